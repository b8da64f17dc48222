"""Bounds on every listener (the daemon's MCP port and control socket, the hub's daemon socket and page): a cap
on open connections, a first-request deadline, file-descriptor headroom, failed accepts as one line per interval.

Opening a connection needs no credential, so whoever can reach a listener can hold connections open. Each
listener is served through a `ListenerGuard`, which wraps the server's protocol factory (asyncio's
`loop.create_server` takes any factory; aiohttp's `web.Server` is one) and tracks every connection:

- A connection is *idle* until a complete request head has been parsed and a handler runs (aiohttp), or until
  it is `hold`-en (the hub's daemon socket, once a daemon's snapshot arrived), and again once a request's
  response has been written. In between it is *busy*. Idle for `head_timeout` seconds, it is closed however
  many bytes it dribbled (slowloris). A busy one (an SSE stream, a long tool call, a daemon's link) is not.
- It is *stalled* while its transport has paused writing: an answer waits in `drain()` for a reader that takes
  nothing. Stalled for `write_timeout` seconds it is closed (None: never, for the control socket, whose own
  user may pause a terminal on purpose; a held link neither: the hub bounds it by its buffer). A TCP
  connection's kernel send buffer is fixed (`SEND_BUFFER`): loopback autotuning let a non-reader park
  megabytes in the kernel without ever stalling. Past `PIPELINE_DEPTH` requests in a row whose bytes arrived
  before the previous answer was written (when its handler ended, or earlier: `answered`, as an ASGI app's
  handler outlives its answer), the connection is closed.
- At the cap, a newcomer takes the place of the connection stalled longest, else of the oldest idle one
  (those accepted under `grace` seconds ago with no request yet last, the ones whose request is arriving
  last of all: a probe accepted before a burst keeps its place): that is the probes' and token holders'
  headroom. A connection that carried a credential-holder's request (`trust`) goes only when no other idle
  or stalled one is left. Only when every connection is busy and being read is the newcomer refused (HTTP
  listeners answer 503 first), and that takes real requests whose answers are really read.
- The caps come from the process's RLIMIT_NOFILE less a reserve (`connection_caps`): the agent's pipes, the
  stores, the upstream link, endpoint tests, and connections accepted before the ones they displace close.
- asyncio logs a failed accept() (EMFILE) with a traceback, once per pending connection per loop iteration.
  `AcceptErrorLog` turns that into one line per interval with a count.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import resource
import socket
import struct
import termios
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from aiohttp import web
from aiohttp.typedefs import Handler

log = logging.getLogger("agentctl.listener")

HEAD_TIMEOUT: Final = 10.0
# How long an answer may wait for a reader that takes nothing (the transport's writing stays paused).
WRITE_TIMEOUT: Final = 10.0
# A connection accepted less than this ago that has not sent a whole request yet is displaced last: a probe's
# request may still be arriving while a burst of newcomers is accepted.
GRACE: Final = 1.0
# A TCP connection's kernel send buffer (doubled by the kernel): loopback needs no more, a non-reader gets no more.
SEND_BUFFER: Final = 128 * 1024
# Requests in a row that arrived before the previous answer was written: one more closes the connection.
PIPELINE_DEPTH: Final = 4
LOG_INTERVAL: Final = 10.0
# Descriptors kept out of every connection cap: one loop iteration accepts up to a listener's backlog (128)
# before the connections it displaced are closed, plus what the process itself holds open.
RESERVED_FDS: Final = 256
MIN_CAP: Final = 8
# Looked at from the oldest idle connection on: one whose response is still being written is passed over.
_EVICTION_SCAN: Final = 32
HTTP_REFUSAL: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 44\r\n"
    b"Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections in use; retry shortly\r\n"
)

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


def fd_limit() -> int:
    """The soft RLIMIT_NOFILE of this process (what accept() runs into)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_caps(nofile: int, wanted: Mapping[str, int], reserve: int = RESERVED_FDS) -> dict[str, int]:
    """Each listener's cap: as wanted when they all fit under `nofile - reserve`, else shrunk in proportion
    (never below MIN_CAP)."""
    room = max(0, nofile - reserve)
    total = sum(wanted.values())
    if total <= room:
        return dict(wanted)
    return {name: max(MIN_CAP, want * room // total) for name, want in wanted.items()}


class RateLimitedLog:
    """At most one line per key per `interval`: the first at once, the rest of the window as one count.
    `render` is called when the line is written, so the text it returns can say how things stand then."""

    def __init__(self, logger: logging.Logger, interval: float = LOG_INTERVAL, level: int = logging.WARNING) -> None:
        self._log = logger
        self._interval = interval
        self._level = level
        self._last: dict[str, float] = {}
        self._pending: dict[str, tuple[int, Callable[[], str]]] = {}

    def note(self, key: str, render: Callable[[], str]) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is None or now - last >= self._interval:
            self._last[key] = now
            self._log.log(self._level, "%s", render())
            return
        count, _ = self._pending.get(key, (0, render))
        self._pending[key] = (count + 1, render)
        if count == 0:
            asyncio.get_running_loop().call_later(self._interval - (now - last), self._flush, key)

    def _flush(self, key: str) -> None:
        count, render = self._pending.pop(key, (0, str))
        if count:
            self._last[key] = time.monotonic()
            self._log.log(self._level, "%s (%d more times in the last %g s)", render(), count, self._interval)


_PRESSURE_LOG = RateLimitedLog(log)


class GuardedProtocol(asyncio.Protocol):
    """One connection of a guarded listener: admitted (or refused) when it is made, then the real protocol."""

    def __init__(self, guard: ListenerGuard, factory: ProtocolFactory) -> None:
        self._guard = guard
        self._factory = factory
        self._inner: Any = None
        self.transport: asyncio.Transport | None = None
        self._busy = 0
        self._timer: asyncio.TimerHandle | None = None
        self._stall_timer: asyncio.TimerHandle | None = None
        self._chunks = 0  # data_received calls so far
        self._answered_at = -1  # the value of _chunks when the last answer was written (-1: not yet written)
        self._pipelined = 0  # requests in a row that arrived before the previous answer was written
        self.closed = False
        self.trusted = False
        self.held = False
        self.fresh = True  # no request yet
        self.reset = False
        self.idle_since = 0.0

    # ---- what the guard and the servers call -------------------------------------------------------

    def request_started(self) -> bool:
        """A complete request head: the connection is busy and no longer timed. False (and the connection is
        closed) when the request is one pipelined request too many."""
        if self.closed:
            return True
        # No byte arrived since the previous answer was written: this request was sent before reading it.
        self._pipelined = self._pipelined + 1 if self._chunks == self._answered_at else 0
        if self._pipelined > PIPELINE_DEPTH:
            self._guard._too_deep(self)
            return False
        self.fresh = False
        self._answered_at = -1
        self._busy += 1
        if self._busy == 1:
            self._guard._not_idle(self)
        return True

    def request_finished(self) -> None:
        """The request's response is written: idle again, so timed and displaceable."""
        if self.closed or self._busy == 0:
            return
        self._busy -= 1
        self.answered()
        if self._busy == 0:
            self._guard._became_idle(self)

    def answered(self) -> None:
        """The current request's answer is written, though its handler may still run (an ASGI app unwinds)."""
        if self._answered_at < 0:
            self._answered_at = self._chunks

    def hold(self) -> None:
        """Busy for good (the hub's daemon link): neither timed nor displaced, nor closed for a stall."""
        if self.closed or self.held:
            return
        self.held = self.trusted = True
        self._guard._unstalled(self)
        self._busy += 1
        if self._busy == 1:
            self._guard._not_idle(self)

    def trust(self) -> None:
        """A credential holder's (or a hello's) connection: displaced after every other idle or stalled one."""
        if not self.trusted and not self.closed:
            self.trusted = True
            self._guard._trusted(self)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _close_now(self) -> None:
        # abort(), not close(): close() would wait for a reader that never reads. And a reset: else the kernel
        # keeps the unsent answer (and the connection, orphaned) until it gives up on the peer's window.
        transport = self.transport
        if transport is not None and not self.reset:
            self.reset = True  # also after a close() that still waits to flush (the pipelining bound's)
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()

    # ---- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport), "a listening socket's connections are stream transports"
        self.transport = transport
        if not self._guard._admit(self):
            self.closed = True
            if self._guard.refusal:
                transport.write(self._guard.refusal)
            transport.close()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # A fixed send buffer: the kernel's autotuning grows it to megabytes for a peer that reads nothing.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        self._inner = self._factory()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._chunks += 1
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self._cancel_timer()
            self._guard._release(self)
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if not self.closed and not self.held:
            self._guard._stalled_now(self)
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._guard._unstalled(self)
        if self._inner is not None:
            self._inner.resume_writing()


class ListenerGuard:
    """The connections of one listener: at most `limit`, idle ones closed after `head_timeout` seconds and
    stalled ones after `write_timeout`, the longest stalled (else the oldest idle) one displaced by a newcomer
    at the cap; `refusal` is written to a refused newcomer."""

    def __init__(self, name: str, limit: int, *, head_timeout: float = HEAD_TIMEOUT,
                 write_timeout: float | None = WRITE_TIMEOUT, grace: float = GRACE, refusal: bytes = b"") -> None:
        if limit < 1:
            raise ValueError("a listener's connection cap must be at least 1")
        self.name = name
        self.limit = limit
        self.head_timeout = head_timeout
        self.write_timeout = write_timeout
        self.grace = grace
        self.refusal = refusal
        self._open: set[GuardedProtocol] = set()
        # Idle connections in the order they became idle (the oldest first); trusted ones apart.
        self._idle: dict[GuardedProtocol, None] = {}
        self._idle_trusted: dict[GuardedProtocol, None] = {}
        # Connections whose answer waits for a reader, in the order they stalled; trusted ones apart.
        self._stalled: dict[GuardedProtocol, None] = {}
        self._stalled_trusted: dict[GuardedProtocol, None] = {}
        self.counts = {"accepted": 0, "displaced": 0, "refused": 0, "timed_out": 0, "stalled_out": 0,
                       "pipelining": 0}

    def wrap(self, factory: ProtocolFactory) -> Callable[[], GuardedProtocol]:
        """The protocol factory to hand to `loop.create_server` / `create_unix_server`."""
        return lambda: GuardedProtocol(self, factory)

    @property
    def open_connections(self) -> int:
        return len(self._open)

    @property
    def idle_connections(self) -> int:
        return len(self._idle) + len(self._idle_trusted)

    @property
    def stalled_connections(self) -> int:
        return len(self._stalled) + len(self._stalled_trusted)

    def _admit(self, conn: GuardedProtocol) -> bool:
        if len(self._open) >= self.limit:
            victim = self._victim()
            if victim is None:
                self.counts["refused"] += 1
                self._pressure()
                return False
            self.counts["displaced"] += 1
            self._forget(victim)
            victim._close_now()
            self._pressure()
        self.counts["accepted"] += 1
        self._open.add(conn)
        self._became_idle(conn)
        return True

    def _victim(self) -> GuardedProtocol | None:
        """The connection stalled longest, else the oldest idle one; anyone's before a credential holder's.

        Stalled before idle: a stalled connection's client is not reading, while an idle one may be a probe
        accepted a moment ago whose request is on its way (a burst of newcomers would displace it first)."""
        for stalled, idle in ((self._stalled, self._idle), (self._stalled_trusted, self._idle_trusted)):
            victim = next(iter(stalled), None) or self._oldest_idle(idle)
            if victim is not None:
                return victim
        return None

    def _oldest_idle(self, idle: dict[GuardedProtocol, None]) -> GuardedProtocol | None:
        """The oldest idle connection whose response is written (else the oldest idle one). Those accepted within
        the grace that have sent no request yet come after: the oldest that sent nothing at all, then the newest
        whose request is arriving (a probe accepted before a burst of newcomers keeps its place)."""
        first = silent = None
        settled = time.monotonic() - self.grace
        for n, conn in enumerate(idle):
            if n > _EVICTION_SCAN:
                break
            if conn.fresh and conn.idle_since > settled:
                silent = silent or (None if conn._chunks or _unread(conn) else conn)
                continue
            transport = conn.transport
            if transport is None or not transport.get_write_buffer_size():
                return conn
            first = first or conn
        return first or silent or next(reversed(idle), None)

    def _became_idle(self, conn: GuardedProtocol) -> None:
        (self._idle_trusted if conn.trusted else self._idle)[conn] = None
        conn.idle_since = time.monotonic()
        conn._cancel_timer()
        conn._timer = asyncio.get_running_loop().call_later(self.head_timeout, self._expire, conn)

    def _not_idle(self, conn: GuardedProtocol) -> None:
        conn._cancel_timer()
        self._idle.pop(conn, None)
        self._idle_trusted.pop(conn, None)

    def _trusted(self, conn: GuardedProtocol) -> None:
        """Move a connection that just became trusted among the trusted ones (the newest of them)."""
        for plain, trusted in ((self._idle, self._idle_trusted), (self._stalled, self._stalled_trusted)):
            if plain.pop(conn, 0) is None:
                trusted[conn] = None

    def _stalled_now(self, conn: GuardedProtocol) -> None:
        if conn not in self._stalled and conn not in self._stalled_trusted:
            (self._stalled_trusted if conn.trusted else self._stalled)[conn] = None
            if self.write_timeout is not None:
                conn._stall_timer = asyncio.get_running_loop().call_later(self.write_timeout, self._stall_expired, conn)

    def _unstalled(self, conn: GuardedProtocol) -> None:
        if conn._stall_timer is not None:
            conn._stall_timer.cancel()
            conn._stall_timer = None
        self._stalled.pop(conn, None)
        self._stalled_trusted.pop(conn, None)

    def _expire(self, conn: GuardedProtocol) -> None:
        conn._timer = None
        if conn in self._idle or conn in self._idle_trusted:
            self._end(conn, "timed_out")

    def _stall_expired(self, conn: GuardedProtocol) -> None:
        conn._stall_timer = None
        if conn in self._stalled or conn in self._stalled_trusted:
            self._end(conn, "stalled_out")

    def _too_deep(self, conn: GuardedProtocol) -> None:
        """Closed after the answers already written reach the peer; reset if they have not within
        `write_timeout`. Until then the connection counts against the cap (and may be displaced)."""
        self.counts["pipelining"] += 1
        if conn.transport is not None:
            conn.transport.close()
            asyncio.get_running_loop().call_later(self.write_timeout or HEAD_TIMEOUT, conn._close_now)

    def _end(self, conn: GuardedProtocol, why: str) -> None:
        self.counts[why] += 1
        self._forget(conn)
        conn._close_now()

    def _forget(self, conn: GuardedProtocol) -> None:
        conn.closed = True
        self._release(conn)

    def _release(self, conn: GuardedProtocol) -> None:
        self._not_idle(conn)
        self._unstalled(conn)
        self._open.discard(conn)

    def _pressure(self) -> None:
        _PRESSURE_LOG.note(f"full:{self.name}", self._pressure_line)

    def _pressure_line(self) -> str:
        counts = self.counts
        return (f"{self.name} listener is at its cap of {self.limit} connections: newcomers take the place of the "
                f"oldest idle or unread connection, or are refused when none is ({counts['displaced']} displaced, "
                f"{counts['refused']} refused, {counts['stalled_out']} closed unread since start)")


def _unread(conn: GuardedProtocol) -> bool:
    """Bytes have arrived on the connection that the loop has not read yet (FIONREAD)."""
    sock = conn.transport.get_extra_info("socket") if conn.transport is not None else None
    with contextlib.suppress(OSError):
        return sock is not None and struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0] > 0
    return False


def _guarded(transport: asyncio.BaseTransport | None) -> GuardedProtocol | None:
    protocol = transport.get_protocol() if transport is not None else None
    return protocol if isinstance(protocol, GuardedProtocol) else None


def hold(transport: asyncio.BaseTransport | None) -> None:
    """Mark a guarded connection busy for good (the hub's daemon link, once a daemon's snapshot arrived)."""
    if (protocol := _guarded(transport)) is not None:
        protocol.hold()


def answered(transport: asyncio.BaseTransport | None) -> None:
    """The connection's request has its whole answer written: a request arriving from now on is not pipelined."""
    if (protocol := _guarded(transport)) is not None:
        protocol.answered()


def trust(transport: asyncio.BaseTransport | None) -> None:
    """The connection carried a request with a valid credential (or a hello): displace it only after every other
    idle or stalled one."""
    if (protocol := _guarded(transport)) is not None:
        protocol.trust()


@web.middleware
async def track_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp middleware (the outermost): a request's connection is busy until its response is written.
    The handler runs in the task aiohttp made for this request, which ends once the response is written (an
    ASGI app's may run on: `answered`); its done-callback marks the connection idle again."""
    protocol = _guarded(request.transport)
    if protocol is not None:
        if not protocol.request_started():
            # Closed already: one pipelined request too many. Nothing is written to a reader that does not read.
            return web.Response(status=503, text="too many pipelined requests")
        task = asyncio.current_task()
        assert task is not None, "aiohttp runs every handler in a task"
        task.add_done_callback(lambda _: protocol.request_finished())
    return await handler(request)


class GuardedSite(web.BaseSite):
    """An aiohttp site served through a ListenerGuard: a pre-bound socket (`sock`, TCP or Unix) or a loopback
    `host` and `port` to bind.

    aiohttp's own sites hand the runner's protocol factory straight to the loop; this one hands it over wrapped
    by the guard. Only public API is used: BaseSite's constructor, start() and stop() (which register the site
    with its runner, so `runner.cleanup()` stops it before it shuts the server down), `runner.server` (a
    protocol factory for the loop's create_server, as aiohttp documents it) and the loop's own servers. The
    listening server is this site's own, so aiohttp's `runner.addresses` (which reads its own sites' servers)
    does not list it: the bound addresses are `addresses`."""

    __slots__ = ("_guard", "_owner", "_sock", "_host", "_port", "_listen_backlog", "_listener")

    def __init__(
        self,
        runner: web.BaseRunner,
        guard: ListenerGuard,
        *,
        sock: socket.socket | None = None,
        host: str | None = None,
        port: int = 0,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._guard = guard
        self._owner = runner
        self._sock = sock
        self._host = host
        self._port = port
        self._listen_backlog = backlog
        self._listener: asyncio.Server | None = None

    @property
    def name(self) -> str:
        return f"{self._guard.name} listener"

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._listener.sockets) if self._listener is not None else ()

    @property
    def addresses(self) -> list[Any]:
        """What each listening socket is bound to (`socket.getsockname()`), as `BaseRunner.addresses` gives it."""
        return [sock.getsockname() for sock in self.sockets]

    async def start(self) -> None:
        await super().start()
        server = self._owner.server
        if server is None:  # pragma: no cover - BaseSite refuses a runner that is not set up
            raise RuntimeError("the runner is not set up")
        loop = asyncio.get_running_loop()
        factory = self._guard.wrap(server)
        backlog = self._listen_backlog
        if self._sock is not None and self._sock.family == socket.AF_UNIX:
            listener = await loop.create_unix_server(factory, sock=self._sock, backlog=backlog)
        elif self._sock is not None:
            listener = await loop.create_server(factory, sock=self._sock, backlog=backlog)
        else:
            listener = await loop.create_server(factory, self._host, self._port, backlog=backlog, reuse_address=True)
        self._listener = listener
        name_listener(listener, self._guard.name)

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            forget_listener(listener)
            listener.close()
        await super().stop()


# ---- failed accepts ------------------------------------------------------------------------------------------

_ACCEPT_MESSAGE: Final = "socket.accept() out of system resource"
_listener_names: dict[int, str] = {}


def name_listener(server: asyncio.Server, name: str) -> None:
    """Name a server's listening sockets in the accept-error line."""
    for sock in server.sockets or ():
        _listener_names[sock.fileno()] = name


def forget_listener(server: asyncio.Server) -> None:
    for sock in server.sockets or ():
        _listener_names.pop(sock.fileno(), None)


class AcceptErrorLog:
    """The loop's exception handler while installed: a failed accept() (out of descriptors or memory)
    becomes one line per listener per interval with a count; anything else goes to the previous handler."""

    def __init__(self, previous: Any, interval: float = LOG_INTERVAL) -> None:
        self.previous = previous
        self.users = 0
        self.failures = 0
        self._log = RateLimitedLog(log, interval, logging.ERROR)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != _ACCEPT_MESSAGE:
            if self.previous is not None:
                self.previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        self.failures += 1
        exc = context.get("exception")
        code = errno.errorcode.get(getattr(exc, "errno", None) or 0, type(exc).__name__)
        sock = context.get("socket")
        try:
            name = _listener_names.get(sock.fileno(), "a") if sock is not None else "a"
        except Exception:
            name = "a"
        self._log.note(f"accept:{name}", lambda: f"{name} listener cannot accept connections ({code}): the process "
                                                 "is out of file descriptors or memory; newcomers wait in the backlog")


def install_accept_error_log(loop: asyncio.AbstractEventLoop | None = None) -> Callable[[], None]:
    """Install (or share) the loop's AcceptErrorLog; returns the call that uninstalls it."""
    loop = loop or asyncio.get_running_loop()
    handler = loop.get_exception_handler()
    if not isinstance(handler, AcceptErrorLog):
        handler = AcceptErrorLog(handler)
        loop.set_exception_handler(handler)
    handler.users += 1
    done = False

    def uninstall() -> None:
        nonlocal done
        if done:
            return
        done = True
        handler.users -= 1
        if handler.users == 0 and loop.get_exception_handler() is handler:
            loop.set_exception_handler(handler.previous)

    return uninstall
