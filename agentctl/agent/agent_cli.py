"""Owns the shape of what agentctl knows about one agent CLI: `AgentCli`, the one object each module of
agentctl/agent/clis/ exports as `AGENT` (its strategy, report reader, display name, hints, trust rules).

Everything here is the default for an agent that lacks a part: no passthrough strategy, no report in its
output, no hints of its own. The registry (agentctl/agent/clis/__init__.py) collects the modules; nothing
else lists agents.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from agentctl.agent.refusal_hints import RefusalHint
from agentctl.agent.reported.base import ReportReader, ServerReport
from agentctl.agent.reported.feed import NULL_FEED, LedgerFeed, ReportFeed, ReportPlan

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.agent.delivery import DeliveryPlan
    from agentctl.agent.passthrough.base import Strategy
    from agentctl.evidence.ledger import Ledger

NO_REPORT = "this CLI has no known MCP status output: no agent report"

# (source, delivered, builtin, secrets) -> the incremental parser of that source, or None (not this agent's).
ReaderOpener = Callable[[str, Collection[str], "str | None", Any], "ReportReader | None"]
# (ledger, attempt id, source, delivered) -> a feed that is not a line parser (a poller), or None.
FeedOpener = Callable[["Ledger", str, str, Collection[str]], "ReportFeed | None"]


class AcpRelay(NamedTuple):
    """An ACP adapter's relay of its CLI's MCP status inside `session/update`: `candidate` is a cheap test of
    the update's shape (no session lookup before it says yes), `parse` gives (source, reports) or None."""

    candidate: Callable[[dict[str, Any]], bool]
    parse: Callable[[dict[str, Any], Collection[str], Any], "tuple[str, list[ServerReport]] | None"]


class AcpExtension(NamedTuple):
    """An agent's ACP extension notifications about its MCP servers: the methods, the source they are
    recorded under, and the parser (method, params, delivered, secrets, builtin) -> reports."""

    methods: frozenset[str]
    source: str
    parse: Callable[[str, Any, Collection[str], Any, "str | None"], "list[ServerReport] | None"]


# (agent name from ACP initialize, command, cwd, spec env) -> a filter of the session's delivery plan, or None
# when the agent is not this one or nothing needs filtering.
AcpGate = Callable[["str | None", Sequence[str], str, Mapping[str, str]], "Callable[[DeliveryPlan], None] | None"]


@dataclass(frozen=True)
class AgentCli:
    """Everything agentctl knows about one agent CLI. `name` is the spec's `agent.strategy` for a passthrough
    CLI (and the agent part of its report sources); `reporters` names each report-source agent part this
    module owns as people call it (`claude-agent-acp` for the adapter)."""

    name: str
    display_name: str
    strategy: Strategy | None = None
    reporters: Mapping[str, str] = field(default_factory=dict)
    # Why this CLI fails as a passthrough run, as it says it (agentctl/agent/passthrough/explain.py).
    failure_hints: tuple[RefusalHint, ...] = ()
    # Why this agent refuses a session or prompt; checked before the generic table (agentctl/agent/refusal_hints.py).
    refusal_hints: tuple[RefusalHint, ...] = ()
    # Its machine-readable output lines as a person reads them, for a failed run's explanation.
    readable_lines: Callable[[list[str]], list[str]] | None = None
    # Which report a run with this final argv carries (None: the sentence `no_report` says none).
    plan_report: Callable[[Sequence[str]], ReportPlan | None] | None = None
    no_report: str = NO_REPORT
    open_reader: ReaderOpener | None = None
    open_feed: FeedOpener | None = None
    acp_relay: AcpRelay | None = None
    acp_extension: AcpExtension | None = None
    acp_gate: AcpGate | None = None

    def report_for(self, argv: Sequence[str]) -> ReportPlan:
        """Whether a run of this CLI with `argv` reports its MCP servers, and from which contract."""
        plan = self.plan_report(argv) if self.plan_report is not None else None
        return plan if plan is not None else ReportPlan(note=self.no_report)

    def reader(self, source: str, delivered: Collection[str], builtin: str | None = None,
               secrets: Any = ()) -> ReportReader | None:
        return self.open_reader(source, delivered, builtin, secrets) if self.open_reader is not None else None

    def feed(self, ledger: Ledger, attempt_id: str, plan: ReportPlan, delivered: Collection[str],
             builtin: str | None = None) -> ReportFeed:
        """The feed for one run: this CLI's own (a poller), a line parser recording on `attempt_id`, or NULL_FEED."""
        if plan.source is None or not delivered:
            return NULL_FEED
        if self.open_feed is not None:
            own = self.open_feed(ledger, attempt_id, plan.source, delivered)
            if own is not None:
                return own
        reader = self.reader(plan.source, delivered, builtin, ledger.secrets)
        return NULL_FEED if reader is None else LedgerFeed(ledger, attempt_id, plan.source, reader)
