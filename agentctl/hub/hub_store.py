"""The hub's state: sessions and their executions in memory, persisted in SQLite (WAL), and the views of it.

One row per session (which execution is current, stale frames rejected, last contact) and one per
execution (its identity, contact times, and its AttachmentHistory as the contract's JSON). Only contract
data is stored: evidence that daemons already sanitized. Tool-call arguments never come here (the tool
tunnel's task store is a separate file).

The live hub keeps the HOT_SESSIONS sessions most recently in contact whole in memory (hydrated from the
file at boot, so it answers at once) and writes dirty rows in one transaction per flush. Any other session
is held only as its listing (for status) and read from the file when asked for or when it says hello again:
memory is bounded by HOT_SESSIONS bounded histories plus about a kilobyte per session ever seen.
`agentctl hub status|report` read the file read-only with the same view functions, so they show what the
hub last flushed (a fraction of a second behind).
"""

from __future__ import annotations

import itertools
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from agentctl.evidence.contract import (
    CONTRACT_VERSION,
    MAX_ATTEMPTS,
    MAX_EVENTS_PER_ATTEMPT,
    Attempt,
    AttachmentHistory,
    HubExecution,
    HubSession,
    HubSessionReport,
    HubStatus,
    Identity,
    encode,
)
from agentctl.hub.migrations import HUB
from agentctl.migrations import MigrationError, MigrationResult, SqliteDialect, open_migrated_sqlite, require_latest
from agentctl.safe_files import UnsafePath
from agentctl.sqlite_util import open_sqlite_readonly

BUSY_TIMEOUT_MS = 5000
# Sessions the live hub keeps whole in memory (their histories); every other one costs only its listing
# (a HubSession without evidence or catalogs, about a kilobyte) and is read from the file on demand.
HOT_SESSIONS = 1024

class HubStoreError(Exception):
    """The hub database cannot be opened or read; one line for the CLI."""


@dataclass
class ExecutionState:
    identity: Identity  # of the newest instance of this execution that said hello
    daemon_version: str
    hello_order: int  # hub-wide order of first hello: the highest in a session is its newest execution
    first_hello_at: datetime
    last_contact_at: datetime
    connected: bool = False
    rejected_frames: int = 0
    history: AttachmentHistory | None = None

    @property
    def execution_id(self) -> str:
        return self.identity.execution_id


@dataclass
class SessionState:
    session_id: str
    task_id: str
    current_execution_id: str
    last_contact_at: datetime
    stale_rejected: int = 0
    executions: dict[str, ExecutionState] = field(default_factory=dict)

    @property
    def current(self) -> ExecutionState:
        return self.executions[self.current_execution_id]


def enforce_bounds(history: AttachmentHistory) -> AttachmentHistory:
    """The orchestrator's bounds on a history from outside: 3 attempts, 64 events each (oldest dropped, counted).

    A well-behaved daemon already holds them (its reducer applies them); this only trims a history that
    does not. It is not a second reducer: nothing is derived, only cut.
    """
    del history.previous[MAX_ATTEMPTS - 1 :]
    for attempt in ([history.current] if history.current else []) + history.previous:
        overflow = len(attempt.evidence) - MAX_EVENTS_PER_ATTEMPT
        if overflow > 0:
            del attempt.evidence[:overflow]
            attempt.dropped_events += overflow
    return history


def _ts(value: datetime) -> str:
    return value.isoformat()


def _dt(text: str) -> datetime:
    return datetime.fromisoformat(text)


_SESSION_COLS = "session_id, task_id, current_execution_id, stale_rejected, last_contact_at"
_EXECUTION_COLS = (
    "session_id, identity, daemon_version, hello_order, first_hello_at, last_contact_at, connected, "
    "rejected_frames, history"
)


def _session(row: tuple[Any, ...]) -> SessionState:
    sid, task, current, stale, contact = row
    return SessionState(session_id=sid, task_id=task, current_execution_id=current, stale_rejected=stale,
                        last_contact_at=_dt(contact))


class HubStore:
    """The SQLite file. Writable (the hub) or read-only (the CLI). Not thread-safe: one user at a time."""

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.migration: MigrationResult | None = None  # what opening it did to its schema (writable only)
        try:
            self._conn = self._open()
        except sqlite3.Error as exc:
            raise HubStoreError(f"cannot open hub database {self.path}: {exc}") from None

    def _open(self) -> sqlite3.Connection:
        if self.readonly:
            if not self.path.is_file():
                raise HubStoreError(
                    f"no hub database at {self.path} (start `agentctl hub serve`, or pass --db PATH)"
                )
            conn = open_sqlite_readonly(self.path, busy_timeout_ms=BUSY_TIMEOUT_MS)
            try:
                require_latest(SqliteDialect(conn), HUB, str(self.path))
            except MigrationError as exc:
                conn.close()
                raise HubStoreError(str(exc)) from None
            return conn
        try:
            conn, self.migration = open_migrated_sqlite(self.path, HUB, busy_timeout_ms=BUSY_TIMEOUT_MS)
            return conn
        except MigrationError as exc:
            raise HubStoreError(str(exc)) from None
        except UnsafePath as exc:
            raise HubStoreError(f"refusing hub database {self.path}: {exc}") from None
        except OSError as exc:
            raise HubStoreError(f"cannot create hub database {self.path}: {exc.strerror or exc}") from None

    def close(self) -> None:
        self._conn.close()

    def load(self) -> dict[str, SessionState]:
        """Everything in the file, as the hub's in-memory state (the CLI's views)."""
        return self.load_split(None)[0]

    def load_split(self, hot: int | None) -> tuple[dict[str, SessionState], dict[str, HubSession]]:
        """The `hot` sessions most recently in contact whole, every other one as its listing (all whole when
        `hot` is None). Executions are decoded one session at a time: a large file never sits in memory whole."""
        try:
            sessions = {row[0]: _session(row) for row in self._conn.execute(f"SELECT {_SESSION_COLS} FROM sessions")}
            if hot is None:
                hot_ids = set(sessions)
            else:
                recent = sorted(sessions.values(), key=lambda s: (s.last_contact_at, s.session_id), reverse=True)
                hot_ids = {s.session_id for s in recent[:hot]}
            cold: dict[str, HubSession] = {}
            rows = self._conn.execute(f"SELECT {_EXECUTION_COLS} FROM executions ORDER BY session_id")
            for sid, group in itertools.groupby(rows, key=lambda row: row[0]):
                session = sessions.get(sid)
                if session is None:
                    continue
                for row in group:
                    execution = self._execution(row)
                    session.executions[execution.execution_id] = execution
                if sid not in hot_ids:
                    del sessions[sid]
                    if session.current_execution_id in session.executions:
                        cold[sid] = session_view(session)
        except sqlite3.Error as exc:
            raise HubStoreError(f"cannot read hub database {self.path}: {exc}") from None
        hot_sessions = {sid: s for sid, s in sessions.items() if s.current_execution_id in s.executions}
        return hot_sessions, cold

    def load_session(self, session_id: str) -> SessionState | None:
        """One session whole (a cold session the live hub reads on demand); None when the file has none."""
        try:
            one = (session_id,)
            row = self._conn.execute(f"SELECT {_SESSION_COLS} FROM sessions WHERE session_id=?", one).fetchone()
            if row is None:
                return None
            rows = self._conn.execute(f"SELECT {_EXECUTION_COLS} FROM executions WHERE session_id=?", one).fetchall()
        except sqlite3.Error as exc:
            raise HubStoreError(f"cannot read hub database {self.path}: {exc}") from None
        session = _session(row)
        for execution_row in rows:
            execution = self._execution(execution_row)
            session.executions[execution.execution_id] = execution
        return session if session.current_execution_id in session.executions else None

    def reset_connected(self) -> None:
        """Nobody is connected to a hub that just started: clear every stored `connected` flag."""
        try:
            self._conn.execute("UPDATE executions SET connected=0 WHERE connected!=0")
        except sqlite3.Error as exc:
            raise HubStoreError(f"cannot write hub database {self.path}: {exc}") from None

    def _execution(self, row: tuple[Any, ...]) -> ExecutionState:
        _sid, ident, version, order, first, last, connected, rejected, history = row
        try:
            identity = msgspec.json.decode(ident, type=Identity)
            decoded = msgspec.json.decode(history, type=AttachmentHistory) if history else None
        except msgspec.DecodeError as exc:
            raise HubStoreError(f"hub database {self.path} holds an unreadable execution row: {exc}") from None
        return ExecutionState(
            identity=identity, daemon_version=version, hello_order=order, first_hello_at=_dt(first),
            last_contact_at=_dt(last), connected=bool(connected), rejected_frames=rejected, history=decoded,
        )

    def write(self, sessions: list[tuple[Any, ...]], executions: list[tuple[Any, ...]]) -> None:
        """Upsert rows made by session_row / execution_row (on the loop: the state may change meanwhile) in one
        transaction. Safe to call from a worker thread."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "INSERT INTO sessions(session_id, task_id, current_execution_id, stale_rejected, last_contact_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET task_id=excluded.task_id, "
                "current_execution_id=excluded.current_execution_id, stale_rejected=excluded.stale_rejected, "
                "last_contact_at=excluded.last_contact_at",
                sessions,
            )
            conn.executemany(
                "INSERT INTO executions(session_id, execution_id, hello_order, identity, daemon_version, "
                "first_hello_at, last_contact_at, connected, rejected_frames, history) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(session_id, execution_id) DO UPDATE SET "
                "hello_order=excluded.hello_order, identity=excluded.identity, "
                "daemon_version=excluded.daemon_version, last_contact_at=excluded.last_contact_at, "
                "connected=excluded.connected, rejected_frames=excluded.rejected_frames, "
                "history=COALESCE(excluded.history, executions.history)",
                executions,
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @staticmethod
    def session_row(s: SessionState) -> tuple[Any, ...]:
        return (s.session_id, s.task_id, s.current_execution_id, s.stale_rejected, _ts(s.last_contact_at))

    @staticmethod
    def execution_row(session_id: str, e: ExecutionState, history: bytes | None) -> tuple[Any, ...]:
        """`history` is the encoded AttachmentHistory, or None to keep the stored one."""
        return (session_id, e.execution_id, e.hello_order, encode(e.identity).decode(), e.daemon_version,
                _ts(e.first_hello_at), _ts(e.last_contact_at), int(e.connected), e.rejected_frames,
                history.decode() if history is not None else None)

    def max_hello_order(self) -> int:
        row = self._conn.execute("SELECT COALESCE(MAX(hello_order), 0) FROM executions").fetchone()
        return int(row[0])


# ---- views (pure: the live hub and the read-only CLI build the same shapes) -------------------------------


def _listing(attempt: Attempt | None) -> Attempt | None:
    """The current attempt for a listing: rows and times, without the evidence log and the catalogs."""
    if attempt is None:
        return None
    copy = msgspec.structs.replace(attempt, evidence=[])
    copy.servers = [msgspec.structs.replace(row, catalog=None) for row in attempt.servers]
    return copy


def session_view(session: SessionState) -> HubSession:
    current = session.current
    history = current.history
    return HubSession(
        task_id=session.task_id,
        session_id=session.session_id,
        current_execution_id=session.current_execution_id,
        connected=current.connected,
        last_contact_at=session.last_contact_at,
        executions=len(session.executions),
        stale_rejected=session.stale_rejected,
        current_attempt=_listing(history.current) if history else None,
        agent=history.agent if history else None,
    )


def status_view(sessions: dict[str, SessionState], cold: Iterable[HubSession] = ()) -> HubStatus:
    """Every session, most recent contact first: `sessions` held whole, `cold` ones by their listing."""
    views = [session_view(s) for s in sessions.values()] + list(cold)
    views.sort(key=lambda v: (v.last_contact_at, v.session_id), reverse=True)
    return HubStatus(version=CONTRACT_VERSION, sessions=views)


def evict(sessions: dict[str, SessionState], cold: dict[str, HubSession], keep: int, busy: set[str]) -> int:
    """Move the sessions least recently in contact beyond `keep` from `sessions` to their listing in `cold`.

    Only sessions the file already holds as they are may go (the caller passes, in `busy`, every session
    with a connection or unflushed changes); returns how many went.
    """
    over = len(sessions) - keep
    if over <= 0:
        return 0
    idle = sorted((s for s in sessions.values() if s.session_id not in busy),
                  key=lambda s: (s.last_contact_at, s.session_id))
    for session in idle[:over]:
        cold[session.session_id] = session_view(session)
        del sessions[session.session_id]
    return min(over, len(idle))


def execution_view(session: SessionState, execution: ExecutionState) -> HubExecution:
    ident = execution.identity
    return HubExecution(
        execution_id=ident.execution_id,
        instance_id=ident.instance_id,
        agent_id=ident.agent_id,
        agent_profile_id=ident.agent_profile_id,
        daemon_version=execution.daemon_version,
        current=ident.execution_id == session.current_execution_id,
        connected=execution.connected,
        first_hello_at=execution.first_hello_at,
        last_contact_at=execution.last_contact_at,
        rejected_frames=execution.rejected_frames,
    )


def report_view(session: SessionState, execution_id: str | None = None) -> HubSessionReport | None:
    """The session's report; None when `execution_id` names no execution of this session."""
    chosen = session.executions.get(execution_id or session.current_execution_id)
    if chosen is None:
        return None
    executions = sorted(session.executions.values(), key=lambda e: e.hello_order, reverse=True)
    return HubSessionReport(
        version=CONTRACT_VERSION,
        session=session_view(session),
        executions=[execution_view(session, e) for e in executions],
        history=chosen.history,
    )
