"""Retention: sessions last in contact longer ago than the retention period leave the hub's database and memory in
bounded batches, never one with a connected daemon, and pruning never weakens fencing: a late hello of a pruned
session's superseded execution is refused as stale, on a real SQLite file and a real PostgreSQL database, with
two hubs pruning one PostgreSQL database at once. `hub status` and `/metrics` show the database's size and its
oldest session. The hubs run on a real socket with an injected clock (31 days cannot pass in a test)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentctl.cli import main
from agentctl.dsn import parse_location
from agentctl.evidence.contract.report import AttachmentHistory
from agentctl.hub import rules
from agentctl.hub.hub import Hub
from agentctl.hub.hub_store import ExecutionRecord, SessionRecord
from agentctl.hub.retention import RetentionError, parse_retention
from agentctl.hub.state import ExecutionState
from agentctl.hub.web import HubWeb
from agentctl.upstream import protocol as P
from tests.pg import PgDatabase
from tests.upstream.support import RawClient, eventually, identity

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
MONTH = timedelta(days=30)


class Clock:
    """The hubs' clock, moved by the test."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request, short_dir: Path) -> object:
    if request.param == "sqlite":
        return short_dir / "hub.sqlite3"
    pg_db: PgDatabase = request.getfixturevalue("pg_db")
    return parse_location(pg_db.url)


@pytest.fixture
async def start_hub(location: object, short_dir: Path) -> AsyncIterator[Callable[..., object]]:
    """start_hub(name, clock) -> a started hub on this test's database (stopped after the test)."""
    started: list[Hub] = []

    async def starter(name: str, clock: Clock) -> Hub:
        hub = Hub(short_dir / f"{name}.sock", location, tasks_db=short_dir / f"{name}.tasks.sqlite3",
                  flush_interval=0.02, clock=clock, retention=MONTH)
        hub.retention.interval = 3600  # rounds run when the test says (Retention.prune), not on their own
        await hub.start()
        started.append(hub)
        return hub

    yield starter
    for hub in reversed(started):
        await hub.stop()


@pytest.fixture
async def pg_pair(pg_db: PgDatabase, short_dir: Path) -> AsyncIterator[Callable[..., object]]:
    """pg_pair(clock, batch) -> two started hubs (two sockets) on one real PostgreSQL, pruning `batch` sessions per
    transaction when the test says; stopped after the test."""
    started: list[Hub] = []

    async def starter(clock: Clock, *, batch: int) -> tuple[Hub, Hub]:
        dsn = parse_location(pg_db.url)
        for name in ("a", "b"):
            hub = Hub(short_dir / f"{name}.sock", dsn, flush_interval=0.02, clock=clock, retention=MONTH)
            hub.retention.interval, hub.retention.batch = 3600, batch
            await hub.start()
            started.append(hub)
        return started[0], started[1]

    yield starter
    for hub in reversed(started):
        await hub.stop()


async def _hello(hub: Hub, session: str, execution: str, instance: str = "inst-a") -> RawClient:
    """A daemon of `execution` that says hello and sends its snapshot."""
    ident = identity(session=session, execution=execution, instance=instance)
    client = await RawClient.connect(hub.socket_path)
    await client.hello(ident)
    await client.send(P.frame(P.SnapshotFrame, history=AttachmentHistory(version=1, identity=ident, updated_at=T0)))
    return client


async def _refused(hub: Hub, session: str, execution: str) -> P.ErrorFrame:
    """A late hello of `execution`: the hub's answer, which closes the connection."""
    client = await RawClient.connect(hub.socket_path)
    await client.hello(identity(session=session, execution=execution))
    frames = await client.recv_until_closed(timeout=10)
    await client.close()
    assert len(frames) == 1 and isinstance(frames[0], P.ErrorFrame), frames
    return frames[0]


def _listed(hub: Hub, session: str) -> str | None:
    listing = hub.listing(session)
    return listing.current_execution_id if listing is not None else None


async def _flushed(hub: Hub) -> None:
    await hub.flush()
    await eventually(lambda: not (hub.memory.dirty_sessions or hub.memory.dirty_executions), what="the hub's flush")


async def _current_in_db(hub: Hub, session: str) -> str | None:
    stored = await asyncio.to_thread(hub.memory.reader.load_session, session)
    return stored.current_execution_id if stored is not None else None


async def test_a_pruned_sessions_superseded_execution_is_refused_and_its_current_one_may_start_it_again(start_hub):
    clock = Clock()
    hub = await start_hub("a", clock)
    # Session old: execution 1, then execution 2 supersedes it; both leave. Session live: a daemon stays connected.
    one = await _hello(hub, "old", "exec-1")
    await eventually(lambda: "old" in hub.sessions, what="execution 1 taken")
    two = await _hello(hub, "old", "exec-2")
    told = await one.recv()
    assert isinstance(told, P.ErrorFrame) and told.code == "stale_execution"
    await one.close()
    await two.close()
    stays = await _hello(hub, "live", "exec-9")
    await eventually(lambda: hub.connected_daemons == 1 and not hub.sessions["old"].current.connected,
                     what="execution 2 disconnected")
    await _flushed(hub)

    # 31 days on: a session in contact now, then a retention round.
    clock.now = T0 + MONTH + timedelta(days=1)
    recent = await _hello(hub, "recent", "exec-5")
    await eventually(lambda: "recent" in hub.sessions, what="the recent session")
    await _flushed(hub)
    assert await hub.retention.prune() == 1
    assert hub.listing("old") is None and await _current_in_db(hub, "old") is None
    assert await _current_in_db(hub, "live") == "exec-9"  # a connected daemon: kept, however old its last contact
    assert await _current_in_db(hub, "recent") == "exec-5"

    # Execution 1's late hello is refused as stale: it never becomes current, nothing of it is stored.
    refused = await _refused(hub, "old", "exec-1")
    assert refused.code == "stale_execution" and refused.fatal
    await _flushed(hub)
    assert hub.listing("old") is None and await _current_in_db(hub, "old") is None

    # Execution 2, current when pruned, may start the session again; execution 1 stays fenced behind it.
    back = await _hello(hub, "old", "exec-2", instance="inst-b")
    await eventually(lambda: _listed(hub, "old") == "exec-2", what="execution 2 current again")
    await _flushed(hub)
    assert (await _refused(hub, "old", "exec-1")).code == "stale_execution"
    assert await _current_in_db(hub, "old") == "exec-2"
    # A new execution supersedes as ever.
    three = await _hello(hub, "old", "exec-3")
    await eventually(lambda: _listed(hub, "old") == "exec-3", what="execution 3 current")
    await _flushed(hub)
    assert await _current_in_db(hub, "old") == "exec-3"
    for client in (stays, recent, back, three):
        await client.close()


async def test_a_session_pruned_while_its_daemon_said_hello_is_written_again_whole(start_hub):
    clock = Clock()
    hub = await start_hub("a", clock)
    for execution in ("exec-1", "exec-2"):
        client = await _hello(hub, "raced", execution)
        await eventually(lambda execution=execution: _listed(hub, "raced") == execution, what=execution)
        await client.close()
    await eventually(lambda: hub.connected_daemons == 0, what="both daemons gone")
    await _flushed(hub)
    clock.now = T0 + MONTH + timedelta(days=1)
    # The race, in its worst order: the prune's transaction commits, then a hello lands before the hub drops the
    # session from memory (Retention.prune does these two on either side of its worker thread).
    async with hub.memory.flush_lock:
        assert await asyncio.to_thread(hub.memory.store.prune, T0 + MONTH, set(), 10, clock.now) == ["raced"]
    back = await _hello(hub, "raced", "exec-2", instance="inst-b")
    await eventually(lambda: hub.connected_daemons == 1, what="the hello taken from memory")
    hub.retention.forget("raced")
    await _flushed(hub)
    stored = await asyncio.to_thread(hub.memory.reader.load_session, "raced")
    assert stored is not None and stored.current_execution_id == "exec-2"
    assert sorted(stored.executions) == ["exec-1", "exec-2"]  # whole: the superseded execution too
    await back.close()


def _old_rows(n: int, contact: datetime) -> tuple[list[SessionRecord], list[ExecutionRecord]]:
    sessions, executions = [], []
    for i in range(n):
        sid = f"s{i:05d}"
        for order, eid in enumerate(("exec-1", "exec-2"), start=1):
            state = ExecutionState(identity=identity(session=sid, execution=eid), daemon_version="0.1.0",
                                   hello_order=order, first_hello_at=contact, last_contact_at=contact)
            executions.append(ExecutionRecord.of(sid, state, None))
        sessions.append(SessionRecord(sid, "task-1", "exec-2", 0, contact))
    return sessions, executions


async def test_two_hubs_pruning_one_database_at_once_take_disjoint_batches_and_both_fence_the_late_frames(
        pg_pair):
    clock = Clock()
    a, b = hubs = await pg_pair(clock, batch=50)  # many small batches: the two interleave
    sessions, executions = _old_rows(400, T0)
    await asyncio.to_thread(a.memory.store.write, sessions, executions)
    await b.retention.measure()  # the hub's tables in PostgreSQL, as /metrics shows them
    assert b.retention.oldest_contact_at == T0 and b.retention.size_bytes > 0
    clock.now = T0 + MONTH + timedelta(days=1)
    pruned = await asyncio.gather(a.retention.prune(), b.retention.prune())
    assert sum(pruned) == 400 and all(pruned), pruned  # each session once, both hubs took batches
    assert await asyncio.to_thread(a.memory.store.max_hello_order) == 0  # every execution row gone
    for hub in hubs:  # each hub's memory follows (the other hub's prunes by notification)
        await eventually(lambda hub=hub: not hub.sessions, what="the pruned sessions gone from memory")
    await a.retention.measure()
    assert a.retention.oldest_contact_at is None
    for hub, sid in ((a, "s00007"), (b, "s00123")):
        refused = await _refused(hub, sid, "exec-1")
        assert refused.code == "stale_execution"
        assert await _current_in_db(hub, sid) is None


async def test_hellos_racing_two_hubs_pruning_never_make_a_superseded_execution_current_nor_lose_a_connected_one(
        pg_pair):
    clock = Clock()
    a, b = hubs = await pg_pair(clock, batch=10)
    clients: list[RawClient] = []
    try:
        await asyncio.to_thread(a.memory.store.write, *_old_rows(240, T0))
        clock.now = T0 + MONTH + timedelta(days=1)
        late, back, new = range(0, 30), range(30, 60), range(60, 90)

        async def late_hello(i: int) -> str:
            client = await RawClient.connect(hubs[i % 2].socket_path)
            clients.append(client)
            await client.hello(identity(session=f"s{i:05d}", execution="exec-1"))
            told = await client.recv(timeout=30)  # fatal once pruned, a notice while the session was still there
            return told.code

        async def current_hello(i: int, execution: str) -> None:
            clients.append(await _hello(hubs[i % 2], f"s{i:05d}", execution, instance="inst-late"))

        results = await asyncio.gather(
            a.retention.prune(), b.retention.prune(),
            *(late_hello(i) for i in late), *(current_hello(i, "exec-2") for i in back),
            *(current_hello(i, "exec-3") for i in new))
        assert set(results[2:2 + len(late)]) == {"stale_execution"}
        for hub in hubs:
            await _flushed(hub)
        stored = await asyncio.to_thread(a.memory.reader.load)
        for i in late:  # pruned, or still there with exec-2 current: never exec-1
            assert stored.get(f"s{i:05d}") is None or stored[f"s{i:05d}"].current_execution_id == "exec-2"
        for i, execution in [*((i, "exec-2") for i in back), *((i, "exec-3") for i in new)]:
            session = stored.get(f"s{i:05d}")
            assert session is not None and session.current_execution_id == execution, i
        assert {sid for sid in stored} <= {f"s{i:05d}" for i in (*late, *back, *new)}

        # A superseded daemon does not hold its session: the next rounds prune every late one and close its
        # connection; the sessions followed by a daemon stay.
        async def settled() -> bool:
            return await asyncio.gather(a.retention.prune(), b.retention.prune()) == [0, 0]

        await eventually(settled, timeout=30, what="every due session pruned")
        kept = await asyncio.to_thread(a.memory.reader.load)
        assert sorted(kept) == [f"s{i:05d}" for i in (*back, *new)]
    finally:
        for client in clients:
            await client.close()


async def test_pruning_goes_in_batches_and_keeps_sessions_within_the_period(start_hub):
    clock = Clock()
    hub = await start_hub("a", clock)
    old, old_executions = _old_rows(1200, T0)
    await asyncio.to_thread(hub.memory.store.write, old, old_executions)
    young = [SessionRecord(s.session_id.replace("s", "y"), "task-1", "exec-2", 0, T0 + MONTH) for s in old[:5]]
    young_executions = [ExecutionRecord.of(s.session_id, ExecutionState(
        identity=identity(session=s.session_id, execution="exec-2"), daemon_version="0.1.0", hello_order=1,
        first_hello_at=T0, last_contact_at=T0 + MONTH), None) for s in young]
    await asyncio.to_thread(hub.memory.store.write, young, young_executions)
    clock.now = T0 + MONTH + timedelta(hours=1)
    batches: list[int] = []
    prune = hub.memory.store.prune
    hub.memory.store.prune = lambda *a: batches.append(len(ids := prune(*a))) or ids  # counts the transactions
    assert await hub.retention.prune() == 1200
    assert batches == [200] * 6 + [0]  # the hub's PRUNE_BATCH, then one that finds none left
    size, oldest = await asyncio.to_thread(hub.memory.reader.footprint)
    assert oldest == T0 + MONTH and size > 0


async def test_hub_status_and_metrics_show_the_database_size_and_the_oldest_session(short_dir: Path, capsys):
    clock = Clock()
    db = short_dir / "hub.sqlite3"
    hub = Hub(short_dir / "hub.sock", db, flush_interval=0.02, clock=clock, retention=MONTH)
    await hub.start()
    page = HubWeb(hub, "127.0.0.1", 0, token="t" * 32)
    await page.start()
    try:
        client = await _hello(hub, "first", "exec-1")
        await eventually(lambda: "first" in hub.sessions, what="the session")
        await _flushed(hub)
        await hub.retention.measure()
        async with aiohttp.ClientSession() as http, http.get(f"{page.url}metrics") as response:
            text = await response.text()
        samples = {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}
        assert samples["agentctl_hub_oldest_session_contact_timestamp_seconds"] == T0.timestamp()
        assert samples["agentctl_hub_database_bytes"] > 0
        await client.close()
    finally:
        await page.stop()
        await hub.stop()
    assert main(["hub", "status", "--db", str(db), "--json"]) == 0
    database = json.loads(capsys.readouterr().out)["database"]
    assert database["oldest_contact_at"] == "2026-12-01T09:00:00Z"
    on_disk = sum(p.stat().st_size for p in short_dir.glob("hub.sqlite3*") if not p.name.endswith("-shm"))
    assert database["size_bytes"] == on_disk
    assert main(["hub", "status", "--db", str(db)]) == 0
    assert "oldest session kept: last contact 2026-12-01 09:00:00" in capsys.readouterr().out


def test_a_retention_period_reads_as_days_hours_minutes_or_seconds_and_forever_keeps_everything():
    assert parse_retention("30d") == parse_retention("30") == timedelta(days=30)
    assert parse_retention("12h") == timedelta(hours=12) and parse_retention("90m") == timedelta(minutes=90)
    assert parse_retention("3600s") == timedelta(hours=1)
    assert parse_retention("forever") is None and parse_retention("0") is None
    for bad in ("", "30 days", "-1d", "1y"):
        with pytest.raises(RetentionError, match="give a period such as 30d"):
            parse_retention(bad)


def test_hub_serve_refuses_an_unreadable_retention_before_opening_anything(short_dir: Path, capsys):
    assert main(["hub", "serve", "--socket", str(short_dir / "h.sock"), "--db", str(short_dir / "h.sqlite3"),
                 "--retention", "a while"]) == 1
    assert "retention 'a while'" in capsys.readouterr().err
    assert not (short_dir / "h.sqlite3").exists()


def test_only_the_execution_current_when_pruned_may_start_its_session_again():
    assert rules.after_prune(None, session_live=False) is None  # no tombstone: a new execution
    assert rules.after_prune(None, session_live=True) is None
    assert rules.after_prune(True, session_live=False) is None
    for was_current, live in ((True, True), (False, False), (False, True)):
        refusal = rules.after_prune(was_current, session_live=live)
        assert refusal is not None and refusal.code == "stale_execution"


def test_the_tombstones_are_all_a_pruned_session_leaves(short_dir: Path):
    import agentctl.hub.hub_store as hs

    store = hs.HubStore(short_dir / "hub.sqlite3")
    sessions, executions = _old_rows(3, T0)
    store.write(sessions, executions)
    assert store.prune(T0 + timedelta(seconds=1), {"s00001"}, 10, T0 + MONTH) == ["s00000", "s00002"]
    store.close()
    conn = sqlite3.connect(short_dir / "hub.sqlite3")
    assert conn.execute("SELECT session_id FROM sessions").fetchall() == [("s00001",)]
    assert conn.execute("SELECT session_id, execution_id, was_current FROM tombstones ORDER BY 1, 2").fetchall() == [
        ("s00000", "exec-1", 0), ("s00000", "exec-2", 1), ("s00002", "exec-1", 0), ("s00002", "exec-2", 1)]
    conn.close()


STOP_DURING_PRUNE = r"""
import sqlite3, sys, threading
from datetime import timedelta
from tests.hub.test_retention import MONTH, T0, _old_rows
import agentctl.hub.hub_store as hs

path = sys.argv[1]
store = hs.HubStore(path)
sessions, executions = _old_rows(20000, T0)
store.write(sessions, executions)
pruned = []
worker = threading.Thread(target=lambda: pruned.extend(store.prune(T0 + timedelta(seconds=1), set(), 20000, T0 + MONTH)))
worker.start()
probe = sqlite3.connect(path, timeout=0)
while worker.is_alive():  # the prune's BEGIN IMMEDIATE holds the write lock: it is running now
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
    except sqlite3.OperationalError:
        break
running = worker.is_alive()
store.close()  # what a hub's stop does once the task awaiting the prune was cancelled
worker.join()
print(running, len(pruned))
"""


def test_closing_the_store_while_a_prune_runs_in_its_thread_waits_for_the_prune_instead_of_crashing(short_dir: Path):
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", STOP_DURING_PRUNE, str(short_dir / "hub.sqlite3")],
                         capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    # Before the store's close took the lock, this ended the process with SIGSEGV (seen in CI as -11).
    assert run.returncode == 0, run.stderr[-2000:]
    running, pruned = run.stdout.split()
    assert pruned == "20000"
    assert running == "True", "the close must have come while the prune ran, or this test proved nothing"



async def test_a_hub_started_on_a_database_from_before_the_listings_lists_every_execution_on_its_own(
        short_dir: Path):
    import agentctl.hub.hub_store as hs
    from agentctl.hub.listing import PageQuery
    from tests.hub.test_listing import write_session

    path = short_dir / "hub.sqlite3"
    store = hs.HubStore(path)
    recent = datetime.now(UTC)  # within the default retention period: none of them is pruned meanwhile
    for i in range(450):  # more than two of the upkeep's batches
        write_session(store, f"s{i:05d}", ["failed"] if i == 7 else ["active"], contact=recent)
    store.close()
    with sqlite3.connect(path) as other:  # what a database migrated from hub schema 3 holds: no listings
        other.execute("DELETE FROM listings")
    hub = Hub(short_dir / "h.sock", path, tasks_db=short_dir / "tasks.sqlite3", flush_interval=0.02)
    await hub.start()
    try:
        def listed() -> bool:
            with sqlite3.connect(path) as other:
                return other.execute("SELECT COUNT(*) FROM listings").fetchone() == (450,)

        await eventually(listed, 30, "the hub to list the executions written before schema 4")
        attention = await hub.page(PageQuery(filter="attention"))
        assert [s.session_id for s in attention.sessions] == ["s00007"]
        one = (await hub.page(PageQuery(words=("s00001",)))).sessions[0]
        assert [row.status for row in one.current_attempt.servers] == ["active"]
    finally:
        await hub.stop()
