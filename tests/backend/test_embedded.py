"""Behaviour of the embedded backend: a real SQLite task store that answers every op offline."""

from __future__ import annotations

import asyncio
import sqlite3
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentctl.backend import OPS, Backend, BackendError, EmbeddedBackend
from agentctl.backend.embedded import SCHEMA_VERSION
from agentctl.daemon.servers import configured_servers
from agentctl.evidence.contract.report import Identity
from agentctl.spec import parse_spec
from tests.conftest import identity, spec_toml

IDENTITY = identity()
OTHER = identity(session="session-2", execution="exec-2", instance="inst-2", task="task-2")
DEADLINE = 5.0


def make_backend(path: Path, **overrides: Any) -> EmbeddedBackend:
    kwargs: dict[str, Any] = {
        "agents_info": {"agents": [{"id": "agent-1", "profiles": [{"id": "profile-1"}]}]},
        "mcp_info": [],
        "execution_info": {"mcp_url": "http://127.0.0.1:4000/mcp"},
    }
    kwargs.update(overrides)
    return EmbeddedBackend(path, **kwargs)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "tasks.sqlite"


@pytest.fixture
def backend(db_path: Path):
    b = make_backend(db_path)
    yield b
    b.close()


async def call(b: EmbeddedBackend, op: str, args: dict[str, Any] | None = None, identity: Identity = IDENTITY):
    return await b.call(op, identity, args or {}, deadline=DEADLINE)


def test_the_embedded_backend_satisfies_the_backend_protocol(backend: EmbeddedBackend) -> None:
    assert isinstance(backend, Backend)


async def test_the_store_is_a_private_wal_sqlite_file_with_its_schema_created_on_open(
    backend: EmbeddedBackend, db_path: Path
) -> None:
    assert db_path.is_file()
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()
    assert {"tasks", "messages", "questions", "plans", "plan_steps"} <= tables


async def test_the_current_task_is_created_lazily_with_a_placeholder_title(backend: EmbeddedBackend) -> None:
    view = await call(backend, "task.get")
    assert view["task"]["id"] == "task-1"
    assert view["task"]["title"] == "Task task-1"
    assert view["task"]["is_current"] is True
    assert view["recent_messages"] == [] and view["questions"] == []
    again = await call(backend, "task.get")
    assert again["task"]["created_at"] == view["task"]["created_at"]


async def test_config_ops_do_not_create_the_current_task(backend: EmbeddedBackend, db_path: Path) -> None:
    await call(backend, "config.agents")
    await call(backend, "config.execution")
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 0
    finally:
        conn.close()


async def test_every_op_answers_and_the_answers_survive_a_reopen(backend: EmbeddedBackend, db_path: Path) -> None:
    created = await call(backend, "task.create", {"title": "Follow-up", "description": "later"})
    child = created["task"]
    assert child["title"] == "Follow-up" and child["status"] == "todo"
    assert child["parent_id"] == "task-1" and child["is_current"] is False

    updated = await call(backend, "task.update", {"description": "Do the thing", "status": "review"})
    assert updated["task"]["description"] == "Do the thing" and updated["task"]["status"] == "review"
    titled = await call(backend, "task.set_title", {"title": "  Better title  "})
    assert titled["task"]["title"] == "Better title"

    message = await call(backend, "task.message", {"text": "halfway"})
    assert message["message"]["text"] == "halfway" and message["message"]["id"] >= 1
    question = await call(backend, "task.ask_user", {"question": "Which DB?", "options": ["sqlite", "postgres"]})
    assert question["question"]["status"] == "pending"
    assert question["question"]["options"] == ["sqlite", "postgres"]

    plan = await call(backend, "plan.create", {"steps": ["read", "write", "test"], "summary": "small"})
    assert [s["number"] for s in plan["plan"]["steps"]] == [1, 2, 3]
    assert plan["plan"]["total_steps"] == 3 and plan["plan"]["completed_steps"] == 0
    done = await call(backend, "plan.step_complete", {"step": 2})
    assert [s["done"] for s in done["plan"]["steps"]] == [False, True, False]
    assert done["plan"]["steps"][1]["completed_at"]
    changed = await call(backend, "plan.update", {"summary": "bigger"})
    assert changed["plan"]["summary"] == "bigger"

    listed = await call(backend, "task.list")
    assert {t["id"] for t in listed["tasks"]} == {"task-1", child["id"]}
    assert listed["current_task_id"] == "task-1"
    only_todo = await call(backend, "task.list", {"status": "todo", "limit": 10})
    assert [t["id"] for t in only_todo["tasks"]] == [child["id"]]
    agents = await call(backend, "config.agents")
    assert agents["agents"][0]["id"] == "agent-1"
    assert (await call(backend, "config.mcp")) == {"servers": []}
    execution = (await call(backend, "config.execution"))["execution"]
    assert execution["task_id"] == "task-1" and execution["mcp_url"] == "http://127.0.0.1:4000/mcp"

    backend.close()
    reopened = make_backend(db_path)
    try:
        view = await call(reopened, "task.get")
        assert view["task"]["title"] == "Better title" and view["task"]["status"] == "review"
        assert [m["text"] for m in view["recent_messages"]] == ["halfway"]
        assert [q["question"] for q in view["questions"]] == ["Which DB?"]
        plan_again = await call(reopened, "plan.get")
        assert plan_again["plan"]["summary"] == "bigger" and plan_again["plan"]["completed_steps"] == 1
    finally:
        reopened.close()


def test_the_op_table_is_fully_implemented() -> None:
    assert set(EmbeddedBackend._HANDLERS) == set(OPS)


async def test_two_daemons_share_one_store_and_each_sees_its_own_current_task(db_path: Path) -> None:
    first, second = make_backend(db_path), make_backend(db_path)
    try:
        await call(first, "task.message", {"text": "from one"})
        view = await call(second, "task.get", identity=OTHER)
        assert view["task"]["id"] == "task-2" and view["recent_messages"] == []
        listed = await call(second, "task.list", identity=OTHER)
        assert {t["id"]: t["is_current"] for t in listed["tasks"]} == {"task-1": False, "task-2": True}
    finally:
        first.close()
        second.close()


async def test_a_plan_update_keeps_the_done_state_of_unchanged_steps(backend: EmbeddedBackend) -> None:
    await call(backend, "plan.create", {"steps": ["a", "b", "c"]})
    await call(backend, "plan.step_complete", {"step": 1})
    await call(backend, "plan.step_complete", {"step": 3})
    plan = (await call(backend, "plan.update", {"steps": ["c", "new", "a"]}))["plan"]
    assert [(s["text"], s["done"]) for s in plan["steps"]] == [("c", True), ("new", False), ("a", True)]


async def test_completing_a_step_twice_keeps_its_first_completion_time(backend: EmbeddedBackend) -> None:
    await call(backend, "plan.create", {"steps": ["a"]})
    first = (await call(backend, "plan.step_complete", {"step": 1}))["plan"]["steps"][0]["completed_at"]
    second = (await call(backend, "plan.step_complete", {"step": 1}))["plan"]["steps"][0]["completed_at"]
    assert first == second


async def test_a_missing_plan_reads_as_none_and_refuses_updates_clearly(backend: EmbeddedBackend) -> None:
    assert (await call(backend, "plan.get")) == {"plan": None}
    with pytest.raises(BackendError, match="no plan yet"):
        await call(backend, "plan.update", {"summary": "x"})
    with pytest.raises(BackendError, match="no plan yet"):
        await call(backend, "plan.step_complete", {"step": 1})


async def test_a_second_plan_is_refused_and_out_of_range_steps_name_the_range(backend: EmbeddedBackend) -> None:
    await call(backend, "plan.create", {"steps": ["a", "b"]})
    with pytest.raises(BackendError, match="already has a plan"):
        await call(backend, "plan.create", {"steps": ["c"]})
    with pytest.raises(BackendError, match="from 1 to 2"):
        await call(backend, "plan.step_complete", {"step": 3})


@pytest.mark.parametrize(
    ("op", "args", "expected"),
    [
        ("task.create", {}, "'title' is required"),
        ("task.create", {"title": "   "}, "'title' must not be empty"),
        ("task.create", {"title": "x" * 201}, "longer than 200"),
        ("task.update", {}, "nothing to update"),
        ("task.update", {"status": "s3cret-status"}, "'status' must be one of"),
        ("task.list", {"limit": 0}, "'limit' must be an integer"),
        ("task.ask_user", {"question": "q", "options": ["ok", ""]}, "empty entries"),
        ("plan.create", {"steps": []}, "at least one step"),
        ("plan.step_complete", {"step": "two"}, "'step' must be a step number"),
    ],
)
async def test_invalid_arguments_are_refused_with_a_message_that_names_the_field_not_the_value(
    backend: EmbeddedBackend, op: str, args: dict[str, Any], expected: str
) -> None:
    with pytest.raises(BackendError, match=expected) as info:
        await call(backend, op, args)
    assert "s3cret" not in str(info.value)


async def test_an_unknown_op_is_a_backend_error(backend: EmbeddedBackend) -> None:
    with pytest.raises(BackendError, match="does not support 'task.delete'"):
        await call(backend, "task.delete")


async def test_a_store_locked_past_the_deadline_gives_a_timeout_error_and_recovers(
    backend: EmbeddedBackend, db_path: Path
) -> None:
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        started = time.monotonic()
        with pytest.raises(BackendError, match=r"did not answer within 0\.2 s"):
            await backend.call("task.message", IDENTITY, {"text": "x"}, deadline=0.2)
        assert time.monotonic() - started < 2.0
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    view = await call(backend, "task.get")
    assert view["task"]["id"] == "task-1"


async def test_an_abandoned_op_still_waiting_for_its_turn_is_skipped(
    backend: EmbeddedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker_done = threading.Event()  # the abandoned worker has taken the lock and answered
    outcomes: list[BaseException | None] = []
    run = backend._run

    def run_and_tell(*args: Any) -> dict[str, Any]:
        try:
            result = run(*args)
        except BaseException as exc:
            outcomes.append(exc)
            raise
        else:
            outcomes.append(None)
            return result
        finally:
            worker_done.set()

    monkeypatch.setattr(backend, "_run", run_and_tell)
    backend._lock.acquire()  # a long op is running in another thread
    try:
        with pytest.raises(BackendError, match="did not answer"):
            await backend.call("task.message", IDENTITY, {"text": "late"}, deadline=0.1)
    finally:
        backend._lock.release()
    assert await asyncio.to_thread(worker_done.wait, 10.0), "the abandoned worker never ran"
    assert [str(exc) for exc in outcomes] == ["abandoned"]
    assert (await call(backend, "task.get"))["recent_messages"] == []


async def test_a_closed_backend_refuses_calls_clearly(backend: EmbeddedBackend) -> None:
    backend.close()
    backend.close()  # idempotent
    with pytest.raises(BackendError, match="closed"):
        await call(backend, "task.get")


async def test_a_users_answer_appears_on_the_task(backend: EmbeddedBackend) -> None:
    asked = await call(backend, "task.ask_user", {"question": "Ship it?"})
    await backend.answer_question(asked["question"]["id"], "yes")
    question = (await call(backend, "task.get"))["questions"][0]
    assert question["status"] == "answered" and question["answer"] == "yes" and question["answered_at"]
    with pytest.raises(BackendError, match="no such question"):
        await backend.answer_question(9999, "no")


async def test_mcp_configuration_is_listed_as_the_attempts_configured_servers(db_path: Path) -> None:
    spec = parse_spec(spec_toml(servers=[
        {"name": "remote", "type": "http", "url": "https://user:pw@api.example.com:8443/mcp?token=abc#frag",
         "headers": {"Authorization": "Bearer abc"}},
        {"name": "local", "type": "stdio", "command": "/opt/tools/bin/fs-server", "env": {"KEY": "v"}},
    ]).encode())
    b = make_backend(db_path, mcp_info=configured_servers(spec, "http://127.0.0.1:4000"))
    try:
        servers = (await call(b, "config.mcp"))["servers"]
    finally:
        b.close()
    assert servers == [
        {"name": spec.mcp.builtin_name, "source": "builtin", "transport": "http", "target": "http://127.0.0.1:4000"},
        {"name": "remote", "source": "profile", "transport": "http", "target": "https://api.example.com:8443"},
        {"name": "local", "source": "profile", "transport": "stdio", "target": "fs-server"},
    ]


async def test_config_answers_are_copies_the_agent_cannot_mutate(backend: EmbeddedBackend) -> None:
    first = await call(backend, "config.agents")
    first["agents"].clear()
    assert (await call(backend, "config.agents"))["agents"]


async def test_a_store_from_a_newer_agentctl_is_refused(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    conn = sqlite3.connect(db_path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(BackendError, match="newer agentctl"):
        make_backend(db_path)
