"""The control API (`/v1/...`) served over the Unix control socket.

The daemon serves ONE aiohttp application on two sites: loopback TCP (MCP, /livez, /readyz) and the
control socket. `control_guard` keeps `/v1/` off TCP (404, as if it did not exist) and refuses
Unix peers whose uid is neither the daemon's nor root (403) before any handler runs.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler

from agentctl.unix_socket import peer_allowed, peer_cred
from agentctl.evidence.contract.control import (
    AgentReadiness,
    AttachedGate,
    CheckState,
    HealthResponse,
    StatusResponse,
    StopResult,
)
from agentctl.evidence.contract.report import AgentState
from agentctl.evidence.required import judge, required_names
from agentctl.http_answers import error_response, json_response, status_reason
from agentctl.logs import log_failure

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.context import DaemonContext

log = logging.getLogger(__name__)

PREFIX = "/v1/"
_CONTROL_METHODS = {m: m for m in ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH")}
_MAX_WARNED_UIDS = 16


def peer_uid(sock: Any) -> int | None:
    """The uid of the process at the other end of a connected AF_UNIX socket, or None when unknown."""
    cred = peer_cred(sock)
    return cred[1] if cred is not None else None


def _is_control_path(path: str) -> bool:
    return path == PREFIX.rstrip("/") or path.startswith(PREFIX)


def control_guard(ctx_key: web.AppKey[DaemonContext]) -> Any:
    """The middleware guarding `/v1/`: not on TCP, and only for our own uid and root on the Unix socket."""
    warned_uids: set[int | None] = set()

    @web.middleware
    async def control_guard_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not _is_control_path(request.path):
            return await handler(request)
        transport = request.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None or getattr(sock, "family", None) != socket.AF_UNIX:
            # Over TCP the control API does not exist (not "forbidden": nothing to discover).
            return error_response(404, "unknown_route", "not found")
        uid = peer_uid(sock)
        if not peer_allowed(uid):
            # Counted (diagnostics show it) and logged once per uid: another local user probing the socket
            # is worth knowing about, but must not be able to flood the log.
            request.app[ctx_key].ledger.count_refusal("control", _CONTROL_METHODS.get(request.method, "OTHER"), 403)
            if uid not in warned_uids and len(warned_uids) < _MAX_WARNED_UIDS:
                warned_uids.add(uid)
                log.warning("refused a control request from uid %s: only the daemon's own user and root may use "
                            "the control socket", "unknown" if uid is None else uid)
            return error_response(403, "forbidden_peer",
                                  "forbidden: the control socket serves only the daemon's own user and root")
        return await _handle(request, handler)

    return control_guard_middleware


async def _handle(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Run an allowed control request; HTTP errors and failures become one-line JSON errors."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 405:
            return error_response(405, "wrong_method", f"method {request.method} not allowed on {request.path}")
        if exc.status == 404:
            return error_response(404, "unknown_route", f"no control route {request.path}")
        return error_response(exc.status, status_reason(exc.status), exc.reason)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log_failure(log, f"control request {request.method} {request.path} failed", exc)
        return error_response(500, "internal_error", "internal error")


def build_status(ctx: DaemonContext) -> StatusResponse:
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
        upstream=ctx.upstream.status() if ctx.upstream is not None else None,
        agent=history.agent,
        degraded=dict(ctx.readiness.degraded),
        required=build_gate(ctx),
    )


def agent_readiness(agent: AgentState | None) -> AgentReadiness | None:
    """The agent's state for readiness: codes and numbers only, whoever asks."""
    if agent is None:
        return None
    return AgentReadiness(
        state=agent.state,
        start_failure=agent.start_failure,
        exit_code=agent.exit_code,
        exit_signal=agent.exit_signal,
        stopped_by_daemon=agent.stopped_by_daemon if agent.state == "exited" else None,
    )


def build_health(ctx: DaemonContext) -> HealthResponse:
    """Readiness as GET /v1/health and `/readyz?verbose` both answer it."""
    readiness = ctx.readiness
    return HealthResponse(
        live=True,
        ready=readiness.ready,
        stopping=readiness.stopping,
        checks={name: CheckState(ok=ok, detail=readiness.details.get(name)) for name, ok in readiness.checks.items()},
        degraded=dict(readiness.degraded),
        agent=agent_readiness(ctx.ledger.history.agent),
        required=gate_readiness(build_gate(ctx)),
    )


def gate_readiness(gate: AttachedGate | None) -> AttachedGate | None:
    """The gate as readiness carries it: its state and times only. Which servers, and the evidence in words
    (the agent's own among them), stay on the control socket: the loopback probe answers without a credential."""
    return None if gate is None else AttachedGate(state=gate.state, timeout=gate.timeout, waited=gate.waited)


def build_gate(ctx: DaemonContext, now: datetime | None = None) -> AttachedGate | None:
    """The required-server gate on the current attempt (None when the spec requires no server): what
    `run --prompt` waits on, GET /v1/attached answers and `/readyz?verbose` carries."""
    mcp = ctx.spec.mcp
    required = required_names(mcp.builtin_name, mcp.builtin_required, [s.name for s in mcp.servers if s.required])
    agent = ctx.ledger.history.agent
    exited = agent is not None and agent.state == "exited"
    # A passthrough CLI run whose arguments ask for no report of its servers (its start says so, and why).
    silent = agent is not None and agent.protocol == "passthrough" and agent.report_source is None
    no_report = agent.report_note if agent is not None and silent else None
    return judge(ctx.ledger.history.current, required, builtin_name=mcp.builtin_name, timeout=mcp.required_timeout,
                 now=now or ctx.ledger.now(), agent_exited=exited, no_report=no_report)


def install_control_routes(app: web.Application, ctx_key: web.AppKey[DaemonContext]) -> None:
    """Add the guard middleware and the /v1 routes. Call before the app is frozen (before runner.setup)."""
    if app.frozen:
        raise RuntimeError("install_control_routes must run before the application is frozen")
    app.middlewares.append(control_guard(ctx_key))

    async def status(request: web.Request) -> web.Response:
        return json_response(build_status(request.app[ctx_key]))

    async def report(request: web.Request) -> web.Response:
        return json_response(request.app[ctx_key].ledger.history)

    async def health(request: web.Request) -> web.Response:
        return json_response(build_health(request.app[ctx_key]))

    async def attached(request: web.Request) -> web.Response:
        gate = build_gate(request.app[ctx_key])
        return json_response(gate if gate is not None else AttachedGate(state="open", timeout=0.0))

    async def stop(request: web.Request) -> web.StreamResponse:
        ctx = request.app[ctx_key]
        response = json_response(StopResult(stopping=True), status=202)
        # Send the whole response first: the stop trigger starts shutdown, which closes this connection.
        await response.prepare(request)
        await response.write_eof()
        asyncio.get_running_loop().call_soon(ctx.request_stop)
        return response

    app.router.add_get("/v1/status", status, allow_head=False)
    app.router.add_get("/v1/report", report, allow_head=False)
    app.router.add_get("/v1/health", health, allow_head=False)
    app.router.add_get("/v1/attached", attached, allow_head=False)
    app.router.add_post("/v1/stop", stop)
