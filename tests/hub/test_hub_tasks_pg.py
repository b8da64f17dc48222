"""The tool tunnel's task store in a shared PostgreSQL: what an agent writes through hub A (a message, a plan, a
question's answer) is what another session of the task reads through hub B; the store's schema is its own migration family; tool
arguments never reach the hub's log."""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg
import pytest

from agentctl.backend.base import BackendError
from agentctl.upstream.publisher import Publisher
from agentctl.upstream.tunnel import TunnelBackend
from tests.pg import PgDatabase
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
