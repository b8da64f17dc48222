"""Faults of a shared PostgreSQL, with real parts: the server restarted by `pg_ctl` mid-ingest (hubs reconnect
with backoff, `/readyz` says the database is unavailable meanwhile, nothing sent is lost), and a hello while it
is down (refused as `unavailable`; the real publisher keeps buffering and gets in once the server is back), and a
slow read of a session the hub holds cold (a table lock), which runs off the event loop: `/readyz` answers."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import aiohttp
import psycopg

from agentctl.dsn import parse_location
from agentctl.evidence.contract.base import encode
from agentctl.hub.pg_store import hub_tag
from agentctl.hub.stores import open_store
from agentctl.hub.web import HubWeb
from agentctl.upstream.publisher import Publisher
from tests.pg import PgDatabase, PgServer
from tests.upstream.support import SEEDS, eventually, identity, make_ctx


async def _readyz(page: HubWeb) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, http.get(page.url + "readyz") as resp:
        return resp.status, await resp.json()


def _stored(db: PgDatabase, session: str) -> bytes | None:
    store = open_store(parse_location(db.url), readonly=True)
    try:
        found = store.load_session(session)
    finally:
        store.close()
    return encode(found.current.history) if found is not None and found.current.history is not None else None


async def test_postgresql_restarted_mid_ingest_loses_nothing_and_readyz_says_unavailable_meanwhile(
        pg_hubs, pg_server: PgServer, pg_db: PgDatabase, tmp_path: Path):
    a, b, page = pg_hubs
    ctx = make_ctx(tmp_path / "one", identity(execution="exec-1"))
    one = Publisher(ctx, a.socket_path, backoff_initial=0.05, backoff_max=0.5)
    one.start()
    late_ctx = make_ctx(tmp_path / "two", identity(session="session-2", execution="exec-9"))
    late = Publisher(late_ctx, b.socket_path, backoff_initial=0.05, backoff_max=0.5)
    try:
        await eventually(lambda: one.connected, what="the publisher connected to hub A")
        attempt, _ = ctx.ledger.begin_attempt("session_new", SEEDS)
        for n in range(5):
            ctx.ledger.record("tools_list_observed", attempt, "kandev", tool_count=n)
        await eventually(lambda: _stored(pg_db, "session-1") == encode(ctx.ledger.history), timeout=20,
                         what="the first events in the database")
        assert await _readyz(page) == (200, {"ok": True, "checks": {"database": {"ok": True, "detail": "available"}}})

        await asyncio.to_thread(pg_server.stop)  # pg_ctl stop -m fast: every connection cut
        for n in range(5, 10):  # ingest goes on: hub A holds what it is sent
            ctx.ledger.record("tools_list_observed", attempt, "kandev", tool_count=n)
        await eventually(lambda: a.database_problem() is not None, timeout=20, what="hub A to see the database gone")
        code, body = await _readyz(page)
        assert code == 503 and body["checks"]["database"]["detail"].startswith("database unavailable")
        refused = b.memory.protocol_errors
        late.start()  # a hello while the database is down is refused; the publisher keeps buffering
        late_ctx.ledger.begin_attempt("session_new", SEEDS)
        await eventually(lambda: b.memory.protocol_errors > refused, timeout=20, what="hub B to refuse the hello")

        await asyncio.to_thread(pg_server.start)
        await eventually(lambda: _stored(pg_db, "session-1") == encode(ctx.ledger.history), timeout=30,
                         what="every event sent during the outage in the database")
        await eventually(lambda: _stored(pg_db, "session-2") == encode(late_ctx.ledger.history), timeout=30,
                         what="the session that said hello during the outage, once the database is back")
        await eventually(lambda: a.database_problem() is None and b.database_problem() is None, timeout=30,
                         what="both hubs to recover")
        code, body = await _readyz(page)
        assert code == 200
        # Hub A's view includes what went through hub B during and after the outage.
        await eventually(lambda: {s.session_id for s in a.status().sessions} == {"session-1", "session-2"},
                         timeout=10, what="hub A to list hub B's session")
    finally:
        await one.stop()
        await late.stop()


async def test_a_slow_read_of_a_cold_session_does_not_stall_the_hub_and_its_readyz(
        pg_hubs, pg_server: PgServer, pg_db: PgDatabase, tmp_path: Path):
    a, b, page = pg_hubs
    ctx = make_ctx(tmp_path / "nine", identity(session="session-9", execution="exec-9"))
    publisher = Publisher(ctx, b.socket_path, backoff_initial=0.05, backoff_max=0.5)
    publisher.start()
    locker = psycopg.connect(pg_db.url)  # not autocommit: the lock lasts until the rollback
    # A safety net for a hub that does block its loop: then nothing else runs until the lock is gone.
    release = threading.Timer(10, locker.rollback)
    try:
        await eventually(lambda: publisher.connected, what="the publisher connected to hub B")
        attempt, _ = ctx.ledger.begin_attempt("session_new", SEEDS)
        # Hub A holds no daemon of this session: the database alone holds it, read on demand.
        await eventually(lambda: (cold := a.report("session-9")) is not None and cold.history is not None
                         and cold.history.current is not None and cold.history.current.attempt_id == attempt
                         and "session-9" not in a.sessions, timeout=20,
                         what="hub A to read hub B's session, with its attempt, from the database")

        locker.execute("LOCK TABLE executions IN ACCESS EXCLUSIVE MODE")  # the reads of hub A wait on it
        release.start()
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer " + "t" * 32}) as http:
            history = asyncio.ensure_future(http.get(page.url + "api/sessions/session-9/history"))
            waiting = ("SELECT count(*) FROM pg_stat_activity WHERE application_name=%s AND wait_event_type='Lock'",
                       (hub_tag(a.hub_id),))
            await eventually(lambda: pg_server.admin().execute(*waiting).fetchone()[0] > 0, timeout=5,
                             what="hub A's read of the cold session waiting on the lock")
            started = time.monotonic()
            async with http.get(page.url + "readyz") as resp:
                assert resp.status == 200
            assert time.monotonic() - started < 2.0, "readyz waited for the slow read"
            assert not history.done()
            locker.rollback()
            async with await history as resp:
                assert resp.status == 200
                assert (await resp.json())["current"]["attempt_id"] == attempt
    finally:
        release.cancel()
        locker.close()
        await publisher.stop()


async def test_a_hello_whose_claim_waits_past_the_hello_deadline_keeps_its_connection(
        pg_server: PgServer, pg_db: PgDatabase, short_dir: Path, tmp_path: Path, monkeypatch):
    # A fleet reconnecting queues its claims; a daemon closed for the database's wait reconnects into the same
    # queue (bench/hub_scale.py saw that storm at 2,000 publishers). The queue is made here by a real lock.
    from agentctl.hub import hub as hub_module

    monkeypatch.setattr(hub_module, "HELLO_TIMEOUT", 0.5)
    hub = hub_module.Hub(short_dir / "c.sock", parse_location(pg_db.url), flush_interval=0.05)
    await hub.start()
    ctx = make_ctx(tmp_path / "one", identity(session="session-1", execution="exec-1"))
    publisher = Publisher(ctx, hub.socket_path, backoff_initial=0.05, backoff_max=0.5)
    locker = psycopg.connect(pg_db.url)  # not autocommit: the lock lasts until the rollback
    release = threading.Timer(20, locker.rollback)  # a safety net only
    try:
        locker.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")  # the hello's claim waits on it
        release.start()
        publisher.start()
        waiting = ("SELECT count(*) FROM pg_stat_activity WHERE application_name=%s AND wait_event_type='Lock'",
                   (hub_tag(hub.hub_id),))
        await eventually(lambda: pg_server.admin().execute(*waiting).fetchone()[0] > 0, timeout=5,
                         what="the hello's claim waiting on the lock")
        deadline = time.monotonic() + 3 * 0.5  # three hello deadlines of waiting, checked at every poll

        def held_past_the_deadlines() -> bool:
            assert hub.guard.counts["timed_out"] == 0 and publisher.connects == 1, "closed while its claim waited"
            return time.monotonic() >= deadline

        await eventually(held_past_the_deadlines, timeout=10, what="three hello deadlines with the claim waiting")
        locker.rollback()
        attempt, _ = ctx.ledger.begin_attempt("session_new", SEEDS)
        await eventually(lambda: (s := hub.sessions.get("session-1")) is not None and s.current.history is not None
                         and s.current.history.current is not None
                         and s.current.history.current.attempt_id == attempt, timeout=10,
                         what="the hub to take the daemon's snapshot once the claim went through")
        assert publisher.connects == 1 and hub.guard.counts["timed_out"] == 0
    finally:
        release.cancel()
        locker.close()
        await publisher.stop()
        await hub.stop()
