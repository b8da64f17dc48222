"""`agentctl hub serve --http HOST:PORT`: the hub's read-only status page, its JSON API and live updates.

The page (agentctl/hub/static/: one HTML file, one script, one stylesheet, nothing external) reads
`/api/*`; `/api/events` streams server-sent events when evidence reaches the hub. What it shows is built by
web_view.py with the CLI's own wording.

Safety:
- binds loopback by default, and then answers only requests whose Host names a loopback address (a page on
  another site cannot reach it through DNS rebinding);
- `/readyz` (a health probe, no token) says only whether the database is available;
- every /api route needs the hub's token in `Authorization: Bearer`, compared in constant time. The token
  reaches the page once, in the URL fragment (never sent to a server), and the page keeps it in
  sessionStorage. A URL with a token in its query is refused, so a token never lands in a log or history;
- actions take stored names only: a server name of the session's current attempt for the endpoint test
  (the daemon tests its own stored configuration), nothing at all for agent output;
- recent agent output and the agent terminal's recent screen are fetched only on an explicit POST and answered
  `Cache-Control: no-store`, like every /api answer; they are never logged, stored or part of the copied
  diagnostics. The page renders the screen in a read-only xterm.js (static/vendor/xterm: vendored, no CDN).
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import ipaddress
import logging
import os
import secrets
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import msgspec
from aiohttp import web

from agentctl.http_answers import Refusal, error_response, status_reason
from agentctl.evidence.contract.base import encode
from agentctl.lifecycle import StackedService, StopStack
from agentctl.evidence.decode_errors import describe_decode_error
from agentctl.listener_guard import (
    HTTP_REFUSAL,
    GuardedSite,
    ListenerGuard,
    install_accept_error_log,
    track_requests,
    trust,
)
from agentctl.logs import http_server_logging
from agentctl.safe_files import UnsafePath, check_private_file, open_nofollow, open_private
from agentctl.hub.hub import Hub
from agentctl.hub.hub_conn import HubRequestError, listener_caps
from agentctl.hub.web_assets import AssetCache
from agentctl.hub.metrics import METRICS_PATH, hub_registry, metrics_handler
from agentctl.hub.web_view import (
    diagnostics_text,
    endpoint_test_view,
    history_view,
    output_notes,
    session_view,
    status_page,
    terminal_notes,
    tool_view,
    tools_view,
)

log = logging.getLogger("agentctl.hub.web")

STATIC = Path(__file__).parent / "static"
ASSETS = {"/": ("index.html", "text/html"), "/app.js": ("app.js", "text/javascript"),
          "/views.js": ("views.js", "text/javascript"), "/app.css": ("app.css", "text/css"),
          "/vendor/xterm/xterm.js": ("vendor/xterm/xterm.js", "text/javascript"),
          "/vendor/xterm/xterm.css": ("vendor/xterm/xterm.css", "text/css")}
TOKEN_BYTES = 32
MIN_TOKEN_CHARS = 16
MAX_STREAMS = 32
KEEPALIVE_SECONDS = 15.0
COALESCE_SECONDS = 0.05  # a burst of evidence becomes one update per session
TEST_TIMEOUT = 70.0  # the daemon's own bound is at most 60 s, plus the stop of a stdio tree
MAX_BODY_BYTES = 1024
MAX_ERROR_DETAIL = 200  # characters of msgspec's reason in a refusal
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
_TOKEN_QUERY_KEYS = {"token", "access_token", "auth", "authorization"}


class WebConfigError(Exception):
    """`--http` or `--token-file` cannot be used; one line for the CLI."""


def parse_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT`, `:PORT` or `PORT`; the host defaults to 127.0.0.1."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise WebConfigError(f"--http: not HOST:PORT: {text!r}") from None
    if not 0 <= number <= 65535:
        raise WebConfigError(f"--http: port out of range: {number}")
    return host, number


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_token(path: Path | None) -> tuple[str, bool]:
    """(token, generated). With a path: read it, or create it (0600, a new token) when missing. Never through
    a symbolic link, and only a regular file of ours: a planted file would hand its author the page."""
    if path is None:
        return secrets.token_urlsafe(TOKEN_BYTES), True
    try:
        fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        pass
    except UnsafePath as exc:
        raise WebConfigError(f"--token-file {exc}") from None
    except OSError as exc:
        raise WebConfigError(f"--token-file {path}: {exc.strerror}") from None
    else:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(TOKEN_BYTES) + "\n")
    try:
        fd = open_nofollow(path)
        with os.fdopen(fd, "rb") as src:
            st = os.fstat(src.fileno())
            check_private_file(path, st)
            if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise WebConfigError(f"--token-file {path}: readable by other users (chmod 600 it)")
            token = src.read(4096).decode("utf-8").strip()
    except UnsafePath as exc:
        raise WebConfigError(f"--token-file {exc}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise WebConfigError(f"--token-file {path} is a symbolic link; refusing to follow it") from None
        raise WebConfigError(f"--token-file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise WebConfigError(f"--token-file {path}: not text") from None
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise WebConfigError(f"--token-file {path}: the token must be one word of at least {MIN_TOKEN_CHARS} characters")
    return token, False


class _TestBody(msgspec.Struct, forbid_unknown_fields=True):
    server: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


@dataclass(eq=False)  # identity: each open stream is its own set member
class _Stream:
    """One open /api/events response: the sessions changed since it last wrote, and its wake-up."""

    pending: set[str] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=encode(body), status=status, content_type="application/json")


class HubWeb(StackedService):
    """The page's HTTP server, on the hub's event loop, reading the hub's in-memory state."""

    stop_log = log

    def __init__(self, hub: Hub, host: str = "127.0.0.1", port: int = 0, *, token: str) -> None:
        self.hub = hub
        self.host = host
        self.port = port
        self._token = token.encode()
        self._streams: set[_Stream] = set()
        self._closing = False
        self._allowed_hosts: set[str] | None = None
        self.guard = ListenerGuard("page", listener_caps()["page"], refusal=HTTP_REFUSAL)
        self._assets = AssetCache(STATIC)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    async def start(self) -> None:
        """Serve the page; each step pushes its own stop, and a start that fails stops what it started."""
        await super().start()
        log.info("hub page at %s", self.url)

    async def _start(self, stops: StopStack) -> None:
        app = web.Application(middlewares=[track_requests, self._guard], client_max_size=MAX_BODY_BYTES)
        runner_logging = http_server_logging(app, "hub page")
        for route, (name, kind) in ASSETS.items():
            app.router.add_get(route, self._assets.handler(name, kind), allow_head=False)
        app.router.add_get("/favicon.ico", self._no_icon, allow_head=False)
        app.router.add_get("/readyz", self._readyz, allow_head=False)
        app.router.add_get("/api/status", self._status, allow_head=False)
        app.router.add_get("/api/events", self._events, allow_head=False)
        app.router.add_get("/api/sessions/{sid}/history", self._history, allow_head=False)
        app.router.add_get("/api/sessions/{sid}/tools", self._tools, allow_head=False)
        app.router.add_get("/api/sessions/{sid}/tools/{name}", self._tool, allow_head=False)
        app.router.add_get("/api/sessions/{sid}/diagnostics", self._diagnostics, allow_head=False)
        app.router.add_post("/api/sessions/{sid}/test-endpoint", self._test_endpoint)
        app.router.add_post("/api/sessions/{sid}/agent-output", self._agent_output)
        app.router.add_post("/api/sessions/{sid}/agent-terminal", self._agent_terminal)
        app.router.add_get(METRICS_PATH, metrics_handler(hub_registry(self.hub)), allow_head=False)
        app.on_shutdown.append(self._on_shutdown)
        await self._assets.preload(name for name, _ in ASSETS.values())  # compressed before the first request
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0, **runner_logging)
        await runner.setup()
        stops.push("page server", runner.cleanup)  # its site too
        site = GuardedSite(runner, self.guard, host=self.host, port=self.port)
        try:
            await site.start()
        except OSError as exc:
            raise WebConfigError(f"--http: cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
        if site.addresses:
            self.port = site.addresses[0][1]
        if is_loopback(self.host):
            names = {"127.0.0.1", "localhost", "[::1]", f"[{self.host}]" if ":" in self.host else self.host}
            self._allowed_hosts = {f"{name}:{self.port}" for name in names}
        else:
            log.warning("the hub page listens on %s, not loopback: its token crosses the network in clear text",
                        self.host)
        self.hub.subscribe(self._changed)
        stops.push("live updates", self._end_streams)
        stops.push("accept error log", install_accept_error_log())

    def _end_streams(self) -> None:
        self.hub.unsubscribe(self._changed)
        self._closing = True
        for stream in self._streams:
            stream.wake.set()

    async def _on_shutdown(self, app: web.Application) -> None:
        self._closing = True
        for stream in self._streams:
            stream.wake.set()

    # -- the guard ------------------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(value.strip().encode(), self._token)

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self._allowed_hosts is not None and request.host not in self._allowed_hosts:
            response: web.StreamResponse = error_response(
                421, "wrong_host", "this page answers only to a loopback host name")
        elif _TOKEN_QUERY_KEYS & {key.lower() for key in request.query}:
            # Refused whatever the value: a URL is logged, kept in history and sent as a referrer.
            response = error_response(400, "token_in_query", "never put the token in a URL query: open the page with "
                                      "#token=… or send it as an Authorization: Bearer header")
        elif request.path.startswith("/api/") and not self._authorized(request):
            response = error_response(401, "bad_token", "the hub token is missing or wrong (the hub printed the page "
                                      "address with its token when it started)")
            response.headers["WWW-Authenticate"] = 'Bearer realm="agentctl-hub"'
        else:
            if request.path.startswith("/api/"):
                trust(request.transport)
            try:
                response = await handler(request)
            except Refusal as exc:
                response = exc.response()
            except web.HTTPException as exc:
                if exc.status < 400:
                    raise
                response = error_response(exc.status, status_reason(exc.status), exc.reason or "refused")
        if not response.prepared:
            response.headers.update(SECURITY_HEADERS)
            if request.path.startswith("/api/"):
                response.headers["Cache-Control"] = "no-store"
        # The path only: never the query, never a header.
        log.debug("%s %s %s", request.method, request.path, response.status)
        return response

    # -- the page -------------------------------------------------------------------------------------

    async def _no_icon(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    # -- queries --------------------------------------------------------------------------------------

    def _now(self) -> datetime:
        return datetime.now(UTC)

    async def _report(self, request: web.Request) -> Any:
        report = await self.hub.read_report(request.match_info["sid"])
        if report is None:
            raise Refusal(404, "unknown_session", "the hub has no such session")
        return report

    async def _readyz(self, request: web.Request) -> web.Response:
        # A health probe without the token: it says only whether the hub can keep what it is sent.
        problem = self.hub.database_problem()
        if problem is None:
            return _json({"ok": True, "checks": {"database": {"ok": True, "detail": "available"}}})
        return _json({"ok": False, "checks": {"database": {"ok": False, "detail": problem}}}, status=503)

    async def _status(self, request: web.Request) -> web.Response:
        return _json(status_page(self.hub.status().sessions, self._now()))

    async def _history(self, request: web.Request) -> web.Response:
        return _json(history_view(await self._report(request)))

    async def _tools(self, request: web.Request) -> web.Response:
        return _json(tools_view(await self._report(request)))

    async def _tool(self, request: web.Request) -> web.Response:
        view = tool_view(await self._report(request), request.match_info["name"])
        if view is None:
            return error_response(404, "unknown_tool", "no tool of that name in the built-in server's current catalog")
        return _json(view)

    async def _diagnostics(self, request: web.Request) -> web.Response:
        text = diagnostics_text(await self._report(request), self._now())
        if text is None:
            return error_response(404, "no_snapshot", "no snapshot from this session's current execution yet")
        return _json({"text": text})

    # -- actions --------------------------------------------------------------------------------------

    async def _test_endpoint(self, request: web.Request) -> web.Response:
        report = await self._report(request)
        try:
            body = msgspec.json.decode(await request.read() or b"{}", type=_TestBody)
        except msgspec.ValidationError as exc:
            detail = describe_decode_error(exc).text(with_path=False, limit=MAX_ERROR_DETAIL)
            return error_response(400, "bad_request_body",
                                  f"bad request body: {detail} (only a server name is accepted)")
        except msgspec.DecodeError:
            return error_response(400, "bad_request_body", "bad request body: not JSON")
        attempt = report.history.current if report.history else None
        known = [row.name for row in attempt.servers] if attempt else []
        if body.server not in known:
            # Stored names only: the daemon tests its own configuration of a server the attempt holds.
            return error_response(404, "unknown_server",
                                  f"no server of that name in the current attempt; known: {', '.join(known) or 'none'}")
        try:
            result = await self.hub.test_endpoint(report.session.session_id, body.server, timeout=TEST_TIMEOUT)
        except HubRequestError as exc:
            status = {"unknown_server": 404, "not_supported": 501}.get(exc.code, 503)
            return error_response(status, exc.code, str(exc))
        return _json({"server": body.server, "result": result, "view": endpoint_test_view(result)})

    async def _agent_output(self, request: web.Request) -> web.Response:
        session_id = (await self._report(request)).session.session_id
        try:
            view = await self.hub.read_stderr(session_id)
        except HubRequestError as exc:
            return error_response(503 if exc.code == "unavailable" else 502, exc.code, str(exc))
        return _json({"view": view, "notes": output_notes(view)})

    async def _agent_terminal(self, request: web.Request) -> web.Response:
        session = (await self._report(request)).session
        no_terminal = error_response(409, "no_terminal", "the session's agent does not run on a terminal (a "
                                     "passthrough agent with [agent] terminal = true does)")
        if session.agent is None or not session.agent.terminal:
            return no_terminal  # never asked: a daemon without terminals does not know the request
        try:
            view = await self.hub.read_terminal(session.session_id)
        except HubRequestError as exc:
            if exc.code == "not_supported":
                return no_terminal
            return error_response(503 if exc.code == "unavailable" else 502, exc.code, str(exc))
        if not view.terminal:
            return no_terminal
        if not view.open and not view.screen:
            return error_response(409, "terminal_closed", "the agent's terminal is closed (the agent is not running)")
        return _json({"view": view, "notes": terminal_notes(view)})

    # -- live updates ---------------------------------------------------------------------------------

    def _changed(self, session_id: str) -> None:
        for stream in self._streams:
            stream.pending.add(session_id)
            stream.wake.set()

    async def _events(self, request: web.Request) -> web.StreamResponse:
        if len(self._streams) >= MAX_STREAMS:
            return error_response(503, "too_many_streams", f"too many open update streams (at most {MAX_STREAMS})")
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no",
            **SECURITY_HEADERS,
        })
        await response.prepare(request)
        stream = _Stream()
        self._streams.add(stream)
        try:
            await self._send(response, "status", status_page(self.hub.status().sessions, self._now()))
            while not self._closing:
                try:
                    await asyncio.wait_for(stream.wake.wait(), KEEPALIVE_SECONDS)
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
                    continue
                if self._closing:
                    break
                await asyncio.sleep(COALESCE_SECONDS)
                stream.wake.clear()
                pending, stream.pending = stream.pending, set()
                for sid in sorted(pending):
                    listing = self.hub.listing(sid)  # from memory: a cold session is not read from the database
                    if listing is not None:
                        await self._send(response, "session", session_view(listing))
        except ConnectionError:
            pass  # the page went away
        finally:
            self._streams.discard(stream)
        return response

    @staticmethod
    async def _send(response: web.StreamResponse, event: str, data: Any) -> None:
        await response.write(b"event: " + event.encode() + b"\ndata: " + encode(data) + b"\n\n")
