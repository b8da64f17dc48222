"""Every task-store op, and the user's answer, on both engines: the embedded backend's SQLite file and the hub's
PostgreSQL store (a real server, tests/pg.py) run the same statements, written once in the SQL both speak."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentctl.backend import OPS, BackendError, EmbeddedBackend
from agentctl.dsn import parse_location
from agentctl.hub.stores import open_task_store
from tests.conftest import identity

ME = identity()
OTHER = identity(session="session-2", execution="exec-2", instance="inst-2", task="task-2")


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EmbeddedBackend]:
    if request.param == "sqlite":
        opened = open_task_store(tmp_path / "tasks.sqlite")
    else:
        opened = open_task_store(parse_location(request.getfixturevalue("pg_db").url))
    yield opened
    opened.close()


async def call(store: EmbeddedBackend, op: str, args: dict[str, Any] | None = None, who=ME) -> dict[str, Any]:
    return await store.call(op, who, args or {}, deadline=10)


async def test_the_current_task_is_created_once_however_many_ops_touch_it(store: EmbeddedBackend) -> None:
    first = (await call(store, "task.get"))["task"]
    for op in ("task.get", "task.list", "plan.get"):
        await call(store, op)
    again = (await call(store, "task.get"))["task"]
    assert (first["id"], first["title"], first["status"]) == ("task-1", "Task task-1", "in_progress")
    assert again["created_at"] == first["created_at"]
    assert [t["id"] for t in (await call(store, "task.list"))["tasks"]] == ["task-1"]


async def test_messages_and_questions_answer_with_the_ids_the_store_gave_them(store: EmbeddedBackend) -> None:
    ids = [(await call(store, "task.message", {"text": text}))["message"]["id"] for text in ("one", "two")]
    assert ids[0] < ids[1]
    asked = (await call(store, "task.ask_user", {"question": "Which?", "options": ["a", "b"]}))["question"]
    assert (asked["question"], asked["options"], asked["status"], asked["answer"]) == ("Which?", ["a", "b"],
                                                                                      "pending", None)
    seen = await call(store, "task.get")
    assert [(m["id"], m["text"]) for m in seen["recent_messages"]] == [(ids[0], "one"), (ids[1], "two")]
    assert [q["id"] for q in seen["questions"]] == [asked["id"]]


async def test_a_users_answer_is_recorded_and_an_unknown_question_is_refused(store: EmbeddedBackend) -> None:
    asked = (await call(store, "task.ask_user", {"question": "Go?"}))["question"]
    await store.answer_question(asked["id"], "yes")
    (got,) = (await call(store, "task.get"))["questions"]
    assert (got["status"], got["answer"]) == ("answered", "yes") and got["answered_at"]
    with pytest.raises(BackendError, match="no such question"):
        await store.answer_question(asked["id"] + 1000, "no")


async def test_tasks_are_created_updated_retitled_and_listed_by_status(store: EmbeddedBackend) -> None:
    child = (await call(store, "task.create", {"title": "Child", "description": "d"}))["task"]
    assert (child["parent_id"], child["status"], child["is_current"]) == ("task-1", "todo", False)
    await call(store, "task.update", {"description": "new", "status": "review"})
    titled = (await call(store, "task.set_title", {"title": "Named"}))["task"]
    assert (titled["title"], titled["description"], titled["status"]) == ("Named", "new", "review")
    await call(store, "task.get", who=OTHER)
    everything = (await call(store, "task.list", {"limit": 10}))["tasks"]
    assert {t["id"] for t in everything} == {"task-1", "task-2", child["id"]}
    assert [t["id"] for t in (await call(store, "task.list", {"status": "todo"}))["tasks"]] == [child["id"]]
    assert len((await call(store, "task.list", {"limit": 1}))["tasks"]) == 1


async def test_a_plan_is_created_completed_step_by_step_and_rewritten(store: EmbeddedBackend) -> None:
    assert (await call(store, "plan.get"))["plan"] is None
    await call(store, "plan.create", {"steps": ["a", "b", "c"], "summary": "s"})
    with pytest.raises(BackendError, match="already has a plan"):
        await call(store, "plan.create", {"steps": ["x"]})
    done = (await call(store, "plan.step_complete", {"step": 2}))["plan"]
    assert [s["done"] for s in done["steps"]] == [False, True, False] and done["completed_steps"] == 1
    rewritten = (await call(store, "plan.update", {"steps": ["b", "d"], "summary": "t"}))["plan"]
    assert [(s["number"], s["text"], s["done"]) for s in rewritten["steps"]] == [(1, "b", True), (2, "d", False)]
    assert (await call(store, "plan.get"))["plan"]["summary"] == "t"
    with pytest.raises(BackendError, match="run from 1 to 2"):
        await call(store, "plan.step_complete", {"step": 3})


async def test_a_refused_op_is_rolled_back_with_the_task_it_created(store: EmbeddedBackend) -> None:
    await call(store, "task.get")
    with pytest.raises(BackendError, match="no plan yet"):  # after the op created task-2 as OTHER's current
        await call(store, "plan.step_complete", {"step": 1}, who=OTHER)
    assert [t["id"] for t in (await call(store, "task.list"))["tasks"]] == ["task-1"]


def test_every_op_of_the_table_is_exercised_here() -> None:
    exercised = {"task.get", "task.list", "task.create", "task.update", "task.set_title", "task.message",
                 "task.ask_user", "plan.create", "plan.get", "plan.update", "plan.step_complete"}
    assert {op for op in OPS if not op.startswith("config.")} == exercised
