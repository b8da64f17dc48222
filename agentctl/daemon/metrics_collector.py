"""Owns what the daemon's Prometheus `/metrics` exposes: a per-daemon registry whose collector reads the
daemon's own state at scrape time (build info, attempts, rows by display state, evidence by kind, MCP request
latency by method, HTTP refusals, the upstream's queue, agent restarts, the required-server gate), with prometheus_client's process and
platform collectors beside it. Imported at the first scrape (agentctl.daemon.metrics mounts the route and
counts from the start), so prometheus_client is no part of a daemon that is never scraped.

Every label value comes from a closed set the daemon itself defines (an evidence kind, a display state, a
route the daemon names, a method, a status code, an upstream state): never a server name, a session or
attempt id, a token or anything a client sent. No token is needed: nothing here is a secret.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, get_args

from prometheus_client import PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from agentctl.evidence.contract.report import GateState, RequiredState
from agentctl.evidence.contract.report import EVIDENCE_KINDS, Status
from agentctl.hub.metrics import build_info, by_label, gauge, metrics_handler
from agentctl.mcp_endpoint.latency import METHODS
from agentctl.mcp_endpoint.server import MCP_PATH, MESSAGES_PATH, SSE_PATH

if TYPE_CHECKING:  # pragma: no cover
    from aiohttp import web

    from agentctl.context import DaemonContext
    from agentctl.daemon.metrics import DaemonCounts

STATES: tuple[str, ...] = get_args(Status)
UPSTREAM_STATES = ("connected", "buffering", "superseded")
GATE_STATES: tuple[str, ...] = get_args(GateState)
REQUIRED_STATES: tuple[str, ...] = get_args(RequiredState)
# Routes the daemon counts refusals under (the MCP endpoint's and the control socket's); anything else
# would be a bug, and is shown as "other" rather than trusted as a label.
REFUSAL_ROUTES = frozenset({MCP_PATH, SSE_PATH, MESSAGES_PATH, "control"})
_METHODS = frozenset({"GET", "POST", "DELETE", "PUT", "HEAD", "OPTIONS", "PATCH", "OTHER"})


class DaemonCollector(Collector):
    """Reads the daemon's state on each scrape, and the counts of what the state does not keep (`counts`,
    listening to the ledger since the daemon started)."""

    def __init__(self, ctx: DaemonContext, counts: DaemonCounts) -> None:
        self.ctx = ctx
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        history = self.ctx.ledger.history
        yield build_info()
        yield CounterMetricFamily("agentctl_attempts", "Attachment attempts opened since the daemon started",
                                  value=self.counts.attempts)
        yield gauge("agentctl_attempts_kept", "Attempts the report keeps (current and previous)",
                    (1 if history.current else 0) + len(history.previous))
        by_state: Counter[str] = (Counter(row.status for row in history.current.servers) if history.current
                                  else Counter())
        yield by_label(GaugeMetricFamily("agentctl_servers", "Server rows of the current attempt by display state",
                                         labels=["state"]), STATES, by_state)
        yield by_label(CounterMetricFamily("agentctl_evidence_events", "Evidence events recorded, by kind",
                                           labels=["kind"]), EVIDENCE_KINDS, self.counts.events)
        refusals = CounterMetricFamily("agentctl_http_refusals",
                                       "HTTP requests refused before any handler, by route, method and status",
                                       labels=["route", "method", "status"])
        merged: Counter[tuple[str, str, str]] = Counter()
        for r in history.http_refusals:
            route = r.route if r.route in REFUSAL_ROUTES else "other"
            method = r.method if r.method in _METHODS else "OTHER"
            status = str(r.status) if 100 <= r.status <= 599 else "other"
            merged[(route, method, status)] += r.count
        for labels, count in sorted(merged.items()):
            refusals.add_metric(list(labels), count)
        yield refusals
        yield CounterMetricFamily("agentctl_rejected_events", "Evidence naming an attempt no longer kept, or a "
                                  "foreign execution", value=history.rejected_events)
        yield from self._latency()
        yield from self._agent()
        yield from self._upstream()
        yield from self._required()

    def _required(self) -> Iterator[Metric]:
        from agentctl.control.server import build_gate

        gate = build_gate(self.ctx)
        if gate is None:
            return
        yield by_label(GaugeMetricFamily("agentctl_required_gate", "1 for the required-server gate's current "
                                         "state", labels=["state"]), GATE_STATES, {gate.state: 1})
        yield by_label(GaugeMetricFamily("agentctl_required_servers", "Required servers by the gate's reading",
                                         labels=["state"]), REQUIRED_STATES,
                       Counter(server.state for server in gate.servers))

    def _latency(self) -> Iterator[Metric]:
        endpoint = self.ctx.endpoint
        if endpoint is None:
            return
        latency = endpoint.observer.latency
        family = HistogramMetricFamily("agentctl_mcp_request_duration_seconds", "Time the built-in MCP endpoint "
                                       "took to answer a request, by JSON-RPC method", labels=["method"])
        for method in METHODS:
            if method in latency.buckets:
                family.add_metric([method], latency.cumulative(method), latency.sums[method])
        yield family

    def _agent(self) -> Iterator[Metric]:
        agent = self.ctx.ledger.history.agent
        yield CounterMetricFamily("agentctl_agent_restarts", "Agent process starts after the first",
                                  value=max(0, self.counts.agent_starts - 1))
        yield gauge("agentctl_agent_running", "1 while the supervised agent's process runs",
                    1 if agent is not None and agent.state == "running" else 0)

    def _upstream(self) -> Iterator[Metric]:
        publisher = self.ctx.upstream
        if publisher is None:
            return
        status = publisher.status()
        yield by_label(GaugeMetricFamily("agentctl_upstream_state", "1 for the upstream link's current state",
                                         labels=["state"]), UPSTREAM_STATES, {status.state: 1})
        yield gauge("agentctl_upstream_buffered_bytes", "Bytes held for the upstream: queued frames plus the "
                    "socket's send buffer", status.buffered_bytes)
        yield gauge("agentctl_upstream_lag_frames", "Evidence frames recorded but not yet written to the upstream",
                    publisher.queued_evidence)
        yield CounterMetricFamily("agentctl_upstream_connects", "Upstream connections made", value=status.connects)
        yield CounterMetricFamily("agentctl_upstream_dropped_events", "Evidence frames dropped on overflow "
                                  "(a resync snapshot repaired each gap)", value=status.dropped_events)
        yield CounterMetricFamily("agentctl_upstream_resyncs", "Snapshots sent because frames were dropped",
                                  value=status.resyncs)


def daemon_metrics_handler(ctx: DaemonContext,
                           counts: DaemonCounts) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The GET /metrics handler of one daemon, with a registry of its own (two daemons in a process share
    nothing)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DaemonCollector(ctx, counts))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return metrics_handler(registry)
