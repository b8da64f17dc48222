"""What every agent-report parser returns (`ServerReport`), its stream reader, and how reports become evidence."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import re

from agentctl.agent.reported.lines import LineScanner
from agentctl.evidence.contract.report import MAX_EXPOSED_TOOLS, ReportedState

if TYPE_CHECKING:
    from agentctl.evidence.ledger import Ledger


@dataclass(frozen=True)
class ServerReport:
    """One delivered server's status as the agent reported it. `summary` is already redacted and bounded."""

    name: str
    state: ReportedState
    raw_state: str | None = None  # the provider's own word; the ledger keeps it only as a short token
    tool_count: int | None = None
    reason_code: str | None = None
    summary: str | None = None
    # The built-in server's tools as the agent lists them for the model (names only; never a third party's).
    exposed_tools: list[str] | None = None


_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def exposed_names(names: Iterable[Any]) -> list[str]:
    """The built-in server's tool names as an agent lists them: MCP tool-name tokens only, bounded, sorted."""
    out: set[str] = set()
    for name in names:
        if isinstance(name, str) and _TOOL_NAME.fullmatch(name):
            out.add(name)
            if len(out) >= MAX_EXPOSED_TOOLS:
                break
    return sorted(out)


def record(ledger: Ledger, attempt_id: str, source: str, reports: Iterable[ServerReport]) -> int:
    """Record each report as `agent_reported` evidence of `attempt_id`; returns how many were kept."""
    kept = 0
    for report in reports:
        fields: dict[str, Any] = {"reported_state": report.state, "report_source": source, "raw_state": report.raw_state}
        for name in ("tool_count", "reason_code", "summary", "exposed_tools"):
            if getattr(report, name) is not None:
                fields[name] = getattr(report, name)
        if ledger.record("agent_reported", attempt_id, report.name, **fields) is not None:
            kept += 1
    return kept


class ReportReader:
    """Reads one CLI's output incrementally and returns the reports of each line a provider contract defines.

    Subclasses name the `markers` a candidate line must contain and parse one line (`parse_line`: None when
    the line is not one of theirs). Lines are bounded by `max_line`; nothing of a line outlives its parse.
    """

    markers: tuple[bytes, ...] = ()

    def __init__(self, delivered: Collection[str], max_line: int) -> None:
        self.delivered = frozenset(delivered)
        self._lines = LineScanner(self.markers, max_line)
        self.events_seen = 0  # lines that were one of the contract's events, with or without a report

    @property
    def oversized_lines(self) -> int:
        return self._lines.oversized_lines

    def feed(self, data: bytes) -> list[ServerReport]:
        return self._parse(self._lines.feed(data))

    def close(self) -> list[ServerReport]:
        return self._parse(self._lines.close())

    def parse_line(self, line: bytes) -> list[ServerReport] | None:
        raise NotImplementedError

    def _parse(self, lines: list[bytes]) -> list[ServerReport]:
        reports: list[ServerReport] = []
        for line in lines:
            found = self.parse_line(line)
            if found is not None:
                self.events_seen += 1
                reports.extend(found)
        return reports
