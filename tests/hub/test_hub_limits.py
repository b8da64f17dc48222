"""The hub's bounds and hygiene over real sockets and real SQLite files: sessions beyond `hot_sessions`
leave memory once flushed and are still served (and still enforce stale executions) from the database;
stop waits for tool calls and never blocks its loop on the task store; peer error codes and listener
exceptions never reach a default log line as they came."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from datetime import UTC, datetime

from agentctl.evidence.contract.base import encode
from agentctl.evidence.ledger import Ledger
from agentctl.upstream import protocol as P
from agentctl.hub import hub as hub_module
from agentctl.hub import hub_conn
from agentctl.hub.hub import Hub
from agentctl.hub.hub_store import HubStore
from agentctl.hub.views import status_view
from tests.hub.conftest import started_hub
from tests.upstream.support import SEEDS, RawClient, eventually, identity

CANARY = "CANARY-hub-9c41"


async def publish(hub: Hub, ident, *, attempt: bool = True) -> bytes:
    """One daemon's life as a raw client: hello, a snapshot with an attempt, gone. Returns the history sent."""
    ledger = Ledger(ident)
    if attempt:
        ledger.begin_attempt("session_new", SEEDS)
    client = await RawClient.connect(hub.socket_path)
    await client.hello(ident)
    await client.send(P.frame(P.SnapshotFrame, history=ledger.history))
    await client.send(P.frame(P.HeartbeatFrame))
    assert isinstance(await client.recv(), P.HeartbeatFrame)  # the snapshot before it was taken
    await client.close()
    return encode(ledger.history)


async def test_sessions_beyond_the_hot_limit_leave_memory_and_are_served_from_the_database(short_dir):
    hub = Hub(short_dir / "hub.sock", short_dir / "hub.sqlite3", flush_interval=0.02, hot_sessions=2)
    await hub.start()
    try:
        sent = {}
        for n in range(5):
            sent[f"s{n}"] = await publish(hub, identity(session=f"s{n}", execution="exec-1"))
        # s0 also gets a newer execution: its stored state is what makes exec-1 stale later.
        sent["s0"] = await publish(hub, identity(session="s0", execution="exec-2"))
        await eventually(lambda: len(hub.sessions) <= 2 and not any(s.current.connected for s in hub.sessions.values()),
                         what="idle sessions evicted after the flush")
        await hub.flush()  # the last disconnect may still be unflushed: the file must hold it before comparing

        status = hub.status()
        assert sorted(s.session_id for s in status.sessions) == ["s0", "s1", "s2", "s3", "s4"]
        assert encode(status) == encode(status_view(HubStore(hub.db_path, readonly=True).load()))
        cold = [sid for sid in sent if sid not in hub.sessions]
        assert len(cold) >= 3
        for sid in cold:
            assert encode(hub.report(sid).history) == sent[sid]
        assert hub.report("nobody") is None

        # An evicted session that says hello again is read back whole: the older execution is still stale.
        assert "s0" not in hub.sessions or len(cold) == 3
        client = await RawClient.connect(hub.socket_path)
        await client.hello(identity(session="s0", execution="exec-1", instance="inst-late"))
        error = await client.recv()
        assert isinstance(error, P.ErrorFrame) and error.code == "stale_execution"
        assert hub.report("s0").session.current_execution_id == "exec-2" and "s0" in hub.sessions
        await client.close()
    finally:
        await hub.stop()

    again = Hub(short_dir / "hub.sock", short_dir / "hub.sqlite3", hot_sessions=2)
    await again.start()
    try:
        assert len(again.sessions) == 2  # booting holds only the hot ones whole
        assert len(again.status().sessions) == 5
        assert all(encode(again.report(sid).history) == history for sid, history in sent.items())
    finally:
        await again.stop()


async def test_stop_waits_for_tool_calls_and_closes_the_task_store_off_the_loop(short_dir):
    """A tool call is stuck in the task store behind a lock another real SQLite connection holds."""
    hub = Hub(short_dir / "hub.sock", short_dir / "hub.sqlite3", flush_interval=0.02)
    await hub.start()
    blocker = sqlite3.connect(hub.tasks_db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the task store's next write waits on its busy timeout (5 s)
    ident = identity()
    client = await RawClient.connect(hub.socket_path)
    await client.hello(ident)
    await client.send(P.frame(P.SnapshotFrame, history=Ledger(ident).history))
    await client.send(P.frame(P.ToolCallFrame, id="tc1", op="task.get", identity=ident, args={},
                              deadline_ms=30_000, sent_at=datetime.now(UTC)))
    backend = hub.backend
    await eventually(lambda: backend._lock.locked(), what="the op holds the task store")
    tool_tasks = set(hub._tool_tasks)
    assert tool_tasks

    stopping = asyncio.create_task(hub.stop())
    # The loop keeps running while the close waits for the op's thread (it used to block right here).
    await eventually(lambda: hub.backend is None and not stopping.done(), what="stop waiting off the loop", timeout=3)
    assert all(task.done() for task in tool_tasks), "the cancelled tool calls were awaited"
    blocker.execute("ROLLBACK")
    blocker.close()
    await asyncio.wait_for(stopping, 5)
    assert backend._closed
    await client.close()


async def test_a_peer_error_code_is_logged_only_when_known_and_listener_tracebacks_only_at_debug(hub, caplog):
    caplog.set_level(logging.INFO, logger="agentctl.hub")

    def broken(session_id: str) -> None:
        raise RuntimeError(f"listener saw {CANARY}")

    hub.subscribe(broken)
    client = await RawClient.connect(hub.socket_path)
    await client.hello(identity())
    await client.send(P.frame(P.ErrorFrame, code=CANARY, message="m"))
    await client.send(P.frame(P.HeartbeatFrame))
    await client.recv()
    reported = [r.getMessage() for r in caplog.records if "reported" in r.getMessage()]
    assert reported == ["session session-1 execution exec-1 reported unknown"]
    failures = [r for r in caplog.records if r.getMessage() == "hub listener failed: RuntimeError"]
    assert failures and not any(r.exc_info for r in failures)
    assert CANARY not in caplog.text

    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="agentctl.hub")
    await client.send(P.frame(P.HeartbeatFrame))
    await client.recv()
    assert any(r.exc_info for r in caplog.records if r.getMessage() == "hub listener failed: RuntimeError")
    hub.unsubscribe(broken)
    await client.close()


async def hello_asking(client: RawClient, ident, heartbeat_ms: int) -> None:
    await client.send(P.frame(P.HelloFrame, identity=ident, daemon_version="t", contract_version=1,
                              heartbeat_ms=heartbeat_ms))


async def test_a_peer_asking_for_an_hour_between_heartbeats_is_still_closed_after_three_of_the_hubs_maximum(
        short_dir, monkeypatch):
    # The clamp shortened so the test is quick: what is tested is that the hub, not the hello, decides.
    monkeypatch.setattr(hub_conn, "MAX_HEARTBEAT_SECONDS", 0.2)
    async with started_hub(short_dir) as hub:
        client = await RawClient.connect(hub.socket_path)
        ident = identity(session="silent")
        await hello_asking(client, ident, 3_600_000)
        await client.send(P.frame(P.SnapshotFrame, history=Ledger(ident).history))  # a held daemon link
        began = asyncio.get_running_loop().time()
        assert [f.code for f in await client.recv_until_closed(timeout=10)] == ["idle_timeout"]
        assert asyncio.get_running_loop().time() - began < 5  # the sweep runs every second


async def test_a_connection_that_says_hello_and_sends_no_snapshot_is_closed_at_the_hello_deadline(
        short_dir, monkeypatch):
    monkeypatch.setattr(hub_module, "HELLO_TIMEOUT", 0.5)
    async with started_hub(short_dir) as hub:
        hello_only = await RawClient.connect(hub.socket_path)
        await hello_asking(hello_only, identity(session="forged"), 3_600_000)
        daemon = await RawClient.connect(hub.socket_path)
        ident = identity(session="real")
        await daemon.hello(ident)
        await daemon.send(P.frame(P.SnapshotFrame, history=Ledger(ident).history))
        assert await hello_only.recv_until_closed(timeout=5) == []  # closed, not held, however long it asked
        assert hub.guard is not None and hub.guard.counts["timed_out"] == 1
        await daemon.send(P.frame(P.HeartbeatFrame))  # the daemon that sent its snapshot is held past it
        assert isinstance(await daemon.recv(), P.HeartbeatFrame)
        await daemon.close()
