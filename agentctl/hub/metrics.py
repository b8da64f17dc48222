"""Owns the hub's Prometheus `/metrics` on its page port: a per-hub registry whose one collector reads the
hub at scrape time (sessions, connected daemons, frames ingested by type, refused frames by reason code,
store errors, the database's size and its oldest session as retention last measured them).

Labels come from closed sets only (a frame type tag of the upstream protocol, an error code of its
ERROR_CODES): never a session, task or execution id, a server name or a token. The page's token is not
needed for it: nothing here is a secret.
"""

from __future__ import annotations

import platform
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, get_args

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from agentctl import __version__
from agentctl.evidence.contract.report import CONTRACT_VERSION, STATUSES
from agentctl.upstream import protocol as P

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.hub.hub import Hub

METRICS_PATH = "/metrics"

# The frames a daemon sends, by their type tag (the decoder accepts no other).
FRAME_KINDS: tuple[str, ...] = tuple(t.__struct_config__.tag for t in get_args(P.DaemonFrame))


def build_info() -> InfoMetricFamily:
    """`agentctl_build_info{version, contract, python}` 1: which agentctl a scrape came from."""
    return InfoMetricFamily("agentctl_build", "agentctl's version, evidence contract version and Python",
                            value={"version": __version__, "contract": str(CONTRACT_VERSION),
                                   "python": platform.python_version()})


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    metric = GaugeMetricFamily(name, documentation)
    metric.add_metric([], value)
    return metric


def by_label(metric: CounterMetricFamily | GaugeMetricFamily, values: Iterable[str],
             counts: Mapping[str, float]) -> Metric:
    """`metric` (one label) with a sample for every value of its closed set: zero when none was counted."""
    for value in values:
        metric.add_metric([value], counts.get(value, 0))
    return metric


SESSION_STATES: tuple[str, ...] = (*STATUSES, "no_servers")


class HubCollector(Collector):
    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    def collect(self) -> Iterator[Metric]:
        hub = self.hub
        yield build_info()
        counts = hub.retention.counts  # counted by the database (each scrape asks first: HubWeb)
        yield gauge("agentctl_hub_sessions", "Sessions the hub knows (in its database)", counts.total)
        yield by_label(GaugeMetricFamily("agentctl_hub_sessions_by_state", "Sessions by the display state of their "
                                         "current attempt: failed if a server failed, else its most advanced "
                                         "server's state", labels=["state"]),
                       SESSION_STATES, counts.by_state)
        yield gauge("agentctl_hub_sessions_needing_attention", "Sessions whose current attempt has a failed server, "
                    "a session error, or no server sent to the agent", counts.attention)
        yield gauge("agentctl_hub_sessions_blocked_on_required", "Sessions whose current attempt the required-server "
                    "gate blocked (a required server failed or was not attached in time: no prompt was sent)",
                    counts.blocked)
        yield by_label(GaugeMetricFamily("agentctl_hub_sessions_by_connection", "Sessions by whether their current "
                                         "execution's daemon is connected", labels=["daemon"]),
                       ("connected", "not_connected"),
                       {"connected": counts.connected, "not_connected": counts.total - counts.connected})
        yield gauge("agentctl_hub_connected_daemons", "Daemon connections that said hello", hub.connected_daemons)
        yield by_label(CounterMetricFamily("agentctl_hub_frames", "Frames received from daemons, by type",
                                           labels=["kind"]), FRAME_KINDS, hub.frames_by_kind)
        yield by_label(CounterMetricFamily("agentctl_hub_refused_frames", "Connections closed for a refused "
                                           "frame, by reason code", labels=["code"]),
                       (*P.ERROR_CODES, "unknown"), hub.memory.refusals_by_code)
        yield CounterMetricFamily("agentctl_hub_events_applied", "Evidence events applied", value=hub.events_applied)
        retention = hub.retention  # measured by its rounds, never on a scrape
        yield gauge("agentctl_hub_database_bytes", "The hub database's size", retention.size_bytes)
        oldest = retention.oldest_contact_at
        yield gauge("agentctl_hub_oldest_session_contact_timestamp_seconds", "Last contact of the oldest session "
                    "kept, Unix time (0: no session)", oldest.timestamp() if oldest is not None else 0)
        yield CounterMetricFamily("agentctl_hub_store_errors", "Failed database writes (each retried)",
                                  value=hub.memory.store_errors)


def hub_registry(hub: Hub) -> CollectorRegistry:
    """A registry of this hub's own: two hubs in one process share no counter."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HubCollector(hub))
    return registry


def metrics_handler(registry: CollectorRegistry) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The GET /metrics handler: the Prometheus text exposition of `registry` (the daemon's /metrics too)."""

    async def metrics(request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(registry))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        response.headers["Cache-Control"] = "no-store"
        return response

    return metrics
