"""Fifty publishers at once lose nothing; tool arguments and results travel only in tool-call frames.

Real processes and sockets: the hub is `agentctl hub serve`; the publishers are real Publishers on real
Ledgers (fifty daemons' worth of evidence without fifty MCP stacks); the privacy scenario runs a real
`agentctl serve` and the SDK client, with a recording relay between daemon and hub to see every frame.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from agentctl.cli import main
from agentctl.evidence.contract.base import encode
from agentctl.hub.hub_store import HubStore
from agentctl.upstream.publisher import Publisher
from tests.upstream.procs import control, start_daemon, start_hub, write_spec
from tests.upstream.support import SEEDS, Relay, eventually, identity, make_ctx

SESSIONS = 50
EVENTS = 40


def _stored(db: Path) -> dict:
    store = HubStore(db, readonly=True)
    try:
        return {sid: s.current.history for sid, s in store.load().items()}
    finally:
        store.close()


async def test_fifty_publishers_at_once_lose_nothing_in_the_hubs_final_state(short_tmp, tmp_path):
    hub = start_hub(short_tmp)
    publishers = []
    try:
        for n in range(SESSIONS):
            ctx = make_ctx(tmp_path, identity(session=f"s-{n:02d}", execution=f"e-{n:02d}", instance=f"i-{n:02d}"))
            publisher = Publisher(ctx, short_tmp / "hub.sock")
            publisher.start()
            publishers.append((ctx, publisher))
        await eventually(lambda: all(p.connected for _, p in publishers), timeout=30, what="all connected")

        async def publish(ctx) -> None:
            ledger = ctx.ledger
            for attempt_no in range(2):
                attempt, _ = ledger.begin_attempt("session_new", SEEDS)
                ledger.update_agent(protocol="acp", state="running", name=f"agent-{attempt_no}")
                for k in range(EVENTS // 2):
                    ledger.record("tool_call_observed", attempt, "kandev", tool_name=f"t{k}", outcome="ok")
                    if k % 5 == 0:
                        await asyncio.sleep(0)  # a yield, not a wait: lets the 50 publishers interleave

        await asyncio.gather(*(publish(ctx) for ctx, _ in publishers))
        expected = {ctx.ledger.identity.session_id: encode(ctx.ledger.history) for ctx, _ in publishers}

        def caught_up() -> bool:
            stored = _stored(short_tmp / "hub.sqlite3")
            return all(sid in stored and stored[sid] is not None and encode(stored[sid]) == data
                       for sid, data in expected.items())

        await eventually(caught_up, timeout=60, what="every session's final state in the hub database")
        assert all(p.dropped_events == 0 for _, p in publishers)
    finally:
        for _, publisher in publishers:
            await publisher.stop()
        hub.kill()


async def test_tool_arguments_and_results_reach_only_tool_frames_never_evidence_logs_or_the_hub_tables(short_tmp, capsys):
    d = short_tmp
    arg_canary, title_canary = "canary-arg-51d0c", "canary-title-9e2b7"
    hub = start_hub(d)
    relay = Relay(d / "relay.sock", d / "hub.sock")
    await relay.start()
    daemon = start_daemon(d, write_spec(d, profile="task", upstream=str(d / "relay.sock")))
    try:
        assert control(daemon).post("/v1/session/new")[0] == 200
        status, config = control(daemon).get("/v1/mcp-config")
        assert status == 200
        async with httpx2.AsyncClient(headers=config["headers"], timeout=30) as http:
            async with Client(streamable_http_client(config["url"], http_client=http), mode="legacy") as client:
                await eventually(lambda: any(b'"snapshot"' in line for _, line in relay.lines), what="connected")
                posted = await client.call_tool("post_task_message", {"text": f"hello {arg_canary}"})
                assert posted.is_error is False
                created = await client.call_tool("create_task", {"title": title_canary})
                assert created.is_error is False
                got = await client.call_tool("get_task", {})  # its result quotes the message: a result canary
                assert arg_canary in str(got.structured_content)
        assert daemon.stop() == 0
    finally:
        daemon.kill()
        relay.stop()
        hub.stop()
        hub.kill()

    canaries = (arg_canary.encode(), title_canary.encode())
    tool_frames = [line for _, line in relay.lines if b'"type":"tool_call"' in line or b'"type":"tool_result"' in line]
    assert any(arg_canary.encode() in line for line in tool_frames), "the tunnel carried the arguments"
    for direction, line in relay.lines:
        if line in tool_frames:
            continue
        assert not any(c in line for c in canaries), (direction, line[:200])
    assert any(b'"type":"evidence"' in line and b"post_task_message" in line for _, line in relay.lines), \
        "the call itself is evidence (tool name and outcome only)"

    assert arg_canary.encode() in (d / "hub.tasks.sqlite3").read_bytes() + _wal(d / "hub.tasks.sqlite3"), \
        "the hub's task store did run the tool"
    checked = [p for p in d.rglob("*") if p.is_file() and "tasks" not in p.name and not p.name.endswith(".sock")]
    assert any(p.name.startswith("hub.sqlite3") for p in checked) and any(p.name == "report.json" for p in checked)
    for path in checked:
        data = path.read_bytes()
        assert not any(c in data for c in canaries), path
    for args in (["hub", "status", "--json"], ["hub", "report", "session-1", "--json"], ["hub", "report", "session-1"]):
        capsys.readouterr()
        assert main([*args, "--db", str(d / "hub.sqlite3")]) == 0
        out = capsys.readouterr()
        assert "session-1" in out.out
        assert arg_canary not in out.out + out.err and title_canary not in out.out + out.err


def _wal(path: Path) -> bytes:
    wal = path.with_name(path.name + "-wal")
    return wal.read_bytes() if wal.exists() else b""
