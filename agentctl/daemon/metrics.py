"""Owns the daemon's Prometheus `/metrics` route on its loopback port and what it counts from the start: the
route is mounted and the counts listen to the ledger when the daemon starts; the exposition (prometheus_client,
~1 MB, agentctl.daemon.metrics_collector) is imported at the first scrape, so a daemon nobody scrapes never
loads it.

No token is needed: nothing exposed is a secret (agentctl.daemon.metrics_collector says why).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING

from aiohttp import web

from agentctl.evidence.contract.report import EVIDENCE_KINDS, EvidenceEvent
from agentctl.evidence.ledger import Ledger

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.context import DaemonContext

# The hub serves its own at the same path (agentctl.hub.metrics.METRICS_PATH, which imports the exposition).
METRICS_PATH = "/metrics"


class DaemonCounts:
    """What the daemon's state does not keep, counted by one ledger listener from the daemon's start: every
    evidence event by kind, every attempt and every agent start.

    An attempt that supersedes another is counted as an `attempt_superseded` event here: the reducer writes
    that marker into the old attempt's log itself, so it never passes the ledger's listeners as an event."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.events: Counter[str] = Counter()
        history = ledger.history
        self._attempt = history.current.attempt_id if history.current else None
        self._started: datetime | None = history.agent.started_at if history.agent else None
        self.attempts = 1 if self._attempt else 0
        self.agent_starts = 1 if self._started else 0
        ledger.subscribe(self._on_change)

    def close(self) -> None:
        self.ledger.unsubscribe(self._on_change)

    def _on_change(self, event: EvidenceEvent | None) -> None:
        if event is not None:
            self.events[event.kind if event.kind in EVIDENCE_KINDS else "other"] += 1
            return
        history = self.ledger.history
        attempt = history.current.attempt_id if history.current else None
        if attempt is not None and attempt != self._attempt:
            self.attempts += 1
            if self._attempt is not None:
                self.events["attempt_superseded"] += 1
        self._attempt = attempt
        started = history.agent.started_at if history.agent else None
        if started is not None and started != self._started:
            self.agent_starts += 1
        self._started = started


class DaemonMetrics:
    """The daemon's counts and its one /metrics handler, served on the MCP port and, when asked, on the
    metrics-only listener (agentctl.daemon.metrics_listener): both expose the same registry."""

    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        self.counts = DaemonCounts(ctx.ledger)
        self._handler: Callable[[web.Request], Awaitable[web.Response]] | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self._handler is None:
            # Once, on the event loop: the import takes tens of milliseconds, paid by the first scrape only.
            from agentctl.daemon.metrics_collector import daemon_metrics_handler

            self._handler = daemon_metrics_handler(self.ctx, self.counts)
        return await self._handler(request)

    def close(self) -> None:
        self.counts.close()


def install_metrics_route(app: web.Application, ctx: DaemonContext) -> DaemonMetrics:
    """Mount GET /metrics on `app`; its registry (one per daemon) is built at the first scrape."""
    metrics = DaemonMetrics(ctx)

    async def close(_app: web.Application) -> None:
        metrics.close()

    app.router.add_get(METRICS_PATH, metrics.handle, allow_head=False)
    app.on_cleanup.append(close)
    return metrics
