"""`agentctl hub`: the reference upstream. Many daemons connect to one Unix socket; the hub keeps every
session's history in SQLite and answers the tool tunnel from a task store.

Orchestrator rules, per frame:
- per session, the newest execution that said hello is current; frames from an older execution (or an
  older instance of the current one) are rejected and counted, its tool calls refused;
- a snapshot replaces the execution's history (trimmed to 3 attempts, 64 events each); an evidence frame
  is folded with the same pure reducer the daemon uses (agentctl.evidence.reducer), never a second one;
- a malformed, truncated or oversized frame gets an `error` frame, that connection is closed and one log
  line written; other connections are unaffected and the database is only ever written in transactions.

State lives in memory (hydrated from the database at start) and dirty rows are flushed every
`flush_interval`. Tool calls are answered by an EmbeddedBackend on the hub's own task database (a separate
file: tool arguments never reach the evidence tables or the log).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from agentctl.backend.base import BackendError
from agentctl.backend.embedded import EmbeddedBackend
from agentctl.control.server import peer_uid
from agentctl.control.socket import bind_unix_socket, cleanup_socket_path, prepare_socket_path
from agentctl.evidence import reducer
from agentctl.evidence.contract import (
    CONTRACT_VERSION,
    EndpointTestResult,
    HubSessionReport,
    HubStatus,
    StderrView,
    encode,
)
from agentctl.evidence.ledger import utcnow
from agentctl.upstream import protocol as P
from agentctl.upstream.hub_conn import Refused, HubConnection
from agentctl.upstream.hub_store import (
    ExecutionState,
    HubStore,
    SessionState,
    enforce_bounds,
    report_view,
    status_view,
)

log = logging.getLogger("agentctl.hub")

FLUSH_INTERVAL = 0.1
SWEEP_INTERVAL = 1.0
MAX_TOOL_SECONDS = 60.0


class HubRequestError(Exception):
    """A request to a daemon (stderr, endpoint test) could not be answered. `code` is a protocol error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Hub:
    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        db_path: str | os.PathLike[str],
        *,
        tasks_db: str | os.PathLike[str] | None = None,
        flush_interval: float = FLUSH_INTERVAL,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.db_path = Path(db_path)
        self.tasks_db = Path(tasks_db) if tasks_db else self.db_path.with_suffix(".tasks.sqlite3")
        self.flush_interval = flush_interval
        self._clock = clock
        self.sessions: dict[str, SessionState] = {}
        self.store: HubStore | None = None
        self.backend: EmbeddedBackend | None = None
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[HubConnection] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._dirty_sessions: set[str] = set()
        self._dirty_executions: dict[tuple[str, str], bool] = {}  # -> history changed
        self._order = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._listeners: list[Callable[[str], None]] = []
        self._flush_lock = asyncio.Lock()
        self._flush_failed = False
        # Counters, for `hub serve` logs and benches.
        self.frames_in = 0
        self.events_applied = 0
        self.protocol_errors = 0

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        self.store = HubStore(self.db_path)
        self.sessions = self.store.load()
        for session in self.sessions.values():
            for execution in session.executions.values():
                if execution.connected:  # nobody is connected to a hub that just started
                    execution.connected = False
                    self._mark(session, execution, history=False)
        self._order = self.store.max_hello_order()
        self.backend = EmbeddedBackend(
            self.tasks_db,
            agents_info={"agents": []},
            mcp_info=[],
            execution_info={},
        )
        prepare_socket_path(self.socket_path)
        sock = bind_unix_socket(self.socket_path)
        try:
            self._server = await asyncio.start_unix_server(self._handle, sock=sock, limit=P.STREAM_LIMIT)
        except BaseException:
            sock.close()
            cleanup_socket_path(self.socket_path)
            raise
        self._tasks = [
            asyncio.create_task(self._flush_loop(), name="agentctl-hub-flush"),
            asyncio.create_task(self._sweep_loop(), name="agentctl-hub-sweep"),
        ]
        log.info("hub serving %s (database %s, %d sessions)", self.socket_path, self.db_path, len(self.sessions))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for conn in list(self._conns):
                conn.writer.close()
            # Closing the writers ends every handler's read; wait for them so none is cancelled mid-frame.
            if self._handlers:
                await asyncio.wait(list(self._handlers), timeout=5.0)
            try:
                await asyncio.wait_for(self._server.wait_closed(), 5.0)
            except TimeoutError:
                pass
            self._server = None
            cleanup_socket_path(self.socket_path)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for conn in list(self._conns):
            for task in list(conn.tasks):
                task.cancel()
            self._closed(conn)
        if self.store is not None:
            await self.flush()
            self.store.close()
            self.store = None
        if self.backend is not None:
            self.backend.close()
            self.backend = None

    # -- queries (the CLI reads the database; an in-process UI calls these) ------------------------------

    def status(self) -> HubStatus:
        return status_view(self.sessions)

    def report(self, session_id: str, execution_id: str | None = None) -> HubSessionReport | None:
        session = self.sessions.get(session_id)
        return report_view(session, execution_id) if session is not None else None

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """`listener(session_id)` after every change to that session (called on the loop; must not block)."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[str], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    async def read_stderr(self, session_id: str, *, timeout: float = 10.0) -> StderrView:
        """Recent agent output of the session's current daemon, on demand. Never stored or logged here."""
        answer = await self._request(session_id, P.StderrReadFrame, timeout)
        return answer.view

    async def test_endpoint(self, session_id: str, server: str, *, timeout: float = 65.0) -> EndpointTestResult:
        """Ask the session's current daemon to test one stored server by name."""
        answer = await self._request(session_id, P.EndpointTestFrame, timeout, server=server)
        return answer.result

    async def _request(self, session_id: str, kind: type, timeout: float, **fields: Any) -> Any:
        conn = self._live_conn(session_id)
        if conn is None:
            raise HubRequestError("unavailable", "no daemon of that session's current execution is connected")
        request_id = "rq_" + secrets.token_hex(6)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        conn.pending[request_id] = future
        try:
            conn.send(P.encode_frame(P.frame(kind, id=request_id, **fields)))
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise HubRequestError("unavailable", f"the daemon did not answer within {timeout:g} s") from None
        finally:
            conn.pending.pop(request_id, None)

    def _live_conn(self, session_id: str) -> HubConnection | None:
        session = self.sessions.get(session_id)
        if session is None:
            return None
        for conn in self._conns:
            if conn.session is session and conn.snapshot_seen and not conn.stale:
                return conn
        return None

    # -- connections ---------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = HubConnection(reader, writer)
        self._conns.add(conn)
        current = asyncio.current_task()
        if current is not None:
            self._handlers.add(current)
            current.add_done_callback(self._handlers.discard)
        try:
            uid = peer_uid(writer.get_extra_info("socket"))
            if uid is None or uid not in (0, os.getuid(), os.geteuid()):
                self._refuse(conn, "forbidden_peer", "the hub serves only its own user and root")
                return
            while True:
                try:
                    raw = await P.read_frame_line(reader)
                    if raw is None:
                        return
                    conn.last_rx = time.monotonic()
                    self.frames_in += 1
                    self._dispatch(conn, P.decode_from_daemon(raw))
                except P.ProtocolError as exc:
                    self._refuse(conn, exc.code, str(exc))
                    return
                except Refused:
                    return
                except (ConnectionError, OSError):
                    return  # the daemon went away; it will reconnect and resend its snapshot
                except Exception as exc:  # a bug here must cost one connection, never the hub
                    log.error("frame from %s failed unexpectedly: %s", conn.label, type(exc).__name__)
                    self._refuse(conn, "internal", "the hub failed on this frame; its log has details")
                    return
        finally:
            self._closed(conn)

    def _refuse(self, conn: HubConnection, code: str, message: str) -> None:
        """The error frame, one log line, close this connection (the close flushes the frame). Nothing else is touched."""
        self.protocol_errors += 1
        conn.refused = True
        log.warning("closed connection from %s: %s", conn.label, code)
        transport = conn.writer.transport
        if not transport.is_closing():
            try:
                conn.writer.write(P.encode_frame(P.frame(P.ErrorFrame, code=code, message=message, fatal=True)))
            except (OSError, ConnectionError):
                pass
        conn.writer.close()

    def _closed(self, conn: HubConnection) -> None:
        if conn not in self._conns:
            return
        self._conns.discard(conn)
        for future in conn.pending.values():
            if not future.done():
                future.set_exception(HubRequestError("unavailable", "the daemon disconnected before answering"))
        conn.writer.close()
        session, execution = conn.session, conn.execution
        if session is not None and execution is not None and not conn.stale:
            if not any(c.execution is execution and not c.stale for c in self._conns):
                execution.connected = False
                self._mark(session, execution, history=False)
                if not conn.refused:  # a refusal already wrote its one line
                    log.info("session %s: execution %s disconnected", session.session_id, execution.execution_id)

    def _fatal(self, conn: HubConnection, code: str, message: str) -> None:
        self._refuse(conn, code, message)
        raise Refused

    def _dispatch(self, conn: HubConnection, received: Any) -> None:
        if isinstance(received, P.HelloFrame):
            self._hello(conn, received)
            return
        if conn.identity is None:
            self._fatal(conn, "expected_hello", "the first frame of a connection must be hello")
        if isinstance(received, P.HeartbeatFrame):
            conn.send(P.encode_frame(P.frame(P.HeartbeatFrame)))
            self._touch(conn)
        elif isinstance(received, (P.SnapshotFrame, P.EvidenceFrame, P.AgentFrame)):
            self._evidence(conn, received)
        elif isinstance(received, P.ToolCallFrame):
            if received.identity != conn.identity:
                self._fatal(conn, "identity_mismatch", "a tool call must carry the identity of the connection's hello")
            task = asyncio.ensure_future(self._tool_call(conn, received))
            conn.tasks.add(task)
            task.add_done_callback(conn.tasks.discard)
        elif isinstance(received, (P.StderrResultFrame, P.EndpointTestResultFrame)):
            future = conn.pending.get(received.id)
            if future is not None and not future.done():
                future.set_result(received)
        elif isinstance(received, P.ErrorFrame):
            future = conn.pending.get(received.id or "")
            if future is not None and not future.done():
                future.set_exception(HubRequestError(received.code, received.message))
            else:
                log.info("%s reported %s", conn.label, received.code)

    def _hello(self, conn: HubConnection, hello: P.HelloFrame) -> None:
        if conn.identity is not None:
            self._fatal(conn, "duplicate_hello", "hello was already received on this connection")
        if hello.contract_version != CONTRACT_VERSION:
            self._fatal(
                conn,
                "contract_mismatch",
                f"contract version {hello.contract_version}; this hub reads {CONTRACT_VERSION}",
            )
        ident = hello.identity
        now = self._clock()
        session = self.sessions.get(ident.session_id)
        execution = session.executions.get(ident.execution_id) if session else None
        if execution is None:
            self._order += 1
            execution = ExecutionState(
                identity=ident, daemon_version=hello.daemon_version, hello_order=self._order,
                first_hello_at=now, last_contact_at=now,
            )
            if session is None:
                session = SessionState(
                    session_id=ident.session_id, task_id=ident.task_id,
                    current_execution_id=ident.execution_id, last_contact_at=now,
                )
                self.sessions[ident.session_id] = session
            session.executions[ident.execution_id] = execution
            if session.current_execution_id != ident.execution_id:
                log.info("session %s: execution %s is now current", ident.session_id, ident.execution_id)
            session.current_execution_id = ident.execution_id  # the newest execution that said hello
        conn.identity, conn.session, conn.execution = ident, session, execution
        conn.idle_limit = 3 * max(hello.heartbeat_ms / 1000, 0.1)
        if ident.execution_id != session.current_execution_id:
            execution.rejected_frames += 1
            session.stale_rejected += 1
            self._mark(session, execution, history=False)
            conn.send(P.encode_frame(P.frame(
                P.ErrorFrame, code="stale_execution",
                message="a newer execution of this session said hello; this execution's frames are rejected",
            )))
            return
        # The current execution, possibly a new instance of it: its snapshot follows and replaces the history.
        execution.identity = ident
        execution.daemon_version = hello.daemon_version
        execution.connected = True
        log.info("session %s: execution %s connected (instance %s)", ident.session_id, ident.execution_id,
                 ident.instance_id)
        self._touch(conn)

    def _touch(self, conn: HubConnection) -> None:
        session, execution = conn.session, conn.execution
        if session is None or execution is None or conn.stale:
            return
        now = self._clock()
        execution.last_contact_at = now
        session.last_contact_at = now
        self._mark(session, execution, history=False)

    def _evidence(self, conn: HubConnection, received: Any) -> None:
        session, execution = conn.session, conn.execution
        assert session is not None and execution is not None and conn.identity is not None
        if conn.stale:
            execution.rejected_frames += 1
            session.stale_rejected += 1
            self._mark(session, execution, history=False)
            return
        if isinstance(received, P.SnapshotFrame):
            history = received.history
            if history.identity != conn.identity:
                self._fatal(conn, "identity_mismatch", "the snapshot is for another identity than the hello's")
            execution.history = enforce_bounds(history)
            conn.snapshot_seen = True
        elif not conn.snapshot_seen or execution.history is None:
            self._fatal(conn, "snapshot_required", "evidence and agent frames must follow a snapshot")
        elif isinstance(received, P.EvidenceFrame):
            event = received.event
            if event.task_id != conn.identity.task_id or event.session_id != conn.identity.session_id:
                self._fatal(conn, "identity_mismatch", "the event names another task or session than the hello's")
            if reducer.apply(execution.history, event) == "applied":
                self.events_applied += 1
        else:
            execution.history.agent = received.agent
        execution.connected = True
        self._touch(conn)
        self._mark(session, execution, history=True)

    async def _tool_call(self, conn: HubConnection, call: P.ToolCallFrame) -> None:
        def answer(ok: bool, result: dict[str, Any] | None = None, error: str | None = None) -> None:
            try:
                line = P.encode_frame(P.frame(P.ToolResultFrame, id=call.id, ok=ok, result=result, error=error))
            except P.ProtocolError:
                line = P.encode_frame(P.frame(
                    P.ToolResultFrame, id=call.id, ok=False,
                    error="the answer is too large for the upstream frame limit (1 MiB)",
                ))
            conn.send(line)

        if conn.stale:
            answer(False, error="a newer execution of this session is current; the tool did not run")
            return
        elapsed = (self._clock() - call.sent_at).total_seconds()
        remaining = min(call.deadline_ms / 1000 - max(elapsed, 0.0), MAX_TOOL_SECONDS)
        if remaining <= 0:
            answer(False, error="the call's deadline passed before the hub read it; the tool did not run")
            return
        assert self.backend is not None and conn.identity is not None
        async with conn.tool_slots:
            try:
                result = await self.backend.call(call.op, conn.identity, call.args, deadline=remaining)
            except BackendError as exc:
                answer(False, error=str(exc) or "the task backend refused the request")
                return
            except Exception as exc:
                # Type only: an exception's text may quote the tool's arguments.
                log.error("tool op %s failed unexpectedly: %s", call.op, type(exc).__name__)
                answer(False, error="the hub failed unexpectedly; its log has details")
                return
        answer(True, result=result)

    # -- persistence ---------------------------------------------------------------------------------

    def _mark(self, session: SessionState, execution: ExecutionState, *, history: bool) -> None:
        self._dirty_sessions.add(session.session_id)
        key = (session.session_id, execution.execution_id)
        self._dirty_executions[key] = self._dirty_executions.get(key, False) or history
        for listener in self._listeners:
            try:
                listener(session.session_id)
            except Exception:
                log.exception("hub listener failed")

    async def flush(self) -> None:
        """Write every dirty row in one transaction (from a worker thread)."""
        async with self._flush_lock:
            if self.store is None or not (self._dirty_sessions or self._dirty_executions):
                return
            sessions_dirty, self._dirty_sessions = self._dirty_sessions, set()
            executions_dirty, self._dirty_executions = self._dirty_executions, {}
            sessions = [HubStore.session_row(self.sessions[sid]) for sid in sessions_dirty if sid in self.sessions]
            rows = []
            for (sid, eid), with_history in executions_dirty.items():
                execution = self.sessions[sid].executions[eid]
                blob = encode(execution.history) if with_history and execution.history is not None else None
                rows.append(HubStore.execution_row(sid, execution, blob))
            try:
                await asyncio.to_thread(self.store.write, sessions, rows)
            except Exception as exc:
                if not self._flush_failed:
                    log.warning("hub database write failed (%s); retrying", type(exc).__name__)
                self._flush_failed = True
                self._dirty_sessions |= sessions_dirty
                for key, with_history in executions_dirty.items():
                    self._dirty_executions[key] = self._dirty_executions.get(key, False) or with_history
                return
            if self._flush_failed:
                log.info("hub database writes recovered")
                self._flush_failed = False

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval)
            await self.flush()

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL)
            now = time.monotonic()
            for conn in list(self._conns):
                if now - conn.last_rx > conn.idle_limit and not conn.writer.transport.is_closing():
                    self._refuse(conn, "idle_timeout", "nothing received for three heartbeats")


@asynccontextmanager
async def embedded_hub(
    directory: str | os.PathLike[str],
    *,
    db_path: str | os.PathLike[str] | None = None,
    tasks_db: str | os.PathLike[str] | None = None,
) -> AsyncIterator[str]:
    """An in-process hub for `agentctl run`: yields the socket path to put in `[upstream] socket`.

    `directory` must be private (0700) and short enough for an AF_UNIX path; the database defaults to
    `directory/hub.sqlite3`, the task store to the database's name with `.tasks.sqlite3`.
    """
    directory = Path(directory)
    hub = Hub(directory / "hub.sock", db_path or directory / "hub.sqlite3", tasks_db=tasks_db)
    await hub.start()
    try:
        yield str(hub.socket_path)
    finally:
        await hub.stop()
