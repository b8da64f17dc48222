"""Owns how a server row reads: its display state, label and the sources it rests on, the plain-language line
under it and its detail lines (pure, no I/O).

Every renderer (status, report, diagnostics, the hub page) asks `row_view` rather than reading `status`
alone, so a state the agent reported is never shown as one agentctl observed, and a report that contradicts
agentctl's observation is shown beside it instead of being resolved silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from agentctl.evidence.contract.diagnostics import RowView, ServerDiagnostics
from agentctl.evidence.contract.report import AgentReport, AgentState, ServerRow
from agentctl.evidence.display import DELIVERED_LABEL, reporter_name, row_label
from agentctl.evidence.reasons import meaning
from agentctl.evidence.reducer import REPORTED_FAILURES, observed_status
from agentctl.present.session import agent_gone
from agentctl.present.words import code_detail, plural, when

OBSERVER = "agentctl"
_STATE_WORDS = {"needs_auth": "needs authentication", "unknown": "an unknown state"}
REASON_EXPOSURE_GAP = "agent_exposure_gap"
MAX_LISTED_MISSING = 8


def row_view(row: ServerRow | Mapping[str, Any]) -> RowView:
    """The display state, label and sources of a row (a contract struct or its JSON as a dict)."""
    if not isinstance(row, ServerRow):
        row = msgspec.convert(row, ServerRow, strict=False)
    observed = observed_status(row)
    report = row.reported
    if report is None:
        return RowView(state=row.status, label=row_label(row), observed=observed, sources=[OBSERVER])
    reporter = reporter_name(report.source)
    if row.status_source == "reported":
        label, sources = f"{row.status} · reported by {reporter}", [report.source, OBSERVER]
    else:
        label, sources = row_label(row), [OBSERVER, report.source]
    return RowView(
        state=row.status,
        label=label,
        observed=observed,
        status_source=row.status_source,
        sources=sources,
        reporter=reporter,
        reported=report.state,
        reported_tool_count=report.tool_count,
        report=_report_words(report, reporter),
        disagreement=_disagreement(row, observed, report, reporter),
        **_exposure(row, report, reporter),
    )


def _report_words(report: AgentReport, reporter: str) -> str:
    text = f"{reporter} reported {_STATE_WORDS.get(report.state, report.state)}"
    if report.state == "unknown" and report.raw_state:
        text += f" ({report.raw_state})"
    if report.tool_count is not None:
        text += f", {report.tool_count} tool" + ("" if report.tool_count == 1 else "s")
    if report.summary:
        text += f": {report.summary}"
    return text


def _disagreement(row: ServerRow, observed: str, report: AgentReport, reporter: str) -> str | None:
    if row.delivered_at is None:
        return f"{reporter} reported a server of this name, which agentctl did not deliver"
    said = _STATE_WORDS.get(report.state, report.state)
    if row.source == "builtin" and report.state == "connected" and observed not in ("active", "connected"):
        return f"{reporter} says connected; agentctl saw no request to its endpoint"
    if observed in ("active", "connected") and report.state in REPORTED_FAILURES:
        return f"agentctl observed {observed}; {reporter} reported {said}"
    if observed == "failed" and report.state == "connected":
        return f"agentctl observed failed; {reporter} reported {said}"
    return None


def _exposure(row: ServerRow, report: AgentReport, reporter: str) -> dict[str, str]:
    """The built-in tools the endpoint served that the agent does not expose to its model, as a finding.
    Only where both lists are whole: the agent listed its tools, and the served catalog was not truncated."""
    catalog = row.catalog
    if row.source != "builtin" or report.exposed_tools is None or catalog is None or catalog.truncated:
        return {}
    served = sorted({tool.name for tool in catalog.tools})
    exposed = set(report.exposed_tools)
    missing = [name for name in served if name not in exposed]
    if not missing:
        return {}
    shown = ", ".join(missing[:MAX_LISTED_MISSING]) + (", ..." if len(missing) > MAX_LISTED_MISSING else "")
    text = (f"{reporter} exposes {len(served) - len(missing)} of {len(served)} {row.name} tools; "
            f"{len(missing)} missing: {shown}")
    return {"exposure_gap": text, "exposure_reason": REASON_EXPOSURE_GAP}


def status_label(status: str) -> str:
    """A display state as people read it."""
    return DELIVERED_LABEL if status == "delivered" else status


def view_of(row: ServerRow | ServerDiagnostics) -> RowView | None:
    """How the row reads (`row_view`): whose evidence its state rests on, and the agent's report."""
    return row_view(row) if isinstance(row, ServerRow) else row.view


def display_label(row: ServerRow | ServerDiagnostics) -> str:
    """The display state of a server row as people read it; a reported state says who reported it."""
    view = view_of(row)
    return view.label if view is not None else status_label(row.status)


def _reported_explanation(view: RowView, row: ServerRow | ServerDiagnostics) -> str | None:
    """The line of a row whose state rests on the agent's report: what the agent said, never as agentctl's."""
    if view.status_source != "reported":
        return None
    who = view.reporter or "the agent"
    if row.status == "active":
        count = view.reported_tool_count
        tools = plural(count, "tool") if isinstance(count, int) else "its tools"
        return f"{who} reported it connected and listed {tools} (the agent's report, not observed by agentctl)"
    if row.status == "connected":
        return f"{who} reported it connected, without listing its tools (the agent's report, not observed by agentctl)"
    return None


def row_explanation(row: ServerRow | ServerDiagnostics) -> str:
    """The plain-language line that says what a row's state means."""
    status = row.status
    view = view_of(row)
    reported = _reported_explanation(view, row) if view is not None else None
    if reported:
        return reported
    if status == "active":
        count = row.tool_count
        text = plural(count, "tool") + " loaded" if isinstance(count, int) else "tools loaded"
        # Say whether the tools were used either way: silence would read as "unknown".
        text += ", used" if row.tool_calls else ", none used yet"
        return text
    if status == "connected":
        return "initialized, tools not listed yet"
    if status == "delivered":
        if row.source == "builtin":
            return "sent to the agent; the agent has not contacted this endpoint yet"
        return "sent to the agent; third-party servers connect directly to the agent, so this is expected"
    if status in ("failed", "filtered", "unavailable"):
        return meaning(row.reason_code)  # the words; the bare code is a detail line
    return "not sent to the agent yet"


def row_details(row: ServerRow, agent: AgentState | None = None, *, gone: bool = True) -> list[str]:
    """The grey lines under a row's explanation: its codes, superseded failure, tool errors, closed connection,
    endpoint test, and whether its agent is gone."""
    details: list[str] = []
    status = row.status
    if status in ("failed", "filtered", "unavailable") and row.reason_code:
        details.append(code_detail(row.reason_code, row.summary))
    details.extend(report_details(view_of(row)))
    failure = row.last_failure
    if status != "failed" and failure:
        # A failure a later contact superseded: still shown, as what it was and when.
        details.append(
            f"earlier attachment error, no longer current: {meaning(failure.reason_code)} at "
            f"{when(row.failed_at) if row.failed_at else 'None'} "
            f"({code_detail(failure.reason_code, failure.summary)}); a later contact succeeded"
        )
    if row.tool_calls and row.tool_errors:
        details.append(f"{plural(row.tool_calls, 'tool call')}, {row.tool_errors} returned an error")
    closed = row.disconnected_at
    if status in ("active", "connected") and closed:
        text = f"legacy connection closed at {when(closed)}"
        contacts = (row.initialize_observed_at, row.tools_list_observed_at, row.tool_call_observed_at)
        if any(t is not None and t > closed for t in contacts):
            # Only a connection-less (modern-era) request can come after the close without replacing it.
            text += "; modern-era requests since (stateless: they have no connection)"
        details.append(text)
    test = row.endpoint_test
    if test:
        if test.succeeded:
            count = test.tool_count
            extra = f", {plural(count, 'tool')}" if isinstance(count, int) else ""
            details.append(f"endpoint test: reachable from the daemon{extra} (reachability, not attachment)")
        else:
            code = test.reason_code or "error"
            details.append(
                f"endpoint test failed: {meaning(code)} [{code}] (a test from the daemon, not what the agent saw)"
            )
    ended = agent_gone(agent) if gone else None
    if ended:
        # The row keeps its strongest evidence; this says no more will come from this agent.
        details.append(f"{ended}; no more evidence will come from it")
    return details


def report_details(view: RowView | None) -> list[str]:
    """What the agent reported beside what agentctl observed, the two when they disagree, and whose evidence
    the row's state rests on. Nothing for a row no agent reported on."""
    if view is None or view.reported is None:
        return []
    lines = []
    if view.status_source == "observed" and view.report:
        lines.append(f"also {view.report} (the agent's report; agentctl's observation is shown)")
    if view.disagreement:
        lines.append(f"disagreement: {view.disagreement}")
    if view.exposure_gap:
        lines.append(f"exposure: {view.exposure_gap} [{view.exposure_reason}]")
    if view.status_source == "reported":
        lines.append(f"evidence: reported by {view.reporter} ({view.sources[0]}); agentctl observed {view.observed}")
    else:
        lines.append(f"evidence: observed by agentctl; reported by {view.reporter} ({view.sources[-1]})")
    return lines
