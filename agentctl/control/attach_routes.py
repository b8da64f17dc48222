"""`GET /v1/agent/terminal`: attach to the passthrough agent's terminal over the control socket, as a WebSocket.

Behind the same guard as every /v1/ route (the control socket only; the daemon's uid or root). Several viewers may
watch; one holds the keyboard (the first to come, or one that asks with `take`), and every viewer is told its role
when it connects and whenever the keyboard changes hands. No viewer slows the agent: one that falls behind skips
ahead to the screen's recent tail, one that stops reading is cut off. What the terminal shows passes through here only: never logged, never persisted.

Every per-viewer queue is bounded: output by MAX_VIEWER_BACKLOG (then the skip), messages to it by MAX_QUEUED_TEXT
(past it nothing more is read from that viewer until they drain, so a flood of bad requests costs the daemon that
much and the kernel's socket buffer, however long it goes on), keys by the terminal's MAX_PENDING_INPUT (past it the
writer is not read: back-pressure to its terminal). Keys are never dropped silently: a viewer is told how many bytes
of its keys were refused (`notice.undelivered`), and `detached` / `closed` say how many reached the agent in all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import msgspec
from aiohttp import web
from aiohttp.http import WSMsgType  # not from the package: its __init__ is deferred (sdk_imports)

from agentctl.agent.pty_host import KEYS_STALL, PtyHost, Viewer, WindowSize
from agentctl.control.attach_protocol import (
    TERMINAL_ROUTE,
    ClientMessage,
    Closed,
    Detach,
    Detached,
    Hello,
    Notice,
    Release,
    Resize,
    RoleChanged,
    ServerMessage,
    Take,
)
from agentctl.http_answers import error_response

log = logging.getLogger(__name__)

# Output queued for one viewer; past this it skips ahead to the screen's recent tail (the agent never waits on it).
MAX_VIEWER_BACKLOG = 1024 * 1024
# A viewer whose socket takes nothing for this long is cut off: it has stopped reading.
SEND_TIMEOUT = 5.0
MAX_FRAME = 64 * 1024  # a frame of keys or a control message
MAX_VIEWERS = 16
# Messages (JSON text) queued for one viewer; past this its requests are not read until they drain.
MAX_QUEUED_TEXT = 64 * 1024
# On `detach`: how long the viewer's keys may still take to reach an agent that reads slowly.
DETACH_DRAIN = 10.0
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ClientMessage)


class _SocketViewer(Viewer):
    """One WebSocket client: output and messages queued in order, written by one pump task."""

    def __init__(self, ws: web.WebSocketResponse, abort: Callable[[], None]) -> None:
        self.ws = ws
        self._abort = abort
        self.host: PtyHost | None = None
        self._queue: asyncio.Queue[bytes | str | None] = asyncio.Queue()
        self._backlog = 0
        self._queued_text = 0
        self._room = asyncio.Event()
        self._room.set()
        self.too_slow = False
        self.greeted = False  # role changes are told after the Hello, never before it
        self.ended = asyncio.Event()

    def output(self, data: bytes) -> None:
        if self.too_slow:
            return
        if self._backlog + len(data) > MAX_VIEWER_BACKLOG and self.host is not None:
            # Behind by more than the bound: what it has not been sent yet is dropped, and it gets the screen's
            # recent tail instead (which ends with `data`), so memory stays bounded and the viewer catches up.
            self._skip_to(self.host.replay())
            return
        self._backlog += len(data)
        self._queue.put_nowait(data)

    def _skip_to(self, tail: bytes) -> None:
        kept: list[bytes | str | None] = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if not isinstance(item, bytes):
                kept.append(item)  # its messages (and the end) are never dropped
        self._backlog = len(tail)
        self._queue_text(_encoder.encode(Notice(reason_code="output_skipped",
                                                message="output skipped: this viewer fell behind")).decode())
        self._queue.put_nowait(tail)
        for item in kept:
            self._queue.put_nowait(item)

    def send(self, message: ServerMessage) -> None:
        self._queue_text(_encoder.encode(message).decode())

    def _queue_text(self, text: str) -> None:
        self._queued_text += len(text)
        if self._queued_text > MAX_QUEUED_TEXT:
            self._room.clear()
        self._queue.put_nowait(text)

    async def wait_room(self) -> None:
        """Until the messages queued for this viewer are within their bound (or it has ended)."""
        await self._room.wait()

    def role_changed(self, holder: Viewer | None) -> None:
        if self.greeted:
            self.send(RoleChanged(role="writer" if holder is self else "reader", held=holder is not None))

    def closed(self) -> None:
        delivered = self.host.input_delivered(self) if self.host is not None else 0
        self.send(Closed(reason="the agent's terminal closed (the agent exited)", delivered=delivered))
        self._queue.put_nowait(None)

    async def pump(self) -> None:
        try:
            while (item := await self._queue.get()) is not None:
                if isinstance(item, bytes):
                    self._backlog = max(0, self._backlog - len(item))
                    await asyncio.wait_for(self.ws.send_bytes(item), SEND_TIMEOUT)
                else:
                    await asyncio.wait_for(self.ws.send_str(item), SEND_TIMEOUT)
                    self._queued_text -= len(item)
                    if self._queued_text <= MAX_QUEUED_TEXT:
                        self._room.set()
        except TimeoutError:
            # Its socket is full, so no goodbye would reach it: the connection is cut, the agent unaffected.
            self.too_slow = True
            log.info("cut off an agent terminal viewer that stopped reading")
            self._abort()
        except (ConnectionError, RuntimeError):
            pass  # the client went away
        finally:
            self.ended.set()
            self._room.set()
            with contextlib.suppress(Exception):
                await self.ws.close()


def _size_of(request: web.Request) -> WindowSize | None:
    try:
        return WindowSize(int(request.query["rows"]), int(request.query["cols"]))
    except (KeyError, ValueError):
        return None


def install_attach_routes(app: web.Application, on_terminal: Callable[[], bool],
                          current: Callable[[], PtyHost | None]) -> None:
    """The attach route, given only what it uses: whether the agent runs on a terminal, and the terminal it
    runs on now (None: not started on one)."""
    async def terminal(request: web.Request) -> web.StreamResponse:
        if not on_terminal():
            return error_response(409, "no_terminal",
                                  "the agent does not run on a terminal (a passthrough agent with [agent] terminal = true does)")
        host = current()
        if host is None or not host.open:
            return error_response(409, "terminal_closed", "the agent's terminal is closed (the agent is not running)")
        if host.viewers >= MAX_VIEWERS:
            return error_response(409, "too_many_viewers", f"the agent's terminal has {MAX_VIEWERS} viewers already")
        ws = web.WebSocketResponse(max_msg_size=MAX_FRAME, autoping=True)
        if not ws.can_prepare(request).ok:
            return error_response(400, "websocket_required", f"{TERMINAL_ROUTE} is a WebSocket: use `agentctl attach`")
        await ws.prepare(request)
        transport = request.transport
        viewer = _SocketViewer(ws, transport.abort if transport is not None else lambda: None)
        viewer.host = host
        host.attach(viewer)
        writer = host.claim(viewer, take=request.query.get("take") == "1")
        size = _size_of(request)
        if writer and size is not None:
            host.resize(viewer, size)
        viewer.send(Hello(role="writer" if writer else "reader", rows=host.size.rows, cols=host.size.cols,
                          viewers=host.viewers))
        viewer.greeted = True
        viewer.output(host.replay())
        pump = asyncio.create_task(viewer.pump(), name="terminal-viewer")
        try:
            await _read_client(ws, host, viewer)
        finally:
            host.detach(viewer)
            viewer._queue.put_nowait(None)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(pump, 2.0)
            pump.cancel()
        return ws

    app.router.add_get(TERMINAL_ROUTE, terminal, allow_head=False)


async def _read_client(ws: web.WebSocketResponse, host: PtyHost, viewer: _SocketViewer) -> None:
    told = ""  # the refusal of keys last explained to this viewer: the words once, the count of bytes each time
    while True:
        await viewer.wait_room()  # nothing more is read from a viewer that does not read what it is told
        if viewer.ended.is_set():
            return
        msg = await ws.receive()
        if viewer.ended.is_set():
            return
        if msg.type == WSMsgType.BINARY:
            # Waits while the agent has not read the keys before these: the viewer is not read meanwhile.
            if await host.type_keys(viewer, msg.data):
                told = ""
                continue
            if host.holder is viewer and host.input_stalled():
                code = "input_stalled"
                message = f"the agent has read none of its input for {KEYS_STALL:g} s: keys refused until it does"
            elif host.holder is viewer:
                continue  # taken by nobody: the terminal closed, and `closed` says what reached the agent
            else:
                code = "read_only"
                message = "read-only: another viewer holds the keyboard (attach with --take to take it)"
            viewer.send(Notice(reason_code=code, message=message if told != code else "", undelivered=len(msg.data)))
            told = code
        elif msg.type == WSMsgType.TEXT:
            try:
                request = _decoder.decode(msg.data)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                viewer.send(Notice(reason_code="bad_message", message=f"bad terminal message: {str(exc)[:200]}"))
                continue
            if isinstance(request, Resize):
                if not host.resize(viewer, WindowSize(request.rows, request.cols)):
                    viewer.send(Notice(reason_code="read_only", message="only the keyboard's holder resizes the terminal"))
            elif isinstance(request, Take):
                host.claim(viewer, take=True)
            elif isinstance(request, Release):
                host.release(viewer)
            elif isinstance(request, Detach):
                await host.wait_input_sent(viewer, DETACH_DRAIN)
                viewer.send(Detached(delivered=host.input_delivered(viewer)))
                return
        elif msg.type in (WSMsgType.ERROR, WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
            return
