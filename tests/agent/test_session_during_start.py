"""Sessions asked for while the agent is still starting, and agents that end before answering initialize.

The control socket is up before the agent (the daemon starts its listeners first), so a CLI can ask for a
session during the agent's ACP initialize. These run a real `agentctl serve` with the reference agent
answering initialize late (`--delay-initialize`), and the real CLI sent the moment the socket answers.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from agentctl.agent.manager import AgentManager
from agentctl.agent.outcome import AgentError
from agentctl.control.client import ControlClient, ControlClientError
from tests.agent.serve_support import agent_spec, base_url, cli, http_get, row
from tests.conftest import ServeProcess, await_ready, poll, spawn_serve


def _serve_without_waiting(spec: Path, sock: Path) -> subprocess.Popen:
    """`agentctl serve` started, not waited for: its ready line comes only once the agent has started."""
    return spawn_serve(spec, sock)


def _agent_starting(sock: Path) -> bool:
    """The control socket answers and the agent check says `starting` (initialize not answered yet)."""
    try:
        code, body = ControlClient(sock, timeout=2).get("/v1/health")
    except ControlClientError:
        return False
    return code == 200 and body["checks"].get("agent", {}).get("detail") == "starting"


def _finish(proc: subprocess.Popen) -> ServeProcess:
    return await_ready(proc)


def _end(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.terminate()
    proc.wait(timeout=30)
    log = proc.stderr.read().decode(errors="replace")
    proc.stdout.close()
    proc.stderr.close()
    return log


def _in_background(fn, *args) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        box["result"] = fn(*args)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


def _evidence_kinds(report: dict[str, Any]) -> list[str]:
    return [e["kind"] for e in report["current"].get("evidence", [])]


@pytest.mark.parametrize(("action", "origin"), [(("new",), "session_new"), (("load", "ref-earlier"), "session_load")],
                         ids=["new", "load"])
def test_a_session_sent_while_the_agent_initializes_waits_and_delivers_over_http_never_filtered(
    tmp_path, short_tmp, action, origin
):
    spec = agent_spec(tmp_path, "--delay-initialize", "4")
    sock = short_tmp / "c.sock"
    proc = _serve_without_waiting(spec, sock)
    try:
        poll(lambda: _agent_starting(sock), timeout=30, interval=0.02, what="the agent to be starting")
        # The real CLI, at once: the agent has not answered initialize yet.
        thread, box = _in_background(cli, sock, "session", *action, "--json")
        # A prompt cannot wait for a session that does not exist yet: refused at once (asserted below).
        prompt = ControlClient(sock).post("/v1/prompt", {"text": "hello"})
        assert _agent_starting(sock), "both requests were sent while the agent was starting"
        daemon = _finish(proc)  # the agent's initialize answered: the daemon is ready
        thread.join(timeout=60)
        done = box["result"]
        assert done.returncode == 0, done.stdout + done.stderr
        result = json.loads(done.stdout)
        assert result["with_agent"] and result["accepted"], "an ACP agent that is starting is not MCP-only mode"
        code, report = ControlClient(sock).get("/v1/report")
        builtin = row(report, "kandev")
        assert builtin["transport"] == "http", "planned from what the agent declared: http"
        assert builtin["status"] in ("delivered", "connected", "active") and "filtered_at" not in builtin
        assert "filtered" not in _evidence_kinds(report)
        assert report["current"]["attempt_id"] == result["attempt_id"] and report["current"]["origin"] == origin
        assert prompt[0] == 409 and prompt[1]["reason_code"] == "agent_starting", prompt
        assert daemon.stop() == 0
    finally:
        _end(proc)


def test_an_agent_that_crashes_during_initialize_filters_nothing_and_says_it_exited_before_initialize(
    tmp_path, short_tmp
):
    # It reads initialize, then crashes (code 3) before answering: it decided nothing about transports.
    servers = '\n[[mcp.servers]]\nname = "docs"\ntype = "http"\nurl = "http://127.0.0.1:9/mcp"\n'
    spec = agent_spec(tmp_path, "--delay-initialize", "30", "--crash-after", "4", servers=servers)
    sock = short_tmp / "c.sock"
    proc = _serve_without_waiting(spec, sock)
    try:
        poll(lambda: _agent_starting(sock), timeout=30, interval=0.02, what="the agent to be starting")
        thread, box = _in_background(cli, sock, "session", "new", "--json")
        daemon = _finish(proc)
        thread.join(timeout=60)
        result = json.loads(box["result"].stdout)
        assert not result["accepted"] and result["reason_code"] == "agent_not_running"
        assert "agent_exited_before_initialize" in result["summary"] and "exited with code 3" in result["summary"]
        code, report = ControlClient(sock).get("/v1/report")
        assert report["agent"]["exit_reason"] == "agent_exited_before_initialize; exited with code 3"
        assert "mcp_capabilities" not in report["agent"], "no capabilities were ever declared"
        rows = report["current"]["servers"]
        assert [r["status"] for r in rows] == ["configured", "configured"], rows
        assert not {"filtered", "delivered"} & set(_evidence_kinds(report))
        assert report["current"]["session_error"]["reason_code"] == "agent_not_running"

        text = cli(sock, "status").stdout
        assert "filtered" not in text and "no_supported_transport" not in text
        assert text.startswith("Daemon: not ready (the agent exited before answering initialize, exit code 3)"), text
        code, ready = http_get(base_url(daemon) + "/readyz?verbose")
        assert code == 503 and ready["agent"] == {"state": "exited", "start_failure": "agent_exited_before_initialize",
                                                  "exit_code": 3, "stopped_by_daemon": False}
        # Later session requests are told the same, and still filter nothing.
        again = cli(sock, "session", "reset")
        assert again.returncode == 1 and "the agent is not running" in again.stdout, again.stdout
        assert "refused" not in again.stdout
        code, report = ControlClient(sock).get("/v1/report")
        assert "filtered" not in _evidence_kinds(report)
    finally:
        _end(proc)


async def test_a_session_request_still_unanswered_after_the_initialize_timeout_is_refused_as_agent_starting(
    tmp_path, monkeypatch
):
    # The start itself hanging past its own bound cannot be produced with a real agent (initialize has its
    # own timeout); the manager is built but never started, which is exactly "still starting".
    from agentctl.agent import manager as manager_mod
    from agentctl.daemon.app import Daemon
    from agentctl.spec_loader import load_spec

    spec = load_spec(agent_spec(tmp_path, agent_extra="initialize_timeout = 0.1"))
    daemon = Daemon(spec, socket_path=tmp_path / "c.sock")
    monkeypatch.setattr(manager_mod, "START_ALLOWANCE", 0.0)
    agent = AgentManager(daemon.ctx, daemon.server_seeds)
    assert agent.starting
    with pytest.raises(AgentError) as caught:
        await agent.session_runtime()
    assert caught.value.reason_code == "agent_starting"
    with pytest.raises(AgentError):
        agent.runtime_now()
    assert daemon.ledger.history.current is None, "a refused request opens no attempt"
