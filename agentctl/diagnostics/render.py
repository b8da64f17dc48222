"""The terminal's layout of diagnostics, endpoint tests and the tools views: agentctl.present's words at 80 columns.

Inputs are contract structs only, read by attribute (control/render.py says why). Output fits 80 columns,
a tone is coloured only when asked (control/render.py `use_color` decides), and every state says what it means.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from typing import Any

from agentctl.control.render import WIDTH, paint, readiness_line, wrap
from agentctl.present.rows import display_label, report_details, row_explanation, status_label
from agentctl.present.session import agent_gone, agent_words, notice_lines, session_error_lines, upstream_words
from agentctl.present.checklist import (
    ESTIMATE_NOTE,
    THIRD_PARTY_NOTE,
    endpoint_test_line,
    endpoint_test_words,
    shown_steps,
    step_words,
)
from agentctl.present.tones import Tone, state_tone
from agentctl.present.words import code_detail, plural, when
from agentctl.evidence.contract.control import EndpointTestResponse, UpstreamStatus
from agentctl.evidence.contract.diagnostics import (
    AttemptDiagnostics,
    ChecklistStep,
    Diagnostics,
    ServerDiagnostics,
    ToolDetail,
    ToolsView,
)
from agentctl.evidence.contract.report import AgentState
from agentctl.safetext import neutralize_data

def _lines(text: str, indent: int, color: bool = False, tone: Tone = "plain") -> list[str]:
    return [paint(line, tone, color) for line in wrap(text, indent)]


# ---- endpoint test --------------------------------------------------------------------------------------


def render_endpoint_test(response: EndpointTestResponse, color: bool) -> str:
    response = neutralize_data(response)
    headline, tone, note = endpoint_test_words(response.result.succeeded)
    lines = [f"{response.name}: " + paint(headline, tone, color)]
    lines += wrap(endpoint_test_line(response.result), 2)
    lines += _lines(note, 2, color, "grey")
    if response.stored:
        lines += _lines(f"stored beside the row of attempt {response.attempt_id}", 2, color, "grey")
    else:
        lines += _lines("not stored: there is no attachment attempt yet", 2, color, "grey")
    return "\n".join(lines) + "\n"


# ---- diagnostics ----------------------------------------------------------------------------------------


def _step_line(step: ChecklistStep) -> list[str]:
    mark, label, text = step_words(step)
    if step.detail:
        text = f"{text}  {step.detail}" if text else step.detail
    head = f"    {mark} {label:<17} "
    wrapped = textwrap.wrap(
        text, width=WIDTH, initial_indent=head, subsequent_indent=" " * len(head), break_on_hyphens=False
    )
    return wrapped or [head.rstrip()]


def _server_block(server: ServerDiagnostics, color: bool, agent: AgentState | None = None) -> list[str]:
    label = paint(display_label(server), state_tone(server.status), color)
    # A third-party server's source is the default one (the profile), and goes unsaid.
    source = server.source if server.source == "builtin" else None
    where = " · ".join(x for x in (source, server.transport, server.target) if x)
    lines = [f"  {server.name}  {label}"]
    if where:
        lines += _lines(where, 4, color, "grey")
    lines += wrap(row_explanation(server), 4)
    gone = agent_gone(agent)
    if gone:
        lines += wrap(f"{gone}; no more evidence will come from it", 4)
    if server.status in ("failed", "filtered", "unavailable") and server.reason_code:
        lines += _lines(code_detail(server.reason_code, server.summary), 4, color, "grey")
    for detail in report_details(server.view):
        lines += _lines(detail, 4, color, "grey")
    steps, hidden_note = shown_steps(server.steps, server.source == "builtin")
    for step in steps:
        lines += _step_line(step)
    if hidden_note:
        lines += wrap(hidden_note, 4)
    if server.catalog_truncated:
        lines += wrap("the tool catalog was truncated at its bound (see `agentctl tools`)", 4)
    if server.endpoint_test:
        lines += wrap("endpoint test (reachability, not attachment): " + endpoint_test_line(server.endpoint_test), 4)
    return lines


def _attempt_block(attempt: AttemptDiagnostics, title: str, color: bool, agent: AgentState | None = None) -> list[str]:
    head = f"{title} {attempt.attempt_id} ({attempt.origin})"
    if attempt.acp_session_id:
        head += f" · ACP session {attempt.acp_session_id}"
    lines = wrap(head, 0)
    times = [f"started {when(attempt.started_at)}"]
    if attempt.accepted_at:
        times.append(f"session accepted {when(attempt.accepted_at)}")
    if attempt.superseded_at:
        times.append(f"superseded {when(attempt.superseded_at)}")
    lines += _lines(" · ".join(times), 2, color, "grey")
    if attempt.session_error:
        text, detail = session_error_lines(attempt.session_error)
        lines += wrap(text, 2)
        lines += _lines(detail, 4, color, "grey")
    for notice in notice_lines(attempt.notices, attempt.notice_count):
        lines += _lines(notice, 2, color, "grey")
    if attempt.dropped_events:
        lines += wrap(f"{plural(attempt.dropped_events, 'older event')} dropped (64 are kept)", 2)
    if not attempt.servers:
        lines.append("  no MCP servers in this attempt")
    for server in attempt.servers:
        lines += _server_block(server, color, agent)
    return lines


def agent_lines(agent: AgentState | None) -> list[str]:
    """`Agent: name version (protocol); what it advertises; how it stands`, wrapped."""
    return [line for text in agent_words(agent) for line in wrap(text, 0)]


def upstream_lines(upstream: UpstreamStatus | None) -> list[str]:
    """`Upstream: state; counters`, wrapped; without an [upstream], what answers tool calls instead."""
    return wrap(upstream_words(upstream), 0)


def render_diagnostics(diagnostics: Diagnostics, color: bool, *, with_readiness: bool = True) -> str:
    """`agentctl diagnostics`; `with_readiness` False leaves out the daemon's readiness line (the hub, which
    builds this text from what it holds, does not know it)."""
    data = neutralize_data(diagnostics)
    ident = data.identity
    lines = [
        "agentctl diagnostics: safe to paste into a bug report",
        *_lines("(no agent output, prompts, arguments, header or env values, tokens or full URLs)", 0, color, "grey"),
        f"daemon {data.daemon_version} · contract {data.contract_version} · generated {when(data.generated_at)} UTC",
    ]
    for key, value in (
        ("execution", ident.execution_id),
        ("instance", ident.instance_id),
        ("task", f"{ident.task_id} · session {ident.session_id}"),
        ("agent id", f"{ident.agent_id} · profile {ident.agent_profile_id}"),
    ):
        lines += wrap(f"{key:<10} {value}", 0)
    if with_readiness:
        lines.append(readiness_line(data, color))
    lines += agent_lines(data.agent)
    lines += upstream_lines(data.upstream)
    lines.append("")
    lines.append("Checklist: [x] observed  [ ] not observed  [-] not observable by agentctl")
    if data.current:
        lines += _attempt_block(data.current, "Current attempt", color, data.agent)
    else:
        lines.append("No attachment attempt yet (no session has been opened).")
    for attempt in data.previous:
        lines.append("")
        lines += _attempt_block(attempt, "Previous attempt", color)
    lines.append("")
    if data.http_refusals:
        lines.append("HTTP requests refused before MCP (route, method, status: count):")
        for r in data.http_refusals:
            lines.append(f"  {r.route} {r.method} {r.status}: {r.count}")
    else:
        lines.append("HTTP requests refused before MCP: none")
    if data.rejected_events:
        lines += wrap(f"Rejected evidence: {plural(data.rejected_events, 'event')} for attempts no longer kept", 0)
    return "\n".join(lines) + "\n"


# ---- tools ----------------------------------------------------------------------------------------------


def _first_line(text: str, width: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def render_tools(view: ToolsView, color: bool) -> str:
    view = neutralize_data(view)
    lines: list[str] = []
    if not view.attempt_id:
        lines += wrap(f"{view.server}: no attachment attempt yet (no session has been opened)", 0)
    elif not view.loaded:
        state = f" (status: {status_label(view.status)})" if view.status else ""
        lines += wrap(
            f"{view.server}: catalog not loaded yet: the agent has not listed the tools in attempt "
            f"{view.attempt_id}{state}",
            0,
        )
    else:
        lines += _tool_list(view, color)
    if view.third_party:
        lines.append("")
        lines += wrap(f"{', '.join(view.third_party)}: {THIRD_PARTY_NOTE}", 0)
    return "\n".join(lines) + "\n"


def some_names(names: list[str], limit: int = 5) -> str:
    """At most `limit` names, then how many there are in all."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{plural(len(names), 'tool')} ({shown}, …)"


def _tool_list(view: ToolsView, color: bool) -> list[str]:
    catalog = view.catalog
    tools = catalog.tools if catalog else []
    count = view.tool_count
    estimates = [t.token_estimate for t in tools if isinstance(t.token_estimate, int)]
    head = f"{view.server} tools in attempt {view.attempt_id}: " + (
        plural(count, "tool") if isinstance(count, int) else "?"
    )
    if estimates and len(estimates) == len(tools):
        head += f", ~{sum(estimates):,} tokens in all"
    lines = wrap(head, 0)
    if tools:
        width = min(max(len(t.name) for t in tools), 28)
        for tool in tools:
            name = tool.name if len(tool.name) <= width else tool.name[: width - 1] + "…"
            est = tool.token_estimate
            est_text = f"~{est:,} tokens" if isinstance(est, int) else ""
            prefix = f"  {name:<{width}}  " + (f"{est_text:>14}  " if estimates else "")
            lines.append(prefix + _first_line(tool.description, WIDTH - len(prefix)))
    if catalog and catalog.estimator:
        lines += _lines(ESTIMATE_NOTE, 0, color, "grey")
    else:
        reason = (catalog.estimator_unavailable_reason if catalog else None) or "encoding_unavailable"
        lines += wrap(f"no token estimates: the o200k_base encoding is not available ({reason})", 0)
    truncated = bool(catalog and catalog.truncated)
    if truncated and isinstance(count, int):
        lines += wrap(f"catalog truncated: {len(tools)} of {count} tools kept (the bound is 128, sorted by name)", 0)
    elif truncated:
        lines += wrap("catalog truncated at its bound", 0)
    cut_desc = [t.name for t in tools if t.description_truncated]
    cut_schema = [t.name for t in tools if t.schema_truncated]
    if cut_desc:
        lines += wrap(f"description cut at 1,024 bytes: {some_names(cut_desc)}", 0)
    if cut_schema or (catalog and catalog.schemas_truncated):
        names = f": {some_names(cut_schema)}" if cut_schema else ""
        lines += wrap(f"input schema dropped (over 64 KiB, or past 512 KiB in all){names}", 0)
    lines += _lines("one tool in detail: agentctl tools NAME", 0, color, "grey")
    return lines


def _type_of(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "any"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(map(str, kind))
    if isinstance(kind, str):
        if kind == "array" and isinstance(schema.get("items"), dict):
            return f"array of {_type_of(schema['items'])}"
        return kind
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(_type_of(s) for s in schema[key])
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return ref.rsplit("/", 1)[-1]
    if "enum" in schema:
        return "enum"
    return "any"


@dataclass(frozen=True)
class ToolArgument:
    """One top-level property of a tool's input schema, as `agentctl tools NAME` and the hub page list it."""

    name: str
    type: str
    required: bool
    description: str


def tool_arguments(schema: Any) -> list[ToolArgument]:
    """Each top-level property of an input schema (a JSON Schema object, whatever the tool declared)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return []
    required = set(schema.get("required") or [])
    args = []
    for name, prop in schema["properties"].items():
        description = prop.get("description", "") if isinstance(prop, dict) else ""
        args.append(ToolArgument(str(name), _type_of(prop), name in required, str(description)))
    return args


def render_tool(detail: ToolDetail, color: bool) -> str:
    detail = neutralize_data(detail)
    tool = detail.tool
    estimate = tool.token_estimate
    head = f"{tool.name} ({detail.server}, attempt {detail.attempt_id})"
    if isinstance(estimate, int):
        head += f"  ~{estimate:,} tokens"
    lines = wrap(head, 0)
    if isinstance(estimate, int):
        lines += _lines(ESTIMATE_NOTE, 0, color, "grey")
    lines += ["", "Description:"]
    lines += [line for para in (tool.description.splitlines() or ["(none)"]) for line in wrap(para, 2)]
    if tool.description_truncated:
        lines += wrap("(description cut at 1,024 bytes)", 2)
    lines += ["", "Arguments:"]
    schema = tool.input_schema
    if tool.schema_truncated or schema is None:
        lines += wrap("(input schema not kept: over its 64 KiB bound, or past 512 KiB for the catalog)", 2)
    else:
        args = tool_arguments(schema)
        if not args:
            lines.append("  (no arguments)")
        else:
            nw = min(max(4, *(len(a.name) for a in args)), 24)
            tw = min(max(4, *(len(a.type) for a in args)), 18)
            prefix_len = 2 + nw + 2 + tw + 2 + 8 + 2
            lines.append(f"  {'name':<{nw}}  {'type':<{tw}}  required  description")
            for a in args:
                name = a.name if len(a.name) <= nw else a.name[: nw - 1] + "…"
                kind = a.type if len(a.type) <= tw else a.type[: tw - 1] + "…"
                head = f"  {name:<{nw}}  {kind:<{tw}}  {'yes' if a.required else 'no':<8}  "
                wrapped = textwrap.wrap(
                    a.description, width=WIDTH, initial_indent=head, subsequent_indent=" " * prefix_len,
                    break_on_hyphens=False,
                )
                lines += wrapped or [head.rstrip()]
        lines += ["", "Input schema (JSON):"]
        lines += ["  " + line for line in json.dumps(schema, indent=2, ensure_ascii=False).splitlines()]
    return "\n".join(lines) + "\n"

