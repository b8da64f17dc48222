"""On-demand requests from the upstream, answered by a real daemon with a real agent: recent agent output
(bounded, never stored by the hub) and endpoint tests by stored name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentctl.spec import parse_spec
from agentctl.hub.hub import Hub, HubRequestError
from agentctl.upstream import protocol as P
from agentctl.upstream.protocol import MAX_STDERR_BYTES, MAX_STDERR_LINES
from tests.conftest import spec_toml
from tests.upstream.support import eventually

REF_AGENT = str(Path(sys.executable).parent / "agentctl-reference-agent")


async def test_the_hub_reads_bounded_agent_output_and_tests_endpoints_through_the_daemon(short_dir, in_process_daemon):
    hub = Hub(short_dir / "hub.sock", short_dir / "hub.sqlite3", flush_interval=0.02)
    await hub.start()
    spec = parse_spec(spec_toml(execution_id="exec-1", agent=[REF_AGENT, "--flood-stderr", "0.1"],
                                state_dir=f"{short_dir}/state", upstream=f"{short_dir}/hub.sock").encode())
    daemon = await in_process_daemon(spec)
    try:
        await eventually(lambda: hub.report("session-1") is not None and hub._live_conn("session-1") is not None,
                         what="daemon connected")
        supervisor = daemon.agent.supervisor
        await eventually(lambda: supervisor.stderr_snapshot().total_bytes_seen >= 100_000, what="agent output")

        view = await hub.read_stderr("session-1")
        assert 0 < len(view.lines) <= MAX_STDERR_LINES
        assert sum(len(line.encode()) + 1 for line in view.lines) <= MAX_STDERR_BYTES
        assert view.truncated and "sensitive" in view.warning
        assert any("flood-stderr" in line for line in view.lines)

        await daemon.agent.acp.new_session()
        result = await hub.test_endpoint("session-1", "kandev")
        assert result.succeeded and result.tool_count and result.tool_count > 0
        with pytest.raises(HubRequestError) as info:
            await hub.test_endpoint("session-1", "https://evil.example/mcp")
        assert info.value.code == "unknown_server"
        with pytest.raises(HubRequestError) as info:
            await hub.read_stderr("no-such-session")
        assert info.value.code == "unavailable"

        # The agent terminal's screen: the hub does not ask a daemon whose agent is not on a terminal; asked
        # anyway, the daemon answers plainly that there is none, and stays connected.
        with pytest.raises(HubRequestError) as info:
            await hub.read_terminal("session-1")
        assert info.value.code == "not_supported"
        conn = hub._live_conn("session-1")
        answer = await conn.ask(P.TerminalReadFrame, P.TerminalResultFrame, 10.0)
        assert isinstance(answer, P.TerminalResultFrame)
        assert not answer.view.terminal and not answer.view.open and answer.view.screen == b""
        assert "sensitive" in answer.view.warning
        assert hub._live_conn("session-1") is conn
    finally:
        await daemon.stop()
        await hub.stop()
    # Agent output was handed over on request only: it is in no file the hub wrote.
    for path in short_dir.glob("hub.sqlite3*"):
        assert b"flood-stderr" not in path.read_bytes(), path.name
