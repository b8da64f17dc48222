"""The tool tunnel's task store in a shared PostgreSQL: what an agent writes through hub A (a message, a plan, a
question's answer) is what another session of the task reads through hub B; the store's schema is its own migration family; tool
arguments never reach the hub's log; PostgreSQL restarted, the store replaces its dead connection, and while the
server is down calls are refused at once and `/readyz` says the database is unavailable."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import psycopg
import pytest

from agentctl.backend.base import BackendError
from agentctl.upstream.publisher import Publisher
from agentctl.upstream.tunnel import TunnelBackend
from tests.pg import PgDatabase, PgServer
from tests.upstream.support import eventually, identity, make_ctx

CANARY = "Tool-Arg-Canary-5d1e"


async def test_a_task_written_through_hub_a_is_read_through_hub_b(pg_hubs, pg_db: PgDatabase, tmp_path: Path,
                                                                  caplog):
    a, b, _page = pg_hubs
    caplog.set_level(logging.DEBUG, logger="agentctl")
    one_ctx = make_ctx(tmp_path / "one", identity(session="session-1", execution="exec-1"))
    two_ctx = make_ctx(tmp_path / "two", identity(session="session-2", execution="exec-2"))
    one = Publisher(one_ctx, a.socket_path, backoff_initial=0.05, backoff_max=0.5)
    two = Publisher(two_ctx, b.socket_path, backoff_initial=0.05, backoff_max=0.5)
    one.start()
    two.start()
    try:
        await eventually(lambda: one.connected and two.connected, what="both publishers connected")
        via_a, via_b = TunnelBackend(one), TunnelBackend(two)
        sent = await via_a.call("task.message", one_ctx.ledger.identity, {"text": f"from A {CANARY}"}, deadline=10)
        await via_a.call("plan.create", one_ctx.ledger.identity, {"steps": ["first", "second"]}, deadline=10)
        await via_a.call("plan.step_complete", one_ctx.ledger.identity, {"step": 1}, deadline=10)
        seen = await via_b.call("task.get", two_ctx.ledger.identity, {}, deadline=10)
        assert [m["text"] for m in seen["recent_messages"]] == [f"from A {CANARY}"]
        assert seen["recent_messages"][0]["id"] == sent["message"]["id"]
        plan = (await via_b.call("plan.get", two_ctx.ledger.identity, {}, deadline=10))["plan"]
        assert [(s["text"], s["done"]) for s in plan["steps"]] == [("first", True), ("second", False)]
        with pytest.raises(BackendError, match="already has a plan"):  # the plan is in the shared store
            await via_b.call("plan.create", two_ctx.ledger.identity, {"steps": ["x"]}, deadline=10)
        asked = await via_b.call("task.ask_user", two_ctx.ledger.identity, {"question": "ok?", "options": ["y", "n"]},
                                 deadline=10)
        await a.backend.answer_question(asked["question"]["id"], "y")  # answered through hub A
        got = await via_b.call("task.get", two_ctx.ledger.identity, {}, deadline=10)
        assert [(q["question"], q["status"], q["answer"]) for q in got["questions"]] == [("ok?", "answered", "y")]
        with pytest.raises(BackendError, match="no such question"):
            await a.backend.answer_question(10**9, "n")
    finally:
        await one.stop()
        await two.stop()
    with psycopg.connect(pg_db.url) as conn:
        families = dict(conn.execute("SELECT family, MAX(version) FROM schema_version GROUP BY family").fetchall())
    assert set(families) == {"hub", "tasks"}
    assert CANARY not in caplog.text


async def test_the_task_store_survives_postgresql_restarting_and_refuses_calls_clearly_while_it_is_down(
        pg_hubs, pg_server: PgServer, tmp_path: Path, caplog):
    a, _b, page = pg_hubs
    caplog.set_level(logging.DEBUG, logger="agentctl")
    ctx = make_ctx(tmp_path / "one", identity(session="session-1", execution="exec-1"))
    one = Publisher(ctx, a.socket_path, backoff_initial=0.05, backoff_max=0.5)
    one.start()
    try:
        await eventually(lambda: one.connected, what="the publisher connected")
        tunnel, me = TunnelBackend(one), ctx.ledger.identity
        await tunnel.call("task.message", me, {"text": f"before {CANARY}"}, deadline=10)

        # Restarted between two calls: the store's connection is dead, found so on use, and replaced.
        await asyncio.to_thread(pg_server.restart)
        await tunnel.call("task.message", me, {"text": f"after a restart {CANARY}"}, deadline=10)

        # Down: a call is refused at once, saying so; /readyz says the database is unavailable.
        await asyncio.to_thread(pg_server.stop)
        with pytest.raises(BackendError, match="task store is unavailable; try again"):
            await tunnel.call("task.message", me, {"text": f"lost {CANARY}"}, deadline=10)
        assert a.backend.problem().startswith("database unavailable: the task store")
        async with aiohttp.ClientSession() as http, http.get(page.url + "readyz") as resp:
            assert resp.status == 503 and (await resp.json())["checks"]["database"]["detail"].startswith(
                "database unavailable")

        # Back: the hub reconnects the store without waiting for a call, then calls work again.
        await asyncio.to_thread(pg_server.start)
        await eventually(lambda: a.backend.problem() is None, timeout=20, what="the task store to reconnect")
        await tunnel.call("task.message", me, {"text": f"back {CANARY}"}, deadline=10)
        seen = await tunnel.call("task.get", me, {}, deadline=10)
        assert [m["text"] for m in seen["recent_messages"]] == [
            f"{when} {CANARY}" for when in ("before", "after a restart", "back")]
    finally:
        await one.stop()
    assert CANARY not in caplog.text
    assert "task store connection lost" in caplog.text and "task store: cannot connect to" in caplog.text
