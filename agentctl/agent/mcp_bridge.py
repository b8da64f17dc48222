"""The kandev stdio bridge (`agentctl mcp-bridge`): the built-in endpoint for an agent that speaks only stdio MCP.

An ACP agent that advertises neither http nor sse MCP (Auggie, pi-acp) can still spawn stdio servers. For
such an agent the built-in server is delivered as a stdio server whose command is this bridge: it reads
newline-delimited JSON-RPC from stdin and POSTs each message to the built-in endpoint (streamable HTTP, both
MCP eras) with the attempt's bearer token, and writes every answer (a JSON body, or each event of an SSE
stream) back as one line on stdout. Server-initiated messages reach the agent the same way: in answers'
SSE streams, and (legacy era) on the GET stream opened after `notifications/initialized`.

It relays only agentctl's own endpoint, never a third-party server. The URL and the token come from the
environment (`AGENTCTL_BRIDGE_URL`, `AGENTCTL_BRIDGE_TOKEN`), never from argv, so neither shows in `ps`;
the endpoint attributes every request to the attempt by that token, exactly as for an http delivery.
Lines are bounded (the ACP transport's reader); the bridge exits when stdin closes or its parent dies;
its diagnostics go to stderr and name no URL, token, header or payload.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import sys
from typing import Any

from agentctl.agent.delivery import BRIDGE_ENV_TOKEN as ENV_TOKEN
from agentctl.agent.delivery import BRIDGE_ENV_URL as ENV_URL
from agentctl.agent.transports import AgentStdioTransport
MAX_LINE_BYTES = 8 * 1024 * 1024
# JSON-RPC "internal error": the endpoint could not be reached or gave no JSON-RPC answer to a request.
BRIDGE_ERROR = -32603

_META_VERSION = "io.modelcontextprotocol/protocolVersion"
_NAME_BEARING = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def _say(text: str) -> None:
    """One diagnostic line on stderr: fixed wording plus counts or status codes, never values."""
    with contextlib.suppress(OSError):
        os.write(2, f"agentctl mcp-bridge: {text}\n".encode())


class Bridge:
    """One stdio <-> streamable-HTTP relay for one agent's connection to the built-in endpoint."""

    def __init__(self, url: str, token: str, stdio: AgentStdioTransport, session: Any) -> None:
        self._url = url
        self._auth = f"Bearer {token}"
        self._stdio = stdio
        self._http = session  # aiohttp.ClientSession
        self._session_id: str | None = None
        self._version: str | None = None  # the legacy era's negotiated version, sent on later requests
        self._inflight: dict[Any, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._get_stream: asyncio.Task[None] | None = None

    # -- stdin -> endpoint -----------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            message = await self._stdio.receive()
            if message is None:
                break
            if self._cancel_modern(message):
                continue
            if not ("method" in message and "id" in message):
                # Notifications and answers in order, each before what follows it (`initialized` before the
                # first request); the endpoint acknowledges them at once.
                await self._relay(message)
                continue
            task = asyncio.create_task(self._relay(message))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            mid = message["id"]
            self._inflight[mid] = task
            task.add_done_callback(functools.partial(self._settled, mid))
        if self._stdio.skipped_lines:
            _say(f"{self._stdio.skipped_lines} unreadable or oversized line(s) from the agent skipped")

    def _settled(self, mid: Any, _task: asyncio.Task[None]) -> None:
        self._inflight.pop(mid, None)

    def _cancel_modern(self, message: dict[str, Any]) -> bool:
        """The modern HTTP wire has no client notifications: a cancellation aborts the request's own POST."""
        if message.get("method") != "notifications/cancelled" or not _modern(self._version_of(message)):
            return False
        params = message.get("params")
        rid = params.get("requestId") if isinstance(params, dict) else None
        task = self._inflight.get(rid) if isinstance(rid, (str, int)) else None
        if task is not None:
            task.cancel()
        return True

    def _version_of(self, message: dict[str, Any]) -> str | None:
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        version = meta.get(_META_VERSION) if isinstance(meta, dict) else None
        return version if isinstance(version, str) else self._version

    def _headers(self, message: dict[str, Any]) -> dict[str, str]:
        headers = {
            "Authorization": self._auth,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        method = message.get("method")
        if method == "initialize":
            return headers  # the negotiation: no version yet, no session
        if self._session_id is not None:
            headers["Mcp-Session-Id"] = self._session_id
        version = self._version_of(message)
        if version is not None:
            headers["MCP-Protocol-Version"] = version
        if isinstance(method, str) and _modern(version):
            # The modern path checks these routing headers against the body.
            from mcp.shared.inbound import encode_header_value

            headers["Mcp-Method"] = method
            params = message.get("params")
            key = _NAME_BEARING.get(method)
            if key and isinstance(params, dict) and isinstance(params.get(key), str):
                headers["Mcp-Name"] = encode_header_value(params[key])
        return headers

    async def _relay(self, message: dict[str, Any]) -> None:
        import aiohttp

        is_request = "method" in message and "id" in message
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            async with self._http.post(self._url, data=body, headers=self._headers(message)) as resp:
                sid = resp.headers.get("Mcp-Session-Id")
                if sid:
                    self._session_id = sid
                answered = await self._answers(resp, message)
                if resp.status >= 400 and not answered:
                    _say(f"the built-in endpoint answered HTTP {resp.status}")
                    if is_request:
                        await self._error(message["id"], f"the built-in endpoint answered HTTP {resp.status}")
                    return
                if is_request and not answered:
                    # Never leave the agent waiting: an answer too large, cut off, or not JSON-RPC is an error.
                    await self._error(message["id"], "the built-in endpoint's answer was too large or cut off")
                    return
        except asyncio.CancelledError:
            raise
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            _say(f"the built-in endpoint is unreachable ({type(exc).__name__})")
            if is_request:
                await self._error(message["id"], "the built-in endpoint is unreachable")
            return
        except Exception as exc:  # noqa: BLE001 - whatever went wrong, the agent is answered, not left waiting
            _say(f"relaying a message failed ({type(exc).__name__})")
            if is_request:
                await self._error(message["id"], "the built-in endpoint's answer was too large or cut off")
            return
        if message.get("method") == "notifications/initialized" and self._session_id and self._get_stream is None:
            self._get_stream = asyncio.create_task(self._listen())

    async def _answers(self, resp: Any, sent: dict[str, Any]) -> bool:
        """Write every JSON-RPC message of the answer to stdout; True when one of them answers `sent` (a
        request), or, for anything else, when there was at least one."""
        ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
        count = 0
        if ctype == "text/event-stream":
            async for data in _sse_events(resp.content):
                count += await self._write(data, sent)
        elif ctype == "application/json":
            raw = await resp.content.read(MAX_LINE_BYTES + 1)
            if len(raw) <= MAX_LINE_BYTES:
                count += await self._write(raw, sent)
            else:
                _say("an answer larger than the line limit was dropped")
        return count > 0

    async def _write(self, data: bytes, sent: dict[str, Any]) -> int:
        """Each message in `data` to stdout; the count of those that answer `sent` (or of all, when `sent`
        is no request)."""
        try:
            value = json.loads(data)
        except (ValueError, RecursionError):
            return 0
        messages = value if isinstance(value, list) else [value]
        written = 0
        for message in messages:
            if not isinstance(message, dict):
                continue
            if sent.get("method") == "initialize" and "result" in message and message.get("id") == sent.get("id"):
                version = message["result"].get("protocolVersion") if isinstance(message["result"], dict) else None
                self._version = version if isinstance(version, str) else None
            try:
                await self._stdio.send(message)
            except (ConnectionError, OSError):
                return written
            is_answer = "method" not in message and message.get("id") == sent.get("id")
            if "id" not in sent or "method" not in sent or is_answer:
                written += 1
        return written

    async def _error(self, request_id: Any, text: str) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            await self._stdio.send({"jsonrpc": "2.0", "id": request_id,
                                    "error": {"code": BRIDGE_ERROR, "message": f"agentctl bridge: {text}"}})

    async def _listen(self) -> None:
        """The legacy era's GET stream: server-initiated requests and notifications outside any answer."""
        import aiohttp

        headers = {"Authorization": self._auth, "Accept": "text/event-stream"}
        if self._session_id:
            headers["Mcp-Session-Id"] = self._session_id
        if self._version:
            headers["MCP-Protocol-Version"] = self._version
        try:
            async with self._http.get(self._url, headers=headers) as resp:
                if resp.status != 200:
                    return  # the server offers no GET stream (405): answers' streams carry everything
                async for data in _sse_events(resp.content):
                    await self._write(data, {})
        except (aiohttp.ClientError, OSError, TimeoutError):
            return

    async def close(self) -> None:
        for task in [*self._tasks, *([self._get_stream] if self._get_stream else [])]:
            task.cancel()
        for task in [*self._tasks, *([self._get_stream] if self._get_stream else [])]:
            with contextlib.suppress(BaseException):
                await task
        if self._session_id is not None:
            headers = {"Authorization": self._auth, "Mcp-Session-Id": self._session_id}
            if self._version:
                headers["MCP-Protocol-Version"] = self._version
            with contextlib.suppress(Exception):
                async with self._http.delete(self._url, headers=headers):
                    pass


def _modern(version: str | None) -> bool:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return version in MODERN_PROTOCOL_VERSIONS


async def _sse_events(content: Any) -> Any:
    """The `data` of each SSE event (a `message` event, or one with no type), each bounded."""
    data: list[bytes] = []
    size = 0
    event = b"message"
    oversized = False
    while True:
        try:
            line = await content.readuntil(b"\n")
        except Exception:  # noqa: BLE001 - a line over the reader's limit (aiohttp's LineTooLong): stream dropped
            _say("an event larger than the line limit was dropped")
            return
        if not line:
            return
        line = line.rstrip(b"\r\n")
        if not line:
            if data and not oversized and event == b"message":
                yield b"\n".join(data)
            elif oversized:
                _say("an event larger than the line limit was dropped")
            data, size, event, oversized = [], 0, b"message", False
            continue
        field, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if field == b"data":
            size += len(value)
            if size > MAX_LINE_BYTES:
                oversized = True
                data.clear()
            elif not oversized:
                data.append(value)
        elif field == b"event":
            event = value


async def _watch_parent(parent: int) -> None:
    """Return when the process that spawned the bridge is gone (re-parented), even if stdin stays open."""
    while os.getppid() == parent:
        await asyncio.sleep(1.0)


async def _main(url: str, token: str) -> int:
    import aiohttp

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout.buffer)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    stdio = AgentStdioTransport(reader, writer, max_frame=MAX_LINE_BYTES)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    # read_bufsize: an SSE line may be as long as the line limit (aiohttp refuses lines over twice this).
    async with aiohttp.ClientSession(timeout=timeout, read_bufsize=MAX_LINE_BYTES // 2) as http:
        bridge = Bridge(url, token, stdio, http)
        runner = asyncio.create_task(bridge.run())
        parent = asyncio.create_task(_watch_parent(os.getppid()))
        await asyncio.wait({runner, parent}, return_when=asyncio.FIRST_COMPLETED)
        parent.cancel()
        if not runner.done():
            runner.cancel()
        with contextlib.suppress(BaseException):
            await runner
        await bridge.close()
    await stdio.close()
    return 0


def main(argv: list[str]) -> int:
    """`agentctl mcp-bridge`: takes no arguments; the URL and the token come from the environment."""
    url, token = os.environ.get(ENV_URL, ""), os.environ.get(ENV_TOKEN, "")
    # Out of the environment at once: nothing the bridge might start inherits the token.
    os.environ.pop(ENV_TOKEN, None)
    if argv or not url.startswith(("http://", "https://")) or not token:
        _say(f"started without its environment ({ENV_URL}, {ENV_TOKEN}); it is spawned by agentctl's delivery")
        return 2
    try:
        return asyncio.run(_main(url, token))
    except KeyboardInterrupt:
        return 130
