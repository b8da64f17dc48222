"""The built-in, task-aware MCP endpoint: both protocol eras on /mcp, legacy SSE on /sse + /messages/.

One `mcp.server.MCPServer` (pinned `mcp==2.3.0`) serves everything; the SDK picks the era per request
(`session_manager.handle_request`): a 2026-07-28 `MCP-Protocol-Version` goes to the modern
single-exchange path, anything else to legacy `initialize` sessions with `Mcp-Session-Id`. The legacy
HTTP+SSE transport is the SDK's `sse_app`. There is no hand-written protocol code here.

Hosting: the SDK's ASGI apps run inside the daemon's aiohttp runner through agentctl's small ASGI
bridge (asgi.py, where the measured reasons are). Each MCP route handler, in order:
1. refuses anything not on the TCP loopback listener (404; the control socket serves /v1/ only);
2. authorizes the bearer token (auth.py): none, malformed or unknown -> 401, before the SDK sees it;
3. refuses while not running (503);
4. admits a request that opens a legacy session through the session pool (pool.py: bounds per attempt
   and in all); a refusal is 503 and an explicit `session_pool_full` error of the token's attempt;
5. hands the request to the SDK with the token's attempt in the scope (observe.py reads it back);
6. counts a refusal (route, method, status; never a body) when the SDK answered >= 400 without the
   request ever reaching the MCP middleware: 406, 413, 421 (DNS rebinding), unsupported version,
   unknown session 404, ...

When an attempt's token leaves history, its legacy sessions and every open exchange it owns (SSE streams,
GET streams) are ended.

Lifecycle (the composition root calls these):
    endpoint = McpEndpoint(ledger, builtin_name=..., profile=..., backend_getter=..., estimator_loader=...)
    endpoint.mount(app)                 # before the runner freezes the app
    endpoint.set_listen(host, port)     # after the TCP site is bound: exact Host/Origin allow-list
    await endpoint.start()              # the session manager's task; before serving MCP
    ...
    await endpoint.stop()               # before runner.cleanup(): ends SSE streams, sessions, bounded

Attribution (observe.py has the details): by the bearer token's attempt, per request. Legacy
connections (streamable-HTTP sessions, SSE streams speaking the handshake era) carry a daemon-minted
connection id and end with connection_closed; modern requests, including a modern client on the SSE
transport, carry neither.

DNS-rebinding protection stays on: one `TransportSecuritySettings` object is shared by the streamable
HTTP manager, the modern path and the SSE transport, so `set_listen` tightens all of them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web
from mcp.server import MCPServer
from mcp.server.streamable_http_manager import DEFAULT_SESSION_IDLE_TIMEOUT
from mcp.server.subscriptions import InMemorySubscriptionBus, ToolsListChanged
from mcp.server.transport_security import TransportSecuritySettings
from sse_starlette.sse import AppStatus

from agentctl.evidence.estimates import CatalogEstimates
from agentctl.evidence.ledger import Ledger
from agentctl.listener_guard import trust
from agentctl.mcp_endpoint import auth, witness_route
from agentctl.mcp_endpoint.asgi import ASGIApp, AsgiBridge, build_scope
from agentctl.mcp_endpoint.capabilities import advertise_capabilities
from agentctl.mcp_endpoint.observe import SCOPE_ATTEMPT, SCOPE_REACHED, Observer
from agentctl.mcp_endpoint.pool import MCP_SESSION_ID, PER_ATTEMPT, TOTAL, SessionPool, legacy_session_of
from agentctl.mcp_endpoint.sdk import install_sdk_log_redaction, new_mcp_server
from agentctl.mcp_endpoint.traced import TraceMiddleware

log = logging.getLogger(__name__)

MCP_PATH: Final = "/mcp"
SSE_PATH: Final = "/sse"
MESSAGES_PATH: Final = "/messages/"
ROUTES: Final = (MCP_PATH, SSE_PATH, MESSAGES_PATH)
_METHODS: Final = frozenset({"GET", "POST", "DELETE", "HEAD", "OPTIONS", "PUT", "PATCH"})

DEFAULT_STOP_TIMEOUT: Final = 5.0
NOTIFY_TIMEOUT: Final = 2.0


class McpEndpoint:
    """The built-in MCP server of one daemon (one execution generation).

    `backend_getter` is called on every tool call (tools.py); `estimator_loader` provides token
    estimates for the catalog (primed with the served tool list at start, never waited for).
    """

    _set_app_status_class: bool = False  # this process set sse_starlette's global AppStatus.should_exit

    def __init__(
        self,
        ledger: Ledger,
        *,
        builtin_name: str,
        profile: str,
        backend_getter: Callable[[], Any],
        estimator_loader: CatalogEstimates | None,
        session_idle_timeout: float | None = DEFAULT_SESSION_IDLE_TIMEOUT,
        session_bounds: tuple[int, int] = (PER_ATTEMPT, TOTAL),
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
        bridge_tick: float = 0.1,
    ) -> None:
        from agentctl.mcp_endpoint.tools import apply_profile, register_tools

        self.ledger = ledger
        self.builtin_name = builtin_name
        self.estimator_loader = estimator_loader
        self.stop_timeout = stop_timeout
        self._apply_profile = apply_profile
        # The capabilities both eras advertise are capabilities.py's: the observer leaves them alone.
        self.observer = Observer(ledger, builtin_name, estimator_loader, advertise_list_changed=False)
        self._bus = InMemorySubscriptionBus()
        self.server: MCPServer[Any] = new_mcp_server(
            builtin_name, middleware=[TraceMiddleware(ledger), advertise_capabilities, self.observer],
            subscriptions=self._bus
        )
        register_tools(self.server, backend_getter, ledger.identity)
        self.profile = profile
        self.tool_count = apply_profile(self.server, profile)

        # Until set_listen() names the bound port: the SDK's own loopback defaults (any port).
        self.security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
        # Building through streamable_http_app() keeps the SDK's DNS-rebinding wiring; it also creates
        # server.session_manager, whose handle_request serves /mcp for both eras.
        self.server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            transport_security=self.security,
            session_idle_timeout=session_idle_timeout,
            # The pool's bounds come first (pool.py); this is the SDK's own backstop, with room for
            # sessions ended to make room whose discard has not run yet.
            max_sessions=2 * session_bounds[1],
        )
        self.session_manager = self.server.session_manager
        self.pool = SessionPool(self.session_manager, lambda: ledger.current_attempt_id, ledger.tokens.attempt_ids,
                                per_attempt=session_bounds[0], total=session_bounds[1])
        self._sse_app: ASGIApp = self.server.sse_app(
            sse_path=SSE_PATH, message_path=MESSAGES_PATH, transport_security=self.security
        )
        self.bridge = AsgiBridge(tick=bridge_tick)
        self.base_url: str | None = None
        self._state = "new"  # new -> running -> stopping -> stopped
        self._manager_task: asyncio.Task[None] | None = None
        self._manager_stop: asyncio.Event | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._live_attempts: set[str] = set()

    # ---- wiring --------------------------------------------------------------------------------

    def mount(self, app: web.Application) -> None:
        """Add /mcp, /sse, /messages/ and the stdio witness's /witness to the daemon's application (before the runner freezes it)."""
        app.router.add_route("*", MCP_PATH, self._handle_mcp)
        app.router.add_route("*", SSE_PATH, self._handle_sse)
        app.router.add_route("*", MESSAGES_PATH, self._handle_sse)
        witness_route.mount(app, self.ledger, _on_tcp)

    def set_listen(self, host: str, port: int) -> None:
        """Record the bound loopback address: the base URL, and the exact Host/Origin allow-list."""
        bare = host.strip("[]")
        try:
            ip = ipaddress.ip_address(bare)
        except ValueError:
            ip = None
        shown = f"[{bare}]" if ip is not None and ip.version == 6 else bare
        names = [shown]
        if ip is not None and ip.is_loopback:
            names += ["localhost", "127.0.0.1" if ip.version == 4 else "[::1]"]
        elif bare == "localhost":
            names += ["127.0.0.1", "[::1]"]
        hosts = list(dict.fromkeys(f"{name}:{port}" for name in names))
        self.security.allowed_hosts = hosts
        self.security.allowed_origins = [f"http://{h}" for h in hosts]
        self.base_url = f"http://{shown}:{port}"

    @property
    def url(self) -> str | None:
        return f"{self.base_url}{MCP_PATH}" if self.base_url else None

    @property
    def sse_url(self) -> str | None:
        return f"{self.base_url}{SSE_PATH}" if self.base_url else None

    @property
    def running(self) -> bool:
        return self._state == "running"

    @property
    def open_connections(self) -> int:
        """Legacy connections (streamable-HTTP sessions, SSE streams) that completed initialize."""
        return len(self.observer.connections)

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self, timeout: float = 5.0) -> None:
        """Run the session manager in a dedicated task (its anyio cancel scope lives and dies there)."""
        if self._state != "new":
            raise RuntimeError(f"McpEndpoint.start() in state {self._state}")
        # sse_starlette's exit flag is process-global, and set by more than us (its uvicorn patch sets it
        # when any in-process uvicorn server shuts down). Left set, every new response ends at once and
        # tools/list would look failed: a starting endpoint always clears it.
        AppStatus.should_exit = False
        McpEndpoint._set_app_status_class = False
        install_sdk_log_redaction()  # again: SDK modules imported since construction have new loggers
        self.bridge.start()
        self.ledger.subscribe(self._on_ledger_change)
        started = asyncio.Event()
        self._manager_stop = asyncio.Event()
        self._manager_task = asyncio.create_task(self._run_manager(started), name="agentctl-mcp-sessions")
        waiter = asyncio.create_task(started.wait())
        done, _ = await asyncio.wait({waiter, self._manager_task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            if self._manager_task.done():
                self._manager_task.result()  # raises the manager's failure
            raise TimeoutError("the MCP session manager did not start")
        await self._prime_estimates()
        self._state = "running"

    async def _prime_estimates(self) -> None:
        """Start counting the tokens of the tool list this server serves, before any agent lists it."""
        if self.estimator_loader is None:
            return
        from mcp_types import ListToolsResult
        from mcp_types.methods import serialize_server_result
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

        try:
            # The SDK's own listing, shaped as its runner shapes a handler's result for the middleware of
            # each protocol version, so the texts counted are the ones a first tools/list carries.
            listed = ListToolsResult(tools=await self.server.list_tools())
            dumped = listed.model_dump(by_alias=True, mode="json", exclude_none=True)
            lists = [serialize_server_result("tools/list", version, dumped)["tools"]
                     for version in (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)]
        except Exception as exc:  # the type only: a validation message would quote the tools' text
            log.warning("the built-in tool list could not be read ahead (%s); estimates wait for a tools/list",
                        type(exc).__name__)
            return
        self.estimator_loader.prime(lists)

    async def _run_manager(self, started: asyncio.Event) -> None:
        assert self._manager_stop is not None
        async with self.session_manager.run():
            started.set()
            await self._manager_stop.wait()

    async def stop(self, timeout: float | None = None) -> None:
        """End open SSE streams and legacy sessions, stop the session manager; bounded; idempotent."""
        if self._state in ("stopping", "stopped"):
            return
        if self._state == "new":
            self._state = "stopped"
            return
        self._state = "stopping"
        self.ledger.unsubscribe(self._on_ledger_change)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.stop_timeout if timeout is None else timeout)

        def left() -> float:
            return max(0.0, deadline - loop.time())

        # 1. Every open HTTP exchange (SSE streams, standalone GET streams, in-flight POSTs) sees
        #    http.disconnect now; sse_starlette ends its streams, the SSE server loops end.
        self.bridge.disconnect_all()
        await _wait_until(lambda: self.bridge.open_exchanges == 0, min(1.0, left()))
        if self.bridge.open_exchanges:
            # Belt and braces: sse_starlette's process-wide shutdown flag (its watcher polls at 0.5 s).
            AppStatus.should_exit = True
            McpEndpoint._set_app_status_class = True
        # 2. The session manager: cancels every legacy session's task; their exit stacks record
        #    connection_closed.
        if self._manager_stop is not None:
            self._manager_stop.set()
        if self._manager_task is not None:
            done, _ = await asyncio.wait({self._manager_task}, timeout=left())
            if not done:
                log.warning("the MCP session manager did not stop in time; cancelling it")
                self._manager_task.cancel()
                await asyncio.wait({self._manager_task}, timeout=1.0)
            elif self._manager_task.exception() is not None:
                log.warning("the MCP session manager failed: %s", type(self._manager_task.exception()).__name__)
        # 3. Whatever apps are still running, then the ticker.
        await self.bridge.stop(left())
        for task in list(self._background):
            task.cancel()
        # 4. Let deferred evidence (call_soon) fold before the caller persists the report.
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        self._state = "stopped"

    # ---- profiles ------------------------------------------------------------------------------

    def set_profile(self, name: str) -> int:
        """Switch the tool profile; returns the new tool count.

        The next tools/list of any era serves the new set (tools_list_observed then records the new
        count). Open legacy connections get notifications/tools/list_changed; modern clients with a
        `subscriptions/listen` stream get the same event through the SDK's subscription bus. Raises
        ValueError for an unknown profile (nothing changes then).
        """
        count = self._apply_profile(self.server, name)
        self.profile = name
        self.tool_count = count
        if self._state == "running":
            self._spawn(self._announce_tools_changed())
        return count

    async def _announce_tools_changed(self) -> None:
        async def one(connection: Any) -> None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.send_tool_list_changed(), NOTIFY_TIMEOUT)

        connections = list(self.observer.connections.values())
        await asyncio.gather(*(one(c) for c in connections), self._bus.publish(ToolsListChanged()))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ---- HTTP ----------------------------------------------------------------------------------

    async def _handle_mcp(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, MCP_PATH, self.session_manager.handle_request)

    async def _handle_sse(self, request: web.Request) -> web.StreamResponse:
        route = SSE_PATH if request.path == SSE_PATH else MESSAGES_PATH
        return await self._handle(request, route, self._sse_app)

    async def _handle(self, request: web.Request, route: str, app: ASGIApp) -> web.StreamResponse:
        method = request.method if request.method in _METHODS else "OTHER"
        if not _on_tcp(request):
            self._refused(route, method, 404)
            raise web.HTTPNotFound()
        attempt_id = auth.attempt_of(request, self.ledger.tokens)
        if attempt_id is None:
            self._refused(route, method, 401)
            return auth.unauthorized()
        trust(request.transport)  # a token holder's connection: displaced last when the listener is full
        if self._state != "running":
            self._refused(route, method, 503)
            return web.Response(status=503, text="the MCP endpoint is not running\n", headers={"Retry-After": "1"})
        scope = build_scope(request)
        scope[SCOPE_ATTEMPT] = attempt_id
        scope["user"] = auth.principal(attempt_id)
        legacy, session_id = legacy_session_of(request.headers) if route == MCP_PATH else (False, None)
        if not legacy:
            return await self._serve(request, route, method, app, scope)
        if session_id is not None:
            self.pool.enter(session_id)
            try:
                return await self._serve(request, route, method, app, scope)
            finally:
                self.pool.leave(session_id)
        # This request opens a legacy session: the pool admits it first (pool.py).
        if not self.pool.admit(attempt_id):
            self._refused(route, method, 503)
            self._pool_full(attempt_id)
            return web.json_response(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": "Too many open sessions"}},
                status=503, headers={"Retry-After": "1"},
            )
        opened: list[str] = []
        try:
            return await self._serve(request, route, method, _session_opened_by(app, opened), scope)
        finally:
            self.pool.opened(attempt_id, opened[0] if opened else None)

    async def _serve(
        self, request: web.Request, route: str, method: str, app: ASGIApp, scope: dict[str, Any]
    ) -> web.StreamResponse:
        attempt_id = scope[SCOPE_ATTEMPT]
        response, status = await self.bridge.serve(request, app, scope, owner=attempt_id)
        if status >= 400 and not scope.get(SCOPE_REACHED):
            self._refused(route, method, status)
            if status == 503 and route == MCP_PATH:
                self._pool_full(attempt_id)  # the SDK's own session limit: its only 503
        return response

    def _pool_full(self, attempt_id: str) -> None:
        """An explicit attachment error of the attempt whose token was refused a session (never by time)."""
        pool = self.pool
        self.observer.record(
            "explicit_error",
            attempt_id,
            reason_code="session_pool_full",
            summary=(
                f"the endpoint refused to open a legacy session (HTTP 503): {pool.sessions_of(attempt_id)} of this "
                f"attempt's sessions are open, none idle (at most {pool.per_attempt} per attempt and {pool.total} in "
                "all); a session ends when its client deletes it or it is left idle"
            ),
            era="legacy",
        )

    def _on_ledger_change(self, event: Any) -> None:
        # Only an attempt change (event None) can retire a token; evidence events cannot.
        if event is not None or self._state != "running":
            return
        live = self.ledger.tokens.attempt_ids()
        if live != self._live_attempts:
            self._live_attempts = live
            self.pool.end_gone_attempts()
            self.bridge.disconnect_owners_except(live)

    def _refused(self, route: str, method: str, status: int) -> None:
        self.observer.defer(self.ledger.count_refusal, route, method, status)


def _session_opened_by(app: ASGIApp, opened: list[str]) -> ASGIApp:
    """`app`, noting the session id its answer opens. Read from the response start the SDK sends (the
    status it decides on), so a session is known even when its client left before the answer arrived."""
    header = MCP_SESSION_ID.lower().encode()

    async def noting(scope: Any, receive: Any, send: Any) -> None:
        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start" and int(message["status"]) < 400:
                opened.extend(v.decode("latin-1") for k, v in message.get("headers") or () if k.lower() == header)
            await send(message)

        await app(scope, receive, sending)

    return noting


async def _wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() >= end:
            return False
        await asyncio.sleep(0.01)
    return True


def _on_tcp(request: web.BaseRequest) -> bool:
    transport = request.transport
    if transport is None:
        return False
    return isinstance(transport.get_extra_info("sockname"), tuple)
