"""ACP sessions through an in-process Daemon and the real reference agent: load, one prompt at a time,
callers that go away, and agents that never get as far as a session."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path

from agentctl.control.client import ControlClient
from agentctl.daemon.app import Daemon
from agentctl.spec_loader import load_spec
from tests.agent.serve_support import agent_spec, cli, cli_json, reference_passthrough, row
from tests.conftest import write_spec
from tests.conftest import eventually



def _raw_prompt(sock: Path, text: str) -> socket.socket:
    """Start a prompt over the control socket and keep the connection open without reading it."""
    body = json.dumps({"text": text}).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(sock))
    conn.sendall(
        b"POST /v1/prompt HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return conn


async def test_one_prompt_at_a_time_and_a_caller_that_goes_away_does_not_break_the_session(tmp_path, short_tmp):
    # A third-party server that accepts connections and never answers: the lazy agent connects to it on
    # the first prompt, so that prompt stays in flight until the test lets go of the server.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    held: list[socket.socket] = []
    servers = f"""
[[mcp.servers]]
name = "slow"
type = "http"
url = "http://127.0.0.1:{port}/mcp"
"""
    spec = agent_spec(tmp_path, "--lazy", servers=servers)
    sock = short_tmp / "c.sock"
    async with Daemon(load_spec(spec), socket_path=sock) as daemon:
        outcome = await daemon.agent.acp.new_session()
        assert outcome.accepted

        first = await asyncio.to_thread(_raw_prompt, sock, "first")

        def accepted() -> bool:
            try:
                held.append(listener.accept()[0])
            except BlockingIOError:
                pass
            return bool(held)

        await eventually(accepted, 20, what="the agent to connect (the first prompt is in flight)")
        code, body = await asyncio.to_thread(ControlClient(sock).post, "/v1/prompt", {"text": "second"})
        assert code == 409 and body["reason_code"] == "prompt_busy"

        first.close()  # the caller goes away mid-prompt
        for conn in held:
            conn.close()
        listener.close()  # the slow server fails now; the prompt completes with nobody listening
        await eventually(lambda: not daemon.agent.acp.prompt_running, 20, what="the abandoned prompt to complete")

        done = await asyncio.to_thread(cli, sock, "prompt", "third")
        assert done.returncode == 0, done.stderr
        assert "Called kandev/" in done.stdout
        body = await asyncio.to_thread(cli_json, sock, "status")
        assert row(body, "kandev")["status"] == "active"
        assert row(body, "slow")["status"] == "delivered", "a third-party server that never answered stays unverified"


async def test_session_load_is_a_new_attempt_for_the_same_acp_session_and_bad_input_is_one_line(tmp_path, short_tmp):
    spec = agent_spec(tmp_path)
    sock = short_tmp / "c.sock"
    async with Daemon(load_spec(spec), socket_path=sock) as daemon:
        new = await asyncio.to_thread(cli_json, sock, "session", "new")
        await eventually(lambda: row_status(daemon, "kandev") == "active", 20, what="active")

        loaded = await asyncio.to_thread(cli_json, sock, "session", "load", new["acp_session_id"])
        assert loaded["accepted"] and loaded["acp_session_id"] == new["acp_session_id"]
        history = daemon.ledger.history
        assert history.current.attempt_id == loaded["attempt_id"] != new["attempt_id"]
        assert history.current.origin == "session_load" and history.current.acp_session_id == new["acp_session_id"]
        assert history.previous[0].attempt_id == new["attempt_id"]
        assert all(r.delivered_at is not None for r in history.current.servers), "session/load delivers too"
        await eventually(lambda: row_status(daemon, "kandev") == "active", 20, what="active again after load")

        bad = await asyncio.to_thread(cli, sock, "session", "load", "x" * 300)
        assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "bad request body" in bad.stderr
        assert daemon.ledger.history.current.attempt_id == loaded["attempt_id"], "refused input opens no attempt"
        empty = await asyncio.to_thread(ControlClient(sock).post, "/v1/prompt", {"text": 5})
        assert empty[0] == 400


def row_status(daemon: Daemon, name: str) -> str | None:
    current = daemon.ledger.history.current
    if current is None:
        return None
    return next((r.status for r in current.servers if r.name == name), None)


async def test_agent_that_exits_before_initialize_leaves_evidence_and_a_healthy_daemon(tmp_path, short_tmp):
    spec = agent_spec(tmp_path, "--crash-before-initialize")
    sock = short_tmp / "c.sock"
    async with Daemon(load_spec(spec), socket_path=sock) as daemon:
        assert daemon.agent.start_error is not None
        assert daemon.agent.start_error.reason_code == "agent_exited_before_initialize"
        agent = await eventually(
            lambda: daemon.ledger.history.agent if daemon.ledger.history.agent.exit_code is not None else None, 20,
            what="the exit code",
        )
        assert agent.state == "exited" and agent.exit_code == 2
        assert not agent.stopped_by_daemon, "it exited on its own; the daemon did not have to stop it"
        assert agent.exit_reason == "agent_exited_before_initialize; exited with code 2"
        assert agent.start_failure == "agent_exited_before_initialize" and agent.mcp_capabilities is None
        assert daemon.ctx.readiness.checks["agent"] is False
        assert daemon.ctx.readiness.details["agent"] == "exited: agent_exited_before_initialize; exited with code 2"
        result = await asyncio.to_thread(cli_json, sock, "session", "new")
        assert not result["accepted"] and result["reason_code"] == "agent_not_running"
        assert result["summary"] == "agent_exited_before_initialize; exited with code 2"
        rows = daemon.ledger.history.current.servers
        assert rows and all(r.delivered_at is None and r.status != "failed" for r in rows)
        assert all(r.status == "configured" for r in rows), "it decided nothing about transports: nothing filtered"
        assert (await asyncio.to_thread(cli, sock, "health")).returncode == 0


async def test_agent_that_never_answers_initialize_is_stopped_with_the_reason(tmp_path, short_tmp):
    extra = f"""
[agent]
command = {json.dumps([sys.executable, "-c", "import signal; signal.pause()"])}
initialize_timeout = 0.5
stop_grace = 0.2
"""
    spec = write_spec(tmp_path, extra)
    sock = short_tmp / "c.sock"
    async with Daemon(load_spec(spec), socket_path=sock) as daemon:
        assert daemon.agent.start_error.reason_code == "initialize_timeout"
        agent = daemon.ledger.history.agent
        assert agent.state == "exited" and agent.stopped_by_daemon
        assert agent.exit_reason.startswith("initialize_timeout; killed by SIG")
        assert not daemon.agent.supervisor.running, "an agent without ACP is of no use: it does not linger"


async def test_linger_stops_the_daemon_that_long_after_the_agent_exits_on_its_own(tmp_path, short_tmp):
    spec = agent_spec(tmp_path, "--crash-before-initialize", agent_extra="linger = 0.2")
    sock = short_tmp / "c.sock"
    async with Daemon(load_spec(spec), socket_path=sock) as daemon:
        await asyncio.wait_for(daemon.ctx.stop_event.wait(), 20)
        assert daemon.ledger.history.agent.exit_code == 2
        assert not daemon.ctx.readiness.ready


def _runtime_with_attempt(tmp_path, names: list[str]):
    from agentctl.agent.acp import AcpRuntime
    from agentctl.agent.delivery import Planned
    from agentctl.evidence.contract.report import Identity
    from agentctl.evidence.ledger import Ledger
    from agentctl.evidence.seeds import ServerSeed

    servers = "".join(
        f'\n[[mcp.servers]]\nname = "{n}"\ntype = "http"\nurl = "http://127.0.0.1:9/mcp"\n' for n in names
    )
    spec = load_spec(agent_spec(tmp_path, servers=servers))
    ident = Identity(task_id="t", session_id="s", execution_id="e", instance_id="i", agent_id="a", agent_profile_id="p")
    ledger = Ledger(ident)
    seeds = [ServerSeed(name=n, source="profile", transport="http", target="http://127.0.0.1:9") for n in names]
    runtime = AcpRuntime(spec, ledger, builtin_base=lambda: "http://127.0.0.1:1", seeds=lambda: seeds)
    attempt_id, _ = ledger.begin_attempt("session_new", seeds)
    planned = [Planned(n, "http", "http://127.0.0.1:9", {}) for n in names]
    return runtime, ledger, attempt_id, planned


def test_a_structured_session_error_fails_exactly_the_servers_it_names_each_with_its_own_reason(tmp_path):
    runtime, ledger, attempt_id, planned = _runtime_with_attempt(tmp_path, ["docs", "server", "files"])
    data = {"servers": [{"name": "docs", "reason": "ConnectError: refused"}]}
    outcome = runtime._session_failed(attempt_id, planned, "session_rejected", "MCP server 'docs' unreachable", data)
    assert outcome.failed_servers == ("docs",)
    rows = {r.name: r for r in ledger.history.current.servers}
    assert rows["docs"].status == "failed" and rows["docs"].summary == "ConnectError: refused"
    assert rows["server"].status != "failed", "the word 'server' in the message names no server"
    assert ledger.history.current.session_error is None


def test_a_session_error_naming_no_server_is_report_level_and_fails_no_row(tmp_path):
    runtime, ledger, attempt_id, planned = _runtime_with_attempt(tmp_path, ["docs"])
    outcome = runtime._session_failed(attempt_id, planned, "session_rejected", "Internal error", {"details": "boom"})
    assert outcome.failed_servers == ()
    current = ledger.history.current
    assert current.session_error.reason_code == "session_rejected"
    assert all(r.status != "failed" for r in current.servers)
    word = runtime._session_failed(attempt_id, planned, "session_rejected", "cannot reach docs: refused")
    assert word.failed_servers == (), "a server name used as a plain word names no server"
    named = runtime._session_failed(attempt_id, planned, "session_rejected", "Internal error",
                                    {"details": "MCP server 'docs' unreachable: ConnectError"})
    assert named.failed_servers == ("docs",), "the SDK's data.details names it as a server"
    row = next(r for r in ledger.history.current.servers if r.name == "docs")
    assert row.summary == "Internal error: MCP server 'docs' unreachable: ConnectError"


def test_a_server_name_inside_a_url_host_path_or_word_of_the_agents_error_fails_no_row(tmp_path):
    runtime, ledger, attempt_id, planned = _runtime_with_attempt(tmp_path, ["docs", "mcp", "github", "closed"])
    for message in ("fetch https://docs.example.com/mcp failed: connection closed",
                    "open /srv/docs/mcp.sock: Transport channel closed"):
        outcome = runtime._session_failed(attempt_id, planned, "session_rejected", message)
        assert outcome.failed_servers == (), message
    current = ledger.history.current
    assert all(r.status != "failed" for r in current.servers)
    assert current.session_error is not None and current.session_error.reason_code == "session_rejected"


async def test_session_new_and_reset_on_a_passthrough_agent_restart_it_as_a_new_attempt(tmp_path, short_tmp):
    # A passthrough CLI has no ACP session: a "manual" attempt would silently supersede the running CLI's.
    sock = short_tmp / "c.sock"
    spec = write_spec(tmp_path, agent=reference_passthrough(tmp_path))
    async with Daemon(load_spec(spec), socket_path=sock) as daemon:
        first = daemon.ledger.current_attempt_id
        assert first is not None
        new = await asyncio.to_thread(cli_json, sock, "session", "new")
        assert new["with_agent"] and new["accepted"] and new["attempt_id"] != first
        assert daemon.ledger.history.current.origin == "passthrough_start"
        reset = await asyncio.to_thread(cli, sock, "session", "reset")
        assert reset.returncode == 0 and "agent started" in reset.stdout
        assert daemon.ledger.history.current.origin == "passthrough_start"
        load = await asyncio.to_thread(ControlClient(sock).post, "/v1/session/load", {"session_id": "x"})
        assert load[0] == 409 and "passthrough" in load[1]["error"]


NOTICE = {"sessionUpdate": "notice", "severity": "warning", "title": "MCP server 'docs' unavailable"}


def _kept(ledger) -> int:
    return ledger.history.current.notice_count


def test_a_notice_without_a_session_id_or_with_one_no_session_has_is_dropped_and_counted_whenever_it_comes(tmp_path):
    # The rule decides by the id alone: the same notices give the same answer in flight and at rest.
    runtime, ledger, attempt_id, _ = _runtime_with_attempt(tmp_path, ["docs"])
    for opening in (None, (attempt_id, None)):  # at rest, then while a session/new is in flight
        runtime._opening = opening
        runtime._on_notice(None, NOTICE)
    runtime._opening = None
    runtime._on_notice("sess-unknown", NOTICE)
    assert _kept(ledger) == 0 and ledger.history.agent.notices_dropped == 3


async def test_notices_during_session_new_are_kept_only_when_they_name_the_session_it_returns(tmp_path, in_process_daemon):
    # The reference agent sends, before its answer: one notice without an id, one naming no session, and one with
    # the id it is about to return. Decided by the ids alone: one kept, two dropped and counted.
    daemon = await in_process_daemon(agent_spec(tmp_path, "--send-notice", "--stray-notices", servers=(
        '\n[[mcp.servers]]\nname = "docs"\ntype = "http"\nurl = "http://127.0.0.1:9/mcp"\n')))
    outcome = await daemon.agent.acp.new_session()
    assert outcome.accepted
    current, agent = daemon.ledger.history.current, daemon.ledger.history.agent
    assert (current.notice_count, agent.notices_dropped) == (1, 2)
    assert current.notices[0].server == "docs"
