"""Human rendering of the probe's findings (the ProbeReport contract type lives in evidence/contract/probe.py).

One line per finding, in a fixed order, each with its time since the probe started. Nothing the agent
did not do is phrased as its failure: an absent observation reads "not observed", and no contact at
all reads "unobserved: the agent did not contact the sentinel within N s". Pure: report in, text out.
"""

from __future__ import annotations

from collections.abc import Callable

from agentctl.control.render import paint as paint_tone
from agentctl.present.session import auth_text
from agentctl.evidence.contract.probe import ProbeContact, ProbePassthroughReport, ProbeReport
from agentctl.evidence.display import reporter_name
from agentctl.present.tones import Tone, reported_tone
from agentctl.safetext import neutralize_data

LABEL_WIDTH = 11


def _time(elapsed: float | None) -> str:
    return f"+{elapsed:.2f}s" if elapsed is not None else "   —"


def _client(contact: ProbeContact) -> str:
    parts = []
    if contact.client is not None:
        parts.append(f"{contact.client.name} {contact.client.version or ''}".strip())
    else:
        parts.append("client unnamed")
    if contact.protocol_version:
        parts.append(f"MCP {contact.protocol_version}")
    if contact.era:
        parts.append(f"{contact.era} era")
    if contact.connection_id:
        parts.append(contact.connection_id)
    return " · ".join(parts)


def _credential_note(report: ProbeReport) -> str | None:
    """Say so when the agent reached the sentinel without what was delivered with it."""
    seen = [c.credential_seen for c in report.contacts if c.kind != "closed" and c.credential_seen is not None]
    if not seen or all(seen):
        return None
    transport = report.session.transport if report.session else None
    what = "env value" if transport == "stdio" else "Authorization header"
    return f"the {what} delivered with the sentinel did not reach it on {seen.count(False)} of {len(seen)} requests"


def render_report(report: ProbeReport, *, color: bool = False, jsonl_path: str | None = None) -> str:
    report = neutralize_data(report)  # the agent's name, version and errors: no control characters

    def paint(text: str, tone: Tone) -> str:
        return paint_tone(text, tone, color)

    lines: list[str] = []

    def row(elapsed: float | None, label: str, text: str) -> None:
        lines.append(f"  {_time(elapsed):>7}  {label:<{LABEL_WIDTH}} {text}")

    agent = report.agent
    who = "agent"
    if agent is not None and agent.name:
        who = f"{agent.name} {agent.version or ''}".strip()
        if agent.protocol_version is not None:
            who += f" · ACP protocol {agent.protocol_version}"
    lines.append(f"agentctl probe mcp · {who}")

    if not report.ran:
        summary = report.error.summary if report.error else "unknown reason"
        lines.append(f"  {paint('could not run', 'red')}: {summary}")
        if agent is not None and agent.exit_reason:
            lines.append(f"  agent: {agent.exit_reason}")
        return "\n".join(lines) + "\n"

    caps = agent.mcp_capabilities if agent is not None else None
    advertised = [name for name in ("http", "sse") if caps is not None and getattr(caps, name)]
    row(report.advertised_elapsed_s, "advertised", "mcpCapabilities: " + (", ".join(advertised) or "none (stdio only)"))
    auth = auth_text(agent)
    if auth:
        row(None, "auth", auth)

    session = report.session
    if session is not None:
        row(session.delivered_elapsed_s, "delivered", f"{session.server_name} over {session.transport} ({session.target})")
        if session.accepted:
            row(session.answered_elapsed_s, "session", paint("accepted", "green"))
        elif session.accepted is False:
            why = session.error.summary if session.error else ""
            row(session.answered_elapsed_s, "session", paint("rejected by the agent", "red") + (f": {why}" if why else ""))
        else:
            why = session.error.summary if session.error else "no answer"
            row(session.answered_elapsed_s, "session", paint("no answer", "amber") + f": {why}")

    init = report.initialize
    if init is not None:
        row(init.elapsed_s, "initialize", paint("observed", "green") + f": {_client(init)}")
    else:
        first = report.first_contact
        if first is not None:
            status = f" → {first.http_status}" if first.http_status else ""
            where = first.http_route or f"{first.transport} sentinel started"
            row(first.elapsed_s, "contact", paint("observed", "amber") + f": {where}{status}")
        row(None, "initialize", paint("not observed", "grey"))

    tools = report.tools_list
    if tools is not None:
        count = "" if tools.tool_count is None else f": {tools.tool_count} tool{'s' if tools.tool_count != 1 else ''}"
        row(tools.elapsed_s, "tools/list", paint("observed", "green") + count)
    else:
        row(None, "tools/list", paint("not observed", "grey"))

    call = report.tool_call
    if call is not None:
        row(call.elapsed_s, "tool call", paint("observed", "green") + f": {call.tool_name or 'unnamed tool'} ({call.outcome or 'unknown'})")
    elif report.prompt is None and session is not None and session.accepted:
        row(None, "tool call", paint("not observed", "grey") + " (no prompt sent; --prompt asks the agent to call it)")
    else:
        row(None, "tool call", paint("not observed", "grey"))

    prompt = report.prompt
    if prompt is not None:
        text = f"sent{' (default text)' if prompt.default_text else ''}"
        if prompt.error is not None:
            text += f"; {prompt.error.summary}"
        elif prompt.stop_reason:
            text += f"; finished ({prompt.stop_reason}) at {_time(prompt.finished_elapsed_s).strip()}"
        row(prompt.sent_elapsed_s, "prompt", text)

    if agent is not None and agent.permission_requests:
        lines.append(
            f"  permission: {agent.permission_requests} requested, {agent.permissions_granted} granted"
            " (granted only for the sentinel tool)"
        )
    if report.unobserved:
        lines.append("  " + paint(report.unobserved, "amber"))
    note = _credential_note(report)
    if note:
        lines.append("  note: " + note)
    if agent is not None and agent.exit_reason:
        by = " (stopped by the probe)" if agent.stopped_by_daemon else ""
        lines.append(f"  agent: {agent.exit_reason}{by}")
    if report.raw_frames_recorded:
        where = f" to {jsonl_path}" if jsonl_path else ""
        lines.append(f"  raw frames: recorded{where} (ACP frames both ways and sentinel markers; it holds prompts and credentials)")
    else:
        lines.append("  raw frames: not recorded (--jsonl FILE records them)")
    return "\n".join(lines) + "\n"


# Paints a text in a tone (ANSI on a colour terminal), or leaves it plain.
Painter = Callable[[str, Tone], str]


def _painter(color: bool) -> Painter:
    return lambda text, tone: paint_tone(text, tone, color)


def render_passthrough(report: ProbePassthroughReport, *, color: bool = False) -> str:
    """`probe passthrough`: configuration written, initialize, tools/list, tool use, the agent's own report,
    the workspace restored; each on its own line, with its time."""
    report = neutralize_data(report)
    paint = _painter(color)
    config = report.configuration
    lines = [f"agentctl probe passthrough · strategy {config.strategy if config else '?'}"]

    def row(elapsed: float | None, label: str, text: str) -> None:
        lines.append(f"  {_time(elapsed):>7}  {label:<{LABEL_WIDTH}} {text}")

    if config is not None:
        if config.delivered:
            where = [f"{config.temporary_files} temporary file{'s' if config.temporary_files != 1 else ''}"]
            where += [f"merged into {path}" for path in config.workspace_files]
            row(config.written_elapsed_s, "configured",
                paint("written", "green") + f": {config.server_name} over {config.transport} ({', '.join(where)})")
        else:
            why = config.filtered.summary if config.filtered else "left out"
            code = config.filtered.reason_code if config.filtered else "filtered"
            row(config.written_elapsed_s, "configured", paint("not written", "amber") + f": [{code}] {why}")
    if not report.ran:
        summary = report.error.summary if report.error else "unknown reason"
        lines.append(f"  {paint('could not run', 'red')}: {summary}")
    else:
        init = report.initialize
        row(init.elapsed_s if init else None, "initialize",
            paint("observed", "green") + f": {_client(init)}" if init else paint("not observed", "grey"))
        tools = report.tools_list
        count = "" if tools is None or tools.tool_count is None else f": {tools.tool_count} tool{'s' if tools.tool_count != 1 else ''}"
        row(tools.elapsed_s if tools else None, "tools/list", paint("observed", "green") + count if tools else paint("not observed", "grey"))
        call = report.tool_call
        row(call.elapsed_s if call else None, "tool use",
            paint("observed", "green") + f": {call.tool_name or 'unnamed tool'} ({call.outcome or 'unknown'})"
            if call else paint("not observed", "grey"))
        lines.extend(_reported_lines(report, paint, row))
    agent = report.agent
    if agent is not None and agent.exit_reason:
        by = " (stopped by the probe at the end of its window)" if report.timed_out else ""
        lines.append(f"  agent: {agent.exit_reason}{by}")
    if config is not None and config.restored is not None:
        state = paint("restored", "green") if config.restored else paint("NOT restored", "red")
        lines.append(f"  workspace: {state}" + ("" if config.workspace_files else " (nothing was merged into it)"))
    return "\n".join(lines) + "\n"


def _reported_lines(report: ProbePassthroughReport, paint: Painter,
                    row: Callable[[float | None, str, str], None]) -> list[str]:
    told = report.agent_report
    if told is None:
        return []
    if told.state is not None and told.source is not None:
        who = reporter_name(told.source)
        count = "" if told.tool_count is None else f", {told.tool_count} tool{'s' if told.tool_count != 1 else ''}"
        row(told.elapsed_s, "reported", paint(told.raw_state or told.state, reported_tone(told.state)) + f"{count} · reported by {who} "
            f"({told.source})")
    elif told.source is not None:
        row(None, "reported", paint("nothing", "grey") + f": the CLI printed no {told.source} event about the sentinel")
    else:
        row(None, "reported", paint("not available", "grey") + f": {told.note}")
    return []
