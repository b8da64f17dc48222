"""What the hub page shows, as plain JSON built from the hub's contract data: words and tones, laid out by the page.

Every label, tone (green, amber, red, grey, plain), plain-language line, checklist step and note comes from
agentctl.present, the same functions the terminal's renderers lay out, so the page and the terminal say the same
things; the page wraps the paragraphs itself and maps a tone to its stylesheet's colour. Only sanitized contract
data goes in: no agent output (that, and the agent terminal's screen, have their own routes, on request).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from agentctl.diagnostics.diagnostics import attempt_diagnostics
from agentctl.diagnostics.render import render_diagnostics, some_names, tool_arguments
from agentctl.evidence.contract.control import StderrView, TerminalView
from agentctl.evidence.contract.diagnostics import Diagnostics
from agentctl.evidence.contract.hub import HubSession, HubSessionReport
from agentctl.evidence.contract.report import (
    CONTRACT_VERSION,
    AgentState,
    Attempt,
    EndpointTestResult,
    ServerRow,
)
from agentctl.hub.views import daemon_link
from agentctl.present.checklist import (
    ESTIMATE_NOTE,
    THIRD_PARTY_NOTE,
    checklist,
    endpoint_test_line,
    endpoint_test_words,
    shown_steps,
    step_words,
)
from agentctl.present.output import STDERR_WARNING, TERMINAL_WARNING
from agentctl.present.rows import display_label, row_details, row_explanation
from agentctl.present.session import agent_words, notice_lines, session_error_lines, upstream_words
from agentctl.present.tones import state_tone
from agentctl.present.words import plural, when
from agentctl.upstream.protocol import MAX_TERMINAL_BYTES

def _text(value: datetime | None) -> str | None:
    return f"{when(value)} UTC" if value is not None else None


def endpoint_test_view(test: EndpointTestResult | None) -> dict[str, Any] | None:
    if test is None:
        return None
    headline, tone, note = endpoint_test_words(test.succeeded)
    return {"succeeded": test.succeeded, "headline": headline, "tone": tone, "line": endpoint_test_line(test),
            "note": note}


def steps_view(row: ServerRow, attempt: Attempt) -> tuple[list[dict[str, Any]], str | None]:
    """The row's checklist as `agentctl diagnostics` prints it: the same steps, marks, times and details, and
    the one `[-]` line for what only the built-in endpoint could have observed."""
    shown, note = shown_steps(checklist(row, attempt), row.source == "builtin")
    steps = []
    for step in shown:
        mark, label, text = step_words(step)
        steps.append({
            "step": step.step, "label": label, "done": step.done, "mark": mark,
            "at": step.at, "text": text + " UTC" if step.at else text, "detail": step.detail,
        })
    return steps, note


def server_view(row: ServerRow, attempt: Attempt, agent: AgentState | None = None) -> dict[str, Any]:
    steps, hidden_note = steps_view(row, attempt)
    catalog = row.catalog
    truncated = bool(catalog and (catalog.truncated or catalog.schemas_truncated))
    builtin = row.source == "builtin"
    return {
        "name": row.name,
        "builtin": builtin,
        "status": row.status,
        "label": display_label(row),
        "tone": state_tone(row.status),
        "explanation": row_explanation(row),
        "details": row_details(row, agent),
        "where": " · ".join(str(x) for x in (row.source, row.transport, row.target) if x),
        "steps": steps,
        "hidden_note": hidden_note,
        "catalog_note": "the tool catalog was truncated at its bound" if truncated else None,
        "no_catalog_note": None if builtin else THIRD_PARTY_NOTE,
        "tool_count": row.tool_count,
        "endpoint_test": endpoint_test_view(row.endpoint_test),
    }


def attempt_view(attempt: Attempt | None, agent: AgentState | None = None) -> dict[str, Any] | None:
    """An attempt's rows; with the agent (current attempts only) a row says when that agent is gone."""
    if attempt is None:
        return None
    error = attempt.session_error
    error_line = None
    if error is not None:
        error_line = " · ".join(session_error_lines(error))
    times = [f"started {_text(attempt.started_at)}"]
    if attempt.accepted_at:
        times.append(f"session accepted {_text(attempt.accepted_at)}")
    if attempt.superseded_at:
        times.append(f"superseded {_text(attempt.superseded_at)}")
    return {
        "attempt_id": attempt.attempt_id,
        "origin": attempt.origin,
        "acp_session_id": attempt.acp_session_id,
        "times": " · ".join(times),
        "session_error": error_line,
        "notices": notice_lines(attempt.notices, attempt.notice_count),
        # The required-server gate's reading, beside the rows (a policy result: a note, never a row's colour).
        "required": [f"{s.name}: {s.policy}" for s in attempt.required.servers] if attempt.required else [],
        "dropped": f"{plural(attempt.dropped_events, 'older event')} dropped (64 are kept)"
        if attempt.dropped_events else None,
        "servers": [server_view(row, attempt, agent) for row in attempt.servers],
    }


def _agent_text(session: HubSession) -> str:
    return " ".join(agent_words(session.agent))


def session_view(session: HubSession) -> dict[str, Any]:
    return {
        "task_id": session.task_id,
        "session_id": session.session_id,
        "execution_id": session.current_execution_id,
        "connected": session.connected,
        "link": daemon_link(session.connected),
        "last_contact": _text(session.last_contact_at),
        "executions": session.executions,
        "stale": f"rejected {plural(session.stale_rejected, 'frame')} from superseded executions or instances"
        if session.stale_rejected else None,
        "agent": _agent_text(session),
        "terminal": bool(session.agent and session.agent.terminal),
        "attempt": attempt_view(session.current_attempt, session.agent),
    }


def status_page(sessions: list[HubSession], now: datetime) -> dict[str, Any]:
    return {"version": CONTRACT_VERSION, "generated_at": now, "output_warning": STDERR_WARNING,
            "terminal_warning": TERMINAL_WARNING, "sessions": [session_view(s) for s in sessions]}


def output_notes(view: StderrView) -> list[str]:
    """What `agentctl stderr` says around the lines (its warning is the view's own)."""
    if view.empty:
        state = view.agent_state
        return ["the agent has written nothing to stderr" + (f" (agent {state})" if state else " (no agent)")]
    notes = []
    if view.agent_state == "exited":
        notes.append("(the agent has exited; this is its last output)")
    if view.truncated:
        notes.append("(older output dropped: at most 50 lines and 16 KiB are kept)")
    return notes


def terminal_notes(view: TerminalView) -> list[str]:
    """What the page says around the agent terminal's screen (its warning is the view's own)."""
    notes = [f"{view.rows} rows x {view.cols} columns, read-only"] if view.rows else []
    if not view.open:
        notes.append("(the agent's terminal is closed: the agent is not running; this is its last screen)")
    if view.truncated:
        notes.append(f"(older output dropped: the last {MAX_TERMINAL_BYTES // 1024} KiB the agent printed are kept)")
    return notes


def history_view(report: HubSessionReport) -> dict[str, Any]:
    """The session's executions and previous attempts (newest first), each with its rows and checklists."""
    history = report.history
    executions = []
    for e in report.executions:
        flags = ["current" if e.current else "superseded", daemon_link(e.connected)]
        if e.rejected_frames:
            flags.append(f"{plural(e.rejected_frames, 'frame')} rejected")
        executions.append({"execution_id": e.execution_id, "flags": ", ".join(flags),
                           "last_contact": _text(e.last_contact_at), "current": e.current})
    return {
        "session": session_view(report.session),
        "executions": executions,
        "current": attempt_view(history.current, history.agent) if history else None,
        "previous": [attempt_view(a) for a in history.previous] if history else [],
        "snapshot": history is not None,
    }


# ---- tools ------------------------------------------------------------------------------------------------


def _builtin(attempt: Attempt | None) -> ServerRow | None:
    if attempt is None:
        return None
    return next((row for row in attempt.servers if row.source == "builtin"), None)


def tools_view(report: HubSessionReport) -> dict[str, Any]:
    """The built-in server's catalog in the current attempt, with `agentctl tools`' notices."""
    attempt = report.history.current if report.history else None
    row = _builtin(attempt)
    third = [r.name for r in attempt.servers if r.source != "builtin"] if attempt else []
    view: dict[str, Any] = {
        "server": row.name if row else None,
        "attempt_id": attempt.attempt_id if attempt else None,
        "loaded": False, "tools": [], "notes": [],
        "third_party": f"{', '.join(third)}: {THIRD_PARTY_NOTE}" if third else None,
    }
    if attempt is None:
        view["message"] = "no attachment attempt yet (no session has been opened)"
        return view
    if row is None:
        view["message"] = "the built-in server is not in this attempt"
        return view
    if row.tools_list_observed_at is None or row.catalog is None:
        view["message"] = (
            f"catalog not loaded yet: the agent has not listed the tools in attempt {attempt.attempt_id} "
            f"(status: {display_label(row)})"
        )
        return view
    catalog = row.catalog
    tools = catalog.tools
    view["loaded"] = True
    view["tool_count"] = row.tool_count
    estimates = [t.token_estimate for t in tools if isinstance(t.token_estimate, int)]
    head = f"{row.name} tools in attempt {attempt.attempt_id}: " + (
        plural(row.tool_count, "tool") if isinstance(row.tool_count, int) else "?"
    )
    if estimates and len(estimates) == len(tools):
        head += f", ~{sum(estimates):,} tokens in all"
    view["head"] = head
    view["tools"] = [
        {
            "name": t.name,
            "tokens": f"~{t.token_estimate:,} tokens" if isinstance(t.token_estimate, int) else None,
            "summary": " ".join((t.description or "").split()),
        }
        for t in tools
    ]
    notes = view["notes"]
    if catalog.estimator:
        notes.append(ESTIMATE_NOTE)
    else:
        reason = catalog.estimator_unavailable_reason or "encoding_unavailable"
        notes.append(f"no token estimates: the o200k_base encoding is not available ({reason})")
    if catalog.truncated and isinstance(row.tool_count, int):
        notes.append(f"catalog truncated: {len(tools)} of {row.tool_count} tools kept (the bound is 128, sorted by name)")
    elif catalog.truncated:
        notes.append("catalog truncated at its bound")
    cut_desc = [t.name for t in tools if t.description_truncated]
    cut_schema = [t.name for t in tools if t.schema_truncated]
    if cut_desc:
        notes.append(f"description cut at 1,024 bytes: {some_names(cut_desc)}")
    if cut_schema or catalog.schemas_truncated:
        names = f": {some_names(cut_schema)}" if cut_schema else ""
        notes.append(f"input schema dropped (over 64 KiB, or past 512 KiB in all){names}")
    return view


def tool_view(report: HubSessionReport, name: str) -> dict[str, Any] | None:
    attempt = report.history.current if report.history else None
    row = _builtin(attempt)
    if attempt is None or row is None or row.catalog is None:
        return None
    tool = next((t for t in row.catalog.tools if t.name == name), None)
    if tool is None:
        return None
    view: dict[str, Any] = {
        "server": row.name, "attempt_id": attempt.attempt_id, "name": tool.name,
        "tokens": f"~{tool.token_estimate:,} tokens" if isinstance(tool.token_estimate, int) else None,
        "estimate_note": ESTIMATE_NOTE if isinstance(tool.token_estimate, int) else None,
        "description": tool.description or "(none)",
        "description_note": "(description cut at 1,024 bytes)" if tool.description_truncated else None,
        "arguments": [], "schema": None, "schema_note": None,
    }
    if tool.schema_truncated or tool.input_schema is None:
        view["schema_note"] = "(input schema not kept: over its 64 KiB bound, or past 512 KiB for the catalog)"
    else:
        view["arguments"] = tool_arguments(tool.input_schema)
        view["schema"] = json.dumps(tool.input_schema, indent=2, ensure_ascii=False)
    return view


# ---- diagnostics ------------------------------------------------------------------------------------------


def diagnostics_text(report: HubSessionReport, now: datetime | None = None) -> str | None:
    """`agentctl diagnostics`' text for the session's current execution, built from what the hub holds.

    The hub does not know the daemon's readiness, so that line is left out, and the upstream line says what
    the hub saw instead. Sanitized evidence only: agent output is never part of it.
    """
    history = report.history
    if history is None:
        return None
    current = next((e for e in report.executions if e.current), None)
    diag = Diagnostics(
        contract_version=CONTRACT_VERSION,
        daemon_version=current.daemon_version if current else "?",
        generated_at=now or datetime.now(UTC),
        identity=history.identity,
        ready=False,
        current=attempt_diagnostics(history.current, []) if history.current else None,
        previous=[attempt_diagnostics(a, []) for a in history.previous],
        http_refusals=list(history.http_refusals),
        rejected_events=history.rejected_events,
        agent=history.agent,
    )
    text = render_diagnostics(diag, color=False, with_readiness=False)
    session = report.session
    hub_line = (
        f"Upstream: agentctl hub; execution's {daemon_link(session.connected)}, "
        f"last contact {when(session.last_contact_at)} UTC"
    )
    if session.stale_rejected:
        hub_line += f"; {plural(session.stale_rejected, 'frame')} from superseded executions or instances rejected"
    return text.replace(upstream_words(None), hub_line, 1)

