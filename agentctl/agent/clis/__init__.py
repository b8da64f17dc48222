"""The agent registry: one module per agent CLI in this package, each exporting `AGENT` (agentctl/agent/agent_cli.py),
looked up by the spec's `agent.strategy` name. Adding an agent is adding a module here (and its tests).

The registry is built from the modules themselves (their names, listed without importing them), so there is
no second list: looking one up loads only that module. The spec declares the passthrough names as its
`StrategyName` literal, so validating a spec needs nothing from here; a test keeps the two equal.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Collection, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from agentctl.agent.agent_cli import AgentCli
from agentctl.agent.refusal_hints import HINTS, RefusalHint
from agentctl.agent.reported.feed import NO_STRATEGY, NULL_FEED, REPORT_OFF, ReportFeed, ReportPlan

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.agent.passthrough.base import Strategy
    from agentctl.agent.reported.base import ReportReader
    from agentctl.evidence.ledger import Ledger

__all__ = ["AgentCli", "agents", "get", "get_strategy", "module_names", "open_feed", "open_reader",
           "plan_report", "refusal_table", "strategy_names"]


@cache
def module_names() -> tuple[str, ...]:
    """The agent modules of this package, sorted (the registry's keys), without importing any."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))


def get(name: str | None) -> AgentCli | None:
    """The agent registered under `name`, or None (no name, or an unknown one)."""
    if name not in module_names():
        return None
    agent: AgentCli = importlib.import_module(f"{__name__}.{name}").AGENT
    return agent


@cache
def agents() -> tuple[AgentCli, ...]:
    """Every registered agent, in name order (this imports every module)."""
    return tuple(agent for name in module_names() if (agent := get(name)) is not None)


def strategy_names() -> tuple[str, ...]:
    """The names with a passthrough strategy: the values the spec's `agent.strategy` accepts besides "none"."""
    return tuple(agent.name for agent in agents() if agent.strategy is not None)


def get_strategy(name: str | None) -> Strategy | None:
    """The passthrough strategy registered under `name`, or None (no strategy configured, or an unknown name)."""
    agent = get(name)
    return agent.strategy if agent is not None else None


def refusal_table() -> tuple[RefusalHint, ...]:
    """Every agent's own refusal hints, then the generic ones: the first that matches wins."""
    return (*(hint for agent in agents() for hint in agent.refusal_hints), *HINTS)


def reporters() -> dict[str, str]:
    """Each report source's agent part (`claude-agent-acp`) as people call that agent."""
    return {part: shown for agent in agents() for part, shown in agent.reporters.items()}


# ---- which report a CLI run will give, and its feed --------------------------------------------------------

def plan_report(strategy: str | None, argv: Sequence[str], mode: str = "auto") -> ReportPlan:
    """Whether the CLI run `argv` under `strategy` will report its MCP servers, and from which contract."""
    if mode == "off":
        return REPORT_OFF
    agent = get(strategy)
    if agent is not None:
        return agent.report_for(argv)
    return NO_STRATEGY if strategy is None else AgentCli(strategy, strategy).report_for(argv)


def _owner(source: str | None) -> AgentCli | None:
    return get(source.partition(":")[0]) if source else None


def open_reader(plan: ReportPlan, delivered: Collection[str], builtin: str | None = None,
                secrets: Any = ()) -> ReportReader | None:
    """The incremental parser of `plan.source` for the servers agentctl delivered, or None. `builtin` names
    the built-in server, whose exposed tools a reader keeps (agentctl's own tools: the exposure check)."""
    agent = _owner(plan.source)
    if agent is None or plan.source is None or not delivered:
        return None
    return agent.reader(plan.source, delivered, builtin, secrets)


def open_feed(ledger: Ledger, attempt_id: str, plan: ReportPlan, delivered: Collection[str],
              builtin: str | None = None) -> ReportFeed:
    """The feed for one CLI run: a parser of `plan.source` recording on `attempt_id`, or `NULL_FEED`."""
    agent = _owner(plan.source)
    return NULL_FEED if agent is None else agent.feed(ledger, attempt_id, plan, delivered, builtin)
