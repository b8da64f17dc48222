"""Owns the hub's memory: the hot sessions, its daemons' connections and the identity each said hello with, the
rows changed since the last flush and what a flush takes of them, the listeners told of every change, the
stores that memory is written to and read from, and refusing a connection. The hub, its shared view
(agentctl.hub.shared) and its retention (agentctl.hub.retention) all go through this one object.

Only what the database holds as it is may leave memory: a flush evicts past `hot_sessions` only sessions with
no connection and nothing unflushed. Users of the writable store take `flush_lock` in turn (flush, prune,
backfill): one at a time, never beside each other.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import NoReturn

from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import Identity
from agentctl.hub import rules
from agentctl.hub.hub_conn import HubConnection, Refused
from agentctl.hub.hub_store import ExecutionRecord, SessionRecord, SessionStore
from agentctl.hub.state import ExecutionState, SessionState
from agentctl.hub.views import evict
from agentctl.listener_guard import RateLimitedLog
from agentctl.upstream import protocol as P

log = logging.getLogger("agentctl.hub")

_UNIDENTIFIED_LOG = RateLimitedLog(log)


class HubMemory:
    """The hub's state in memory and its way to the database; created by the hub, which opens its stores."""

    def __init__(self, clock: Callable[[], datetime], hot_sessions: int) -> None:
        self.clock = clock
        self.hot_sessions = hot_sessions
        self.sessions: dict[str, SessionState] = {}  # the hot ones; every other one is in the database alone
        self.conns: set[HubConnection] = set()
        self.store: SessionStore | None = None
        self.reader: SessionStore | None = None  # read-only: cold sessions, never blocked by a flush
        self.dirty_sessions: set[str] = set()
        self.dirty_executions: dict[tuple[str, str], bool] = {}  # -> history changed
        self.flush_lock = asyncio.Lock()
        self.flush_failed = False
        self.store_errors = 0
        self.listeners: list[Callable[[str], None]] = []
        # For /metrics, by closed sets only: an error code of ERROR_CODES.
        self.protocol_errors = 0
        self.refusals_by_code: Counter[str] = Counter()

    # -- connections ---------------------------------------------------------------------------------

    def links(self, session: SessionState | None) -> dict[HubConnection, Identity]:
        """The session's connections that said hello, with the identity each said it with."""
        if session is None:
            return {}
        return {c: c.identity for c in self.conns if c.session is session and c.identity is not None}

    def held_executions(self, session: SessionState) -> set[str]:
        """The session's executions this hub holds: a connection here, or changes not yet written."""
        held = {c.identity.execution_id for c in self.conns if c.session is session and c.identity is not None}
        return held | {eid for sid, eid in self.dirty_executions if sid == session.session_id}

    def busy(self, *, followed_only: bool) -> set[str]:
        """Sessions that may not leave memory or the database: a connection (only one this hub follows, with
        `followed_only`), or changes not yet written."""
        busy = {c.session.session_id for c in self.conns
                if c.session is not None and (not followed_only or c.standing == "current")}
        return busy | self.dirty_sessions | {sid for sid, _ in self.dirty_executions}

    def followed(self) -> dict[str, str | None]:
        """Each session with a daemon here that is current, with the execution this hub takes as current."""
        return {c.session.session_id: c.session.current_execution_id for c in self.conns
                if c.session is not None and c.standing == "current"}

    def refuse(self, conn: HubConnection, code: str, message: str) -> None:
        """The error frame, one log line, close this connection (the close flushes the frame). Nothing else is touched.

        A peer that never said hello gets no line of its own: a process reconnecting as fast as it can would
        write one per connection, so those are one line per code per interval, with a count.
        """
        self.protocol_errors += 1
        self.refusals_by_code[P.loggable_code(code)] += 1
        conn.refused = True
        if conn.identity is None:
            _UNIDENTIFIED_LOG.note(code, lambda: f"closed a connection from an unidentified peer: {code}")
        else:
            log.warning("closed connection from %s: %s", conn.label, code)
        transport = conn.writer.transport
        if not transport.is_closing():
            try:
                conn.writer.write(P.encode_frame(P.frame(P.ErrorFrame, code=code, message=message, fatal=True)))
            except (OSError, ConnectionError):
                pass
        conn.writer.close()

    def fatal(self, conn: HubConnection, refusal: rules.Refusal) -> NoReturn:
        """Refuse the connection and end its frame's handling (Refused ends the hub's read loop)."""
        self.refuse(conn, refusal.code, refusal.message)
        raise Refused

    # -- changes -------------------------------------------------------------------------------------

    def mark(self, session: SessionState, execution: ExecutionState, *, history: bool) -> None:
        """The execution's row (and its history, with `history`) is written at the next flush."""
        self.dirty_sessions.add(session.session_id)
        key = (session.session_id, execution.execution_id)
        self.dirty_executions[key] = self.dirty_executions.get(key, False) or history
        self.changed(session.session_id)

    def remark_connections(self) -> None:
        """Every connected daemon's rows written again at the next flush (their `connected` flags included)."""
        for conn in list(self.conns):
            if conn.session is not None and conn.execution is not None:
                self.mark(conn.session, conn.execution, history=False)

    def changed(self, session_id: str) -> None:
        """Tell every listener ("": any session may have changed)."""
        for listener in self.listeners:
            try:
                listener(session_id)
            except Exception as exc:
                # The type only by default: an exception's text may quote what it was handling.
                log.error("hub listener failed: %s", type(exc).__name__, exc_info=log.isEnabledFor(logging.DEBUG))

    async def flush(self) -> None:
        """Write every dirty row in one transaction (from a worker thread)."""
        async with self.flush_lock:
            if self.store is None or not (self.dirty_sessions or self.dirty_executions):
                return
            sessions_dirty, self.dirty_sessions = self.dirty_sessions, set()
            executions_dirty, self.dirty_executions = self.dirty_executions, {}
            sessions = [SessionRecord.of(self.sessions[sid]) for sid in sessions_dirty if sid in self.sessions]
            rows = []
            for (sid, eid), with_history in executions_dirty.items():
                execution = self.sessions[sid].executions[eid]
                blob = encode(execution.history) if with_history and execution.history is not None else None
                rows.append(ExecutionRecord.of(sid, execution, blob))
            write = asyncio.ensure_future(asyncio.to_thread(self.store.write, sessions, rows))
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:  # stopping: the store must not close under the write in its thread
                await asyncio.wait([write])
                raise
            except Exception as exc:
                self.store_errors += 1
                if not self.flush_failed:
                    log.warning("hub database write failed (%s); retrying", type(exc).__name__)
                self.flush_failed = True
                self.dirty_sessions |= sessions_dirty
                for key, with_history in executions_dirty.items():
                    self.dirty_executions[key] = self.dirty_executions.get(key, False) or with_history
                return
            if self.flush_failed:
                log.info("hub database writes recovered")
                self.flush_failed = False
            evict(self.sessions, self.hot_sessions, self.busy(followed_only=False))

    def close_stores(self) -> None:
        for store in (self.store, self.reader):
            if store is not None:
                store.close()
        self.store = self.reader = None
