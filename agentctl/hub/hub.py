"""`agentctl hub`: the reference upstream. Many daemons connect to one Unix socket; the hub keeps every session's
history in SQLite, or in a PostgreSQL database shared by the hubs of several hosts (which then decides each
hello: agentctl.hub.shared), and answers the tool tunnel from a task store.

This module is the hub's I/O: connections, frames in and out, persistence, requests to daemons. What a frame
decides (which execution and instance is current, which frames are taken, who is told what) is the pure rules'
(agentctl.hub.rules); this layer applies their decisions. A malformed, truncated or oversized frame gets an
`error` frame, that connection is closed and one log line written; other connections are unaffected and the
database is only ever written in transactions.

`Hub` is an async context manager: each start step pushes its own stop, so it stops in reverse order of start.

Only hot sessions live in memory: read from the database when their daemon says hello (never hydrated at
start, so a restart over any number of sessions is ready at once), dirty rows flushed every `flush_interval`,
and past `hot_sessions` the least recently in contact dropped once flushed. The page's session list and the
metrics' counts are the database's (agentctl.hub.listing). Tool calls are answered by the task store's backend
(agentctl.hub.stores; tool arguments never reach the evidence tables or the log).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from agentctl.backend.embedded import EmbeddedBackend
from agentctl.control.socket import cleanup_socket_path, prepare_socket_path
from agentctl.unix_socket import bind_unix_socket, peer_allowed
from agentctl.evidence.contract.control import StderrView, TerminalView
from agentctl.evidence.contract.hub import HubSession, HubSessionReport, HubStatus
from agentctl.evidence.contract.report import EndpointTestResult, Identity
from agentctl.evidence.ledger import utcnow
from agentctl.listener_guard import ListenerGuard, forget_listener, hold, install_accept_error_log, name_listener, trust
from agentctl.hub import rules
from agentctl.hub.hub_conn import (  # noqa: F401 - the caps are the hub's, re-exported for its page and units
    DAEMON_CONNECTIONS, HELLO_TIMEOUT, PAGE_CONNECTIONS, HubConnection, HubRequestError, Refused, listener_caps)
from agentctl.hub.hub_conn import notice_line as _notice_line
from agentctl.dsn import PostgresDsn, SqlitePath
from agentctl.hub.hub_store import HOT_SESSIONS, HubStoreError, SessionPage
from agentctl.hub.listing import PageQuery
from agentctl.hub.stores import label, open_store, open_task_store
from agentctl.hub.shared import SharedView
from agentctl.hub.retention import DEFAULT_RETENTION, Retention
from agentctl.hub.memory import HubMemory
from agentctl.hub.state import SessionState
from agentctl.hub.views import report_view, session_listing, status_view
from agentctl.lifecycle import StackedService, StopStack
from agentctl.upstream import protocol as P
from agentctl.upstream.frames_io import STREAM_LIMIT, read_frame_line

log = logging.getLogger("agentctl.hub")

FLUSH_INTERVAL = 0.1
SWEEP_INTERVAL = 1.0
# The frame a request to a daemon is answered with (Hub._request).
_Reply = TypeVar("_Reply")


class Hub(StackedService):
    """The hub: its socket, its sessions in memory and in the database, its task store. `async with Hub(...)`
    starts and stops it."""

    stop_log = log

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        db_path: str | os.PathLike[str] | SqlitePath | PostgresDsn,
        *,
        tasks_db: str | os.PathLike[str] | None = None,
        flush_interval: float = FLUSH_INTERVAL,
        clock: Callable[[], datetime] = utcnow,
        hot_sessions: int = HOT_SESSIONS,
        retention: timedelta | None = DEFAULT_RETENTION,
    ) -> None:
        self.socket_path = Path(socket_path)
        db_path = db_path.path if isinstance(db_path, SqlitePath) else db_path
        # A PostgreSQL database may be shared with hubs on other hosts (agentctl.hub.shared).
        self.dsn = db_path if isinstance(db_path, PostgresDsn) else None
        self.db_path: Path | PostgresDsn = db_path if isinstance(db_path, PostgresDsn) else Path(db_path)
        # The task store: a SQLite file when given or beside a SQLite database, else the shared PostgreSQL one.
        self.tasks_db: Path | PostgresDsn
        default_tasks = (self.db_path if isinstance(self.db_path, PostgresDsn)
                         else self.db_path.with_suffix(".tasks.sqlite3"))
        self.tasks_db = Path(tasks_db) if tasks_db else default_tasks
        # Names this hub in a shared database (the `connected` flags it owns): stable across its restarts.
        self.hub_id = f"{socket.gethostname()}:{self.socket_path}"
        self.memory = HubMemory(clock, hot_sessions)  # sessions, connections, dirty rows, stores, listeners
        self.shared: SharedView | None = None
        self.retention = Retention(self.memory, retention)  # None: keep every session
        self.flush_interval = flush_interval
        self.backend: EmbeddedBackend | None = None
        self._server: asyncio.Server | None = None
        self.guard: ListenerGuard | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self._tool_tasks: set[asyncio.Task[Any]] = set()
        self._order = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._recovery: asyncio.Future[None] | None = None  # the task store's reconnect (_sweep_loop)
        self._stopping = False
        # Counters, for `hub serve` logs and benches.
        self.frames_in = 0
        self.events_applied = 0
        # For /metrics, by a closed set only: a frame's type tag (refusals are counted by the memory).
        self.frames_by_kind: Counter[str] = Counter()

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the stores, hydrate, then serve; a start that fails stops what it started, in reverse."""
        await super().start()
        log.info("hub serving %s (database %s, %d sessions)", self.socket_path, self.db_label, len(self.sessions))

    @property
    def sessions(self) -> dict[str, SessionState]:
        """The hot sessions (the memory's); every other one is in the database alone."""
        return self.memory.sessions

    @property
    def db_label(self) -> str:
        """The database as messages name it (a DSN without its secrets)."""
        return label(self.db_path)

    @property
    def tasks_label(self) -> str:
        return label(self.tasks_db)

    async def _start(self, stops: StopStack) -> None:
        memory = self.memory
        memory.store = store = open_store(self.db_path, hub_id=self.hub_id)
        stops.push("hub database", memory.close_stores)  # closed last, after the last flush
        store.reset_connected()  # nobody is connected to a hub that just started
        self._order = store.max_hello_order()
        memory.reader = open_store(self.db_path, readonly=True, hub_id=self.hub_id)
        if self.dsn is not None:
            self.shared = SharedView(memory, self.retention, self.hub_id, self.dsn)
            await self.shared.start()
            stops.push("shared database view", self.shared.stop)
        await self.retention.start()
        stops.push("retention", self.retention.stop)
        self.backend = await asyncio.to_thread(open_task_store, self.tasks_db)
        stops.push("task store", self._close_backend)
        stops.push("last flush", self.flush)
        stops.push("connections", self._forget_connections)
        # Flushing goes on while the connections close, so what they change meanwhile is written too.
        self._tasks = [
            asyncio.create_task(self._flush_loop(), name="agentctl-hub-flush"),
            asyncio.create_task(self._sweep_loop(), name="agentctl-hub-sweep"),
        ]
        stops.push("flush and sweep", self._cancel_loops)
        prepare_socket_path(self.socket_path)
        sock = bind_unix_socket(self.socket_path)
        try:
            self._server = await self._serve(sock)
        except BaseException:
            sock.close()
            cleanup_socket_path(self.socket_path)
            raise
        stops.push("hub socket", self._stop_serving)
        stops.push("accept error log", install_accept_error_log())

    async def _serve(self, sock: socket.socket) -> asyncio.Server:
        """`asyncio.start_unix_server`, with every connection through the listener guard."""
        loop = asyncio.get_running_loop()
        caps = listener_caps()
        self.guard = ListenerGuard("hub", caps["hub"], head_timeout=HELLO_TIMEOUT,
                                   refusal=P.encode_frame(P.frame(P.ErrorFrame, code="unavailable", fatal=True,
                                                                  message="the hub is at its connection cap")))

        def connection() -> asyncio.StreamReaderProtocol:
            return asyncio.StreamReaderProtocol(asyncio.StreamReader(limit=STREAM_LIMIT), self._handle)

        server = await loop.create_unix_server(self.guard.wrap(connection), sock=sock)
        name_listener(server, "hub")
        return server

    async def stop(self) -> None:
        """Stop in reverse order of start; idempotent."""
        self._stopping = True  # connections closing now are the hub's doing: nobody is asked to reconnect
        await super().stop()

    async def _stop_serving(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        forget_listener(server)
        server.close()
        for conn in list(self.memory.conns):
            conn.writer.close()
        # Closing the writers ends every handler's read; wait for them so none is cancelled mid-frame.
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=5.0)
        try:
            await asyncio.wait_for(server.wait_closed(), 5.0)
        except TimeoutError:
            pass
        cleanup_socket_path(self.socket_path)

    async def _cancel_loops(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _forget_connections(self) -> None:
        for conn in list(self.memory.conns):
            self._closed(conn)
        # Tool calls of connections already closed too: none may touch the backend after it closes.
        for task in self._tool_tasks:
            task.cancel()
        await asyncio.gather(*self._tool_tasks, return_exceptions=True)

    async def _close_backend(self) -> None:
        backend, self.backend = self.backend, None
        if backend is not None:
            # Its close waits for an op still running in a worker thread (up to the busy timeout): not on the loop.
            await asyncio.to_thread(backend.close)

    # -- queries (the CLI reads the database; an in-process UI calls these) ------------------------------

    def database_problem(self) -> str | None:
        """None while the database takes the hub's writes (and, shared, its notifications); else why not."""
        if self.memory.flush_failed:
            return "database unavailable: writes are retried; what daemons send is held until they succeed"
        shared = self.shared.problem() if self.shared is not None else None
        return shared or (self.backend.problem() if self.backend is not None else None)  # the task store's

    @property
    def connected_daemons(self) -> int:
        """Connections that said hello and are still open."""
        return sum(1 for c in self.memory.conns if c.identity is not None)

    def status(self) -> HubStatus:
        """Every session, the stored ones read whole (blocking: small databases, tests; the page uses `page`)."""
        stored = reader.load_split(0)[1] if (reader := self.memory.reader) is not None else {}
        return status_view(self.sessions, [v for sid, v in stored.items() if sid not in self.sessions])

    def report(self, session_id: str, execution_id: str | None = None) -> HubSessionReport | None:
        session = self.sessions.get(session_id) or self._read_cold(session_id)
        return report_view(session, execution_id) if session is not None else None

    async def read_report(self, session_id: str, execution_id: str | None = None) -> HubSessionReport | None:
        """report(), a cold session read in a worker thread: a slow query never stalls the loop (page, frames)."""
        session = self.sessions.get(session_id) or await asyncio.to_thread(self._read_cold, session_id)
        return report_view(session, execution_id) if session is not None else None

    async def page(self, query: PageQuery) -> SessionPage:
        """A window of the session list from the database, after a flush. Raises HubStoreError."""
        await self.flush()
        if (reader := self.memory.reader) is None:
            raise HubStoreError("the hub is not serving")
        return await asyncio.to_thread(reader.page, query)

    def listing(self, session_id: str) -> HubSession | None:
        """The session's listing when it is in memory (None: the database alone holds it, or nothing does)."""
        return session_listing(session) if (session := self.sessions.get(session_id)) is not None else None

    def _read_cold(self, session_id: str) -> SessionState | None:
        """A session not in memory, read whole from the database (one indexed query); None on a failed read."""
        try:  # the reader read once: a worker thread runs this while stop may close the stores
            return reader.load_session(session_id) if (reader := self.memory.reader) is not None else None
        except HubStoreError as exc:
            log.warning("reading session %s from the hub database failed: %s", session_id, type(exc).__name__)
            return None

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """`listener(session_id)` after every change to that session (called on the loop; must not block)."""
        self.memory.listeners.append(listener)

    def unsubscribe(self, listener: Callable[[str], None]) -> None:
        if listener in self.memory.listeners:
            self.memory.listeners.remove(listener)

    async def read_stderr(self, session_id: str, *, timeout: float = 10.0) -> StderrView:
        """Recent agent output of the session's current daemon, on demand. Never stored or logged here."""
        return (await self._request(session_id, P.StderrReadFrame, P.StderrResultFrame, timeout)).view

    async def read_terminal(self, session_id: str, *, timeout: float = 10.0) -> TerminalView:
        """The session's agent terminal's recent screen, on demand (asked only of a daemon whose agent is on one:
        another does not know the frame). Never stored, logged or cached here."""
        conn = self._live_conn(session_id)
        if conn is not None and not conn.on_terminal:
            raise HubRequestError("not_supported", "the session's agent does not run on a terminal")
        return (await self._request(session_id, P.TerminalReadFrame, P.TerminalResultFrame, timeout)).view

    async def test_endpoint(self, session_id: str, server: str, *, timeout: float = 65.0) -> EndpointTestResult:
        """Ask the session's current daemon to test one stored server by name."""
        return (await self._request(session_id, P.EndpointTestFrame, P.EndpointTestResultFrame, timeout,
                                    server=server)).result

    async def _request(self, session_id: str, kind: type[Any], reply: type[_Reply], timeout: float,
                       **fields: Any) -> _Reply:
        conn = self._live_conn(session_id)
        if conn is None:
            raise HubRequestError("unavailable", "no daemon of that session's current execution is connected")
        return await conn.ask(kind, reply, timeout, **fields)

    def _live_conn(self, session_id: str) -> HubConnection | None:
        session = self.sessions.get(session_id)
        if session is None:
            return None
        for conn in self.memory.conns:
            if conn.session is session and conn.snapshot_seen and not conn.stale:
                return conn
        return None

    # -- connections ---------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = HubConnection(reader, writer)
        self.memory.conns.add(conn)
        current = asyncio.current_task()
        if current is not None:
            self._handlers.add(current)
            current.add_done_callback(self._handlers.discard)
        held = False
        try:
            if not peer_allowed(conn.peer_uid):
                self.memory.refuse(conn, "forbidden_peer", "the hub serves only its own user and root")
                return
            while True:
                try:
                    raw = await read_frame_line(reader)
                    if raw is None:
                        return
                    conn.last_rx = time.monotonic()
                    self.frames_in += 1
                    received = P.decode_from_daemon(raw)
                    self.frames_by_kind[str(received.__struct_config__.tag or "other")] += 1
                    stored = None
                    if (self.shared is not None and isinstance(received, P.HelloFrame)
                            and rules.admit(conn.identity is not None, received) is None):
                        stored = await self.shared.claim(conn, received)
                    self._dispatch(conn, received, stored)
                    if isinstance(received, P.HelloFrame):
                        trust(writer.transport)  # displaced after unidentified peers; closed unless a snapshot follows
                    elif isinstance(received, P.SnapshotFrame) and not held:
                        held = True  # a daemon's link from its snapshot on: never timed out or displaced by the guard
                        hold(writer.transport)
                except P.ProtocolError as exc:
                    self.memory.refuse(conn, exc.code, str(exc))
                    return
                except Refused:
                    return
                except (ConnectionError, OSError):
                    return  # the daemon went away; it will reconnect and resend its snapshot
                except Exception as exc:  # a bug here must cost one connection, never the hub
                    log.error("frame from %s failed unexpectedly: %s", conn.label, type(exc).__name__)
                    self.memory.refuse(conn, "internal", "the hub failed on this frame; its log has details")
                    return
        finally:
            self._closed(conn)

    def _closed(self, conn: HubConnection) -> None:
        if conn not in self.memory.conns:
            return
        self.memory.conns.discard(conn)
        for future in conn.pending.values():
            if not future.done():
                future.set_exception(HubRequestError("unavailable", "the daemon disconnected before answering"))
        conn.writer.close()
        session, execution, ident = conn.session, conn.execution, conn.identity
        if session is None or execution is None or ident is None:
            return
        left = rules.departure(session, execution, ident, self.memory.links(session), stopping=self._stopping)
        if not left.disconnected:
            return
        self.memory.mark(session, execution, history=False)
        if not conn.refused and conn.snapshot_seen:  # a refusal already wrote its one line; hello-only: none
            log.info("session %s: execution %s disconnected", session.session_id, execution.execution_id)
        for other in left.reconnect:
            # Without this the hub would keep rejecting a live daemon and show the dead instance's history
            # (often no attempt at all) for good.
            assert other.identity is not None
            log.info("session %s: asking instance %s of execution %s to reconnect: the instance that superseded "
                     "it disconnected", other.identity.session_id, other.identity.instance_id,
                     other.identity.execution_id)
            other.refused = True
            if not other.writer.transport.is_closing():
                other.send(_notice_line(rules.RECONNECT))
            other.writer.close()

    def _dispatch(self, conn: HubConnection, received: P.DaemonFrame, stored: SessionState | None = None) -> None:
        refusal = rules.admit(conn.identity is not None, received)
        if refusal is not None:
            self.memory.fatal(conn, refusal)
        if isinstance(received, P.HelloFrame):
            self._hello(conn, received, stored)
        elif isinstance(received, P.HeartbeatFrame):
            conn.send(P.encode_frame(P.frame(P.HeartbeatFrame)))
            self._touch(conn)
        elif isinstance(received, (P.SnapshotFrame, P.EvidenceFrame, P.AgentFrame)):
            self._state_frame(conn, received)
        elif isinstance(received, P.ToolCallFrame):
            assert conn.identity is not None
            refusal = rules.admit_tool_call(conn.identity, received)
            if refusal is not None:
                self.memory.fatal(conn, refusal)
            task = asyncio.ensure_future(conn.run_tool_call(received, self.backend, self.memory.clock()))
            conn.tasks.add(task)
            task.add_done_callback(conn.tasks.discard)
            self._tool_tasks.add(task)
            task.add_done_callback(self._tool_tasks.discard)
        elif isinstance(received, (P.StderrResultFrame, P.TerminalResultFrame, P.EndpointTestResultFrame)):
            future = conn.pending.get(received.id)
            if future is not None and not future.done():
                future.set_result(received)
        elif isinstance(received, P.ErrorFrame):
            future = conn.pending.get(received.id or "")
            if future is not None and not future.done():
                future.set_exception(HubRequestError(received.code, received.message))
            else:
                log.info("%s reported %s", conn.label, P.loggable_code(received.code))

    def _hello(self, conn: HubConnection, hello: P.HelloFrame, stored: SessionState | None = None) -> None:
        ident = hello.identity
        session = self.sessions.get(ident.session_id)
        if stored is not None:  # a shared database: it decided which execution is current
            assert self.shared is not None
            session = self.shared.take_stored(stored)
        elif session is None:
            try:
                session = self.memory.reader.load_session(ident.session_id) if self.memory.reader is not None else None
            except HubStoreError:  # without its stored state the hub cannot tell a stale execution
                self.memory.fatal(conn, rules.Refusal("unavailable", "the hub cannot read this session's stored state; "
                                                               "try again"))
            if session is not None:
                self.sessions[ident.session_id] = session
        if stored is None:  # (a shared database's claim checked it)
            self.retention.fence(conn, session, ident)
        taken = rules.hello(session, hello, links=self.memory.links(session), order=self._order + 1, now=self.memory.clock())
        session, execution = taken.session, taken.execution
        if taken.new_execution:
            self._order += 1
        if taken.new_session:
            self.sessions[ident.session_id] = session
        if taken.now_current:
            log.info("session %s: execution %s is now current", ident.session_id, ident.execution_id)
        conn.identity, conn.session, conn.execution = ident, session, execution
        conn.heard_hello(hello.heartbeat_ms)
        if taken.notice is not None:  # an older execution: its frames are rejected from the start
            self.memory.mark(session, execution, history=False)
            conn.send(_notice_line(taken.notice))
            return
        # The current execution, possibly a new instance of it: its snapshot follows and replaces the history.
        for other, notice in taken.told:
            # Told once, and left open: a daemon must never go on believing it is followed.
            assert other.identity is not None
            log.info("session %s: execution %s instance %s superseded (%s)", other.identity.session_id,
                     other.identity.execution_id, other.identity.instance_id, notice.code)
            other.send(_notice_line(notice))
        self._touch(conn)

    def _touch(self, conn: HubConnection) -> None:
        session, execution, ident = conn.session, conn.execution, conn.identity
        if session is None or execution is None or ident is None:
            return
        if rules.contact(session, execution, ident, self.memory.clock()):
            self.memory.mark(session, execution, history=False)

    def _state_frame(self, conn: HubConnection, received: P.SnapshotFrame | P.EvidenceFrame | P.AgentFrame) -> None:
        session, execution, ident = conn.session, conn.execution, conn.identity
        assert session is not None and execution is not None and ident is not None
        outcome = rules.state_frame(session, execution, ident, conn.snapshot_seen, received)
        if isinstance(outcome, rules.Refusal):
            self.memory.fatal(conn, outcome)
        if isinstance(outcome, rules.Rejected):
            self.memory.mark(session, execution, history=False)
            return
        if outcome.snapshot and not conn.snapshot_seen:
            conn.snapshot_seen = True  # said now, not at hello: a peer that only says hello writes no line
            log.info("session %s: execution %s connected (instance %s)", ident.session_id, ident.execution_id,
                     ident.instance_id)
        if outcome.applied:
            self.events_applied += 1
        self._touch(conn)
        self.memory.mark(session, execution, history=True)

    # -- persistence ---------------------------------------------------------------------------------

    async def flush(self) -> None:
        """Write every dirty row in one transaction (from a worker thread)."""
        await self.memory.flush()

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval)
            await self.flush()

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL)
            backend, recovery = self.backend, self._recovery  # a task store away comes back without a tool call
            if backend is not None and backend.problem() is not None and (recovery is None or recovery.done()):
                # Not awaited: a connect may take its whole timeout, and the sweep must go on meanwhile.
                self._recovery = asyncio.ensure_future(asyncio.to_thread(backend.recover))
            now = time.monotonic()
            for conn in list(self.memory.conns):
                if now - conn.last_rx > conn.idle_limit and not conn.writer.transport.is_closing():
                    self.memory.refuse(conn, "idle_timeout", "nothing received for three heartbeats")
