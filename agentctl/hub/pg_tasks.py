"""The hub's task store (the tool tunnel's tasks, messages, questions and plans) in PostgreSQL: the same ops as
the SQLite store (agentctl.backend.embedded), so a task written through one hub is read through every other.

Its schema is a second migration family ("tasks") beside the hub's in the same database, applied at start.
The ops are the embedded backend's own, written once in the SQL both engines speak (ON CONFLICT DO NOTHING,
RETURNING); only their `?` placeholders are converted here: one implementation of the ops, two engines. Each
op is one transaction; a connection the server dropped is replaced, with backoff while the server is away
(PgTaskBackend). Tool arguments never reach a log line: a failure is logged by its type only, as in the
SQLite store.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from agentctl.backend.base import BackendError
from agentctl.backend.embedded import EmbeddedBackend, TaskStoreError
from agentctl.dsn import PostgresDsn
from agentctl.evidence.contract.report import Identity
from agentctl.migrations import Family, Migration, MigrationError
from agentctl.postgres import PostgresUnavailable, connect, driver, migrate_postgres

log = logging.getLogger("agentctl.hub")
# What one unit of work on a connection returns (PgTaskBackend._op).
_T = TypeVar("_T")

BACKOFF_INITIAL = 0.2  # seconds before the first reconnect attempt, doubled up to BACKOFF_MAX (the listener's)
BACKOFF_MAX = 5.0
UNAVAILABLE = "the hub's task store is unavailable; try again in a moment"

_V1 = (
    """CREATE TABLE tasks (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    parent_id TEXT,
    created_by_session TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
)""",
    "CREATE INDEX tasks_updated ON tasks(updated_at)",
    """CREATE TABLE messages (
    id BIGSERIAL PRIMARY KEY,
    task_id TEXT NOT NULL REFERENCES tasks(id),
    session_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at TEXT NOT NULL
)""",
    "CREATE INDEX messages_task ON messages(task_id, id)",
    """CREATE TABLE questions (
    id BIGSERIAL PRIMARY KEY,
    task_id TEXT NOT NULL REFERENCES tasks(id),
    session_id TEXT NOT NULL,
    question TEXT NOT NULL,
    options TEXT NOT NULL DEFAULT '[]',
    status TEXT NOT NULL DEFAULT 'pending',
    answer TEXT,
    created_at TEXT NOT NULL,
    answered_at TEXT
)""",
    "CREATE INDEX questions_task ON questions(task_id, id)",
    """CREATE TABLE plans (
    task_id TEXT PRIMARY KEY REFERENCES tasks(id),
    summary TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
)""",
    """CREATE TABLE plan_steps (
    task_id TEXT NOT NULL REFERENCES plans(task_id),
    position INTEGER NOT NULL,
    text TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    completed_at TEXT,
    PRIMARY KEY (task_id, position)
)""",
)

TASKS = Family(
    name="tasks",
    what="hub task store",
    migrations=(Migration(1, "tasks, messages, questions and plans", (), _V1),),
    tables=("tasks", "messages", "questions", "plans", "plan_steps"),
    upgrade_hint="start the hub (`agentctl hub serve`) with this database",
)

class _Row(dict[str, Any]):
    """A row by column name (like sqlite3.Row) and by position."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int):
            return list(self.values())[key]
        return super().__getitem__(key)


def _row_factory(cursor: Any) -> Callable[[Any], _Row]:
    names = [c.name for c in cursor.description] if cursor.description else []
    return lambda values: _Row(zip(names, values))


class _Placeholders:
    """A psycopg connection as the embedded ops use a sqlite3 one (inside the transaction `_run` opened): their
    statements are already in the dialect both engines speak, so only the `?` placeholders become `%s`."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Any = (), /) -> Any:
        cur = self.conn.cursor(row_factory=_row_factory)
        cur.execute(sql.replace("?", "%s"), params or None)
        return cur


class PgTaskBackend(EmbeddedBackend):
    """The embedded backend's ops on a PostgreSQL database shared by hubs. Thread-safe; one op at a time.

    Its one connection is replaced when found dead (the server restarted since its last op) and the op run
    again on the new one, unless the connection died during the COMMIT itself: then whether the op took is
    unknown and the call fails saying so, since an op (a message, a question) is not safe to repeat. While the
    server cannot be reached, calls are refused at once and `problem()` says why for `/readyz`; only
    `recover()`, which the hub calls once a second, connects again then (with backoff, outside the lock), so the
    store comes back without waiting for a tool call and no call ever waits on a connect."""

    def __init__(self, dsn: PostgresDsn, **kwargs: Any) -> None:
        self._dsn = dsn
        self._pg: Any = None
        self._away: str | None = None  # why the server cannot be reached; None while it can
        self._retry_at = 0.0  # monotonic: no connection attempt before this
        self._backoff = BACKOFF_INITIAL
        super().__init__(Path(), **kwargs)  # no file: `path` names the database

    def _open(self) -> Any:
        try:
            self._psycopg = driver()
            migrate_postgres(self._dsn, TASKS)
            self._pg = connect(self._dsn)
        except (MigrationError, PostgresUnavailable) as exc:
            raise TaskStoreError(str(exc)) from None
        return self._pg

    @property
    def path(self) -> Any:
        return self._dsn.display()

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                if self._pg is not None:
                    self._pg.close()

    def problem(self) -> str | None:
        if self._away is None:
            return None
        return "database unavailable: the task store cannot reach it; tool calls are refused until it is back"

    def recover(self) -> None:
        """Reconnect now if the server was away and the backoff allows (blocking: a worker thread). The connect
        runs without the lock, so tool calls meanwhile are refused at once rather than queued behind it."""
        with self._lock:
            now = time.monotonic()
            if self._closed or self._away is None or now < self._retry_at:
                return
            self._retry_at = float("inf")  # a reconnect is under way: calls are refused until it ends
        try:
            conn = connect(self._dsn)
        except PostgresUnavailable as exc:
            with self._lock:
                self._unreachable(exc, now)
            return
        with self._lock:
            if self._closed:
                conn.close()
                return
            self._discard()
            self._pg = conn
            log.info("task store: database reachable again")
            self._away, self._retry_at, self._backoff = None, 0.0, BACKOFF_INITIAL

    def _connection(self) -> Any:
        """The open connection, or a new one once a held one is found dead; raises BackendError(UNAVAILABLE)
        while the server is away (only recover() reconnects then, without the lock)."""
        if self._pg is not None and not (self._pg.closed or self._pg.broken):
            return self._pg
        self._discard()
        if self._away is not None:
            raise BackendError(UNAVAILABLE)
        try:
            self._pg = connect(self._dsn)
        except PostgresUnavailable as exc:
            self._unreachable(exc, time.monotonic())
            raise BackendError(UNAVAILABLE) from None
        return self._pg

    def _discard(self) -> None:
        if self._pg is not None:
            with contextlib.suppress(Exception):
                self._pg.close()
            self._pg = None

    def _unreachable(self, exc: PostgresUnavailable, now: float) -> None:
        self._retry_at, self._backoff = now + self._backoff, min(self._backoff * 2, BACKOFF_MAX)
        if self._away is None:
            log.warning("task store: %s; reconnecting with backoff", exc)  # the DSN's secrets are masked
        self._away = str(exc)

    def _op(self, work: Callable[[Any], _T], abandoned: threading.Event | None = None) -> _T:
        """`work(connection)` in one transaction (the lock held), on a new connection once if the one held
        turns out dead before the COMMIT: the server rolled that transaction back, so running it again is safe.
        A call its caller gave up on (`abandoned`, while a connect took its time) is not run."""
        for retry in (True, False):
            conn = self._connection()
            if abandoned is not None and abandoned.is_set():
                raise BackendError("abandoned")
            committing = False
            try:
                with conn.transaction():
                    result = work(conn)
                    committing = True
                return result
            except self._psycopg.Error as exc:
                if not (conn.closed or conn.broken):
                    log.warning("task store error: %s", type(exc).__name__)
                    raise BackendError("the task store failed; the hub log has details") from None
                self._discard()
                log.warning("task store connection lost (%s)%s", type(exc).__name__,
                            "" if committing or not retry else "; running the op again on a new one")
                if committing:
                    raise BackendError("the task store's connection was lost during the commit, so whether this "
                                       "call took is unknown; read the task (task.get) before repeating it") from None
                if not retry:
                    raise BackendError(UNAVAILABLE) from None
        raise AssertionError("unreachable")

    def _run(self, handler: Callable[..., dict[str, Any]], identity: Identity | None, args: dict[str, Any],
             abandoned: threading.Event) -> dict[str, Any]:
        with self._lock:
            if self._closed:
                raise BackendError("the task backend is closed")
            if abandoned.is_set():
                raise BackendError("abandoned")
            return self._op(lambda conn: handler(self, _Placeholders(conn), identity, args), abandoned)
