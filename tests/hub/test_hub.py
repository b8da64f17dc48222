"""The reference hub over real Unix sockets: orchestrator rules, bad frames, persistence and boot hydration.

The daemon side is either a real Publisher on a real Ledger, or a RawClient for frames a real daemon
never sends (garbage, truncation, oversize, another execution's late evidence).
"""

from __future__ import annotations

import logging
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from agentctl.evidence import reducer
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import (
    MAX_ATTEMPTS,
    MAX_EVENTS_PER_ATTEMPT,
    AttachmentHistory,
    EvidenceEvent,
)
from agentctl.upstream import protocol as P
from agentctl.hub.hub import Hub
from agentctl.hub.hub_store import HubStore
from agentctl.hub.views import status_view
from agentctl.upstream.publisher import Publisher
from tests.upstream.support import SEEDS, RawClient, eventually, identity, make_ctx

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _history(ident) -> AttachmentHistory:
    return AttachmentHistory(version=1, identity=ident, updated_at=T0)


async def _start_publisher(tmp: Path, hub: Hub, ident):
    ctx = make_ctx(tmp, ident)
    publisher = Publisher(ctx, hub.socket_path, backoff_initial=0.02, backoff_max=0.2)
    publisher.start()
    await eventually(lambda: publisher.connected, what="publisher connected")
    return ctx, publisher


def _hub_history(hub: Hub, session: str = "session-1"):
    report = hub.report(session)
    return report.history if report else None


async def test_a_publisher_hello_snapshot_and_evidence_reach_the_hub_as_exactly_the_daemons_history(hub, tmp_path):
    ctx, publisher = await _start_publisher(tmp_path, hub, identity())
    try:
        ledger = ctx.ledger
        attempt, _ = ledger.begin_attempt("session_new", SEEDS)
        ledger.record("delivered", attempt, "kandev", transport="http", target="http://127.0.0.1:1")
        ledger.record("session_accepted", attempt, acp_session_id="acp-1")
        ledger.record("initialize_observed", attempt, "kandev", era="legacy", connection_id="conn_1")
        ledger.update_agent(protocol="acp", state="running", name="ref")
        second, _ = ledger.begin_attempt("reset", SEEDS)
        ledger.record("tools_list_observed", second, "kandev", tool_count=3)
        await eventually(lambda: _hub_history(hub) is not None and encode(_hub_history(hub)) == encode(ledger.history),
                         what="hub state equal to the daemon's")
        status = hub.status().sessions[0]
        assert status.current_attempt.attempt_id == second
        assert status.current_attempt.evidence == [], "listings leave the evidence log to the report"
        assert {r.name: r.status for r in status.current_attempt.servers} == {"kandev": "active", "docs": "configured"}
        assert status.connected and status.agent.name == "ref"
    finally:
        await publisher.stop()
    await eventually(lambda: not hub.status().sessions[0].connected, what="disconnect recorded")


async def test_evidence_frames_are_folded_by_the_same_reducer_not_replaced(hub):
    ident = identity()
    client = await RawClient.connect(hub.socket_path)
    await client.hello(ident)
    history = _history(ident)
    reducer.begin_attempt(history, attempt_id="att_1", origin="manual", now=T0)
    await client.send(P.frame(P.SnapshotFrame, history=history))
    mine = msgspec.json.decode(encode(history), type=AttachmentHistory)
    events = []
    for seq, kind in enumerate(["configured", "delivered", "initialize_observed", "tools_list_observed"], start=1):
        event = EvidenceEvent(kind=kind, occurred_at=T0 + timedelta(seconds=seq), task_id="task-1",
                              session_id="session-1", execution_id="exec-1", instance_id="inst-1",
                              attempt_id="att_1", seq=seq, server="kandev")
        events.append(event)
    # Sent out of occurrence order and with a duplicate: the reducer orders by time and ignores the repeat.
    for event in [events[2], events[0], events[3], events[1], events[1]]:
        await client.send(P.frame(P.EvidenceFrame, event=event))
    for event in [events[2], events[0], events[3], events[1], events[1]]:
        reducer.apply(mine, msgspec.json.decode(encode(event), type=EvidenceEvent))
    await eventually(lambda: encode(_hub_history(hub)) == encode(mine), what="reduced state")
    await client.close()


async def test_a_snapshot_over_the_bounds_is_trimmed_to_three_attempts_of_sixty_four_events(hub):
    ident = identity()
    history = _history(ident)
    for n in range(5):
        reducer.begin_attempt(history, attempt_id=f"att_{n}", origin="manual", now=T0 + timedelta(seconds=n))
    # A misbehaving daemon: more attempts and events than the contract allows.
    history.previous = [msgspec.structs.replace(history.current, attempt_id=f"old_{n}") for n in range(4)]
    history.current.evidence = [
        EvidenceEvent(kind="configured", occurred_at=T0, task_id="task-1", session_id="session-1",
                      execution_id="exec-1", instance_id="inst-1", attempt_id="att_4", seq=n + 1, server=f"s{n}")
        for n in range(100)
    ]
    client = await RawClient.connect(hub.socket_path)
    await client.hello(ident)
    await client.send(P.frame(P.SnapshotFrame, history=history))
    stored = await eventually(lambda: _hub_history(hub), what="snapshot stored")
    assert len(stored.previous) == MAX_ATTEMPTS - 1
    assert len(stored.current.evidence) == MAX_EVENTS_PER_ATTEMPT
    assert stored.current.dropped_events == 100 - MAX_EVENTS_PER_ATTEMPT
    assert stored.current.evidence[-1].server == "s99", "the newest events are kept"
    await client.close()


async def test_a_newer_execution_makes_late_evidence_from_the_older_one_rejected_and_counted(hub, tmp_path):
    old_ctx, old_pub = await _start_publisher(tmp_path / "a", hub, identity(execution="exec-1", instance="inst-a"))
    new_ctx, new_pub = await _start_publisher(tmp_path / "b", hub, identity(execution="exec-2", instance="inst-b"))
    try:
        new_attempt, _ = new_ctx.ledger.begin_attempt("session_new", SEEDS)
        await eventually(lambda: hub.report("session-1").session.current_attempt is not None
                         and hub.report("session-1").session.current_attempt.attempt_id == new_attempt,
                         what="the new execution's attempt")
        # The old execution's daemon is still alive and keeps publishing (a late observation).
        old_attempt, _ = old_ctx.ledger.begin_attempt("session_new", SEEDS)
        await eventually(lambda: hub.report("session-1").session.stale_rejected >= 1, what="stale snapshot counted")
        old_ctx.ledger.record("tools_list_observed", old_attempt, "kandev", tool_count=1)
        await eventually(lambda: hub.report("session-1").session.stale_rejected >= 2, what="stale evidence counted")
        report = hub.report("session-1")
        assert report.session.current_execution_id == "exec-2"
        assert report.history.current.attempt_id == new_attempt
        by_id = {e.execution_id: e for e in report.executions}
        assert by_id["exec-1"].current is False and by_id["exec-1"].rejected_frames >= 2
        old_report = hub.report("session-1", "exec-1")
        assert old_report.history.current is None, "the old execution's late attempt never landed"
        # Its tool calls are refused too: its session has moved on.
        from agentctl.upstream.tunnel import TunnelBackend
        from agentctl.backend.base import BackendError

        tunnel = TunnelBackend(old_pub)
        with pytest.raises(BackendError, match="newer execution"):
            await tunnel.call("task.get", old_ctx.ledger.identity, {}, deadline=5)
    finally:
        await old_pub.stop()
        await new_pub.stop()


async def test_a_superseded_connection_is_told_once_and_asked_back_when_its_superseder_disconnects(hub):
    other_execution = await RawClient.connect(hub.socket_path)  # followed, until a newer execution says hello
    await other_execution.hello(identity(execution="exec-0", instance="inst-0"))
    await eventually(lambda: hub.status().sessions and hub.status().sessions[0].connected, what="exec-0 followed")
    first = await RawClient.connect(hub.socket_path)
    await first.hello(identity(instance="inst-a"))
    await first.send(P.frame(P.SnapshotFrame, history=_history(identity(instance="inst-a"))))
    told = await other_execution.recv()
    assert isinstance(told, P.ErrorFrame) and told.code == "stale_execution" and not told.fatal

    second = await RawClient.connect(hub.socket_path)  # a newer instance of the same execution
    await second.hello(identity(instance="inst-b"))
    told = await first.recv()
    assert isinstance(told, P.ErrorFrame) and told.code == "stale_instance" and not told.fatal
    await first.send(P.frame(P.HeartbeatFrame))
    assert isinstance(await first.recv(), P.HeartbeatFrame), "a superseded connection stays open"
    await first.send(P.frame(P.ToolCallFrame, id="c1", op="task.get", identity=identity(instance="inst-a"), args={},
                             deadline_ms=5000, sent_at=datetime.now(UTC)))
    refused = await first.recv()
    assert isinstance(refused, P.ToolResultFrame) and not refused.ok
    assert refused.error == "a newer daemon instance of this execution is current; the tool did not run"

    await second.close()
    # The superseder is gone while the first is alive: the first is asked to reconnect (fatal) and closed.
    frames = await first.recv_until_closed()
    assert [(f.code, f.fatal) for f in frames] == [("reconnect", True)]
    # An older execution is never asked back (a newer execution superseded it): its next frame is the
    # answer to its heartbeat, and the release above (done in one go) sent it nothing.
    await other_execution.send(P.frame(P.HeartbeatFrame))
    assert isinstance(await other_execution.recv(), P.HeartbeatFrame)
    await first.close()
    await other_execution.close()


@pytest.mark.parametrize(
    "bad, code",
    [
        (b"this is not json\n", "malformed_frame"),
        (b'{"v":1,"type":"snapshot","history":{"nope":1}}\n', "malformed_frame"),
        (b'{"v":9,"type":"hello"}\n', "unsupported_version"),
        (b"x" * (P.MAX_FRAME_BYTES + 100) + b"\n", "frame_too_large"),
        (b'{"v":1,"type":"heartb', "truncated_frame"),
    ],
    ids=["garbage", "wrong-shape", "version", "oversized", "truncated"],
)
async def test_a_bad_frame_closes_only_its_connection_with_an_error_frame_and_one_log_line(hub, tmp_path, caplog, bad, code):
    ctx, publisher = await _start_publisher(tmp_path, hub, identity(session="good"))
    try:
        attempt, _ = ctx.ledger.begin_attempt("session_new", SEEDS)
        await eventually(lambda: _hub_history(hub, "good") is not None, what="good session stored")
        bad_client = await RawClient.connect(hub.socket_path)
        await bad_client.hello(identity(session="bad"))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="agentctl.hub"):
            bad_client.writer.write(bad)
            if code == "truncated_frame":
                bad_client.writer.write_eof()
            try:
                await bad_client.writer.drain()
            except (ConnectionError, OSError):
                pass
            frames = await bad_client.recv_until_closed()
        assert [f.code for f in frames if isinstance(f, P.ErrorFrame)] == [code]
        assert all(f.fatal for f in frames if isinstance(f, P.ErrorFrame))
        lines = [r.getMessage() for r in caplog.records if r.name == "agentctl.hub" and "session bad" in r.getMessage()
                 and "connected (instance" not in r.getMessage()]
        assert len(lines) == 1 and lines[0].startswith("closed connection") and code in lines[0], lines
        # The other daemon is still served, live and in the database.
        ctx.ledger.record("delivered", attempt, "kandev", transport="http")
        await eventually(lambda: encode(_hub_history(hub, "good")) == encode(ctx.ledger.history), what="good still served")
        await hub.flush()
        conn = sqlite3.connect(hub.db_path)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        conn.close()
        stored = HubStore(hub.db_path, readonly=True)
        assert encode(stored.load()["good"].current.history) == encode(ctx.ledger.history)
        stored.close()
        await bad_client.close()
    finally:
        await publisher.stop()


async def test_protocol_order_violations_are_refused(hub):
    client = await RawClient.connect(hub.socket_path)
    await client.send(P.frame(P.HeartbeatFrame))
    assert [f.code for f in await client.recv_until_closed()] == ["expected_hello"]

    client = await RawClient.connect(hub.socket_path)
    await client.hello(identity(session="order"))
    event = EvidenceEvent(kind="configured", occurred_at=T0, task_id="task-1", session_id="order",
                          execution_id="exec-1", instance_id="inst-1", attempt_id="a", seq=1, server="x")
    await client.send(P.frame(P.EvidenceFrame, event=event))
    assert [f.code for f in await client.recv_until_closed()] == ["snapshot_required"]

    client = await RawClient.connect(hub.socket_path)
    await client.hello(identity(session="order"))
    await client.send(P.frame(P.SnapshotFrame, history=_history(identity(session="someone-else"))))
    assert [f.code for f in await client.recv_until_closed()] == ["identity_mismatch"]


async def test_the_hub_answers_heartbeats_and_closes_a_silent_connection(short_dir):
    hub = Hub(short_dir / "h.sock", short_dir / "h.sqlite3")
    await hub.start()
    try:
        client = await RawClient.connect(hub.socket_path)
        await client.send(P.frame(P.HelloFrame, identity=identity(), daemon_version="t", contract_version=1, heartbeat_ms=100))
        await client.send(P.frame(P.HeartbeatFrame))
        assert isinstance(await client.recv(), P.HeartbeatFrame)
        # Then silence for more than three heartbeats: the hub's sweep closes the connection.
        frames = await client.recv_until_closed(timeout=5)
        assert [f.code for f in frames] == ["idle_timeout"]
    finally:
        await hub.stop()


async def test_a_restarted_hub_answers_from_its_database_at_once(short_dir, tmp_path):
    hub = Hub(short_dir / "hub.sock", short_dir / "hub.sqlite3")
    await hub.start()
    ctx, publisher = await _start_publisher(tmp_path, hub, identity())
    attempt, _ = ctx.ledger.begin_attempt("session_new", SEEDS)
    ctx.ledger.record("delivered", attempt, "kandev", transport="http")
    await eventually(lambda: encode(_hub_history(hub)) == encode(ctx.ledger.history), what="stored")
    await publisher.stop()
    before = hub.report("session-1")
    await hub.stop()

    again = Hub(short_dir / "hub.sock", short_dir / "hub.sqlite3")
    await again.start()
    try:
        after = again.report("session-1")  # no daemon connected: straight from the database
        assert encode(after.history) == encode(before.history)
        assert after.session.connected is False
        assert encode(again.status()) == encode(status_view(HubStore(again.db_path, readonly=True).load()))
    finally:
        await again.stop()
