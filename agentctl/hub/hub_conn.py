"""One daemon's connection to the hub: who it said it is, where it stands (by the hub's rules), bounded sending,
requests to the daemon and their answers, running its tunnelled tool calls on the hub's task backend, and how
many such connections the hub takes."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from datetime import datetime
from typing import Any, TypeVar

from agentctl.backend.base import Backend, BackendError
from agentctl.unix_socket import peer_cred
from agentctl.evidence.contract.report import Identity
from agentctl.hub import rules
from agentctl.listener_guard import connection_caps, fd_limit
from agentctl.hub.state import ExecutionState, SessionState
from agentctl.upstream import protocol as P

log = logging.getLogger("agentctl.hub")

TOOL_CONCURRENCY = 16  # tool calls running at once per connection
MAX_WRITE_BUFFER = 8 * 1024 * 1024  # a daemon that stops reading its answers is disconnected past this
DEFAULT_HEARTBEAT_SECONDS = 10.0
# A hello's heartbeat_ms above this is taken as this: a peer that stays silent for three of these is closed
# whatever it asked for (the daemon's own heartbeat is 10 s).
MAX_HEARTBEAT_SECONDS = 30.0
# Connections when the descriptor limit allows (connection_caps shrinks them under a low one): daemons on
# the socket, browsers on the page. A daemon says hello and sends its snapshot as it connects; a connection
# that has not sent a snapshot within HELLO_TIMEOUT seconds of connecting is closed, and at the cap a
# newcomer takes the place of the oldest such connection (one that never said hello first).
DAEMON_CONNECTIONS = 4096
PAGE_CONNECTIONS = 128
HELLO_TIMEOUT = 10.0


def listener_caps() -> dict[str, int]:
    """The hub's connection caps (its daemon socket and its page) under this process's descriptor limit."""
    return connection_caps(fd_limit(), {"hub": DAEMON_CONNECTIONS, "page": PAGE_CONNECTIONS})


def notice_line(notice: rules.Notice) -> bytes:
    """The error frame a connection is told `notice` with."""
    return P.encode_frame(P.frame(P.ErrorFrame, code=notice.code, message=notice.message, fatal=notice.fatal))


# The frame a request is answered with (HubConnection.ask).
_Reply = TypeVar("_Reply")


class HubRequestError(Exception):
    """A request to a daemon (stderr, endpoint test) could not be answered. `code` is a protocol error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Refused(Exception):
    """This connection was refused with a fatal error frame."""


class HubConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.identity: Identity | None = None
        self.session: SessionState | None = None
        self.execution: ExecutionState | None = None
        self.snapshot_seen = False
        self.refused = False
        self.idle_limit = 3 * DEFAULT_HEARTBEAT_SECONDS
        self.last_rx = time.monotonic()
        self.pending: dict[str, asyncio.Future[Any]] = {}
        self.tool_slots = asyncio.Semaphore(TOOL_CONCURRENCY)
        self.tasks: set[asyncio.Task[Any]] = set()
        cred = peer_cred(writer.get_extra_info("socket"))
        self.peer_pid: int | None = cred[0] if cred is not None else None
        self.peer_uid: int | None = cred[1] if cred is not None else None

    def heard_hello(self, heartbeat_ms: int) -> None:
        """Silence for three heartbeats closes the connection; the hub, not the peer, bounds the heartbeat."""
        self.idle_limit = 3 * min(max(heartbeat_ms / 1000, 0.1), MAX_HEARTBEAT_SECONDS)

    @property
    def label(self) -> str:
        if self.identity is not None:
            return f"session {self.identity.session_id} execution {self.identity.execution_id}"
        return f"unidentified peer (pid {self.peer_pid})" if self.peer_pid else "unidentified peer"

    @property
    def standing(self) -> rules.Standing | None:
        """Whether this connection's frames are taken now; None before its hello."""
        if self.identity is None or self.session is None:
            return None
        return rules.standing(self.session, self.identity)

    @property
    def stale(self) -> bool:
        standing = self.standing
        return standing is not None and standing != "current"

    @property
    def on_terminal(self) -> bool:
        """The daemon's agent runs on a terminal (only such a daemon knows `terminal_read`)."""
        history = self.execution.history if self.execution is not None else None
        return bool(history and history.agent and history.agent.terminal)

    def send(self, line: bytes) -> None:
        transport = self.writer.transport
        if transport.is_closing():
            return
        if transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
            log.warning("closed connection from %s: it stopped reading its answers", self.label)
            transport.abort()
            return
        self.writer.write(line)

    async def ask(self, kind: type[Any], reply: type[_Reply], timeout: float, **fields: Any) -> _Reply:
        """Send this daemon one request frame and wait (at most `timeout`) for the answer with its id, which must
        be a `reply` frame: a daemon answering with another kind of result is refused, not passed on."""
        request_id = "rq_" + secrets.token_hex(6)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        try:
            self.send(P.encode_frame(P.frame(kind, id=request_id, **fields)))
            answer = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise HubRequestError("unavailable", f"the daemon did not answer within {timeout:g} s") from None
        finally:
            self.pending.pop(request_id, None)
        if not isinstance(answer, reply):
            raise HubRequestError("unavailable", "the daemon answered with another kind of frame")
        return answer

    async def run_tool_call(self, call: P.ToolCallFrame, backend: Backend | None, now: datetime) -> None:
        """Run one tool call on `backend` (received at `now`) and send its tool_result."""

        def answer(ok: bool, result: dict[str, Any] | None = None, error: str | None = None) -> None:
            try:
                line = P.encode_frame(P.frame(P.ToolResultFrame, id=call.id, ok=ok, result=result, error=error))
            except P.ProtocolError:
                line = P.encode_frame(P.frame(
                    P.ToolResultFrame, id=call.id, ok=False,
                    error="the answer is too large for the upstream frame limit (1 MiB)",
                ))
            self.send(line)

        standing = self.standing
        assert self.identity is not None and standing is not None, "a tool call is admitted only after hello"
        remaining = rules.tool_call_budget(standing, call, now)
        if isinstance(remaining, rules.ToolRefused):
            answer(False, error=remaining.error)
            return
        if backend is None:  # the hub is stopping
            answer(False, error="the hub is stopping; the tool did not run")
            return
        async with self.tool_slots:
            try:
                result = await backend.call(call.op, self.identity, call.args, deadline=remaining)
            except BackendError as exc:
                answer(False, error=str(exc) or "the task backend refused the request")
                return
            except Exception as exc:
                # Type only: an exception's text may quote the tool's arguments.
                log.error("tool op %s failed unexpectedly: %s", call.op, type(exc).__name__)
                answer(False, error="the hub failed unexpectedly; its log has details")
                return
        answer(True, result=result)
