"""Owns feeding a passthrough CLI's output, as it passes through, to the report parser its strategy names.

`ReportFeed` is the one interface every output reader calls (the stdout drain of a pipe, a PTY reader):
`feed(chunk)` with the bytes exactly as read, `close()` once the stream has ended. A `LedgerFeed` parses
incrementally (bounded lines, nothing of a line kept past its parse) and records what the parser returns as
`agent_reported` evidence of the attempt the CLI was started for; the output itself is neither kept, nor
logged, nor persisted. `NULL_FEED` is for a CLI whose output carries no report.

`plan_report` decides, from the strategy and the CLI's final argv, whether the CLI's output will carry a
report (which provider contract) or, when it will not, the plain sentence that says so. It is pure.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

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

CLAUDE_REQUEST = ("--output-format", "stream-json", "--verbose")
_PRINT_FLAGS = ("-p", "--print")


@dataclass(frozen=True)
class ReportPlan:
    """Either a provider contract the output will carry (`source`), or `note`: why no report is available."""

    source: str | None = None
    note: str | None = None


def _options(argv: Sequence[str]) -> list[str]:
    """The arguments before a `--` separator (after it they are positional, never the CLI's own flags)."""
    argv = list(argv)
    return argv[: argv.index("--")] if "--" in argv else argv


def option_value(argv: Sequence[str], name: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` (the last one wins, as for every argument parser)."""
    value = None
    args = _options(argv)
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1:]
    return value


def claude_stream_json(argv: Sequence[str]) -> bool:
    """Whether Claude Code run with `argv` prints stream-json (its init event needs `--verbose` with `-p`)."""
    args = _options(argv)
    return option_value(args, "--output-format") == "stream-json" and "--verbose" in args and is_print_mode(args)


def is_print_mode(argv: Sequence[str]) -> bool:
    return any(arg in _PRINT_FLAGS for arg in _options(argv))


def claude_request_args(argv: Sequence[str]) -> list[str]:
    """What to add so a print-mode Claude Code run reports its servers; nothing when the user chose an
    output format already (theirs is kept) or the run is interactive (a TUI has no stream-json)."""
    args = _options(argv)
    if not is_print_mode(args) or option_value(args, "--output-format") is not None:
        return []
    return ["--output-format", "stream-json"] + ([] if "--verbose" in args else ["--verbose"])


_NO_REPORT = {
    "codex": "Codex's exec mode prints no MCP server status (only `codex app-server` does: run that, with a "
             "client driving it, and agentctl reads its startup notifications): no agent report is available "
             "for this run",
    "gemini": "Gemini CLI prints no MCP server status in its output: no agent report is available for this CLI",
    "opencode": "OpenCode prints no MCP server status in its run output (only `opencode serve` answers it, at "
                "GET /mcp, which agentctl then asks): no agent report is available for this run",
    "cursor": "Cursor's agent CLI was not measured here: no agent report is read for it",
}


def plan_report(strategy: str | None, argv: Sequence[str], mode: str = "auto") -> ReportPlan:
    """Whether the CLI run `argv` under `strategy` will report its MCP servers, and from which contract."""
    if mode == "off":
        return ReportPlan(note="reading the agent's own report is switched off (agent.report = \"off\")")
    if strategy == "claude":
        from agentctl.agent.reported.claude import SOURCE

        if claude_stream_json(argv):
            return ReportPlan(source=SOURCE)
        if not is_print_mode(argv):
            return ReportPlan(note="Claude Code runs interactively (no -p): its terminal UI carries no "
                                   "machine-readable MCP status, so no agent report is available")
        return ReportPlan(note="Claude Code runs without `--output-format stream-json --verbose`: no agent "
                               "report is available (set agent.report = \"request\" to have agentctl add them)")
    if strategy is None:
        return ReportPlan(note="no passthrough strategy: no agent report is available")
    if strategy == "codex":
        from agentctl.agent.reported.codex import SOURCE as CODEX, is_app_server

        if is_app_server(argv):
            return ReportPlan(source=CODEX)
    if strategy == "opencode":
        from agentctl.agent.reported.opencode import SOURCE as OPENCODE, is_serve

        if is_serve(argv):
            return ReportPlan(source=OPENCODE)
    return ReportPlan(note=_NO_REPORT.get(strategy, "this CLI has no known MCP status output: no agent report"))


def open_reader(
    plan: ReportPlan, delivered: Collection[str], builtin: str | None = None, secrets: Any = ()
) -> ReportReader | None:
    """The incremental parser of `plan.source` for the servers agentctl delivered, or None. `builtin` names
    the built-in server, whose exposed tools a reader keeps (agentctl's own tools: the exposure check)."""
    if plan.source is None or not delivered:
        return None
    from agentctl.agent.reported.claude import SOURCE as CLAUDE, ClaudeInitReader
    from agentctl.agent.reported.codex import SOURCE as CODEX, CodexAppServerReader

    if plan.source == CLAUDE:
        return ClaudeInitReader(delivered, builtin=builtin)
    return CodexAppServerReader(delivered, secrets, builtin=builtin) if plan.source == CODEX else None


def open_feed(
    ledger: Ledger, attempt_id: str, plan: ReportPlan, delivered: Collection[str], builtin: str | None = None
) -> ReportFeed:
    """The feed for one CLI run: a parser of `plan.source` recording on `attempt_id`, or `NULL_FEED`."""
    from agentctl.agent.reported import opencode

    if plan.source == opencode.SOURCE and delivered:
        from agentctl.agent.reported.acp_tap import ReportSink

        return opencode.ServeFeed(ReportSink(ledger), attempt_id, delivered, ledger.secrets)
    reader = open_reader(plan, delivered, builtin, ledger.secrets)
    if reader is None or plan.source is None:
        return NULL_FEED
    return LedgerFeed(ledger, attempt_id, plan.source, reader)
