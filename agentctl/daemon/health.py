"""Health probes on the loopback port: /livez (the loop answers) and /readyz (every readiness check holds)."""

from __future__ import annotations

from aiohttp import web

from agentctl.daemon.context import DaemonContext


def install_health_routes(app: web.Application, ctx_key: web.AppKey[DaemonContext]) -> None:
    async def livez(request: web.Request) -> web.Response:
        return web.json_response({"live": True})

    async def readyz(request: web.Request) -> web.Response:
        readiness = request.app[ctx_key].readiness
        status = 200 if readiness.ready else 503
        if "verbose" not in request.query:
            return web.json_response({"ready": readiness.ready}, status=status)
        body = {
            "ready": readiness.ready,
            "stopping": readiness.stopping,
            "checks": {
                name: {"ok": ok, **({"detail": readiness.details[name]} if name in readiness.details else {})}
                for name, ok in readiness.checks.items()
            },
        }
        return web.json_response(body, status=status)

    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
