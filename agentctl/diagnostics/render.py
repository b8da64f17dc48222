"""Human text for diagnostics, endpoint tests and the tools views: pure functions from contract JSON to text.

Inputs are what the control socket returns (dicts) or the contract structs. Output fits 80 columns,
colours only when asked (control/render.py `use_color` decides), and every state says what it means.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

from agentctl.control.render import (
    GREEN,
    GREY,
    RED,
    STATE_COLORS,
    WIDTH,
    _get,
    _paint,
    _plain,
    _plural,
    _readiness_line,
    _when,
    _wrap,
    agent_gone,
    display_label,
    code_detail,
    row_explanation,
    upstream_text,
    session_error_lines,
)
from agentctl.evidence.reasons import meaning

REACHABILITY_NOTE = "reachability from the daemon, not attachment: the row's status is unchanged"
TEST_FAILURE_NOTE = "a failed test is a test failure, not proof of what happened inside the agent"
THIRD_PARTY_NOTE = (
    "no catalog: third-party servers connect directly to the agent, so agentctl never sees their tools/list"
)
ESTIMATE_NOTE = (
    "~N tokens: o200k_base over each tool's JSON definition; the agent may tokenize differently"
)
NOT_OBSERVABLE = "not observable: the agent connects to this server directly"

STEP_LABELS = {
    "configured": "configured",
    "filtered": "filtered",
    "unavailable": "unavailable",
    "delivered": "delivered",
    "session_accepted": "session accepted",
    "initialize": "initialize",
    "tools_loaded": "tools loaded",
    "used": "used",
    "disconnected": "disconnected",
    "failed": "failed",
}
# Steps only the built-in endpoint can observe: for third-party servers they are not evidence either way.
_BUILTIN_ONLY = frozenset({"initialize", "tools_loaded", "used", "disconnected"})


def _lines(text: str, indent: int, color: bool = False, ansi: str | None = None) -> list[str]:
    return [_paint(line, ansi, color) for line in _wrap(text, indent)]


def _ms(value: Any) -> str:
    return f"{float(value):.1f} ms" if isinstance(value, int | float) else "?"


# ---- endpoint test --------------------------------------------------------------------------------------


def endpoint_test_line(test: Any) -> str:
    """One line for a stored or fresh endpoint test: labelled as reachability, failures as test failures."""
    when = _when(_get(test, "tested_at", ""))
    if _get(test, "succeeded", False):
        count = _get(test, "tool_count")
        listed = f", {_plural(count, 'tool')} listed" if isinstance(count, int) else ""
        return f"reachable from the daemon{listed} in {_ms(_get(test, 'latency_ms'))} (tested {when})"
    code = _get(test, "reason_code", "error")
    summary = _get(test, "summary", "")
    # The words first; the bare code (with the redacted summary) is the detail at the end.
    return f"test failed: {meaning(code)} (tested {when}) · {code}" + (f": {summary}" if summary else "")


def render_endpoint_test(response: Any, color: bool) -> str:
    data = _plain(response) or {}
    result = data.get("result") or {}
    ok = bool(result.get("succeeded"))
    head = f"{data.get('name', '?')}: " + _paint("reachable" if ok else "test failed", GREEN if ok else RED, color)
    lines = [head]
    lines += _wrap(endpoint_test_line(result), 2)
    lines += _lines(REACHABILITY_NOTE if ok else TEST_FAILURE_NOTE, 2, color, GREY)
    if data.get("stored"):
        lines += _lines(f"stored beside the row of attempt {data.get('attempt_id')}", 2, color, GREY)
    else:
        lines += _lines("not stored: there is no attachment attempt yet", 2, color, GREY)
    return "\n".join(lines) + "\n"


# ---- diagnostics ----------------------------------------------------------------------------------------


def _step_line(step: dict[str, Any]) -> list[str]:
    name = step.get("step", "?")
    label = STEP_LABELS.get(name, name)
    done = bool(step.get("done"))
    if done:
        mark, text = "[x]", _when(step["at"]) if step.get("at") else ""
    elif step.get("at"):  # happened, but is no longer current (a failure a later contact superseded)
        mark, text = "[ ]", _when(step["at"])
    else:
        mark, text = "[ ]", "not observed" if name != "failed" else "no attachment error"
    if step.get("detail"):
        text = f"{text}  {step['detail']}" if text else str(step["detail"])
    head = f"    {mark} {label:<17} "
    wrapped = textwrap.wrap(
        text, width=WIDTH, initial_indent=head, subsequent_indent=" " * len(head), break_on_hyphens=False
    )
    return wrapped or [head.rstrip()]


def _server_block(server: dict[str, Any], color: bool, agent: dict[str, Any] | None = None) -> list[str]:
    status = server.get("status", "configured")
    label = _paint(display_label(server), STATE_COLORS.get(status), color)
    name = str(server.get("name", "?"))
    where = " · ".join(str(x) for x in (server.get("source"), server.get("transport"), server.get("target")) if x)
    lines = [f"  {name}  {label}"]
    if where:
        lines += _lines(where, 4, color, GREY)
    lines += _wrap(row_explanation(server), 4)
    gone = agent_gone(agent)
    if gone:
        lines += _wrap(f"{gone}; no more evidence will come from it", 4)
    if status in ("failed", "filtered", "unavailable") and server.get("reason_code"):
        lines += _lines(code_detail(server["reason_code"], server.get("summary")), 4, color, GREY)
    third_party = server.get("source", "profile") != "builtin"
    hidden: list[str] = []
    for step in server.get("steps") or []:
        if third_party and step.get("step") in _BUILTIN_ONLY and not step.get("done"):
            hidden.append(STEP_LABELS.get(step["step"], step["step"]))
            continue
        lines += _step_line(step)
    delivered = any(s.get("done") for s in server.get("steps") or [] if s.get("step") == "delivered")
    if hidden and delivered:
        # One line for what only the built-in endpoint could have seen, not four identical ones; only once the
        # server was handed to the agent (before that there is nothing the agent could have done).
        lines += _wrap(f"[-] {', '.join(hidden)}: {NOT_OBSERVABLE}", 4)
    if server.get("catalog_truncated"):
        lines += _wrap("the tool catalog was truncated at its bound (see `agentctl tools`)", 4)
    test = server.get("endpoint_test")
    if test:
        lines += _wrap("endpoint test (reachability, not attachment): " + endpoint_test_line(test), 4)
    return lines


def _attempt_block(attempt: dict[str, Any], title: str, color: bool, agent: dict[str, Any] | None = None) -> list[str]:
    head = f"{title} {attempt.get('attempt_id', '?')} ({attempt.get('origin', 'manual')})"
    if attempt.get("acp_session_id"):
        head += f" · ACP session {attempt['acp_session_id']}"
    lines = _wrap(head, 0)
    times = [f"started {_when(attempt.get('started_at', ''))}"]
    if attempt.get("accepted_at"):
        times.append(f"session accepted {_when(attempt['accepted_at'])}")
    if attempt.get("superseded_at"):
        times.append(f"superseded {_when(attempt['superseded_at'])}")
    lines += _lines(" · ".join(times), 2, color, GREY)
    error = attempt.get("session_error")
    if error:
        text, detail = session_error_lines(error)
        lines += _wrap(text, 2)
        lines += _lines(detail, 4, color, GREY)
    if attempt.get("dropped_events"):
        lines += _wrap(f"{_plural(attempt['dropped_events'], 'older event')} dropped (64 are kept)", 2)
    servers = attempt.get("servers") or []
    if not servers:
        lines.append("  no MCP servers in this attempt")
    for server in servers:
        lines += _server_block(server, color, agent)
    return lines


def _agent_lines(agent: dict[str, Any] | None) -> list[str]:
    if not agent:
        return _wrap("Agent: none (this daemon hosts MCP only)", 0)
    who = " ".join(str(x) for x in (agent.get("name"), agent.get("version")) if x) or "unnamed"
    protocol = agent.get("protocol", "?")
    text = f"Agent: {who} ({'ACP' if protocol == 'acp' else protocol}"
    if agent.get("protocol_version") is not None:
        text += f" protocol {agent['protocol_version']}"
    text += ")"
    caps = agent.get("mcp_capabilities")
    if caps is not None:
        advertised = [name for name in ("http", "sse") if caps.get(name)]
        text += f"; advertises MCP over {', '.join(['stdio', *advertised])}"
    state = agent.get("state", "?")
    if state == "exited":
        how = f"exited ({agent.get('exit_reason') or 'no reason recorded'})"
        if agent.get("exited_at"):
            how += f" at {_when(agent['exited_at'])}"
        if agent.get("stopped_by_daemon"):
            how += ", stopped by the daemon"
        text += f"; {how}"
    else:
        text += f"; {state}"
    if agent.get("stdout_skipped_lines"):
        text += f"; {_plural(agent['stdout_skipped_lines'], 'non-frame stdout line')} skipped"
    return _wrap(text, 0)


def _upstream_lines(upstream: dict[str, Any] | None) -> list[str]:
    if not upstream:
        return _wrap("Upstream: not configured (the embedded backend answers tool calls)", 0)
    state = upstream_text(upstream) if upstream.get("state") else "?"
    extra = [_plural(int(upstream.get("connects", 0)), "connect")]
    if upstream.get("superseded_at"):
        extra.append(f"superseded {_when(upstream['superseded_at'])}")
    if upstream.get("last_connected_at"):
        extra.append(f"last connected {_when(upstream['last_connected_at'])}")
    if upstream.get("dropped_events"):
        extra.append(
            f"{_plural(upstream['dropped_events'], 'event')} dropped, "
            f"{_plural(int(upstream.get('resyncs', 0)), 'resync snapshot')}"
        )
    if upstream.get("buffered_bytes"):
        extra.append(f"{upstream['buffered_bytes']:,} bytes buffered")
    if upstream.get("last_error"):
        extra.append(f"last error {upstream['last_error']}")
    meaning = " (evidence is kept and sent with the next snapshot)" if upstream.get("state") == "buffering" else ""
    return _wrap(f"Upstream: {state}{meaning}; " + "; ".join(extra), 0)


def render_diagnostics(diagnostics: Any, color: bool) -> str:
    data = _plain(diagnostics) or {}
    ident = data.get("identity") or {}
    lines = [
        "agentctl diagnostics: safe to paste into a bug report",
        *_lines("(no agent output, prompts, arguments, header or env values, tokens or full URLs)", 0, color, GREY),
        f"daemon {data.get('daemon_version', '?')} · contract {data.get('contract_version', '?')} "
        f"· generated {_when(data.get('generated_at', ''))} UTC",
    ]
    for key, value in (
        ("execution", ident.get("execution_id")),
        ("instance", ident.get("instance_id")),
        ("task", f"{ident.get('task_id')} · session {ident.get('session_id')}"),
        ("agent id", f"{ident.get('agent_id')} · profile {ident.get('agent_profile_id')}"),
    ):
        lines += _wrap(f"{key:<10} {value}", 0)
    readiness = _readiness_line(data, color)
    if readiness:
        lines.append(readiness)
    lines += _agent_lines(data.get("agent"))
    lines += _upstream_lines(data.get("upstream"))
    lines.append("")
    lines.append("Checklist: [x] observed  [ ] not observed  [-] not observable by agentctl")
    current = data.get("current")
    if current:
        lines += _attempt_block(current, "Current attempt", color, data.get("agent"))
    else:
        lines.append("No attachment attempt yet (no session has been opened).")
    for attempt in data.get("previous") or []:
        lines.append("")
        lines += _attempt_block(attempt, "Previous attempt", color)
    lines.append("")
    refusals = data.get("http_refusals") or []
    if refusals:
        lines.append("HTTP requests refused before MCP (route, method, status: count):")
        for r in refusals:
            lines.append(f"  {r.get('route')} {r.get('method')} {r.get('status')}: {r.get('count', 0)}")
    else:
        lines.append("HTTP requests refused before MCP: none")
    if data.get("rejected_events"):
        lines += _wrap(f"Rejected evidence: {_plural(data['rejected_events'], 'event')} for attempts no longer kept", 0)
    return "\n".join(lines) + "\n"


# ---- tools ----------------------------------------------------------------------------------------------


def _first_line(text: str, width: int) -> str:
    line = " ".join((text or "").split())
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def render_tools(view: Any, color: bool) -> str:
    data = _plain(view) or {}
    server = data.get("server", "kandev")
    lines: list[str] = []
    if not data.get("attempt_id"):
        lines += _wrap(f"{server}: no attachment attempt yet (no session has been opened)", 0)
    elif not data.get("loaded"):
        status = data.get("status")
        state = f" (status: {display_label({'status': status})})" if status else ""
        lines += _wrap(
            f"{server}: catalog not loaded yet: the agent has not listed the tools in attempt "
            f"{data['attempt_id']}{state}",
            0,
        )
    else:
        lines += _tool_list(data, color)
    third = data.get("third_party") or []
    if third:
        lines.append("")
        lines += _wrap(f"{', '.join(third)}: {THIRD_PARTY_NOTE}", 0)
    return "\n".join(lines) + "\n"


def _some(names: list[Any], limit: int = 5) -> str:
    shown = ", ".join(map(str, names[:limit]))
    return shown if len(names) <= limit else f"{_plural(len(names), 'tool')} ({shown}, …)"


def _tool_list(data: dict[str, Any], color: bool) -> list[str]:
    catalog = data.get("catalog") or {}
    tools = catalog.get("tools") or []
    count = data.get("tool_count")
    estimates = [t.get("token_estimate") for t in tools if isinstance(t.get("token_estimate"), int)]
    head = f"{data.get('server')} tools in attempt {data.get('attempt_id')}: " + (
        _plural(count, "tool") if isinstance(count, int) else "?"
    )
    if estimates and len(estimates) == len(tools):
        head += f", ~{sum(estimates):,} tokens in all"
    lines = _wrap(head, 0)
    if tools:
        width = min(max(len(str(t.get("name", ""))) for t in tools), 28)
        for tool in tools:
            name = str(tool.get("name", "?"))
            name = name if len(name) <= width else name[: width - 1] + "…"
            est = tool.get("token_estimate")
            est_text = f"~{est:,} tokens" if isinstance(est, int) else ""
            prefix = f"  {name:<{width}}  " + (f"{est_text:>14}  " if estimates else "")
            lines.append(prefix + _first_line(str(tool.get("description", "")), WIDTH - len(prefix)))
    if catalog.get("estimator"):
        lines += _lines(ESTIMATE_NOTE, 0, color, GREY)
    else:
        reason = catalog.get("estimator_unavailable_reason") or "encoding_unavailable"
        lines += _wrap(f"no token estimates: the o200k_base encoding is not available ({reason})", 0)
    if catalog.get("truncated") and isinstance(count, int):
        lines += _wrap(f"catalog truncated: {len(tools)} of {count} tools kept (the bound is 128, sorted by name)", 0)
    elif catalog.get("truncated"):
        lines += _wrap("catalog truncated at its bound", 0)
    cut_desc = [t.get("name") for t in tools if t.get("description_truncated")]
    cut_schema = [t.get("name") for t in tools if t.get("schema_truncated")]
    if cut_desc:
        lines += _wrap(f"description cut at 1,024 bytes: {_some(cut_desc)}", 0)
    if cut_schema or catalog.get("schemas_truncated"):
        names = f": {_some(cut_schema)}" if cut_schema else ""
        lines += _wrap(f"input schema dropped (over 64 KiB, or past 512 KiB in all){names}", 0)
    lines += _lines("one tool in detail: agentctl tools NAME", 0, color, GREY)
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
    if isinstance(schema.get("$ref"), str):
        return schema["$ref"].rsplit("/", 1)[-1]
    if "enum" in schema:
        return "enum"
    return "any"


def tool_arguments(schema: Any) -> list[dict[str, Any]]:
    """(name, type, required, description) of each top-level property of an input schema."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return []
    required = set(schema.get("required") or [])
    args = []
    for name, prop in schema["properties"].items():
        description = prop.get("description", "") if isinstance(prop, dict) else ""
        args.append(
            {"name": str(name), "type": _type_of(prop), "required": name in required, "description": str(description)}
        )
    return args


def render_tool(detail: Any, color: bool) -> str:
    data = _plain(detail) or {}
    tool = data.get("tool") or {}
    head = f"{tool.get('name', '?')} ({data.get('server')}, attempt {data.get('attempt_id')})"
    if isinstance(tool.get("token_estimate"), int):
        head += f"  ~{tool['token_estimate']:,} tokens"
    lines = _wrap(head, 0)
    if isinstance(tool.get("token_estimate"), int):
        lines += _lines(ESTIMATE_NOTE, 0, color, GREY)
    lines += ["", "Description:"]
    description = str(tool.get("description") or "")
    lines += [line for para in (description.splitlines() or ["(none)"]) for line in _wrap(para, 2)]
    if tool.get("description_truncated"):
        lines += _wrap("(description cut at 1,024 bytes)", 2)
    lines += ["", "Arguments:"]
    schema = tool.get("input_schema")
    if tool.get("schema_truncated") or schema is None:
        lines += _wrap("(input schema not kept: over its 64 KiB bound, or past 512 KiB for the catalog)", 2)
    else:
        args = tool_arguments(schema)
        if not args:
            lines.append("  (no arguments)")
        else:
            nw = min(max(4, *(len(a["name"]) for a in args)), 24)
            tw = min(max(4, *(len(a["type"]) for a in args)), 18)
            prefix_len = 2 + nw + 2 + tw + 2 + 8 + 2
            lines.append(f"  {'name':<{nw}}  {'type':<{tw}}  required  description")
            for a in args:
                name = a["name"] if len(a["name"]) <= nw else a["name"][: nw - 1] + "…"
                kind = a["type"] if len(a["type"]) <= tw else a["type"][: tw - 1] + "…"
                head = f"  {name:<{nw}}  {kind:<{tw}}  {'yes' if a['required'] else 'no':<8}  "
                wrapped = textwrap.wrap(
                    a["description"], width=WIDTH, initial_indent=head, subsequent_indent=" " * prefix_len,
                    break_on_hyphens=False,
                )
                lines += wrapped or [head.rstrip()]
        lines += ["", "Input schema (JSON):"]
        lines += ["  " + line for line in json.dumps(schema, indent=2, ensure_ascii=False).splitlines()]
    return "\n".join(lines) + "\n"

