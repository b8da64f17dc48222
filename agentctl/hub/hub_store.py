"""The hub's store: its sessions and executions (agentctl.hub.state) kept in a database, behind `SessionStore`.

`HubStore` is the SQLite (WAL) implementation. One row per session (which execution is current, stale frames rejected, last contact) and one per
execution (its identity, contact times, and its AttachmentHistory as the contract's JSON). Only contract
data is stored: evidence that daemons already sanitized. Tool-call arguments never come here (the tool
tunnel's task store is a separate file).

The live hub keeps the HOT_SESSIONS sessions most recently in contact whole in memory (hydrated from the
file at boot, so it answers at once) and writes dirty rows in one transaction per flush. Any other session
is held only as its listing (for status) and read from the file when asked for or when it says hello again:
memory is bounded by HOT_SESSIONS bounded histories plus about a kilobyte per session ever seen.
`agentctl hub status|report` read the file read-only with the same view functions (agentctl.hub.views), so
they show what the hub last flushed (a fraction of a second behind).

The rules (agentctl.hub.rules) never see the store; the live hub reads and writes it through `SessionStore`
only, with rows taken on the event loop as `SessionRecord` / `ExecutionRecord` and written from a worker
thread, so another database can take SQLite's place without the hub changing.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import msgspec

from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.hub import HubSession
from agentctl.evidence.contract.report import AttachmentHistory, Identity
from agentctl.hub.listing import (COUNTS_SQL, PAGE_FROM, PAGE_ORDER, PageQuery, SessionCounts, Summary, counts_of,
                                  decode_summary, listing_of, summarize, where_clause)
from agentctl.hub.migrations import HUB
from agentctl.hub.state import ExecutionState, SessionState
from agentctl.hub.views import session_listing
from agentctl.migrations import MigrationError, MigrationResult, SqliteDialect, open_migrated_sqlite, require_latest
from agentctl.safe_files import UnsafePath
from agentctl.sqlite_util import open_sqlite_readonly

BUSY_TIMEOUT_MS = 5000
# Sessions the live hub keeps whole in memory (their histories); every other one costs only its listing
# (a HubSession without evidence or catalogs, about a kilobyte) and is read from the file on demand.
HOT_SESSIONS = 1024

class HubStoreError(Exception):
    """The hub database cannot be opened or read; one line for the CLI."""


@dataclass(frozen=True)
class SessionRecord:
    """A session as the store keeps it, taken on the event loop (the state may change while it is written)."""

    session_id: str
    task_id: str
    current_execution_id: str
    stale_rejected: int
    last_contact_at: datetime

    @classmethod
    def of(cls, s: SessionState) -> SessionRecord:
        return cls(s.session_id, s.task_id, s.current_execution_id, s.stale_rejected, s.last_contact_at)


@dataclass(frozen=True)
class ExecutionRecord:
    """An execution as the store keeps it; `history` is its encoded AttachmentHistory, None to keep the stored one."""

    session_id: str
    identity: Identity
    daemon_version: str
    hello_order: int
    first_hello_at: datetime
    last_contact_at: datetime
    connected: bool
    rejected_frames: int
    history: bytes | None
    listing: Summary | None = None  # written with the history (agentctl.hub.listing), None to keep the stored one

    @classmethod
    def of(cls, session_id: str, e: ExecutionState, history: bytes | None) -> ExecutionRecord:
        listing = None
        if history is not None:
            whole = e.history if e.history is not None else msgspec.json.decode(history, type=AttachmentHistory)
            listing = summarize(e.identity.task_id, session_id, whole)
        return cls(session_id, e.identity, e.daemon_version, e.hello_order, e.first_hello_at, e.last_contact_at,
                   e.connected, e.rejected_frames, history, listing)


class SessionStore(Protocol):
    """What the live hub needs from its database. Not thread-safe: one user at a time (the hub's writes run in a
    worker thread, one flush at a time)."""

    def load_split(self, hot: int | None) -> tuple[dict[str, SessionState], dict[str, HubSession]]:
        """The `hot` sessions most recently in contact whole, every other one as its listing (all whole: None)."""
        ...

    def load_session(self, session_id: str) -> SessionState | None:
        """One session whole; None when the store has none."""
        ...

    def reset_connected(self) -> None:
        """Nobody is connected to a hub that just started."""
        ...

    def max_hello_order(self) -> int: ...

    def write(self, sessions: Sequence[SessionRecord], executions: Sequence[ExecutionRecord]) -> None:
        """Upsert the records in one transaction."""
        ...

    def prune(self, cutoff: datetime, keep: Collection[str], batch: int, now: datetime) -> list[str]:
        """Delete up to `batch` sessions last in contact before `cutoff`, none with a connected daemon nor in
        `keep`, each execution leaving a tombstone, in one transaction; the sessions pruned."""
        ...

    def tombstone(self, session_id: str, execution_id: str) -> bool | None:
        """The execution's tombstone: whether it was its session's current one when pruned; None without one."""
        ...

    def footprint(self) -> tuple[int, datetime | None]:
        """The database's size in bytes and the oldest last contact of a session it keeps (None: no session)."""
        ...

    def page(self, query: PageQuery) -> SessionPage:
        """A page of the session list (agentctl.hub.listing), filtered, searched and ordered by the database."""
        ...

    def backfill_listings(self, batch: int) -> int:
        """List up to `batch` executions that hold a history but no listing (written before hub schema 4), in one
        transaction; how many were listed."""
        ...

    def counts(self) -> SessionCounts:
        """The stored sessions counted (agentctl.hub.listing.COUNTS_SQL)."""
        ...

    def close(self) -> None: ...


class SharedStore(SessionStore, Protocol):
    """What a hub sharing a PostgreSQL database with other hubs needs of its store beyond SessionStore
    (agentctl.hub.pg_store implements it; agentctl.hub.shared uses it)."""

    def claim(self, identity: Identity, daemon_version: str, now: datetime) -> SessionState:
        """The session as the database holds it after this hello (the database decides which execution is current)."""
        ...

    def currents(self, session_ids: Sequence[str]) -> dict[str, str]:
        """session id -> its current execution, for the given sessions."""
        ...

    def load_sessions(self, session_ids: Sequence[str]) -> dict[str, SessionState | None]:
        """These sessions whole, in one read (None: the database has none)."""
        ...

    def live_hubs(self) -> set[str]:
        """The tags of the hubs with a connection to the database now."""
        ...

    def clear_departed(self, tags: Sequence[str]) -> list[str]:
        """Clear the `connected` flags of the hubs with these tags still without a connection; the sessions changed."""
        ...


# Every execution of the pruned sessions becomes a tombstone (its flag: the session's current one); a session's
# older tombstones are first marked superseded, since the session may have moved on since its last prune.
TOMBSTONE_RESET = "UPDATE tombstones SET was_current=0 WHERE session_id IN ({ids})"
TOMBSTONE_INSERT = (
    "INSERT INTO tombstones(session_id, execution_id, was_current, pruned_at) "
    "SELECT e.session_id, e.execution_id, CASE WHEN e.execution_id = s.current_execution_id THEN 1 ELSE 0 END, {now} "
    "FROM executions e JOIN sessions s ON s.session_id = e.session_id WHERE e.session_id IN ({ids}) "
    "ON CONFLICT(session_id, execution_id) DO UPDATE SET was_current=excluded.was_current, pruned_at=excluded.pruned_at"
)
# A superseded execution's `connected` flag is not cleared when its daemon leaves (its frames were not taken
# anyway): only the current execution's flag says a daemon is there. A hub also passes the sessions it holds.
PRUNE_CANDIDATES = (
    "SELECT session_id FROM sessions s WHERE last_contact_at < {cutoff} AND NOT EXISTS "
    "(SELECT 1 FROM executions e WHERE e.session_id = s.session_id AND e.execution_id = s.current_execution_id "
    "AND e.connected != 0) "
    "ORDER BY last_contact_at LIMIT {limit}"
)


@dataclass(frozen=True)
class SessionPage:
    """A window of the session list: how many sessions there are, how many match, and the window's listings."""

    total: int
    matched: int
    sessions: list[HubSession]


# An execution's listing (agentctl.hub.listing), written with its history; a write without one keeps the stored.
LISTING_UPSERT = ("INSERT INTO listings(session_id, execution_id, attention, statuses, search, summary) "
                  "VALUES ({m}, {m}, {m}, {m}, {m}, {m}) ON CONFLICT(session_id, execution_id) DO UPDATE SET "
                  "attention=excluded.attention, statuses=excluded.statuses, search=excluded.search, "
                  "summary=excluded.summary")


def listing_rows(executions: Sequence[ExecutionRecord]) -> list[tuple[Any, ...]]:
    """The `listings` rows of the records that carry a new history, in the order rows are locked in."""
    return sorted((r.session_id, r.identity.execution_id, r.listing.attention, r.listing.statuses, r.listing.search,
                   r.listing.summary.decode()) for r in executions if r.listing is not None)


# Executions written before hub schema 4 hold a history but no listing: listed in batches by the hub's upkeep,
# so an upgraded database's page shows each session's attempt rather than none.
BACKFILL_SELECT = ("SELECT e.session_id, e.execution_id, s.task_id, e.history FROM executions e "
                   "JOIN sessions s ON s.session_id = e.session_id LEFT JOIN listings l "
                   "ON l.session_id = e.session_id AND l.execution_id = e.execution_id "
                   "WHERE e.history IS NOT NULL AND l.session_id IS NULL ORDER BY 1, 2 LIMIT {m}")


def backfill_rows(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The `listings` rows of BACKFILL_SELECT's rows. A history that cannot be read is listed without its attempt
    (never selected again), as the page shows a session with no snapshot."""
    out = []
    for session_id, execution_id, task_id, history in rows:
        try:
            whole: AttachmentHistory | None = msgspec.json.decode(history, type=AttachmentHistory)
        except (msgspec.DecodeError, msgspec.ValidationError):
            whole = None
        listing = summarize(task_id, session_id, whole)
        out.append((session_id, execution_id, listing.attention, listing.statuses, listing.search,
                    listing.summary.decode()))
    return out


def read_page(fetch: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]], query: PageQuery,
              mark: str) -> SessionPage:
    """A page by `fetch(sql, params)` (one engine's): the window's ids in order, then their listings."""
    where, params = where_clause(query, mark)
    (total,) = fetch(f"SELECT COUNT(*) {PAGE_FROM}", [])[0]
    matched = fetch(f"SELECT COUNT(*) {PAGE_FROM}{where}", params)[0][0] if where else total
    ids = [sid for (sid,) in fetch(f"SELECT s.session_id {PAGE_FROM}{where} {PAGE_ORDER} LIMIT {mark} OFFSET {mark}",
                                   [*params, query.limit, query.offset])]
    if not ids:
        return SessionPage(int(total), int(matched), [])
    marks = ", ".join([mark] * len(ids))
    rows = fetch("SELECT s.task_id, s.session_id, s.current_execution_id, e.connected, s.last_contact_at, "
                 "(SELECT COUNT(*) FROM executions x WHERE x.session_id = s.session_id), s.stale_rejected, l.summary "
                 f"{PAGE_FROM} WHERE s.session_id IN ({marks})", ids)
    by_id = {row[1]: listing_of(row[0], row[1], row[2], bool(row[3]), _dt(row[4]), int(row[5]), int(row[6]),
                                decode_summary(row[7])) for row in rows}
    return SessionPage(int(total), int(matched), [by_id[sid] for sid in ids if sid in by_id])


def ts(value: datetime) -> str:
    return value.isoformat()


def _dt(text: str) -> datetime:
    return datetime.fromisoformat(text)


SESSION_COLS = "session_id, task_id, current_execution_id, stale_rejected, last_contact_at"
EXECUTION_COLS = (
    "session_id, identity, daemon_version, hello_order, first_hello_at, last_contact_at, connected, "
    "rejected_frames, history"
)


def session_of_row(row: tuple[Any, ...]) -> SessionState:
    sid, task, current, stale, contact = row
    return SessionState(session_id=sid, task_id=task, current_execution_id=current, stale_rejected=stale,
                        last_contact_at=_dt(contact))


def split_sessions(session_rows: Iterable[tuple[Any, ...]], execution_rows: Iterable[tuple[Any, ...]], hot: int | None,
                   decode: Callable[[tuple[Any, ...]], ExecutionState]) -> tuple[dict[str, SessionState], dict[str, HubSession]]:
    """Rows of sessions and of executions (ordered by session) as `load_split` answers: the `hot` sessions most
    recently in contact whole, every other one as its listing; a session without its current execution is left out."""
    sessions = {row[0]: session_of_row(row) for row in session_rows}
    if hot is None:
        hot_ids = set(sessions)
    else:
        recent = sorted(sessions.values(), key=lambda s: (s.last_contact_at, s.session_id), reverse=True)
        hot_ids = {s.session_id for s in recent[:hot]}
    cold: dict[str, HubSession] = {}
    for sid, group in itertools.groupby(execution_rows, key=lambda row: row[0]):
        session = sessions.get(sid)
        if session is None:
            continue
        for row in group:
            execution = decode(row)
            session.executions[execution.execution_id] = execution
        if sid not in hot_ids:
            del sessions[sid]
            if session.current_execution_id in session.executions:
                cold[sid] = session_listing(session)
    hot_sessions = {sid: s for sid, s in sessions.items() if s.current_execution_id in s.executions}
    return hot_sessions, cold


def decode_execution(row: tuple[Any, ...], where: str) -> ExecutionState:
    """An execution row (in EXECUTION_COLS' order) as the hub's state. Raises HubStoreError."""
    _sid, ident, version, order, first, last, connected, rejected, history = row
    try:
        identity = msgspec.json.decode(ident, type=Identity)
        decoded = msgspec.json.decode(history, type=AttachmentHistory) if history else None
    except msgspec.DecodeError as exc:
        raise HubStoreError(f"hub database {where} holds an unreadable execution row: {exc}") from None
    return ExecutionState(
        identity=identity, daemon_version=version, hello_order=order, first_hello_at=_dt(first),
        last_contact_at=_dt(last), connected=bool(connected), rejected_frames=rejected, history=decoded,
    )


class HubStore:
    """The SQLite file. Writable (the hub) or read-only (the CLI). Every use from a worker thread and close()
    take one lock: the hub reads cold sessions both on its loop and in worker threads, and a stop that closes the
    file while a cancelled prune or flush still runs in its thread must wait for it (SQLite's connection freed
    under a running statement ends the process)."""

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.Lock()
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
        with self._lock:
            self._conn.close()

    def load(self) -> dict[str, SessionState]:
        """Everything in the file, as the hub's in-memory state (the CLI's views)."""
        return self.load_split(None)[0]

    def load_split(self, hot: int | None) -> tuple[dict[str, SessionState], dict[str, HubSession]]:
        """The `hot` sessions most recently in contact whole, every other one as its listing (all whole when
        `hot` is None). Executions are decoded one session at a time: a large file never sits in memory whole."""
        try:
            sessions = self._conn.execute(f"SELECT {SESSION_COLS} FROM sessions")
            rows = self._conn.execute(f"SELECT {EXECUTION_COLS} FROM executions ORDER BY session_id")
            return split_sessions(sessions, rows, hot, self._execution)
        except sqlite3.Error as exc:
            raise HubStoreError(f"cannot read hub database {self.path}: {exc}") from None

    def load_session(self, session_id: str) -> SessionState | None:
        """One session whole (a cold session the live hub reads on demand); None when the file has none."""
        try:
            one = (session_id,)
            with self._lock:
                row = self._conn.execute(f"SELECT {SESSION_COLS} FROM sessions WHERE session_id=?", one).fetchone()
                if row is None:
                    return None
                rows = self._conn.execute(f"SELECT {EXECUTION_COLS} FROM executions WHERE session_id=?",
                                          one).fetchall()
        except sqlite3.Error as exc:
            raise HubStoreError(f"cannot read hub database {self.path}: {exc}") from None
        session = session_of_row(row)
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
        return decode_execution(row, str(self.path))

    def write(self, sessions: Sequence[SessionRecord], executions: Sequence[ExecutionRecord]) -> None:
        """Upsert the records in one transaction. Safe to call from a worker thread."""
        with self._lock:
            self._write(sessions, executions)

    def _write(self, sessions: Sequence[SessionRecord], executions: Sequence[ExecutionRecord]) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "INSERT INTO sessions(session_id, task_id, current_execution_id, stale_rejected, last_contact_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET task_id=excluded.task_id, "
                "current_execution_id=excluded.current_execution_id, stale_rejected=excluded.stale_rejected, "
                "last_contact_at=excluded.last_contact_at",
                [_session_row(r) for r in sessions],
            )
            conn.executemany(
                "INSERT INTO executions(session_id, execution_id, hello_order, identity, daemon_version, "
                "first_hello_at, last_contact_at, connected, rejected_frames, history) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(session_id, execution_id) DO UPDATE SET "
                "hello_order=excluded.hello_order, identity=excluded.identity, "
                "daemon_version=excluded.daemon_version, last_contact_at=excluded.last_contact_at, "
                "connected=excluded.connected, rejected_frames=excluded.rejected_frames, "
                "history=COALESCE(excluded.history, executions.history)",
                [_execution_row(r) for r in executions],
            )
            conn.executemany(LISTING_UPSERT.format(m="?"), listing_rows(executions))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def max_hello_order(self) -> int:
        row = self._conn.execute("SELECT COALESCE(MAX(hello_order), 0) FROM executions").fetchone()
        return int(row[0])

    def prune(self, cutoff: datetime, keep: Collection[str], batch: int, now: datetime) -> list[str]:
        """SessionStore.prune. Safe to call from a worker thread."""
        try:
            with self._lock:
                return self._prune(cutoff, keep, batch, now)
        except sqlite3.Error as exc:
            raise HubStoreError(f"cannot prune hub database {self.path}: {exc}") from None

    def _prune(self, cutoff: datetime, keep: Collection[str], batch: int, now: datetime) -> list[str]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            rows = conn.execute(PRUNE_CANDIDATES.format(cutoff="?", limit="?"),
                                (ts(cutoff), batch + len(keep))).fetchall()
            ids = [sid for (sid,) in rows if sid not in keep][:batch]
            if ids:
                marks = ", ".join("?" * len(ids))
                conn.execute(TOMBSTONE_RESET.format(ids=marks), ids)
                conn.execute(TOMBSTONE_INSERT.format(now="?", ids=marks), (ts(now), *ids))
                conn.execute(f"DELETE FROM listings WHERE session_id IN ({marks})", ids)
                conn.execute(f"DELETE FROM executions WHERE session_id IN ({marks})", ids)
                conn.execute(f"DELETE FROM sessions WHERE session_id IN ({marks})", ids)
            conn.execute("COMMIT")
            return ids
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def tombstone(self, session_id: str, execution_id: str) -> bool | None:
        try:
            with self._lock:
                row = self._conn.execute("SELECT was_current FROM tombstones WHERE session_id=? AND execution_id=?",
                                         (session_id, execution_id)).fetchone()
        except sqlite3.Error as exc:
            raise HubStoreError(f"cannot read hub database {self.path}: {exc}") from None
        return None if row is None else bool(row[0])

    def backfill_listings(self, batch: int) -> int:
        """SessionStore.backfill_listings. Safe to call from a worker thread."""
        try:
            with self._lock:
                conn = self._conn
                conn.execute("BEGIN IMMEDIATE")
                try:
                    rows = backfill_rows(conn.execute(BACKFILL_SELECT.format(m="?"), (batch,)).fetchall())
                    conn.executemany(LISTING_UPSERT.format(m="?"), rows)
                    conn.execute("COMMIT")
                    return len(rows)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise HubStoreError(f"cannot write hub database {self.path}: {exc}") from None

    def page(self, query: PageQuery) -> SessionPage:
        """SessionStore.page. Safe to call from a worker thread (the reader's lock)."""

        def fetch(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            return self._conn.execute(sql, params).fetchall()

        try:
            with self._lock:
                return read_page(fetch, query, "?")
        except sqlite3.Error as exc:
            raise HubStoreError(f"cannot read hub database {self.path}: {exc}") from None

    def counts(self) -> SessionCounts:
        """SessionStore.counts. Safe to call from a worker thread (the reader's lock)."""
        try:
            with self._lock:
                return counts_of(self._conn.execute(COUNTS_SQL).fetchall())
        except sqlite3.Error as exc:
            raise HubStoreError(f"cannot read hub database {self.path}: {exc}") from None

    def footprint(self) -> tuple[int, datetime | None]:
        """The file and its write-ahead log on disk, and the oldest session's last contact (indexed)."""
        try:
            with self._lock:
                (oldest,) = self._conn.execute("SELECT MIN(last_contact_at) FROM sessions").fetchone()
        except sqlite3.Error as exc:
            raise HubStoreError(f"cannot read hub database {self.path}: {exc}") from None
        size = 0
        for suffix in ("", "-wal"):
            try:
                size += os.stat(f"{self.path}{suffix}").st_size
            except OSError:
                pass
        return size, _dt(oldest) if oldest else None


def _session_row(r: SessionRecord) -> tuple[Any, ...]:
    return (r.session_id, r.task_id, r.current_execution_id, r.stale_rejected, ts(r.last_contact_at))


def _execution_row(r: ExecutionRecord) -> tuple[Any, ...]:
    return (r.session_id, r.identity.execution_id, r.hello_order, encode(r.identity).decode(), r.daemon_version,
            ts(r.first_hello_at), ts(r.last_contact_at), int(r.connected), r.rejected_frames,
            r.history.decode() if r.history is not None else None)
