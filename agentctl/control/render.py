"""The terminal's layout of status, report and health: the words and tones of agentctl.present, at 80 columns.

Inputs are contract structs only (the control client decodes every answer into one), read by attribute: a
misspelt field is an error at once, never a silently rendered default. Every string in them has its control
characters made visible first (agentctl.safetext). Output fits 80 columns: one block per server (name,
coloured display state, one plain-language line), with attempt and execution ids as secondary detail
lines. What a row, an agent or a notice says, and its tone, is agentctl.present's; here a tone becomes an ANSI
colour, only when asked (see `use_color`).
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from typing import TextIO

from agentctl.evidence.contract.control import HealthResponse, StatusResponse
from agentctl.evidence.contract.diagnostics import Diagnostics
from agentctl.evidence.contract.report import AgentState, Attempt, AttachmentHistory, ServerRow
from agentctl.present.rows import display_label, row_details, row_explanation
from agentctl.present.session import (
    agent_gone,
    agent_report_line,
    auth_text,
    health_words,
    notice_lines,
    readiness_words,
    refusal_headline,
    session_error_lines,
    upstream_text,
)
from agentctl.present.tones import Tone, state_tone
from agentctl.present.words import plural, when
from agentctl.safetext import neutralize_data

WIDTH = 80
NAME_MIN = 8
NAME_MAX = 24

RESET = "\x1b[0m"
GREEN = "\x1b[32m"
AMBER = "\x1b[33m"
RED = "\x1b[31m"
GREY = "\x1b[90m"

# A tone (agentctl.present.tones) as the terminal shows it; `plain` is not painted.
TONE_ANSI: dict[Tone, str] = {"green": GREEN, "amber": AMBER, "red": RED, "grey": GREY}

def use_color(stream: TextIO | None = None) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set to a non-empty value (no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if isatty is None:
        return False
    try:
        return bool(isatty())
    except (ValueError, OSError):  # closed or detached stream
        return False


def paint(text: str, tone: Tone, color: bool) -> str:
    """`text` in its tone's colour, when colour is on."""
    ansi = TONE_ANSI.get(tone)
    return f"{ansi}{text}{RESET}" if color and ansi else text


# Stands for a space inside a `command` while wrapping: textwrap never breaks at it, so a command a line gives
# stays on one line (a character of Unicode's private use area: it never occurs in agentctl's own texts).
_KEEP = "\ue000"
_COMMAND = re.compile(r"`[^`\n]+`")


def wrap(text: str, indent: int) -> list[str]:
    """`text` at WIDTH columns: a word longer than a line (a path, a URL, an id) overflows whole rather than being
    cut, and a `command` in backquotes is never split across lines."""
    kept = _COMMAND.sub(lambda m: m.group(0).replace(" ", _KEEP), text)
    lines = textwrap.wrap(
        kept,
        width=WIDTH,
        initial_indent=" " * indent,
        subsequent_indent=" " * indent,
        break_on_hyphens=False,
        break_long_words=False,
    ) or [" " * indent]
    return [line.replace(_KEEP, " ") for line in lines]


def _name_cell(name: str, width: int) -> str:
    if len(name) > width:
        name = name[: width - 1] + "…"
    return name.ljust(width)


def render_rows(servers: list[ServerRow], color: bool, indent: int = 2, agent: AgentState | None = None,
                gone: bool = True) -> list[str]:
    """One block per server: `name  state`, then the explanation (and details) under the state column; with
    `gone` False a gone agent is not repeated under every row (the caller says it once)."""
    servers = neutralize_data(servers)
    if not servers:
        return [" " * indent + "no MCP servers in this attempt"]
    names = [row.name for row in servers]
    width = min(max(NAME_MIN, *(len(n) for n in names)), NAME_MAX)
    text_col = indent + width + 2
    lines: list[str] = []
    for name, row in zip(names, servers):
        label = paint(display_label(row), state_tone(row.status), color)
        lines.append(f"{' ' * indent}{_name_cell(name, width)}  {label}")
        lines.extend(wrap(row_explanation(row), text_col))
        for detail in row_details(row, agent, gone=gone):
            lines.extend(paint(line, "grey", color) for line in wrap(detail, text_col))
    return lines


def _detail(key: str, value: str, color: bool) -> list[str]:
    head = f"  {key:<10} "
    wrapped = textwrap.wrap(
        value, width=WIDTH, initial_indent=head, subsequent_indent=" " * len(head), break_on_hyphens=False,
        break_long_words=False,  # a path or an id overflows whole, never cut
    ) or [head.rstrip()]
    return [paint(line, "grey", color) for line in wrapped]


def _attempt_line(attempt: Attempt) -> str:
    text = f"{attempt.attempt_id} ({attempt.origin})"
    if attempt.acp_session_id:
        text += f" · ACP session {attempt.acp_session_id}"
    return text


def _required_lines(attempt: Attempt, color: bool) -> list[str]:
    """The gate's reading the report kept on `attempt`, beside its rows (grey: never a row's colour)."""
    gate = attempt.required
    if gate is None:
        return []
    return [line for server in gate.servers for line in _detail("required", f"{server.name}: {server.policy}", color)]


def readiness_line(view: StatusResponse | Diagnostics, color: bool) -> str:
    """`Daemon: ready` (or degraded), or `Daemon: not ready (why)`: a gone agent says how it ended."""
    state, tone, why = readiness_words(view)
    return "Daemon: " + paint(state, tone, color) + (f" ({why})" if why else "")


def render_attempt(attempt: Attempt, color: bool, agent: AgentState | None = None, *, gone: bool = True) -> list[str]:
    """The server rows of one attempt, plus its session-level error (a diagnostic, not a row failure); an
    attempt whose session was not accepted says so first."""
    attempt = neutralize_data(attempt)
    headline = refusal_headline(attempt)
    lines = [paint(line, "red", color) for line in wrap(headline, 2)] if headline else []
    error = attempt.session_error
    said = bool(headline and error is not None and f"[{error.reason_code}]" in headline)
    if said and error is not None:
        # The headline has said the session error: only its detail is new, under it, once.
        lines.extend(paint(line, "grey", color) for line in wrap(session_error_lines(error)[1], 4))
    lines += render_rows(attempt.servers, color, agent=agent, gone=gone)
    report = agent_report_line(agent)
    if report:
        lines.extend(paint(line, "grey", color) for line in wrap(report, 2))
    for notice in notice_lines(attempt.notices, attempt.notice_count):
        lines.extend(paint(line, "grey", color) for line in wrap(notice, 2))
    if error is not None and not said:
        text, detail = session_error_lines(error)
        lines.extend(wrap(text, 2))
        lines.extend(paint(line, "grey", color) for line in wrap(detail, 4))
    return lines


def render_status(status: StatusResponse | AttachmentHistory | Attempt, color: bool, *, agent_line: bool = False) -> str:
    """A status (GET /v1/status), a whole report, or one attempt, for a person at an 80-column terminal. With
    `agent_line`, a gone agent is said once, in an `Agent:` line on top, instead of under every row."""
    status = neutralize_data(status)
    attempt: Attempt | None
    if isinstance(status, Attempt):
        attempt, identity, agent = status, None, None
    else:
        attempt, identity, agent = status.current, status.identity, status.agent
    live = status if isinstance(status, StatusResponse) else None  # only a live status has readiness

    lines: list[str] = []
    if live is not None:
        lines += [readiness_line(live, color), ""]
    ended = agent_gone(agent) if agent_line else None
    if ended:
        lines += wrap(f"Agent: {ended}; no more evidence will come from it", 0)
    if attempt:
        lines += render_attempt(attempt, color, agent=agent, gone=not agent_line)
    else:
        lines.append("  no attachment attempt yet (no session has been opened)")
        gone = None if agent_line else agent_gone(agent)
        if gone:
            lines.extend(wrap(gone, 2))
    lines.append("")
    if attempt:
        lines += _detail("attempt", _attempt_line(attempt), color)
    auth = auth_text(agent)
    if auth:
        lines += _detail("auth", auth, color)
    owner = identity or attempt
    if owner is not None and owner.execution_id:
        lines += _detail("execution", owner.execution_id, color)
        task, session = owner.task_id, owner.session_id
        if task or session:
            lines += _detail("task", " · ".join(x for x in (task, session and f"session {session}") if x), color)
    if live is not None:
        if live.mcp_url:
            lines += _detail("MCP", live.mcp_url, color)
        if live.upstream:
            dropped = live.upstream.dropped_events
            state = upstream_text(live.upstream)
            lines += _detail("upstream", state + (f", {plural(dropped, 'event')} resynced" if dropped else ""), color)
        if live.report_path:
            lines += _detail("report", live.report_path, color)
        if live.required is not None:
            # The gate's reading beside the rows' evidence: a policy result, never a row's colour.
            for server in live.required.servers:
                lines += _detail("required", f"{server.name}: {server.policy}", color)
    if (live is None or live.required is None) and attempt is not None:
        lines += _required_lines(attempt, color)
    rejected = status.rejected_events if not isinstance(status, Attempt) else 0
    if rejected:
        lines += _detail("rejected", f"{plural(rejected, 'event')} for attempts no longer kept", color)
    return "\n".join(lines).rstrip("\n") + "\n"


def render_report(history: AttachmentHistory, color: bool) -> str:
    """The whole report: the current attempt like `status`, then each previous attempt, newest first."""
    history = neutralize_data(history)
    parts = [render_status(history, color)]
    for attempt in history.previous:
        head = f"Previous attempt {_attempt_line(attempt)}"
        if attempt.superseded_at:
            head += f", superseded {when(attempt.superseded_at)}"
        lines = ["", *wrap(head, 0), *render_attempt(attempt, color), *_required_lines(attempt, color)]
        parts.append("\n".join(lines) + "\n")
    if history.http_refusals:
        total = sum(r.count for r in history.http_refusals)
        parts.append("\n" + "\n".join(_detail("refused", f"{plural(total, 'HTTP request')} before MCP", color)) + "\n")
    return "".join(parts)


def render_health(health: HealthResponse, ready_mode: bool, color: bool) -> str:
    """One line: liveness (or readiness with --ready) and, when not ready, which checks are failing."""
    state, tone, why = health_words(neutralize_data(health), ready_mode)
    return paint(state, tone, color) + (f" ({why})" if why else "") + "\n"
