"""The embedded backend: a real SQLite task store in the state directory, so every tool works offline.

The daemon's backend when the spec configures no upstream (`agentctl run` on a fresh machine among
others), the local answer to `config.*` behind the tool tunnel, and the hub's executor of tunnelled calls.
One connection, guarded by a lock, used from worker threads (`asyncio.to_thread`); WAL mode and a busy
timeout let several daemons share one file (agentctl/backend/task_schema.py is its schema). The identity's
task is created lazily, with a placeholder title, the first time a task or plan op touches it. Arguments
are checked against agentctl/backend/limits.py; `config.*` is answered from memory
(agentctl/backend/execution_info.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from agentctl.backend.base import BackendError, timeout_message
from agentctl.backend.execution_info import ExecutionInfo
from agentctl.backend.limits import (
    MAX_OPTION,
    MAX_OPTIONS,
    MAX_QUESTION,
    MAX_STEP,
    MAX_STEPS,
    MAX_SUMMARY,
    MAX_TEXT,
    MAX_TITLE,
    RECENT,
    list_limit_arg,
    status_arg,
    step_arg,
    str_list_arg,
    text_arg,
)
from agentctl.backend.task_schema import SCHEMA, SCHEMA_VERSION
from agentctl.evidence.contract.report import Identity
from agentctl.evidence.seeds import ServerSeed
from agentctl.safe_files import UnsafePath
from agentctl.sqlite_util import open_sqlite

logger = logging.getLogger(__name__)


class SqlCursor(Protocol):
    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class SqlConnection(Protocol):
    """What the ops run on: a sqlite3 connection here, a PostgreSQL one in agentctl.hub.pg_tasks. Their
    statements are written once, in the SQL both engines speak (ON CONFLICT DO NOTHING, RETURNING), with `?`
    placeholders: the one thing the PostgreSQL side converts. Rows are read by column name or position."""

    def execute(self, sql: str, parameters: Any = (), /) -> SqlCursor: ...


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TaskStoreError(BackendError):
    """The task store cannot be opened (corrupt, unreadable, or written by a newer agentctl): a start error
    whose message is one line for the CLI."""


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class EmbeddedBackend:
    """Backend over a local SQLite file. Thread-safe; every op is one transaction."""

    def __init__(
        self,
        db_path: Path,
        *,
        agents_info: dict[str, Any],
        mcp_info: list[ServerSeed],
        execution_info: dict[str, Any],
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._path = Path(db_path)
        self._info = ExecutionInfo(agents_info=agents_info, mcp_info=mcp_info, execution_info=execution_info)
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        self._conn = self._open()

    def _open(self) -> sqlite3.Connection:
        try:
            return open_sqlite(
                self._path, SCHEMA, SCHEMA_VERSION, too_new=lambda found: TaskStoreError(
                    f"the task store {self._path} was written by a newer agentctl (schema {found})"),
                foreign_keys=True, row_factory=sqlite3.Row,
            )
        except sqlite3.Error as exc:
            # A corrupt or foreign file: one line naming the file, not a traceback.
            text = _one_line(exc)
            hint = " (move the file aside to start an empty one)" if "not a database" in text or "malformed" in text else ""
            raise TaskStoreError(f"cannot open the task store {self._path}: {text}{hint}") from None
        except UnsafePath as exc:
            raise TaskStoreError(f"refusing the task store {self._path}: {exc}") from None
        except OSError as exc:
            raise TaskStoreError(f"cannot create the task store {self._path}: {exc.strerror or exc}") from None

    @property
    def path(self) -> Path:
        return self._path

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def problem(self) -> str | None:
        """Why the store cannot take ops now, None when it can: a local file always can (a database server
        may be away: agentctl.hub.pg_tasks)."""
        return None

    def recover(self) -> None:
        """Try to reach the store again if it is away (blocking: a worker thread). Nothing to do for a file."""

    # ---- Backend ------------------------------------------------------------------------------------

    async def call(self, op: str, identity: Identity, args: dict[str, Any], *, deadline: float) -> dict[str, Any]:
        handler = self._HANDLERS.get(op)
        if handler is None:
            raise BackendError(f"the task backend does not support '{op}'")
        if op.startswith("config."):
            return handler(self, None, identity, args)  # answered from memory, no I/O
        abandoned = threading.Event()
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(self._run, handler, identity, args, abandoned), timeout=deadline
            )
        except TimeoutError:
            # The worker thread cannot be cancelled; an op still waiting for the lock is skipped, one
            # already running finishes (and commits) unseen.
            abandoned.set()
            raise BackendError(timeout_message(deadline)) from None

    def _run(
        self,
        handler: Callable[..., dict[str, Any]],
        identity: Identity | None,
        args: dict[str, Any],
        abandoned: threading.Event,
    ) -> dict[str, Any]:
        with self._lock:
            if self._closed:
                raise BackendError("the task backend is closed")
            if abandoned.is_set():
                raise BackendError("abandoned")  # nobody is waiting for this answer any more
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = handler(self, conn, identity, args)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                return result
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise BackendError("the task store is busy; try again in a moment") from None
                logger.warning("task store error: %s", type(exc).__name__)
                raise BackendError("the task store failed; the daemon log has details") from None
            except sqlite3.Error as exc:
                logger.warning("task store error: %s", type(exc).__name__)
                raise BackendError("the task store failed; the daemon log has details") from None

    # ---- out-of-band (not agent ops) ---------------------------------------------------------------

    async def answer_question(self, question_id: int, answer: str) -> None:
        """Record the user's answer (what a UI or the CLI calls); the agent sees it in task.get."""
        args = {"question_id": question_id, "answer": answer}
        await asyncio.to_thread(self._run, EmbeddedBackend._answer, None, args, threading.Event())

    def _answer(self, conn: SqlConnection, identity: None, args: dict[str, Any]) -> dict[str, Any]:
        cur = conn.execute(
            "UPDATE questions SET status='answered', answer=?, answered_at=? WHERE id=?",
            (args["answer"], self._now(), args["question_id"]),
        )
        if cur.rowcount == 0:
            raise BackendError("no such question")
        return {}

    # ---- helpers ------------------------------------------------------------------------------------

    def _now(self) -> str:
        return _iso(self._clock())

    def _ensure_current(self, conn: SqlConnection, identity: Identity) -> None:
        now = self._now()
        conn.execute(
            "INSERT INTO tasks(id, title, description, status, created_by_session, created_at, updated_at)"
            " VALUES (?, ?, '', 'in_progress', ?, ?, ?) ON CONFLICT DO NOTHING",
            (identity.task_id, f"Task {identity.task_id}", identity.session_id, now, now),
        )

    def _task(self, conn: SqlConnection, identity: Identity, task_id: str) -> dict[str, Any]:
        row = conn.execute("SELECT * FROM tasks WHERE id=?", (task_id,)).fetchone()
        if row is None:
            raise BackendError("the task does not exist")
        return self._task_record(row, identity)

    @staticmethod
    def _task_record(row: Any, identity: Identity) -> dict[str, Any]:
        return {
            "id": row["id"],
            "title": row["title"],
            "description": row["description"],
            "status": row["status"],
            "parent_id": row["parent_id"],
            "created_at": row["created_at"],
            "updated_at": row["updated_at"],
            "is_current": row["id"] == identity.task_id,
        }

    def _touch(self, conn: SqlConnection, task_id: str) -> None:
        conn.execute("UPDATE tasks SET updated_at=? WHERE id=?", (self._now(), task_id))

    @staticmethod
    def _question_record(row: Any) -> dict[str, Any]:
        return {
            "id": row["id"],
            "question": row["question"],
            "options": json.loads(row["options"]),
            "status": row["status"],
            "answer": row["answer"],
            "created_at": row["created_at"],
            "answered_at": row["answered_at"],
        }

    def _plan(self, conn: SqlConnection, task_id: str) -> dict[str, Any] | None:
        plan = conn.execute("SELECT * FROM plans WHERE task_id=?", (task_id,)).fetchone()
        if plan is None:
            return None
        rows = conn.execute(
            "SELECT position, text, done, completed_at FROM plan_steps WHERE task_id=? ORDER BY position", (task_id,)
        ).fetchall()
        steps = [
            {"number": r["position"], "text": r["text"], "done": bool(r["done"]), "completed_at": r["completed_at"]}
            for r in rows
        ]
        return {
            "summary": plan["summary"],
            "steps": steps,
            "completed_steps": sum(1 for s in steps if s["done"]),
            "total_steps": len(steps),
            "created_at": plan["created_at"],
            "updated_at": plan["updated_at"],
        }

    def _write_steps(self, conn: SqlConnection, task_id: str, steps: list[str]) -> None:
        """Replace the steps; a step whose text is unchanged keeps its completion."""
        old = conn.execute(
            "SELECT text, done, completed_at FROM plan_steps WHERE task_id=? ORDER BY position", (task_id,)
        ).fetchall()
        pool: dict[str, list[tuple[int, str | None]]] = {}
        for r in old:
            pool.setdefault(r["text"], []).append((r["done"], r["completed_at"]))
        conn.execute("DELETE FROM plan_steps WHERE task_id=?", (task_id,))
        for position, text in enumerate(steps, start=1):
            done, completed_at = pool[text].pop(0) if pool.get(text) else (0, None)
            conn.execute(
                "INSERT INTO plan_steps(task_id, position, text, done, completed_at) VALUES (?, ?, ?, ?, ?)",
                (task_id, position, text, done, completed_at),
            )

    # ---- ops (run inside one transaction; conn is None for config ops) ------------------------------

    def _task_get(self, conn: SqlConnection, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        self._ensure_current(conn, identity)
        tid = identity.task_id
        messages = conn.execute(
            "SELECT id, text, created_at FROM messages WHERE task_id=? ORDER BY id DESC LIMIT ?", (tid, RECENT)
        ).fetchall()
        questions = conn.execute(
            "SELECT * FROM questions WHERE task_id=? ORDER BY id DESC LIMIT ?", (tid, RECENT)
        ).fetchall()
        return {
            "task": self._task(conn, identity, tid),
            "recent_messages": [dict(m) for m in reversed(messages)],
            "questions": [self._question_record(q) for q in reversed(questions)],
        }

    def _task_list(self, conn: SqlConnection, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        self._ensure_current(conn, identity)
        status = status_arg(args)
        limit = list_limit_arg(args)
        if status is None:
            rows = conn.execute("SELECT * FROM tasks ORDER BY updated_at DESC, id LIMIT ?", (limit,)).fetchall()
        else:
            rows = conn.execute(
                "SELECT * FROM tasks WHERE status=? ORDER BY updated_at DESC, id LIMIT ?", (status, limit)
            ).fetchall()
        return {"tasks": [self._task_record(r, identity) for r in rows], "current_task_id": identity.task_id}

    def _task_create(self, conn: SqlConnection, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        title = text_arg(args, "title", limit=MAX_TITLE, required=True)
        description = text_arg(args, "description", limit=MAX_TEXT) or ""
        self._ensure_current(conn, identity)
        now = self._now()
        new_id = "task_" + secrets.token_hex(8)
        conn.execute(
            "INSERT INTO tasks(id, title, description, status, parent_id, created_by_session, created_at, updated_at)"
            " VALUES (?, ?, ?, 'todo', ?, ?, ?, ?)",
            (new_id, title, description, identity.task_id, identity.session_id, now, now),
        )
        return {"task": self._task(conn, identity, new_id)}

    def _task_update(self, conn: SqlConnection, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        description = text_arg(args, "description", limit=MAX_TEXT)
        status = status_arg(args)
        if description is None and status is None:
            raise BackendError("nothing to update: give a new description, a new status, or both")
        self._ensure_current(conn, identity)
        tid = identity.task_id
        if description is not None:
            conn.execute("UPDATE tasks SET description=? WHERE id=?", (description, tid))
        if status is not None:
            conn.execute("UPDATE tasks SET status=? WHERE id=?", (status, tid))
        self._touch(conn, tid)
        return {"task": self._task(conn, identity, tid)}

    def _task_set_title(self, conn: SqlConnection, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        title = text_arg(args, "title", limit=MAX_TITLE, required=True)
        self._ensure_current(conn, identity)
        conn.execute("UPDATE tasks SET title=?, updated_at=? WHERE id=?", (title, self._now(), identity.task_id))
        return {"task": self._task(conn, identity, identity.task_id)}

    def _task_message(self, conn: SqlConnection, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        text = text_arg(args, "text", limit=MAX_TEXT, required=True)
        self._ensure_current(conn, identity)
        now = self._now()
        message_id = conn.execute(
            "INSERT INTO messages(task_id, session_id, execution_id, text, created_at) VALUES (?, ?, ?, ?, ?)"
            " RETURNING id",
            (identity.task_id, identity.session_id, identity.execution_id, text, now),
        ).fetchall()[0][0]  # fetchall: the statement runs to its end before the COMMIT
        self._touch(conn, identity.task_id)
        return {"message": {"id": message_id, "text": text, "created_at": now}}

    def _task_ask_user(self, conn: SqlConnection, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        question = text_arg(args, "question", limit=MAX_QUESTION, required=True)
        options = str_list_arg(args, "options", max_items=MAX_OPTIONS, limit=MAX_OPTION, required=False) or []
        self._ensure_current(conn, identity)
        row = conn.execute(
            "INSERT INTO questions(task_id, session_id, question, options, created_at) VALUES (?, ?, ?, ?, ?)"
            " RETURNING *",
            (identity.task_id, identity.session_id, question, json.dumps(options), self._now()),
        ).fetchall()[0]
        return {"question": self._question_record(row)}

    def _plan_create(self, conn: SqlConnection, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        steps = str_list_arg(args, "steps", max_items=MAX_STEPS, limit=MAX_STEP, required=True)
        assert steps is not None
        if not steps:
            raise BackendError("a plan needs at least one step")
        summary = text_arg(args, "summary", limit=MAX_SUMMARY) or ""
        self._ensure_current(conn, identity)
        tid = identity.task_id
        if conn.execute("SELECT 1 FROM plans WHERE task_id=?", (tid,)).fetchone():
            raise BackendError("this task already has a plan; update it instead of creating a new one")
        now = self._now()
        conn.execute(
            "INSERT INTO plans(task_id, summary, created_at, updated_at) VALUES (?, ?, ?, ?)", (tid, summary, now, now)
        )
        self._write_steps(conn, tid, steps)
        return {"plan": self._plan(conn, tid)}

    def _plan_get(self, conn: SqlConnection, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        self._ensure_current(conn, identity)
        return {"plan": self._plan(conn, identity.task_id)}

    def _plan_update(self, conn: SqlConnection, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        steps = str_list_arg(args, "steps", max_items=MAX_STEPS, limit=MAX_STEP, required=False)
        summary = text_arg(args, "summary", limit=MAX_SUMMARY)
        if steps is None and summary is None:
            raise BackendError("nothing to update: give new steps, a new summary, or both")
        if steps is not None and not steps:
            raise BackendError("a plan needs at least one step")
        self._ensure_current(conn, identity)
        tid = identity.task_id
        if not conn.execute("SELECT 1 FROM plans WHERE task_id=?", (tid,)).fetchone():
            raise BackendError("this task has no plan yet; create one first")
        if summary is not None:
            conn.execute("UPDATE plans SET summary=? WHERE task_id=?", (summary, tid))
        if steps is not None:
            self._write_steps(conn, tid, steps)
        conn.execute("UPDATE plans SET updated_at=? WHERE task_id=?", (self._now(), tid))
        return {"plan": self._plan(conn, tid)}

    def _plan_step_complete(self, conn: SqlConnection, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        step = step_arg(args)
        self._ensure_current(conn, identity)
        tid = identity.task_id
        if not conn.execute("SELECT 1 FROM plans WHERE task_id=?", (tid,)).fetchone():
            raise BackendError("this task has no plan yet; create one first")
        total = conn.execute("SELECT COUNT(*) FROM plan_steps WHERE task_id=?", (tid,)).fetchone()[0]
        if step > total:
            raise BackendError(f"the plan has {total} steps; step numbers run from 1 to {total}")
        now = self._now()
        conn.execute(
            "UPDATE plan_steps SET done=1, completed_at=? WHERE task_id=? AND position=? AND done=0", (now, tid, step)
        )
        conn.execute("UPDATE plans SET updated_at=? WHERE task_id=?", (now, tid))
        return {"plan": self._plan(conn, tid)}

    def _config_agents(self, conn: None, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        return self._info.agents()

    def _config_mcp(self, conn: None, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        return self._info.mcp()

    def _config_execution(self, conn: None, identity: Identity, args: dict[str, Any]) -> dict[str, Any]:
        return self._info.execution(identity)

    _HANDLERS: dict[str, Callable[..., dict[str, Any]]] = {
        "task.get": _task_get,
        "task.list": _task_list,
        "task.create": _task_create,
        "task.update": _task_update,
        "task.set_title": _task_set_title,
        "task.message": _task_message,
        "task.ask_user": _task_ask_user,
        "plan.create": _plan_create,
        "plan.get": _plan_get,
        "plan.update": _plan_update,
        "plan.step_complete": _plan_step_complete,
        "config.agents": _config_agents,
        "config.mcp": _config_mcp,
        "config.execution": _config_execution,
    }
