"""Owns the daemon's metrics-only listener (`--metrics-listen HOST:PORT`): a TCP port an operator may bind to a
pod's address so Prometheus can scrape a daemon whose MCP port stays on loopback.

It serves GET /metrics and nothing else (every other path and method is a 404 or 405 from the router, before
any handler): no token is asked for, since nothing there is a secret (agentctl.daemon.metrics_collector
says why), and nothing of the control API, the MCP endpoint, health or diagnostics is reachable through it.
Its connections are capped like every other listener's.
"""

from __future__ import annotations

import ipaddress
import logging

from aiohttp import web

from agentctl.daemon.metrics import METRICS_PATH, DaemonMetrics
from agentctl.listener_guard import GuardedSite, ListenerGuard
from agentctl.logs import http_server_logging

log = logging.getLogger(__name__)

# A scraper or two, and a person with curl: a few connections are plenty, and each costs a descriptor.
METRICS_CONNECTIONS = 16


class MetricsListenError(ValueError):
    """A --metrics-listen value that is not HOST:PORT; the message says what was given and what is taken."""


def parse_metrics_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT`, the host an IP address (a pod's, `0.0.0.0`, `::`) or `localhost`."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise MetricsListenError(f"--metrics-listen: not HOST:PORT: {text!r} (e.g. 0.0.0.0:9464 or [::]:9464)")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise MetricsListenError(f"--metrics-listen: the host must be an IP address or localhost, "
                                     f"not {host!r}") from None
    return host, int(port)


class MetricsListener:
    """The metrics-only site: its own aiohttp app and runner, sharing the daemon's `DaemonMetrics`."""

    def __init__(self, metrics: DaemonMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self.url: str | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=1024)
        runner_logging = http_server_logging(app, "metrics")
        app.router.add_get(METRICS_PATH, self.metrics.handle, allow_head=False)
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0, **runner_logging)
        await runner.setup()
        self._runner = runner
        site = GuardedSite(runner, ListenerGuard("metrics", METRICS_CONNECTIONS), host=self.host, port=self.port)
        try:
            await site.start()
        except OSError:
            await self.stop()
            raise
        bound = site.addresses[0]
        host_txt = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        self.url = f"http://{host_txt}:{bound[1]}{METRICS_PATH}"
        log.info("metrics served on %s (metrics only, no token)", self.url)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
