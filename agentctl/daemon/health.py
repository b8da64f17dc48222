"""Health probes on the loopback port: /livez (the loop answers) and /readyz (every readiness check holds).

`/readyz?verbose` also says what a failing or degraded check means: the agent's end when it has exited,
the upstream's state (connected, buffering, superseded), and each degraded component's reason code.
Degraded never makes the daemon unready: it still serves MCP (a failed report write, for one, is retried
and the live report is whole), so a probe that restarted it would lose more than it saves.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from agentctl.evidence.contract.control import HealthResponse
from agentctl.http_answers import json_response


def install_health_routes(app: web.Application, ready: Callable[[], bool], health: Callable[[], HealthResponse]) -> None:
    """The probes, given only what they use: whether the daemon is ready, and its health answer (the control
    socket's, built when asked)."""
    async def livez(request: web.Request) -> web.Response:
        return web.json_response({"live": True})

    async def readyz(request: web.Request) -> web.Response:
        now_ready = ready()
        status = 200 if now_ready else 503
        if "verbose" not in request.query:
            return web.json_response({"ready": now_ready}, status=status)
        # The control socket's health answer, word for word: its agent part holds codes and numbers only.
        return json_response(health(), status=status)

    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
