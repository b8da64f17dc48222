"""Issue 31, "a failed agent explains itself", with the real CLIs and no API key: `agentctl run` on the docs'
passthrough specs (docs/agents.md) shows, on its stderr only, the last lines the CLI printed (its stdout and
stderr window, under the usual warning) and the hint for the cause; the report and the state directory hold
none of it. Each CLI runs in a throw-away HOME with nothing of the user's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.clis.conftest import clean_env
from tests.conftest import REPO, agentctl_cmd, write_spec

PROMPT_CANARY = "PROMPT-CANARY-explain-7c21"
WARNING = "warning: recent agent output may contain sensitive data"
OUTPUT = os.environ.get("AGENTCTL_EXPLAIN_RUN_OUTPUT")  # where to copy the Claude run's terminal output, if set


def run_failing(real_cli, tmp_path: Path, short_tmp: Path, cli: str, args: list[str], strategy: str,
                env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    program = real_cli(cli)
    workdir, home = tmp_path / "work", tmp_path / "home"
    workdir.mkdir()
    home.mkdir()
    spec = write_spec(tmp_path, f"""
[agent]
command = {json.dumps([str(program), *args])}
protocol = "passthrough"
strategy = "{strategy}"
workdir = "{workdir}"
stop_grace = 0.5
env = {{ {", ".join(f"{name} = {json.dumps(value)}" for name, value in (env or {}).items())} }}
""")
    done = subprocess.run(agentctl_cmd("run", str(spec), "--socket", str(short_tmp / "c.sock")), cwd=tmp_path,
                          env=clean_env(home, NO_COLOR="1", PYTHONPATH=os.environ.get("PYTHONPATH", "")),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 1, done.stdout + done.stderr
    # What the CLI printed is the person's to read, never the record's.
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert PROMPT_CANARY.encode() not in path.read_bytes(), path.name
    assert PROMPT_CANARY not in done.stdout
    return done


def explanation(done: subprocess.CompletedProcess[str]) -> str:
    assert WARNING in done.stderr, done.stdout + done.stderr
    return " ".join(done.stderr.split())


def test_claude_code_with_no_key_says_it_is_not_logged_in_and_how_to_log_it_in(real_cli, tmp_path, short_tmp):
    done = run_failing(real_cli, tmp_path, short_tmp, "claude",
                       ["-p", PROMPT_CANARY, "--output-format", "stream-json", "--verbose"], "claude")
    if OUTPUT:
        Path(OUTPUT).write_text(done.stdout + done.stderr)
    said = explanation(done)
    assert "agentctl: the agent exited with code 1" in said
    # The stream-json events read as words, not as JSON cut at 400 characters.
    assert "| [assistant: authentication_failed] Not logged in · Please run /login" in said, done.stderr
    assert '{"type"' not in done.stderr
    assert "hint: Claude Code is not logged in: set ANTHROPIC_API_KEY in [agent] env" in said
    # docs/troubleshooting.md shows this run's explanation as it is.
    example = re.search(r"```text\n(agentctl: the agent exited with code 1\n.*?)```",
                        (REPO / "docs" / "troubleshooting.md").read_text(), re.S)
    assert example and example.group(1) in done.stderr, done.stderr


# (its env, its exit code, what it printed, the hint). No key in a trusted folder: exit 41. In an untrusted folder,
# with a placeholder key to get past authentication (trust is checked before any model call): exit 55, in red.
GEMINI_CASES = [
    ({"GEMINI_CLI_TRUST_WORKSPACE": "true"}, 41, "| Please set an Auth method",
     "hint: Gemini CLI has no credentials: set GEMINI_API_KEY in [agent] env"),
    ({"GEMINI_API_KEY": "placeholder-not-a-key"}, 55, "| Gemini CLI is not running in a trusted directory",
     "hint: Gemini CLI does not trust the agent's workdir: set GEMINI_CLI_TRUST_WORKSPACE=true"),
]


@pytest.mark.parametrize("env, code, printed, hint", GEMINI_CASES, ids=["no-key", "untrusted-folder"])
def test_gemini_cli_in_headless_mode_is_told_why_it_exited(real_cli, tmp_path, short_tmp, env, code, printed, hint):
    done = run_failing(real_cli, tmp_path, short_tmp, "gemini", ["-p", PROMPT_CANARY, "-o", "stream-json"],
                       "gemini", env=env)
    said = explanation(done)
    assert f"agentctl: the agent exited with code {code}" in said
    assert printed in said and hint in said
    assert "\\x1b" not in said, "its colour codes are dropped, not shown as escapes"


def test_codex_exec_with_a_missing_codex_home_is_told_to_create_it(real_cli, tmp_path, short_tmp):
    done = run_failing(real_cli, tmp_path, short_tmp, "codex",
                       ["exec", "--json", "--skip-git-repo-check", PROMPT_CANARY], "codex",
                       env={"CODEX_HOME": str(tmp_path / "no-such-codex-home")})
    said = explanation(done)
    assert "| Error finding codex home: CODEX_HOME points to" in said
    assert "hint: Codex's CODEX_HOME does not exist: create that directory" in said


@pytest.mark.timeout(300)
def test_opencode_run_with_no_provider_in_reach_is_told_what_it_could_not_reach(real_cli, tmp_path, short_tmp):
    # No network here: OpenCode retries its default model's provider for about 80 s, then exits 1.
    done = run_failing(real_cli, tmp_path, short_tmp, "opencode", ["run", PROMPT_CANARY], "opencode",
                       timeout=280)
    said = explanation(done)
    assert "| Error: Cannot connect to API" in said and "\\x1b" not in said
    assert "hint: OpenCode cannot reach its model's provider" in said
