"""A passthrough CLI's own report under the real daemon: its stdout passes the report feed as it is drained, the
report becomes `agent_reported` evidence of the run's attempt, and nothing of the output is kept, logged or
persisted. The CLI is the reference agent in its claude passthrough mode (which prints Claude Code's init
event when its flags ask for stream-json); tests/clis runs the same with real Claude Code."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentctl.control.client import ControlClient
from tests.conftest import agentctl_cmd, poll, start_serve, write_spec
from tests.passthrough.support import reachable_and_closed_toml

PROMPT_CANARY = "PROMPT-CANARY-2b7c91"


def _spec(tmp_path: Path, workdir: Path, terminal: bool) -> Path:
    # `report = "request"`: agentctl adds --output-format stream-json --verbose to this print-mode run.
    command = ["agentctl-reference-agent", "--passthrough", "claude", "--connect-timeout", "20", "-p", PROMPT_CANARY]
    argv = ", ".join(json.dumps(a) for a in command)
    return write_spec(tmp_path, f"""
[agent]
command = [{argv}]
protocol = "passthrough"
strategy = "claude"
report = "request"
terminal = {str(terminal).lower()}
workdir = "{workdir}"
stop_grace = 0.2

{reachable_and_closed_toml()}""")


# On a terminal the same stream arrives through the PTY agentctl owns (lines end CR LF there).
@pytest.mark.parametrize("terminal", [False, True], ids=["headless", "on a terminal"])
def test_the_cli_report_read_from_its_stdout_shows_beside_what_agentctl_observed(tmp_path, short_tmp, terminal):
    workdir = tmp_path / "work"
    workdir.mkdir()
    sock = short_tmp / "r.sock"
    serve = start_serve(_spec(tmp_path, workdir, terminal), sock)
    client = ControlClient(sock)

    def rows() -> dict:
        current = client.get("/v1/status")[1]["current"]
        return {r["name"]: r for r in current["servers"]} if current else {}

    try:
        poll(lambda: rows().get("closed", {}).get("status_source") == "reported"
             and rows().get("kandev", {}).get("status") == "active", timeout=30,
             what="the CLI's report of both servers and the built-in endpoint's own observation")
        by_name = rows()
        assert (by_name["kandev"]["status"], by_name["kandev"].get("status_source", "observed")) == ("active", "observed")
        research = by_name["research"]
        assert (research["status"], research["status_source"], research["reported"]["tool_count"]) == ("active", "reported", 2)
        assert research["reported"]["source"] == "claude:stream-json-init"
        assert (by_name["closed"]["status"], by_name["closed"]["reason_code"]) == ("failed", "agent_reported_failed")
        status = subprocess.run(agentctl_cmd("status", "--socket", str(sock)), capture_output=True, timeout=30,
                                env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})
        text = " ".join(status.stdout.decode().split())
        assert "research active · reported by Claude Code" in text, text
        assert "closed failed · reported by Claude Code" in text, text
        assert "agent report: read from the agent's output (claude:stream-json-init)" in text, text
        agent = client.get("/v1/status")[1]["agent"]
        assert agent["report_source"] == "claude:stream-json-init" and agent.get("report_note") is None
    finally:
        assert serve.stop(signal.SIGTERM) == 0
    log = serve.proc.stderr.read().decode()
    report = (tmp_path / "state" / "exec-test" / "report.json").read_text()
    # The output (the init event with its cwd, the reference agent's summary line) is never kept or logged.
    for text in (report, log):
        assert PROMPT_CANARY not in text and '"subtype":"init"' not in text and str(workdir) not in text
