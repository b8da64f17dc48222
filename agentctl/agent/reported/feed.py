"""Owns feeding a passthrough CLI's output, as it passes through, to the report parser its strategy names.

`ReportFeed` is the one interface every output reader calls (the stdout drain of a pipe, a PTY reader):
`feed(chunk)` with the bytes exactly as read, `close()` once the stream has ended. A `LedgerFeed` parses
incrementally (bounded lines, nothing of a line kept past its parse) and records what the parser returns as
`agent_reported` evidence of the attempt the CLI was started for; the output itself is neither kept, nor
logged, nor persisted. `NULL_FEED` is for a CLI whose output carries no report.

`ReportPlan` says whether a run's output will carry a report (which provider contract) or, when it will not,
the plain sentence that says so; each agent's module decides it from the CLI's final argv (agentctl/agent/clis/),
with the pure argv helpers below.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from agentctl.agent.reported.base import ReportReader, ServerReport, record

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.evidence.ledger import Ledger

log = logging.getLogger(__name__)


class ReportFeed(Protocol):
    def feed(self, chunk: bytes) -> None: ...

    def close(self) -> None: ...


class _NullFeed:
    def feed(self, chunk: bytes) -> None:
        pass

    def close(self) -> None:
        pass


NULL_FEED: ReportFeed = _NullFeed()


class LedgerFeed:
    """Parses one CLI run's output with `reader` and records each report on `attempt_id` as it completes."""

    def __init__(self, ledger: Ledger, attempt_id: str, source: str, reader: ReportReader) -> None:
        self._ledger = ledger
        self._attempt_id = attempt_id
        self._source = source
        self._reader: ReportReader | None = reader
        self.recorded = 0

    def feed(self, chunk: bytes) -> None:
        if self._reader is not None:
            self._record(self._reader.feed(chunk))

    def close(self) -> None:
        """The stream ended: a last line without a newline is parsed; later calls do nothing."""
        reader, self._reader = self._reader, None
        if reader is not None:
            self._record(reader.close())

    def _record(self, reports: list[ServerReport]) -> None:
        if not reports:
            return
        try:
            self.recorded += record(self._ledger, self._attempt_id, self._source, reports)
        except Exception as exc:  # the output must keep flowing: a full pipe would stop the CLI
            self._reader = None
            log.warning("the agent's report could not be recorded (%s); no more is read from this run",
                        type(exc).__name__)


# ---- which report a CLI run will give -------------------------------------------------------------------

_PRINT_FLAGS = ("-p", "--print")


@dataclass(frozen=True)
class ReportPlan:
    """Either a provider contract the output will carry (`source`), or `note`: why no report is available.
    Which one a CLI's run gives is its agent module's rule (agentctl/agent/clis/)."""

    source: str | None = None
    note: str | None = None


REPORT_OFF = ReportPlan(note="reading the agent's own report is switched off (agent.report = \"off\")")
NO_STRATEGY = ReportPlan(note="no passthrough strategy: no agent report is available")


def options(argv: Sequence[str]) -> list[str]:
    """The arguments before a `--` separator (after it they are positional, never the CLI's own flags)."""
    argv = list(argv)
    return argv[: argv.index("--")] if "--" in argv else argv


def option_value(argv: Sequence[str], name: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` (the last one wins, as for every argument parser)."""
    value = None
    args = options(argv)
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1:]
    return value


def is_print_mode(argv: Sequence[str]) -> bool:
    return any(arg in _PRINT_FLAGS for arg in options(argv))
