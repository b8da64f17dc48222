"""Faults of a shared PostgreSQL, with real parts: the server restarted by `pg_ctl` mid-ingest (hubs reconnect
with backoff, `/readyz` says the database is unavailable meanwhile, nothing sent is lost), and a hello while it
is down (refused as `unavailable`; the real publisher keeps buffering and gets in once the server is back)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from agentctl.dsn import parse_location
from agentctl.evidence.contract import encode
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
        refused = b.protocol_errors
        late.start()  # a hello while the database is down is refused; the publisher keeps buffering
        late_ctx.ledger.begin_attempt("session_new", SEEDS)
        await eventually(lambda: b.protocol_errors > refused, timeout=20, what="hub B to refuse the hello")

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
