"""The real agent CLIs from npm (pinned in tests/clis/package-lock.json), found where .ci/run installed them.

`.ci/run` installs them into `.ci-cache/clis` and exports AGENTCTL_CLIS_DIR; a local run can point
AGENTCTL_CLIS_DIR at any `npm install --prefix DIR` of tests/clis/package.json. A missing CLI fails the test
with what to do where AGENTCTL_REQUIRE_REAL_CLIS=1 (CI) and skips with the same advice elsewhere;
AGENTCTL_SKIP_REAL_CLIS=1 skips them everywhere.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SKIP_VAR = "AGENTCTL_SKIP_REAL_CLIS"
REQUIRE_VAR = "AGENTCTL_REQUIRE_REAL_CLIS"  # set by .ci/run: a missing CLI fails there
DIR_VAR = "AGENTCTL_CLIS_DIR"
# The executable each package installs, by package name.
BINS = {"@anthropic-ai/claude-code": "claude", "@openai/codex": "codex", "@google/gemini-cli": "gemini",
        "opencode-ai": "opencode", "@agentclientprotocol/claude-agent-acp": "claude-agent-acp",
        "@agentclientprotocol/codex-acp": "codex-acp",
        # Not an agent: a real third-party stdio MCP server, run behind agentctl's witness (tests/agent/test_witness_*).
        "@modelcontextprotocol/server-filesystem": "mcp-server-filesystem"}
PINNED: dict[str, str] = {BINS[name]: version
                          for name, version in json.loads((HERE / "package.json").read_text())["dependencies"].items()}


def clis_dir() -> Path:
    return Path(os.environ.get(DIR_VAR) or HERE.parent.parent / ".ci-cache" / "clis")


def find_cli(name: str) -> Path:
    """The installed executable `name` (claude, codex, gemini, opencode); skips when SKIP_VAR is 1 or when it
    is missing where REQUIRE_VAR is not set, and fails when it is missing where REQUIRE_VAR is set."""
    if os.environ.get(SKIP_VAR) == "1":
        pytest.skip(f"the real CLIs are skipped ({SKIP_VAR}=1)")
    path = clis_dir() / "node_modules" / ".bin" / name
    if not os.access(path, os.X_OK) and os.environ.get(REQUIRE_VAR) != "1":
        # A newcomer's `make test` has no CLIs (1.3 GB from npm): say how to get them; CI requires them.
        pytest.skip(f"the real CLI {name!r} is not installed at {path}: run .ci/run, or set {DIR_VAR} to a "
                    f"directory where `npm install --prefix DIR` of tests/clis/package.json ran")
    if not os.access(path, os.X_OK):
        pytest.fail(f"the real CLI {name!r} is not installed at {path}: run .ci/run (it installs "
                    f"tests/clis/package-lock.json with npm), or set {DIR_VAR} to a directory where "
                    f"`npm install --prefix DIR` of tests/clis/package.json ran, or {SKIP_VAR}=1 to skip", pytrace=False)
    return path


@pytest.fixture
def real_cli() -> Callable[[str], Path]:
    return find_cli


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment with nothing of the user's: a throw-away HOME, and PATH so that `node` is found."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", **extra}


def gemini_home_and_workspace(base: Path) -> tuple[Path, Path, Path]:
    """(home, workspace, trusted-folders file): a throw-away HOME with an empty ~/.gemini and a workspace two levels
    under `base`, so a rule on its parent differs from one on the folder itself. The file is not written."""
    home, ws = base / "home", base / "root" / "proj"
    (home / ".gemini").mkdir(parents=True)
    ws.mkdir(parents=True)
    return home, ws, home / ".gemini" / "trustedFolders.json"


# The real built-in endpoint the smoke tests' CLIs reach (in-process: the MCP endpoint tests' harness).
from tests.mcp_endpoint.conftest import make_harness  # noqa: E402,F401


def claude_run(claude: Path, tmp_path: Path, sock: Path, servers: str, prompt: str) -> "subprocess.CompletedProcess[str]":
    """`agentctl run` of a claude passthrough spec (`claude -p PROMPT`, stream-json) in `tmp_path/work` with `servers`,
    under a throw-away HOME; the report lands in `tmp_path/state/exec-test`."""
    import subprocess

    from tests.conftest import agentctl_cmd, write_spec

    workdir, home = tmp_path / "work", tmp_path / "home"
    workdir.mkdir(exist_ok=True)
    home.mkdir(exist_ok=True)
    command = [str(claude), "-p", prompt, "--output-format", "stream-json", "--verbose"]
    spec = write_spec(tmp_path, f"""
[agent]
command = {json.dumps(command)}
protocol = "passthrough"
strategy = "claude"
workdir = "{workdir}"
stop_grace = 0.5

{servers}""")
    env = clean_env(home, NO_COLOR="1", PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    return subprocess.run(agentctl_cmd("run", str(spec), "--socket", str(sock)), cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=240)
