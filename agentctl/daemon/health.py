"""Health probes on the loopback port: /livez (the loop answers) and /readyz (every readiness check holds).

`/readyz?verbose` also says what a failing or degraded check means: the agent's end when it has exited,
the upstream's state (connected, buffering, superseded), and each degraded component's reason code.
Degraded never makes the daemon unready: it still serves MCP (a failed report write, for one, is retried
and the live report is whole), so a probe that restarted it would lose more than it saves.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agentctl.context import DaemonContext


def _agent(ctx: DaemonContext) -> dict[str, Any] | None:
    """How the agent stands, as codes and numbers only: nothing it said (its name, version and the summary
    of a start failure stay on the control socket), since this port answers without a credential."""
    agent = ctx.ledger.history.agent
    if agent is None:
        return None
    out: dict[str, Any] = {"state": agent.state}
    for key in ("start_failure", "exit_code", "exit_signal"):
        value = getattr(agent, key)
        if value is not None:
            out[key] = value
    if agent.state == "exited":
        out["stopped_by_daemon"] = agent.stopped_by_daemon
    return out


def install_health_routes(app: web.Application, ctx_key: web.AppKey[DaemonContext]) -> None:
    async def livez(request: web.Request) -> web.Response:
        return web.json_response({"live": True})

    async def readyz(request: web.Request) -> web.Response:
        ctx = request.app[ctx_key]
        readiness = ctx.readiness
        status = 200 if readiness.ready else 503
        if "verbose" not in request.query:
            return web.json_response({"ready": readiness.ready}, status=status)
        body: dict[str, Any] = {
            "ready": readiness.ready,
            "stopping": readiness.stopping,
            "checks": {
                name: {"ok": ok, **({"detail": readiness.details[name]} if name in readiness.details else {})}
                for name, ok in readiness.checks.items()
            },
            "degraded": dict(readiness.degraded),
        }
        agent = _agent(ctx)
        if agent is not None:
            body["agent"] = agent
        return web.json_response(body, status=status)

    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
