"""The hub's store in PostgreSQL: the SQLite file's `SessionStore` for hubs on several hosts sharing one database,
and what only a shared database has to answer: which execution of a session is current (decided here, in one
transaction, never in a hub's memory), and a notification to every other hub after each change.

Fencing: a hello of an execution the database has not seen takes the next value of the `hub_hello_order`
sequence while it holds the session's row lock (SELECT ... FOR UPDATE), and becomes the session's current
execution. Claims of one session are serialized by that lock and the sequence only grows, so the newest hello
across every hub wins without comparing any host's clock. A hub's flush never writes `current_execution_id`
or `hello_order` of a row that exists: only a claim moves them.

A flush is additive where two hubs may write one row: the session's last contact is the later of the stored one
and the hub's, its rejected-frame count the sum of its executions' counts (each execution's count is kept by
the hub holding its daemon), and each `connected` flag belongs to the hub named in the execution's row, so a
hub that restarts clears its own flags only.

After every committed change the store sends NOTIFY on CHANNEL with the hub's id and the session's id: the
other hubs reread that one session (agentctl.hub.shared).

A hub's connections carry its tag (`hub_tag`) as their application_name, so every hub can see in
pg_stat_activity which hubs are alive: the `connected` flags of a hub with no connection left (SIGKILLed,
its host gone) are cleared by the others (`clear_departed`), since that hub cannot; it clears and rewrites
its own when it returns. The driver is imported through agentctl.postgres
only. Every error is a HubStoreError of one line with the DSN's secrets masked.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from agentctl.dsn import PostgresDsn
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.hub import HubSession
from agentctl.evidence.contract.report import Identity
from agentctl.hub import rules
from agentctl.hub.hub_store import (
    BACKFILL_SELECT,
    EXECUTION_COLS,
    LISTING_UPSERT,
    PRUNE_CANDIDATES,
    SESSION_COLS,
    TOMBSTONE_INSERT,
    TOMBSTONE_RESET,
    ExecutionRecord,
    HubStoreError,
    SessionPage,
    SessionRecord,
    decode_execution,
    backfill_rows,
    listing_rows,
    read_page,
    session_of_row,
    split_sessions,
    ts,
)
from agentctl.hub.listing import COUNTS_SQL, PageQuery, SessionCounts, counts_of
from agentctl.hub.migrations import HUB
from agentctl.hub.state import SessionState
from agentctl.migrations import MigrationError, PostgresDialect, require_latest
from agentctl.postgres import PostgresUnavailable, connect, describe_error, driver, migrate_postgres

CHANNEL = "agentctl_hub"
TAG_PREFIX = "agentctl-hub "
# What one unit of work on the connection returns (PgHubStore._run).
_T = TypeVar("_T")
# The tag computed by the database from an execution's `hub` column, as hub_tag computes it from a hub's id.
_TAG_OF_ROW = "'agentctl-hub ' || left(encode(sha256(convert_to(hub, 'UTF8')), 'hex'), 20)"


class PrunedExecution(Exception):
    """A hello the database refused: its execution was pruned and may not be current again (`refusal`)."""

    def __init__(self, refusal: rules.Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def hub_tag(hub_id: str) -> str:
    """A hub's application_name: a digest of its id, as application_name is cut at 63 bytes."""
    return TAG_PREFIX + hashlib.sha256(hub_id.encode()).hexdigest()[:20]


def notice_payload(hub_id: str, session_id: str) -> str:
    return msgspec.json.encode([hub_id, session_id]).decode()


def parse_notice(payload: str) -> tuple[str, str] | None:
    """(hub id, session id) of a notification, None for one that is not ours."""
    try:
        hub_id, session_id = msgspec.json.decode(payload, type=tuple[str, str])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return hub_id, session_id


class PgHubStore:
    """One connection to the database (reconnected after a failure), used by one thread at a time (a lock makes
    a flush and a claim from two worker threads take turns). Writable (a hub, which migrates at open) or
    read-only (the CLI, which refuses a database not at the latest schema)."""

    def __init__(self, dsn: PostgresDsn, *, readonly: bool = False, hub_id: str = "") -> None:
        self.dsn = dsn
        self.path = dsn.display()  # what messages name it by
        self.readonly = readonly
        self.hub_id = hub_id
        self.migration: Any = None
        self._lock = threading.Lock()
        self._conn: Any = None
        try:
            self._psycopg = driver()
            if readonly:
                conn = connect(dsn)
                try:
                    require_latest(PostgresDialect(conn), HUB, self.path)
                except self._psycopg.Error as exc:
                    raise HubStoreError(f"cannot read hub database {self.path}: {describe_error(dsn, exc)}") from None
                finally:
                    conn.close()
            else:
                self.migration = migrate_postgres(dsn, HUB)
        except (MigrationError, PostgresUnavailable) as exc:
            raise HubStoreError(str(exc)) from None

    # -- connection ------------------------------------------------------------------------------------

    def _run(self, what: str, work: Callable[[Any], _T]) -> _T:
        """`work(connection)`; a connection found dead on use (the server restarted since) is replaced and the
        work tried once more. Every op is safe to repeat: upserts, additive counts, a claim that finds its
        execution already taken."""
        with self._lock:
            for retry in (True, False):
                try:
                    if self._conn is None or self._conn.closed or self._conn.broken:
                        self._conn = connect(self.dsn, application_name=hub_tag(self.hub_id) if self.hub_id else None)
                    return work(self._conn)
                except PostgresUnavailable as exc:
                    raise HubStoreError(str(exc)) from None
                except self._psycopg.Error as exc:
                    dead = self._conn is not None and (self._conn.broken or self._conn.closed)
                    if dead:
                        self._conn.close()
                        self._conn = None
                    if not (dead and retry):
                        raise HubStoreError(f"cannot {what} hub database {self.path}: "
                                            f"{describe_error(self.dsn, exc)}") from None
            raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- SessionStore ------------------------------------------------------------------------------------

    def load(self) -> dict[str, SessionState]:
        return self.load_split(None)[0]

    def load_split(self, hot: int | None) -> tuple[dict[str, SessionState], dict[str, HubSession]]:
        def work(conn: Any) -> tuple[dict[str, SessionState], dict[str, HubSession]]:
            with conn.transaction():  # one snapshot of both tables
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                sessions = conn.execute(f"SELECT {SESSION_COLS} FROM sessions").fetchall()
                with conn.cursor(name="agentctl_hub_executions") as cur:  # streamed: a large table never whole
                    cur.execute(f"SELECT {EXECUTION_COLS} FROM executions ORDER BY session_id")
                    return split_sessions(sessions, cur, hot, self._execution)

        return self._run("read", work)

    def load_session(self, session_id: str) -> SessionState | None:
        return self._run("read", lambda conn: self._session_of(conn, session_id))

    def load_sessions(self, session_ids: Sequence[str]) -> dict[str, SessionState | None]:
        """Several sessions in two queries (what another hub changed in one flush); None for each one gone."""
        ids = list(session_ids)

        def work(conn: Any) -> dict[str, SessionState | None]:
            with conn.transaction():
                sessions = {row[0]: session_of_row(row) for row in conn.execute(
                    f"SELECT {SESSION_COLS} FROM sessions WHERE session_id = ANY(%s)", (ids,))}
                for row in conn.execute(f"SELECT {EXECUTION_COLS} FROM executions WHERE session_id = ANY(%s)", (ids,)):
                    if row[0] in sessions:
                        execution = self._execution(row)
                        sessions[row[0]].executions[execution.execution_id] = execution
            whole = {sid: s for sid, s in sessions.items() if s.current_execution_id in s.executions}
            return {sid: whole.get(sid) for sid in ids}

        return self._run("read", work)

    def listing(self, session_id: str) -> HubSession | None:
        """The session's listing (for a hub that holds it cold), None when it has none."""
        from agentctl.hub.views import session_listing

        session = self.load_session(session_id)
        return session_listing(session) if session is not None else None

    def _session_of(self, conn: Any, session_id: str) -> SessionState | None:
        one = (session_id,)
        row = conn.execute(f"SELECT {SESSION_COLS} FROM sessions WHERE session_id=%s", one).fetchone()
        if row is None:
            return None
        session = session_of_row(row)
        for execution_row in conn.execute(f"SELECT {EXECUTION_COLS} FROM executions WHERE session_id=%s", one):
            execution = self._execution(execution_row)
            session.executions[execution.execution_id] = execution
        return session if session.current_execution_id in session.executions else None

    def _execution(self, row: tuple[Any, ...]) -> Any:
        return decode_execution(row, self.path)

    def reset_connected(self) -> None:
        """This hub just started: nobody is connected to it. Other hubs' flags stay; they are told."""

        def work(conn: Any) -> None:
            with conn.transaction():
                rows = conn.execute("UPDATE executions SET connected=0 WHERE connected!=0 AND hub=%s "
                                    "RETURNING session_id", (self.hub_id,)).fetchall()
                self._notify(conn, sorted({sid for (sid,) in rows}))

        self._run("write", work)

    def live_hubs(self) -> set[str]:
        """The tags of the hubs with a connection to this database now."""
        rows = self._run("read", lambda conn: conn.execute(
            "SELECT DISTINCT application_name FROM pg_stat_activity WHERE datname=current_database() "
            "AND application_name LIKE %s", (TAG_PREFIX + "%",)).fetchall())
        return {tag for (tag,) in rows}

    def clear_departed(self, tags: Sequence[str]) -> list[str]:
        """Clear the `connected` flags of the hubs with these tags that still have no connection (checked in the
        same statement: a hub back meanwhile keeps its flags); the sessions changed, the other hubs told."""

        def work(conn: Any) -> list[str]:
            with conn.transaction():
                rows = conn.execute(
                    f"UPDATE executions SET connected=0 WHERE connected!=0 AND hub!=%s AND {_TAG_OF_ROW} = ANY(%s) "
                    "AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname=current_database() "
                    f"AND a.application_name = {_TAG_OF_ROW}) RETURNING session_id",
                    (self.hub_id, list(tags))).fetchall()
                changed = sorted({sid for (sid,) in rows})
                self._notify(conn, changed)
                return changed

        return self._run("write", work)

    def _notify(self, conn: Any, session_ids: Sequence[str]) -> None:
        # One statement for the whole flush: a round trip per session made the flush of a busy hub its
        # longest step (bench/hub_scale.py).
        conn.execute("SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload",
                     (CHANNEL, [notice_payload(self.hub_id, sid) for sid in session_ids]))

    def max_hello_order(self) -> int:
        return int(self._run("read", lambda conn: conn.execute(
            "SELECT COALESCE(MAX(hello_order), 0) FROM executions").fetchone()[0]))

    def write(self, sessions: Sequence[SessionRecord], executions: Sequence[ExecutionRecord]) -> None:
        """Upsert the records in one transaction, additively (see the module's docstring), and notify."""
        # Rows locked in one order (sessions by id, then executions by id) by every hub: two flushes never deadlock.
        session_rows = sorted(((r.session_id, r.task_id, r.current_execution_id, r.stale_rejected,
                                ts(r.last_contact_at)) for r in sessions))
        execution_rows = sorted(self._execution_row(r) for r in executions)
        listings = listing_rows(executions)
        touched = sorted({r[0] for r in session_rows} | {r[0] for r in execution_rows})

        def work(conn: Any) -> None:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO sessions(session_id, task_id, current_execution_id, stale_rejected, last_contact_at) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT(session_id) DO UPDATE SET "
                    "last_contact_at=GREATEST(sessions.last_contact_at, excluded.last_contact_at)",
                    session_rows,
                )
                cur.executemany(
                    "INSERT INTO executions(session_id, execution_id, hello_order, identity, daemon_version, "
                    "first_hello_at, last_contact_at, connected, rejected_frames, history, hub) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT(session_id, execution_id) "
                    "DO UPDATE SET identity=excluded.identity, daemon_version=excluded.daemon_version, "
                    "last_contact_at=GREATEST(executions.last_contact_at, excluded.last_contact_at), "
                    "connected=excluded.connected, hub=excluded.hub, "
                    "rejected_frames=GREATEST(executions.rejected_frames, excluded.rejected_frames), "
                    "history=COALESCE(excluded.history, executions.history)",
                    execution_rows,
                )
                cur.executemany(LISTING_UPSERT.format(m="%s"), listings)
                cur.execute(
                    "UPDATE sessions s SET stale_rejected=COALESCE((SELECT SUM(e.rejected_frames) FROM executions e "
                    "WHERE e.session_id=s.session_id), 0) WHERE s.session_id = ANY(%s)", (touched,))
                self._notify(conn, touched)

        self._run("write", work)

    def _execution_row(self, r: ExecutionRecord) -> tuple[Any, ...]:
        return (r.session_id, r.identity.execution_id, r.hello_order, encode(r.identity).decode(), r.daemon_version,
                ts(r.first_hello_at), ts(r.last_contact_at), int(r.connected), r.rejected_frames,
                r.history.decode() if r.history is not None else None, self.hub_id)

    # -- fencing -------------------------------------------------------------------------------------------

    def claim(self, identity: Identity, daemon_version: str, now: datetime) -> SessionState:
        """A hello of `identity` on this hub: the session as the database holds it after the hello, with the
        hello's execution in it. An execution the database has not seen takes the next hello order and becomes
        current, atomically under the session's row lock; a known one changes nothing here."""
        sid, eid = identity.session_id, identity.execution_id

        def work(conn: Any) -> SessionState:
            with conn.transaction():
                created = self._lock_session(conn, identity, now)
                known = conn.execute("SELECT 1 FROM executions WHERE session_id=%s AND execution_id=%s",
                                     (sid, eid)).fetchone()
                if known is None:
                    tomb = conn.execute("SELECT was_current FROM tombstones WHERE session_id=%s AND execution_id=%s",
                                        (sid, eid)).fetchone()
                    refusal = rules.after_prune(None if tomb is None else bool(tomb[0]), session_live=not created)
                    if refusal is not None:
                        raise PrunedExecution(refusal)  # the transaction rolls back: nothing of the hello stays
                    conn.execute(
                        "INSERT INTO executions(session_id, execution_id, hello_order, identity, daemon_version, "
                        "first_hello_at, last_contact_at, connected, rejected_frames, history, hub) "
                        "VALUES (%s, %s, nextval('hub_hello_order'), %s, %s, %s, %s, 1, 0, NULL, %s)",
                        (sid, eid, encode(identity).decode(), daemon_version, ts(now), ts(now), self.hub_id))
                    conn.execute("UPDATE sessions SET current_execution_id=%s, "
                                 "last_contact_at=GREATEST(last_contact_at, %s) WHERE session_id=%s",
                                 (eid, ts(now), sid))
                    self._notify(conn, [sid])
                session = self._session_of(conn, sid)
            if session is None:  # the row names an execution it does not hold: not ours to repair
                raise HubStoreError(f"hub database {self.path}: session {sid} has no row for its current execution")
            return session

        return self._run("write", work)

    @staticmethod
    def _lock_session(conn: Any, identity: Identity, now: datetime) -> bool:
        """The session's row, locked; True when this claim created it. A prune that held the row meanwhile deleted
        it: the claim starts the session anew (its tombstones decide which execution may)."""
        sid = identity.session_id
        for _ in range(3):  # a row gone, then taken by another hub's claim: at most a few turns
            if conn.execute(
                    "INSERT INTO sessions(session_id, task_id, current_execution_id, stale_rejected, last_contact_at) "
                    "VALUES (%s, %s, %s, 0, %s) ON CONFLICT(session_id) DO NOTHING RETURNING 1",
                    (sid, identity.task_id, identity.execution_id, ts(now))).fetchone() is not None:
                return True
            if conn.execute("SELECT 1 FROM sessions WHERE session_id=%s FOR UPDATE", (sid,)).fetchone() is not None:
                return False
        raise HubStoreError(f"session {sid} kept changing under this hello; try again")

    def currents(self, session_ids: Sequence[str]) -> dict[str, str]:
        """session id -> its current execution, for the given sessions (one indexed query)."""
        rows = self._run("read", lambda conn: conn.execute(
            "SELECT session_id, current_execution_id FROM sessions WHERE session_id = ANY(%s)",
            (list(session_ids),)).fetchall())
        return {sid: current for sid, current in rows}

    # -- retention -----------------------------------------------------------------------------------------

    def prune(self, cutoff: datetime, keep: Collection[str], batch: int, now: datetime) -> list[str]:
        """SessionStore.prune; hubs pruning at once take disjoint batches (SKIP LOCKED), and a hello claiming
        a session waits for its prune, then finds it gone (and its tombstones). The other hubs are told."""

        def work(conn: Any) -> list[str]:
            with conn.transaction():
                rows = conn.execute(PRUNE_CANDIDATES.format(cutoff="%s", limit="%s") + " FOR UPDATE SKIP LOCKED",
                                    (ts(cutoff), batch + len(keep))).fetchall()
                ids = [sid for (sid,) in rows if sid not in keep][:batch]
                if ids:
                    marks = ", ".join(["%s"] * len(ids))
                    conn.execute(TOMBSTONE_RESET.format(ids=marks), ids)
                    conn.execute(TOMBSTONE_INSERT.format(now="%s", ids=marks), (ts(now), *ids))
                    conn.execute("DELETE FROM listings WHERE session_id = ANY(%s)", (ids,))
                    conn.execute("DELETE FROM executions WHERE session_id = ANY(%s)", (ids,))
                    conn.execute("DELETE FROM sessions WHERE session_id = ANY(%s)", (ids,))
                    self._notify(conn, ids)
                return ids

        return self._run("write", work)

    def tombstone(self, session_id: str, execution_id: str) -> bool | None:
        row = self._run("read", lambda conn: conn.execute(
            "SELECT was_current FROM tombstones WHERE session_id=%s AND execution_id=%s",
            (session_id, execution_id)).fetchone())
        return None if row is None else bool(row[0])

    def backfill_listings(self, batch: int) -> int:
        """SessionStore.backfill_listings: hubs listing at once take the same rows and write the same listings."""

        def work(conn: Any) -> int:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(BACKFILL_SELECT.format(m="%s"), (batch,))
                rows = backfill_rows(cur.fetchall())
                cur.executemany(LISTING_UPSERT.format(m="%s"), rows)
                return len(rows)

        return self._run("list", work)

    def page(self, query: PageQuery) -> SessionPage:
        """SessionStore.page, in one snapshot of the tables."""

        def work(conn: Any) -> SessionPage:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                return read_page(lambda sql, params: conn.execute(sql, list(params)).fetchall(), query, "%s")

        return self._run("read", work)

    def counts(self) -> SessionCounts:
        """SessionStore.counts (no parameter: the statement's LIKE wildcards are not placeholders)."""
        return counts_of(self._run("read", lambda conn: conn.execute(COUNTS_SQL).fetchall()))

    def footprint(self) -> tuple[int, datetime | None]:
        """The hub's tables with their indexes and TOAST (not the rest of a database it may share), and the
        oldest session's last contact."""
        size, oldest = self._run("read", lambda conn: conn.execute(
            "SELECT pg_total_relation_size('sessions') + pg_total_relation_size('executions') + "
            "pg_total_relation_size('tombstones'), (SELECT MIN(last_contact_at) FROM sessions)").fetchone())
        return int(size), datetime.fromisoformat(oldest) if oldest else None
