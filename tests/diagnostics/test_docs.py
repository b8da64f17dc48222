"""docs/troubleshooting.md: every command in its ```sh blocks runs, in order, against a real daemon
(`agentctl serve` with the reference agent and a third-party stdio server named as in the doc), through the
real CLI entry point, and exits 0 with output that says what the doc says it does."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from agentctl import cli
from tests.conftest import REPO, write_spec
from tests.diagnostics.conftest import FIXTURES, PY, REF_AGENT

DOC = REPO / "docs" / "troubleshooting.md"
EXECUTION = "exec-docs"


def doc_commands() -> list[str]:
    text = DOC.read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        commands += [line.strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]
    return commands


def test_the_doc_shows_commands_and_names_only_commands_it_runs() -> None:
    commands = doc_commands()
    assert len(commands) >= 10 and all(" agentctl " in f" {c} " for c in commands)
    run = {" ".join(shlex.split(c.split("agentctl", 1)[1])[:2]) for c in commands}
    run |= {shlex.split(c.split("agentctl", 1)[1])[0] for c in commands}
    # Not commands to type at a live daemon here: `serve` is the daemon this test starts; `recover` needs a
    # journal a killed daemon left (run for real by the hostile-workspace-file tests); `run` starts its own
    # (the doc's failed-CLI text is checked against a real run by the failure-explanation tests); `attach`
    # needs a terminal (run through a real PTY by the attach tests).
    run |= {"serve", "recover", "run", "attach"}
    for mention in re.findall(r"`agentctl ([^`]*)`", DOC.read_text()):
        words = mention.split()
        assert words[0] in run or " ".join(words[:2]) in run, f"`agentctl {mention}` is shown but never run"


def _spec(tmp_path: Path) -> Path:
    return write_spec(tmp_path, execution_id=EXECUTION, agent=[REF_AGENT], servers=[
        {"name": "github", "type": "stdio", "command": PY, "args": [str(FIXTURES / "stdio_server.py")]},
    ])


def _run(line: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    words = shlex.split(line)
    with monkeypatch.context() as env:
        while "=" in words[0]:
            name, _, value = words.pop(0).partition("=")
            env.setenv(name, value)
        assert words[0] == "agentctl", line
        code = cli.main(words[1:])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_every_command_in_the_troubleshooting_doc_runs_against_a_real_daemon(
    tmp_path: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], serve
) -> None:
    # No AGENTCTL_O200K_PATH: the estimates come from the encoding shipped in the package.
    daemon = serve(_spec(tmp_path), short_tmp / EXECUTION / "control.sock", env={"AGENTCTL_O200K_PATH": ""})
    outputs: dict[str, str] = {}
    try:
        for name in ("AGENTCTL_SOCKET", "AGENTCTL_RUNTIME_DIR", "RUNTIME_DIRECTORY", "NO_COLOR", "TERM"):
            monkeypatch.delenv(name, raising=False)
        # Commands without --socket find the only daemon under the runtime directory, as the doc says.
        monkeypatch.setenv("AGENTCTL_RUNTIME_DIR", str(short_tmp))
        for line in doc_commands():
            code, text = _run(line, monkeypatch, capsys)
            assert code == 0, f"{line!r} exited {code}:\n{text}"
            outputs[line] = text
    finally:
        assert daemon.stop() == 0

    # Each command does what the doc says it does.
    assert "session accepted" in outputs["agentctl session new"]
    status = outputs["NO_COLOR=1 agentctl status"]
    assert "\x1b" not in status
    assert re.search(r"kandev +active", status)
    assert "github    delivered · connection unverified" in status
    assert "third-party servers connect directly to the agent" in " ".join(status.split())
    assert '"status": "active"' in outputs["agentctl status --json"]
    assert "[x] tools loaded" in outputs["agentctl diagnostics"]
    assert "[-] initialize, tools loaded, used, disconnected" in outputs["agentctl diagnostics"]
    assert '"contract_version": 3' in outputs["agentctl diagnostics --json"]
    assert "kandev: reachable" in outputs["agentctl test-endpoint kandev"]
    assert "reachability from the daemon, not attachment" in outputs["agentctl test-endpoint kandev"]
    assert "github: reachable" in outputs["agentctl test-endpoint github --timeout 30"]
    assert "2 tools listed" in outputs["agentctl test-endpoint github --timeout 30"]
    tools = outputs["agentctl tools"]
    assert "get_task" in tools and "github: no catalog" in tools
    assert "tokens" in tools and "the agent may tokenize" in " ".join(tools.split())
    assert "Arguments:" in outputs["agentctl tools get_task"]
    assert '"loaded": true' in outputs["agentctl tools --json"]
    assert "may contain sensitive data" in outputs["agentctl stderr"]
    probe = outputs["agentctl probe mcp --timeout 5 -- agentctl-reference-agent"]
    assert "advertised" in probe and "initialize" in probe
