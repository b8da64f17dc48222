"""A small ASGI 3 bridge: serves the MCP SDK's ASGI apps from aiohttp handlers in the daemon's runner.

Why a bridge, and why this one (measured here; bench/mcp_throughput.py compares it with uvicorn):
- The daemon has ONE aiohttp AppRunner and one loopback port for /mcp, /sse, /messages/, /livez and
  /readyz. uvicorn in the same event loop would need a second listener (or aiohttp proxying to it) and
  its own lifecycle and signal handling; the bridge keeps one listener, one shutdown order, one place
  that sees every request (for authorization and refusal counting).
- `aiohttp-asgi` 0.7.1 froze the loop here: its `receive()` never yields `http.disconnect`, so the
  SDK's disconnect watchers spin.
- This bridge measured at parity with uvicorn for tools/call (numbers in the closing note of
  bench/mcp_throughput.py's output), and is ~250 lines we own.

What it does, because the SDK depends on each point:
- The first `receive()` returns `http.request` even for GET and DELETE (empty body); a body is streamed
  in chunks with `more_body`, so the SDK's own 413 limit applies to chunked uploads too.
- Every later `receive()` blocks until the response is complete or the client is gone, then returns
  `http.disconnect` (sse_starlette and the SDK's modern path watch for it to end streams).
- A `send()` after the response is complete is dropped: `sse_app` sends a second response after its
  stream ends.
- A response without Content-Length (SSE) is prepared at `http.response.start`, so the client sees its
  headers before the first event, and each body message is written as it comes (never buffered); a
  response whose first body message is also its last goes out in one write with a Content-Length.
- The app runs in its own task, shielded from the aiohttp handler: a cancelled handler (client gone
  with `handler_cancellation`, or runner shutdown) turns into `http.disconnect` for the app instead of
  a CancelledError thrown into the SDK's anyio task groups.

Client-gone detection: aiohttp tells a handler nothing when the peer closes an idle response (unless
the runner cancels handlers). The bridge notices it three ways: a failed write, a cancelled handler, and
one shared ticker that checks the transport of every in-flight exchange (`tick` seconds, default 0.1 s,
and only while exchanges are open); the transport is gone within milliseconds of the peer's FIN
(measured). Exchanges that finish quickly never wait for the ticker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from aiohttp import web
from multidict import CIMultiDict

from agentctl.listener_guard import answered

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

READ_CHUNK: Final = 64 * 1024
# Hop-by-hop headers are aiohttp's business (keep-alive, chunking), never the app's.
_HOP_BY_HOP: Final = frozenset({"connection", "keep-alive", "transfer-encoding", "upgrade"})
_DISCONNECT: Final = {"type": "http.disconnect"}


def build_scope(request: web.BaseRequest, **extra: Any) -> dict[str, Any]:
    """The ASGI HTTP scope of an aiohttp request (path decoded, raw path and query string as bytes)."""
    transport = request.transport
    client: tuple[str, int] | None = None
    server: tuple[str, int | None] | None = None  # a Unix socket's server has no port
    if transport is not None:
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            client = (str(peer[0]), int(peer[1]))
        sock = transport.get_extra_info("sockname")
        if isinstance(sock, tuple) and len(sock) >= 2:
            server = (str(sock[0]), int(sock[1]))
        elif isinstance(sock, str):
            server = (sock, None)
    raw_path, _, query = request.raw_path.partition("?")
    version = request.version
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{version.major}.{version.minor}",
        "method": request.method,
        "scheme": "http",
        "path": request.path,
        "raw_path": raw_path.encode("utf-8", "surrogateescape"),
        "query_string": query.encode("utf-8", "surrogateescape"),
        "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.raw_headers],
        "client": client,
        "server": server,
        "state": {},
    }
    scope.update(extra)
    return scope


class _Exchange:
    """One request/response between aiohttp and the ASGI app."""

    __slots__ = (
        "request",
        "owner",
        "status",
        "_headers",
        "response",
        "complete",
        "gone",
        "_body_done",
        "_finished",
    )

    def __init__(self, request: web.BaseRequest, owner: str | None = None) -> None:
        self.request = request
        self.owner = owner
        self.status: int | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self.response: web.StreamResponse | None = None
        self.complete = False  # the final body was written
        self.gone = False  # the client went away (or the bridge is stopping)
        self._body_done = False
        self._finished = asyncio.Event()  # complete or gone: later receive() returns http.disconnect

    def client_gone(self) -> None:
        if not self.gone:
            self.gone = True
            self._finished.set()

    @property
    def in_flight(self) -> bool:
        """The request body was delivered and the response is not finished: watched by the ticker."""
        return self._body_done and not self._finished.is_set()

    def transport_lost(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    async def receive(self) -> Message:
        if not self._body_done:
            return await self._read_body()
        await self._finished.wait()
        return _DISCONNECT

    async def _read_body(self) -> Message:
        request = self.request
        if not request.body_exists:
            self._body_done = True
            return {"type": "http.request", "body": b"", "more_body": False}
        try:
            chunk = await request.content.read(READ_CHUNK)
        except (ConnectionError, asyncio.CancelledError, OSError):
            self._body_done = True
            self.client_gone()
            return _DISCONNECT
        except Exception:  # a payload error (bad chunked encoding, client reset): the request is over
            self._body_done = True
            self.client_gone()
            return _DISCONNECT
        more = bool(chunk) and not request.content.at_eof()
        if not more:
            self._body_done = True
        return {"type": "http.request", "body": chunk, "more_body": more}

    async def send(self, message: Message) -> None:
        if self.complete or self.gone:
            return  # after the response (sse_app sends a second one) or after the client left
        kind = message["type"]
        try:
            if kind == "http.response.start":
                if self.status is None:
                    self.status = int(message["status"])
                    self._headers = list(message.get("headers") or ())
                    if not any(name.lower() == b"content-length" for name, _ in self._headers):
                        # A stream (SSE): the client must see the headers now, not with the first event.
                        self.response = self._stream_response()
                        await self.response.prepare(self.request)
                return
            if kind != "http.response.body":
                return
            if self.status is None:
                raise RuntimeError("ASGI app sent a body before http.response.start")
            body = bytes(message.get("body") or b"")
            more = bool(message.get("more_body", False))
            response = self.response
            if response is None and not more:
                # The whole body at once: one write for headers and body.
                response = self.response = web.Response(
                    status=self.status, headers=self._response_headers(drop_length=True), body=body
                )
                await response.prepare(self.request)
                await response.write_eof()
            else:
                if response is None:
                    response = self.response = self._stream_response()
                    await response.prepare(self.request)
                if more:
                    if body:
                        await response.write(body)
                    return
                await response.write_eof(body)
            self.complete = True
            self._finished.set()
            # The app unwinds after this; the client's next request may arrive meanwhile, sent after this answer.
            answered(self.request.transport)
        except (ConnectionError, OSError):
            # aiohttp raises ClientConnectionResetError (a ConnectionResetError) on a closed transport.
            self.client_gone()

    def _response_headers(self, *, drop_length: bool = False) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict()
        for raw_name, raw_value in self._headers:
            name = raw_name.decode("latin-1")
            lname = name.lower()
            if lname in _HOP_BY_HOP or (drop_length and lname == "content-length"):
                continue
            headers.add(name, raw_value.decode("latin-1"))
        return headers

    def _stream_response(self) -> web.StreamResponse:
        assert self.status is not None
        return web.StreamResponse(status=self.status, headers=self._response_headers())


class AsgiBridge:
    """Runs ASGI apps for aiohttp requests; `stop()` ends every open exchange (SSE streams included)."""

    def __init__(self, *, tick: float = 0.1) -> None:
        self._tick = tick
        self._open: set[_Exchange] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._busy = asyncio.Event()  # set while exchanges are open: an idle daemon does not tick

    @property
    def open_exchanges(self) -> int:
        return len(self._open)

    def start(self) -> None:
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._watch(), name="agentctl-asgi-watch")

    async def _watch(self) -> None:
        while True:
            if not self._open:
                self._busy.clear()
                await self._busy.wait()
            await asyncio.sleep(self._tick)
            for exchange in [e for e in self._open if e.in_flight]:
                if exchange.transport_lost():
                    exchange.client_gone()

    def disconnect_all(self) -> None:
        """Tell every open exchange its client is gone: streams end, apps unwind."""
        for exchange in list(self._open):
            exchange.client_gone()

    def disconnect_owners_except(self, kept: set[str]) -> int:
        """End every open exchange whose owner (the attempt `serve` was given) is not in `kept`."""
        gone = [e for e in self._open if e.owner is not None and e.owner not in kept]
        for exchange in gone:
            exchange.client_gone()
        return len(gone)

    async def stop(self, timeout: float) -> None:
        """Disconnect every exchange, wait up to `timeout` for the apps to return, then cancel the rest."""
        self.disconnect_all()
        tasks = [t for t in self._tasks if not t.done()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=max(timeout, 0.0))
            for task in pending:
                task.cancel()
            if pending:
                log.warning("%d MCP exchange(s) did not end in time; cancelled", len(pending))
                await asyncio.wait(pending, timeout=1.0)
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None

    async def serve(
        self, request: web.BaseRequest, app: ASGIApp, scope: Scope, owner: str | None = None
    ) -> tuple[web.StreamResponse, int]:
        """Run `app` for `request` on behalf of `owner`; returns the (finished) aiohttp response and the status sent."""
        exchange = _Exchange(request, owner)
        self._open.add(exchange)
        self._busy.set()
        task = asyncio.get_running_loop().create_task(_run_app(app, scope, exchange))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            # Shielded: a cancelled handler must not throw CancelledError into the SDK's task groups.
            await asyncio.shield(task)
        except asyncio.CancelledError:
            exchange.client_gone()
            raise
        except Exception:
            # _run_app logs; the response below reflects what was (not) sent.
            pass
        finally:
            self._open.discard(exchange)
        return await _finish(exchange)


async def _run_app(app: ASGIApp, scope: Scope, exchange: _Exchange) -> None:
    try:
        await app(scope, exchange.receive, exchange.send)
    except Exception as exc:
        # Type only at WARNING: an exception's text can quote a request body.
        log.warning("MCP ASGI app raised %s", type(exc).__name__)
        log.debug("MCP ASGI app failure", exc_info=True)
        raise
    finally:
        # Whatever happened, nothing may wait on this exchange any more.
        exchange._finished.set()


async def _finish(exchange: _Exchange) -> tuple[web.StreamResponse, int]:
    response = exchange.response
    if response is None:
        if exchange.gone:
            # Nobody to answer; aiohttp discards the response on a closed transport. Status 0: not a refusal.
            return web.Response(status=500), 0
        status = exchange.status or 500
        if exchange.status is None:
            return web.Response(status=500, text="internal error\n"), 500
        # Status sent but never a body: an empty response with that status.
        return web.Response(status=status, headers=exchange._response_headers(drop_length=True)), status
    if not exchange.complete and not exchange.gone:
        with contextlib.suppress(ConnectionError, OSError):
            await response.write_eof()
    if exchange.gone and not exchange.complete:
        # The app stopped mid-stream: do not let aiohttp reuse a connection whose body was cut short.
        response.force_close()
    return response, response.status
