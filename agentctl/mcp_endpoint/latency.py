"""Owns the built-in MCP endpoint's request latencies by method: bucket counts kept in memory (no I/O, no
prometheus_client: the exposition reads them at a scrape, agentctl.daemon.metrics_collector).

The method label is a closed set: the MCP methods a client sends to a server, and "other" for any other
string, so a client cannot grow the label set.
"""

from __future__ import annotations

from bisect import bisect_left

# Seconds. The endpoint answers from memory in well under a millisecond; a tools/call through the upstream
# tunnel waits on a task and its executor, up to minutes.
BUCKETS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                              10.0, 30.0, 60.0, 300.0)
METHODS: tuple[str, ...] = (
    "initialize", "server/discover", "ping", "tools/list", "tools/call", "resources/list",
    "resources/templates/list", "resources/read", "resources/subscribe", "resources/unsubscribe", "prompts/list",
    "prompts/get", "completion/complete", "logging/setLevel", "tasks/get", "tasks/result", "tasks/list",
    "tasks/cancel", "other",
)
_KNOWN = frozenset(METHODS)


def method_label(method: object) -> str:
    return method if isinstance(method, str) and method in _KNOWN else "other"


class RequestLatency:
    """Per method: the count in each bucket (not cumulative), the count and the sum of seconds."""

    def __init__(self) -> None:
        self.buckets: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}

    def observe(self, method: object, seconds: float) -> None:
        label = method_label(method)
        counts = self.buckets.get(label)
        if counts is None:
            counts = self.buckets[label] = [0] * (len(BUCKETS) + 1)
        counts[bisect_left(BUCKETS, seconds)] += 1
        self.sums[label] = self.sums.get(label, 0.0) + seconds

    def cumulative(self, method: str) -> list[tuple[str, int]]:
        """Prometheus's buckets for `method`: (upper bound, count at or below it), `+Inf` last."""
        total, out = 0, []
        for bound, count in zip((*map(str, BUCKETS), "+Inf"), self.buckets.get(method, ()), strict=False):
            total += count
            out.append((bound, total))
        return out
