"""Owns how a server row reads: its display state, label and the sources it rests on (pure, no I/O).

Every renderer (status, report, diagnostics, the hub page) asks `row_view` rather than reading `status`
alone, so a state the agent reported is never shown as one agentctl observed, and a report that contradicts
agentctl's observation is shown beside it instead of being resolved silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from agentctl.evidence.contract import AgentReport, RowView, ServerRow
from agentctl.evidence.reducer import REPORTED_FAILURES, observed_status

DELIVERED_LABEL = "delivered · connection unverified"
OBSERVER = "agentctl"
WITNESS = "agentctl's witness"

# Report sources are `<agent>:<contract>`; the agent's part, as people call the agent.
REPORTERS: dict[str, str] = {
    "claude": "Claude Code",
    "claude-agent-acp": "claude-agent-acp",
    "codex-acp": "codex-acp",
    "kiro": "Kiro CLI",
    "codex": "Codex",
    "cursor": "Cursor",
    "gemini": "Gemini CLI",
    "opencode": "OpenCode",
}
_STATE_WORDS = {"needs_auth": "needs authentication", "unknown": "an unknown state"}
REASON_EXPOSURE_GAP = "agent_exposure_gap"
MAX_LISTED_MISSING = 8


def reporter_name(source: str) -> str:
    """The agent a report source names, as people call it (`claude:stream-json-init` -> `Claude Code`)."""
    agent = source.partition(":")[0]
    return REPORTERS.get(agent, agent)


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


def _label(status: str) -> str:
    return DELIVERED_LABEL if status == "delivered" else status


def row_label(row: ServerRow) -> str:
    """The row's status in words with what it rests on when that is agentctl's stdio witness, and the
    server's exit when the witness saw it exit after its last contact (mid-session too)."""
    if row.observed_by != "witness" or row.status_source != "observed":
        return _label(row.status)
    if row.exited_at is not None and (exited := exited_words(row)) is not None:
        return f"{'failed, ' if row.status == 'failed' else ''}{exited} · observed by {WITNESS}"
    if row.status in ("connected", "active", "failed"):
        return f"{row.status} · observed by {WITNESS}"
    return _label(row.status)


def exited_words(row: ServerRow) -> str | None:
    """`exited with code N` when the witness saw the server exit after every contact it observed, else None."""
    if row.exited_at is None:
        return None
    contacts = [t for t in (row.initialize_observed_at, row.tools_list_observed_at, row.tool_call_observed_at)
                if t is not None]
    if contacts and max(contacts) > row.exited_at:
        return None
    return "exited" if row.exit_code is None else f"exited with code {row.exit_code}"


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
