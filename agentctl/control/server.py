"""The control API (`/v1/...`) served over the Unix control socket.

The daemon serves ONE aiohttp application on two sites: loopback TCP (MCP, /livez, /readyz) and the
control socket. `control_guard_middleware` keeps `/v1/` off TCP (404, as if it did not exist) and refuses
Unix peers whose uid is neither the daemon's nor root (403) before any handler runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from typing import Any

import msgspec
from aiohttp import web

from agentctl.evidence.contract import HealthResponse, StatusResponse, encode

log = logging.getLogger(__name__)

PREFIX = "/v1/"
_UCRED = struct.Struct("3i")  # struct ucred { pid_t pid; uid_t uid; gid_t gid; }


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=encode(body), status=status, content_type="application/json")


def error_response(status: int, message: str) -> web.Response:
    return json_response({"error": message}, status=status)


def peer_uid(sock: Any) -> int | None:
    """The uid of the process at the other end of a connected AF_UNIX socket, or None when unknown."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        return None  # not Linux: fail closed
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, peercred, _UCRED.size)
    except OSError:
        return None
    _pid, uid, _gid = _UCRED.unpack(raw)
    return uid


def _is_control_path(path: str) -> bool:
    return path == PREFIX.rstrip("/") or path.startswith(PREFIX)


@web.middleware
async def control_guard_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    if not _is_control_path(request.path):
        return await handler(request)
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or getattr(sock, "family", None) != socket.AF_UNIX:
        # Over TCP the control API does not exist (not "forbidden": nothing to discover).
        return error_response(404, "not found")
    uid = peer_uid(sock)
    if uid is None or uid not in (0, os.getuid(), os.geteuid()):
        return error_response(403, "forbidden: the control socket serves only the daemon's own user and root")
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 405:
            return error_response(405, f"method {request.method} not allowed on {request.path}")
        if exc.status == 404:
            return error_response(404, f"no control route {request.path}")
        return error_response(exc.status, exc.reason)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("control request %s %s failed", request.method, request.path)
        return error_response(500, "internal error")


def build_status(ctx: Any) -> StatusResponse:
    """The status view of a DaemonContext: what `agentctl status` shows (also used by `agentctl run`)."""
    history = ctx.ledger.history
    return StatusResponse(
        identity=history.identity,
        ready=ctx.readiness.ready,
        checks=dict(ctx.readiness.checks),
        current=history.current,
        report_path=str(ctx.report_path) if ctx.report_path is not None else None,
        mcp_url=ctx.mcp_url,
        rejected_events=history.rejected_events,
        upstream=ctx.upstream.status() if getattr(ctx, "upstream", None) is not None else None,
    )


def install_control_routes(app: web.Application, ctx_key: web.AppKey) -> None:
    """Add the guard middleware and the /v1 routes. Call before the app is frozen (before runner.setup)."""
    if app.frozen:
        raise RuntimeError("install_control_routes must run before the application is frozen")
    app.middlewares.append(control_guard_middleware)

    async def status(request: web.Request) -> web.Response:
        return json_response(build_status(request.app[ctx_key]))

    async def report(request: web.Request) -> web.Response:
        return json_response(request.app[ctx_key].ledger.history)

    async def health(request: web.Request) -> web.Response:
        readiness = request.app[ctx_key].readiness
        body = HealthResponse(
            live=True,
            ready=readiness.ready,
            stopping=readiness.stopping,
            checks=dict(readiness.checks),
            details=dict(readiness.details),
        )
        return json_response(body)

    async def stop(request: web.Request) -> web.StreamResponse:
        ctx = request.app[ctx_key]
        response = json_response({"stopping": True}, status=202)
        # Send the whole response first: the stop trigger starts shutdown, which closes this connection.
        await response.prepare(request)
        await response.write_eof()
        asyncio.get_running_loop().call_soon(ctx.request_stop)
        return response

    app.router.add_get("/v1/status", status, allow_head=False)
    app.router.add_get("/v1/report", report, allow_head=False)
    app.router.add_get("/v1/health", health, allow_head=False)
    app.router.add_post("/v1/stop", stop)
