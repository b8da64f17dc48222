"""The probe's sentinel MCP server: one harmless tool, observed through SDK middleware, on loopback.

Three ways the agent can reach it, matching what ACP lets a client deliver:
- `HttpSentinel`: streamable HTTP on `/mcp` (both eras, the SDK picks per request) and legacy HTTP+SSE
  on `/sse` + `/messages/`, one aiohttp app on 127.0.0.1 with an ephemeral port, hosted through the
  daemon's ASGI bridge (mcp_endpoint/asgi.py: the reasons for a bridge are there);
- `StdioReportServer`: the probe's end of the stdio sentinel (stdio_sentinel.py, a process the agent
  spawns). That process reports what it sees over a Unix socket in a private directory and waits for an
  acknowledgement before answering the agent, so every observation is recorded before the agent can
  act on the answer.

What is observed (`SentinelObserver`, shared by both): initialize (legacy) or the first modern-era
request, tools/list (tool count), tools/call (tool name, outcome), a legacy connection closing, and at
the HTTP layer the first request and any refusal before the SDK (route, method, status). Never
arguments, results, header or env values. Connection ids are opaque and minted here, never taken from
anything the client chose. Every request is answered whatever happens to the observation.

The sentinel is deliberately open on loopback (no 401): the probe wants to see an agent that connects
but drops the delivered headers, so a credential is delivered and its presence is reported instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentctl.evidence.sanitize import bounded_text
from agentctl.identity import new_connection_id
from agentctl.logs import http_server_logging

if TYPE_CHECKING:  # pragma: no cover - aiohttp is imported when the sentinel starts serving
    from aiohttp import web

log = logging.getLogger(__name__)

SERVER_NAME: Final = "agentctl-probe"
TOOL_NAME: Final = "agentctl_probe_sentinel"
TOOL_REPLY: Final = "agentctl probe sentinel reached: this MCP server is attached."
CREDENTIAL_ENV: Final = "AGENTCTL_PROBE_CREDENTIAL"
MCP_PATH: Final = "/mcp"
SSE_PATH: Final = "/sse"
MESSAGES_PATH: Final = "/messages/"

# The stdio sentinel's report lines are a handful of short fields; anything longer is not ours.
MAX_REPORT_LINE: Final = 16 * 1024
_TOOL_NAME_RE: Final = re.compile(r"[A-Za-z0-9_.\-/]{1,128}")
_VERSION_RE: Final = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
_CONNECTION_KEY: Final = "agentctl.probe.connection_id"
SCOPE_TRANSPORT: Final = "agentctl.probe.transport"
SCOPE_CREDENTIAL: Final = "agentctl.probe.credential_seen"
SCOPE_REACHED: Final = "agentctl.probe.reached_sdk"

# kind, fields -> None or an awaitable (the stdio sentinel waits for the probe's acknowledgement).
Report = Callable[[str, dict[str, Any]], Awaitable[None] | None]


def credential_digest(credential: str) -> str:
    """What the stdio sentinel is told to expect (its argv is visible to `ps`; the credential is not)."""
    return hashlib.sha256(credential.encode()).hexdigest()


def _version(value: Any) -> str | None:
    return value if isinstance(value, str) and _VERSION_RE.fullmatch(value) else None


def _client(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    name = raw.get("name") if isinstance(raw, dict) else getattr(raw, "name", None)
    version = raw.get("version") if isinstance(raw, dict) else getattr(raw, "version", None)
    name = bounded_text(name)
    return {"name": name, "version": bounded_text(version)} if name else None


def tool_name_of(value: Any) -> str | None:
    return value if isinstance(value, str) and _TOOL_NAME_RE.fullmatch(value) else None


async def _sentinel_tool() -> str:
    return TOOL_REPLY


def build_server(observer: SentinelObserver) -> MCPServer[Any]:
    """The sentinel: an SDK MCPServer with one argument-free tool and the observer as middleware.

    Built like the daemon's endpoint (no logging side effects, SDK log redaction) through the light
    `agentctl.mcp_endpoint.sdk`, which the stdio sentinel process can import cheaply too.
    """
    from agentctl.mcp_endpoint.sdk import new_mcp_server

    server = new_mcp_server(SERVER_NAME, middleware=[observer])
    server.add_tool(
        _sentinel_tool,
        name=TOOL_NAME,
        description=(
            "The agentctl probe's sentinel. Call it once, with no arguments, when asked to: "
            "it only shows that this MCP server is attached."
        ),
    )
    return server


class SentinelObserver:
    """SDK middleware: every request is answered; what it shows is handed to `report`.

    `base(ctx)` gives the per-request fields the transport knows (transport, credential_seen).
    `track_connections` mints an opaque id per legacy connection (HTTP and SSE; the stdio sentinel is
    one process per connection and gets its id from the probe).
    """

    def __init__(
        self,
        report: Report,
        base: Callable[[ServerRequestContext[Any, Any]], dict[str, Any]],
        *,
        track_connections: bool = True,
    ) -> None:
        self._report = report
        self._base = base
        self._track = track_connections
        self._modern_seen: set[tuple[Any, ...]] = set()

    async def _emit(self, kind: str, fields: dict[str, Any]) -> None:
        try:
            result = self._report(kind, fields)
            if result is not None:
                await result
        except Exception:
            log.debug("recording a sentinel observation failed", exc_info=True)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        try:
            base = self._base(ctx)
        except Exception:
            return await call_next(ctx)
        if ctx.request_id is None:
            return await call_next(ctx)  # notifications show nothing the findings use
        method = ctx.method
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            base["era"] = "modern"
            if method == "initialize":
                return await call_next(ctx)  # not a modern method; the SDK answers -32601
            if method == "server/discover":
                result = await call_next(ctx)
                await self._modern_contact(ctx, base, always=True)
                return result
            # Before the request is handled, so the contact precedes what the request shows.
            await self._modern_contact(ctx, base, always=False)
        else:
            base["era"] = "legacy"
            if method == "initialize":
                return await self._initialize(ctx, call_next, base)
            base.update(self._connection(ctx))
        base["protocol_version"] = _version(ctx.protocol_version)
        if method == "tools/list":
            result = await call_next(ctx)
            tools = result.get("tools") if isinstance(result, dict) else None
            await self._emit("tools_list", {**base, "tool_count": len(tools) if isinstance(tools, list) else None})
            return result
        if method == "tools/call":
            base["tool_name"] = tool_name_of((ctx.params or {}).get("name"))
            try:
                result = await call_next(ctx)
            except Exception:
                await self._emit("tool_call", {**base, "outcome": "error"})
                raise
            failed = isinstance(result, dict) and result.get("isError") is True
            await self._emit("tool_call", {**base, "outcome": "error" if failed else "ok"})
            return result
        return await call_next(ctx)

    async def _initialize(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext, base: dict[str, Any]
    ) -> HandlerResult:
        params = ctx.params or {}
        base["requested_protocol_version"] = _version(params.get("protocolVersion"))
        base["client"] = _client(params.get("clientInfo"))
        try:
            result = await call_next(ctx)
        except Exception:
            await self._emit("initialize", {**base, "outcome": "error"})
            raise
        negotiated = result.get("protocolVersion") if isinstance(result, dict) else None
        base.update(self._connection(ctx))
        await self._emit("initialize", {**base, "outcome": "ok", "protocol_version": _version(negotiated)})
        return result

    async def _modern_contact(self, ctx: ServerRequestContext[Any, Any], base: dict[str, Any], *, always: bool) -> None:
        client_params = getattr(ctx.session, "client_params", None)
        client = _client(getattr(client_params, "client_info", None))
        key = (base.get("transport"), client and client["name"], client and client["version"], ctx.protocol_version)
        if not always and key in self._modern_seen:
            return
        self._modern_seen.add(key)
        version = _version(ctx.protocol_version)
        await self._emit("initialize", {**base, "outcome": "ok", "protocol_version": version,
                                        "requested_protocol_version": version, "client": client})

    def _connection(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        """An opaque id for a legacy connection, with a `closed` observation when it ends."""
        if not self._track:
            return {}
        from agentctl.mcp_endpoint.observe import legacy_connection

        connection = legacy_connection(ctx)
        if connection is None:
            return {}
        existing = connection.state.get(_CONNECTION_KEY)
        if isinstance(existing, str):
            return {"connection_id": existing}
        connection_id = new_connection_id()
        connection.state[_CONNECTION_KEY] = connection_id
        closed = {"transport": self._base(ctx).get("transport"), "era": "legacy", "connection_id": connection_id}
        connection.exit_stack.callback(self._closed, closed)
        return {"connection_id": connection_id}

    def _closed(self, fields: dict[str, Any]) -> None:
        # An exit-stack callback cannot wait: connections are tracked only with a synchronous sink.
        with contextlib.suppress(Exception):
            self._report("closed", fields)


# ---- HTTP and SSE on loopback ----------------------------------------------------------------------


class HttpSentinel:
    """The sentinel on 127.0.0.1:<ephemeral>: `/mcp` (streamable HTTP, both eras), `/sse` + `/messages/`."""

    def __init__(self, sink: Callable[[str, dict[str, Any]], None], credential: str, *, stop_timeout: float = 3.0) -> None:
        from mcp.server.transport_security import TransportSecuritySettings

        from agentctl.mcp_endpoint.asgi import AsgiBridge

        self._sink = sink
        self._expected = f"Bearer {credential}".encode()
        self._stop_timeout = stop_timeout
        self._first_seen = False
        self.observer = SentinelObserver(sink, self._request_fields)
        self.server = build_server(self.observer)
        self.security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
        )
        self.server.streamable_http_app(streamable_http_path=MCP_PATH, transport_security=self.security)
        self._sse_app = self.server.sse_app(sse_path=SSE_PATH, message_path=MESSAGES_PATH, transport_security=self.security)
        self.bridge = AsgiBridge()
        self._runner: web.AppRunner | None = None
        self._manager_task: asyncio.Task[None] | None = None
        self._manager_stop = asyncio.Event()
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{MCP_PATH}"

    @property
    def sse_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{SSE_PATH}"

    def _request_fields(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        from agentctl.mcp_endpoint.observe import scope_of

        scope = scope_of(ctx)
        if scope is None:
            return {"transport": "http"}
        scope[SCOPE_REACHED] = True
        return {"transport": scope.get(SCOPE_TRANSPORT, "http"), "credential_seen": scope.get(SCOPE_CREDENTIAL)}

    async def start(self) -> None:
        from aiohttp import web
        from sse_starlette.sse import AppStatus

        # A previous sentinel or endpoint in this process may have ended its streams through this flag.
        AppStatus.should_exit = False
        app = web.Application()
        app.router.add_route("*", MCP_PATH, self._handle)
        app.router.add_route("*", SSE_PATH, self._handle)
        app.router.add_route("*", MESSAGES_PATH, self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, **http_server_logging(app, "probe sentinel"))
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        hosts = [f"127.0.0.1:{self.port}", f"localhost:{self.port}"]
        self.security.allowed_hosts = hosts
        self.security.allowed_origins = [f"http://{h}" for h in hosts]
        self.bridge.start()
        started = asyncio.Event()
        self._manager_task = asyncio.create_task(self._run_manager(started), name="probe-sentinel-sessions")
        waiter = asyncio.create_task(started.wait())
        done, _ = await asyncio.wait({waiter, self._manager_task}, timeout=5.0, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            raise RuntimeError("the sentinel's MCP session manager did not start")

    async def _run_manager(self, started: asyncio.Event) -> None:
        async with self.server.session_manager.run():
            started.set()
            await self._manager_stop.wait()

    async def _handle(self, request: Any) -> Any:
        from agentctl.mcp_endpoint.asgi import build_scope

        route = request.path if request.path in (MCP_PATH, SSE_PATH) else MESSAGES_PATH
        transport = "http" if route == MCP_PATH else "sse"
        presented = request.headers.get("Authorization", "").encode()
        credential_seen = hmac.compare_digest(presented, self._expected)
        scope = build_scope(request)
        scope[SCOPE_TRANSPORT] = transport
        scope[SCOPE_CREDENTIAL] = credential_seen
        fields = {"transport": transport, "credential_seen": credential_seen,
                  "http_route": f"{request.method if len(request.method) <= 8 else 'OTHER'} {route}"}
        if not self._first_seen:
            # Recorded on arrival: the first sign of the agent, whatever becomes of the request.
            self._first_seen = True
            with contextlib.suppress(Exception):
                self._sink("contact", fields)
        app = self.server.session_manager.handle_request if route == MCP_PATH else self._sse_app
        response, status = await self.bridge.serve(request, app, scope)
        if status >= 400 and not scope.get(SCOPE_REACHED):
            # Refused before the SDK's handlers (406, 421, unknown session...): route and status only.
            with contextlib.suppress(Exception):
                self._sink("contact", {**fields, "http_status": status})
        return response

    async def stop(self) -> None:
        """End open streams and sessions, then the listener; bounded by `stop_timeout`."""
        from sse_starlette.sse import AppStatus

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._stop_timeout
        self.bridge.disconnect_all()
        while self.bridge.open_exchanges and loop.time() < deadline - 1.0:
            await asyncio.sleep(0.01)
        if self.bridge.open_exchanges:
            AppStatus.should_exit = True
        self._manager_stop.set()
        if self._manager_task is not None:
            done, _ = await asyncio.wait({self._manager_task}, timeout=max(0.1, deadline - loop.time()))
            if not done:
                self._manager_task.cancel()
                await asyncio.wait({self._manager_task}, timeout=1.0)
        await self.bridge.stop(max(0.1, deadline - loop.time()))
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        AppStatus.should_exit = False


# ---- the probe's end of the stdio sentinel ---------------------------------------------------------


_STDIO_FIELDS: Final = frozenset(
    {"era", "protocol_version", "requested_protocol_version", "client", "tool_count", "tool_name", "outcome",
     "credential_seen"}
)
_STDIO_KINDS: Final = frozenset({"contact", "initialize", "tools_list", "tool_call"})


def clean_stdio_report(line: bytes) -> tuple[str, dict[str, Any]] | None:
    """Validate one report line from a stdio sentinel: known kind, known fields, bounded values."""
    try:
        raw = json.loads(line)
    except ValueError:
        return None
    if not isinstance(raw, dict) or raw.get("kind") not in _STDIO_KINDS:
        return None
    fields: dict[str, Any] = {"transport": "stdio"}
    for key, value in raw.items():
        if key not in _STDIO_FIELDS or value is None:
            continue
        if key == "era" and value in ("legacy", "modern"):
            fields[key] = value
        elif key in ("protocol_version", "requested_protocol_version"):
            fields[key] = _version(value)
        elif key == "client":
            fields[key] = _client(value) if isinstance(value, dict) else None
        elif key == "tool_count" and isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1_000_000:
            fields[key] = value
        elif key == "tool_name":
            fields[key] = tool_name_of(value)
        elif key == "outcome" and value in ("ok", "error"):
            fields[key] = value
        elif key == "credential_seen" and isinstance(value, bool):
            fields[key] = value
    return raw["kind"], fields


class StdioReportServer:
    """A Unix socket in a fresh 0700 directory; each stdio sentinel process is one connection (one id)."""

    def __init__(self, sink: Callable[[str, dict[str, Any]], None]) -> None:
        self._sink = sink
        self._dir: str | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.path: str | None = None

    async def start(self) -> None:
        # /tmp rather than $TMPDIR: AF_UNIX paths are limited to 107 bytes.
        self._dir = tempfile.mkdtemp(prefix="agentctl-probe-", dir="/tmp" if os.path.isdir("/tmp") else None)
        self.path = os.path.join(self._dir, "report.sock")
        self._server = await asyncio.start_unix_server(self._serve, path=self.path, limit=MAX_REPORT_LINE)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        connection_id = new_connection_id()
        try:
            while True:
                try:
                    line = await reader.readuntil(b"\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    break
                cleaned = clean_stdio_report(line)
                if cleaned is not None:
                    kind, fields = cleaned
                    fields["connection_id"] = connection_id
                    with contextlib.suppress(Exception):
                        self._sink(kind, fields)
                writer.write(b"ok\n")
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                self._sink("closed", {"transport": "stdio", "connection_id": connection_id})
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=1.0)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            self._server = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
