"""Health probes on the loopback port: /livez (the loop answers) and /readyz (every readiness check holds).

`/readyz?verbose` also says what a failing or degraded check means: the agent's end when it has exited,
the upstream's state (connected, buffering, superseded), and each degraded component's reason code.
Degraded never makes the daemon unready: it still serves MCP (a failed report write, for one, is retried
and the live report is whole), so a probe that restarted it would lose more than it saves.
"""

from __future__ import annotations

from aiohttp import web

from agentctl.context import DaemonContext
from agentctl.control.server import build_health
from agentctl.http_answers import json_response


def install_health_routes(app: web.Application, ctx_key: web.AppKey[DaemonContext]) -> None:
    async def livez(request: web.Request) -> web.Response:
        return web.json_response({"live": True})

    async def readyz(request: web.Request) -> web.Response:
        ctx = request.app[ctx_key]
        status = 200 if ctx.readiness.ready else 503
        if "verbose" not in request.query:
            return web.json_response({"ready": ctx.readiness.ready}, status=status)
        # The control socket's health answer, word for word: its agent part holds codes and numbers only.
        return json_response(build_health(ctx), status=status)

    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
