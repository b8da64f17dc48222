"""Human output for status, report and health: pure functions from contract structs to text.

Inputs are contract structs only (the control client decodes every answer into one), read by attribute: a
misspelt field is an error at once, never a silently rendered default. Every string in them has its control
characters made visible first (agentctl.safetext). Output fits 80 columns: one block per server (name,
coloured display state, one plain-language line), with attempt and execution ids as secondary detail
lines. Colour only when asked (see `use_color`).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import textwrap
from collections.abc import Mapping
from datetime import datetime
from typing import TextIO

from agentctl.evidence.contract import (
    MAX_NOTICES_PER_ATTEMPT,
    AgentNotice,
    AgentState,
    Attempt,
    AttachmentHistory,
    Diagnostics,
    ErrorSummary,
    HealthResponse,
    RowView,
    ServerDiagnostics,
    ServerRow,
    StatusResponse,
    UpstreamStatus,
)
from agentctl.evidence.display import row_view
from agentctl.evidence.reasons import meaning
from agentctl.safetext import neutralize_data

WIDTH = 80
NAME_MIN = 8
NAME_MAX = 24

RESET = "\x1b[0m"
GREEN = "\x1b[32m"
AMBER = "\x1b[33m"
RED = "\x1b[31m"
GREY = "\x1b[90m"

# Display status -> colour. `configured` stays plain: it claims nothing.
STATE_COLORS: dict[str, str] = {
    "active": GREEN,
    "connected": AMBER,
    "delivered": AMBER,
    "failed": RED,
    "filtered": GREY,
    "unavailable": GREY,
}

DELIVERED_LABEL = "delivered · connection unverified"


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


def paint(text: str, ansi: str | None, color: bool) -> str:
    return f"{ansi}{text}{RESET}" if color and ansi else text


def status_label(status: str) -> str:
    """A display state as people read it."""
    return DELIVERED_LABEL if status == "delivered" else status


def view_of(row: ServerRow | ServerDiagnostics) -> RowView | None:
    """How the row reads (agentctl.evidence.display): whose evidence its state rests on, and the agent's report."""
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


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def when(value: datetime | str) -> str:
    """A timestamp as `YYYY-MM-DD HH:MM:SS` (UTC, as stored); anything else verbatim."""
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    if len(text) >= 19 and text[10] in "T ":
        return text[:10] + " " + text[11:19]
    return text


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


# How an agent that never got through its start ended, by the start failure's reason code.
_START_FAILURES = {
    "agent_start_failed": "could not be started",
    "agent_exited_before_initialize": "exited before answering initialize",
    "initialize_timeout": "did not answer initialize in time",
    "initialize_rejected": "refused initialize",
    "initialize_invalid": "answered initialize with something unusable",
    "materialize_failed": "was not started: its MCP configuration could not be written",
}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def agent_gone(agent: AgentState | None) -> str | None:
    """One line for an agent whose process has ended (crashed, exited, killed, never started), else None."""
    if agent is None or agent.state != "exited":
        return None
    if agent.exit_code is not None:
        end = f"exit code {agent.exit_code}"
    elif agent.exit_signal is not None:
        end = f"killed by {_signal_name(agent.exit_signal)}"
    else:
        end = None
    if agent.start_failure:
        head = "the agent " + _START_FAILURES.get(agent.start_failure, f"did not start ({agent.start_failure})")
    elif agent.stopped_by_daemon:
        head = "the agent was stopped by the daemon"
    else:
        head = "the agent has exited"
    return f"{head}, {end}" if end else head


def code_detail(reason: str | None, summary: str | None) -> str:
    """The detail beside a plain-language line: the bare reason code and the redacted summary."""
    code = reason or "no_reason_code"
    return f"{code}: {summary}" if summary else code


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


def agent_report_line(agent: AgentState | None) -> str | None:
    """Report level: whether the agent's own report of its servers is read, from where, or why none exists."""
    if agent is None:
        return None
    if agent.report_source:
        return (f"agent report: read from the agent's output ({agent.report_source}); a row says "
                f"\"reported by\" when its state rests on it, every other state is agentctl's own observation")
    if agent.report_note:
        return f"agent report: none; {agent.report_note}"
    return None


def auth_text(agent: AgentState | None) -> str | None:
    """Which ACP `authenticate` method was sent (its id only) and how the agent answered; None when none was."""
    if agent is None or agent.auth_result is None:
        return None
    method = agent.auth_method or "?"
    if agent.auth_result == "accepted":
        return f"ACP authenticate with method {method}: accepted"
    if agent.auth_result == "not_advertised":
        return f"ACP authenticate not sent: the agent did not advertise the method {method} ([agent] auth_method)"
    return f"ACP authenticate with method {method}: rejected" + (f" ({agent.auth_note})" if agent.auth_note else "")


def notice_lines(notices: list[AgentNotice], count: int) -> list[str]:
    """Report level: the agent's session notices in its own (redacted) words. Weak: they change no row."""
    lines = []
    for notice in notices:
        text = notice.title + (f": {notice.description}" if notice.description else "")
        lines.append(f"agent notice ({notice.severity}; the agent's words, not agentctl's observation; "
                     f"no server's state changes): {text}")
    if count > len(notices):
        lines.append(f"{plural(count - len(notices), 'more agent notice')} not kept (the first "
                     f"{MAX_NOTICES_PER_ATTEMPT} are)")
    return lines


def session_error_lines(error: ErrorSummary) -> tuple[str, str]:
    """A report-level session error: the plain line (it fails no row) and its code detail."""
    code = error.reason_code or "session_error"
    return (f"session error (not tied to one server): {meaning(code)}", code_detail(code, error.summary))


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
        label = paint(display_label(row), STATE_COLORS.get(row.status), color)
        lines.append(f"{' ' * indent}{_name_cell(name, width)}  {label}")
        lines.extend(wrap(row_explanation(row), text_col))
        for detail in row_details(row, agent, gone=gone):
            lines.extend(paint(line, GREY, color) for line in wrap(detail, text_col))
    return lines


def _detail(key: str, value: str, color: bool) -> list[str]:
    head = f"  {key:<10} "
    wrapped = textwrap.wrap(
        value, width=WIDTH, initial_indent=head, subsequent_indent=" " * len(head), break_on_hyphens=False,
        break_long_words=False,  # a path or an id overflows whole, never cut
    ) or [head.rstrip()]
    return [paint(line, GREY, color) for line in wrapped]


def _attempt_line(attempt: Attempt) -> str:
    text = f"{attempt.attempt_id} ({attempt.origin})"
    if attempt.acp_session_id:
        text += f" · ACP session {attempt.acp_session_id}"
    return text


def degraded_text(degraded: Mapping[str, str]) -> str:
    """`persistence: report_write_failed, ...`: what works but not fully, by component and reason code."""
    return ", ".join(f"{name}: {code}" for name, code in sorted(degraded.items()))


def readiness_line(view: StatusResponse | Diagnostics, color: bool) -> str:
    """`Daemon: ready` (or degraded), or `Daemon: not ready (why)`: a gone agent says how it ended."""
    degraded = view.degraded
    if view.ready:
        if degraded:
            return "Daemon: " + paint("ready, degraded", AMBER, color) + f" ({degraded_text(degraded)})"
        return "Daemon: " + paint("ready", GREEN, color)
    failing = [name for name, ok in view.checks.items() if not ok]
    gone = agent_gone(view.agent) if "agent" in failing else None
    if failing:
        # An agent that has exited will not come back by waiting: say what happened to it instead.
        waits = [name for name in failing if not (gone and name == "agent")]
        why = "; ".join(filter(None, [gone, "waiting for " + ", ".join(waits) if waits else None]))
    elif view.checks:
        why = "stopping"
    else:
        why = "starting"
    if degraded:
        why += f"; degraded: {degraded_text(degraded)}"
    return "Daemon: " + paint("not ready", AMBER, color) + f" ({why})"


def upstream_text(upstream: UpstreamStatus) -> str:
    """The upstream's state as people read it: `superseded` says by what, never "connected"."""
    if upstream.state == "superseded":
        reason = upstream.superseded_reason
        by = {"stale_execution": "a newer execution of this session is current",
              "stale_instance": "a newer daemon instance of this execution is current"}.get(reason or "", reason)
        return f"superseded ({by}; the upstream rejects this daemon's evidence)" if by else "superseded"
    return upstream.state


# Reason codes of a session request that did not open a session (agentctl/agent/acp.py): the agent refused it,
# never answered, or was not there to ask.
_NOT_OPENED = frozenset({"session_rejected", "session_timeout", "session_error", "agent_exited", "agent_not_running"})


def refusal_headline(attempt: Attempt) -> str | None:
    """First line of an attempt whose session was not accepted, so that green rows above a refusal (servers the
    agent connected to before refusing) never read as a healthy attempt at a glance. None once accepted."""
    if attempt.accepted_at is not None:
        return None
    error = attempt.session_error
    code = error.reason_code if error is not None else None
    if code is None:
        failed = [row for row in attempt.servers if row.status == "failed" and row.reason_code in _NOT_OPENED]
        code = failed[0].reason_code if failed else None
    if code is None or code not in _NOT_OPENED:
        return None
    return (f"NO SESSION: {meaning(code)} [{code}]. The agent has no session with these servers; each row "
            f"below is only what happened before that")


def render_attempt(attempt: Attempt, color: bool, agent: AgentState | None = None, *, gone: bool = True) -> list[str]:
    """The server rows of one attempt, plus its session-level error (a diagnostic, not a row failure); an
    attempt whose session was not accepted says so first."""
    attempt = neutralize_data(attempt)
    headline = refusal_headline(attempt)
    lines = [paint(line, RED, color) for line in wrap(headline, 2)] if headline else []
    error = attempt.session_error
    said = bool(headline and error is not None and f"[{error.reason_code}]" in headline)
    if said and error is not None:
        # The headline has said the session error: only its detail is new, under it, once.
        lines.extend(paint(line, GREY, color) for line in wrap(session_error_lines(error)[1], 4))
    lines += render_rows(attempt.servers, color, agent=agent, gone=gone)
    report = agent_report_line(agent)
    if report:
        lines.extend(paint(line, GREY, color) for line in wrap(report, 2))
    for notice in notice_lines(attempt.notices, attempt.notice_count):
        lines.extend(paint(line, GREY, color) for line in wrap(notice, 2))
    if error is not None and not said:
        text, detail = session_error_lines(error)
        lines.extend(wrap(text, 2))
        lines.extend(paint(line, GREY, color) for line in wrap(detail, 4))
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
        lines = ["", *wrap(head, 0), *render_attempt(attempt, color)]
        parts.append("\n".join(lines) + "\n")
    if history.http_refusals:
        total = sum(r.count for r in history.http_refusals)
        parts.append("\n" + "\n".join(_detail("refused", f"{plural(total, 'HTTP request')} before MCP", color)) + "\n")
    return "".join(parts)


def render_health(health: HealthResponse, ready_mode: bool, color: bool) -> str:
    """One line: liveness (or readiness with --ready) and, when not ready, which checks are failing."""
    health = neutralize_data(health)
    if not ready_mode:
        if health.live:
            return paint("live", GREEN, color) + "\n"
        return paint("not live", RED, color) + "\n"
    if health.ready:
        if health.degraded:
            return paint("ready", GREEN, color) + f" (degraded: {degraded_text(health.degraded)})\n"
        return paint("ready", GREEN, color) + "\n"
    failing = [f"{name} ({check.detail})" if check.detail else name for name, check in health.checks.items() if not check.ok]
    if health.stopping:
        why = "stopping"
    elif failing:
        why = "failing: " + ", ".join(failing)
    elif not health.checks:
        why = "no readiness checks reported yet"
    else:
        why = "not ready"
    return paint("not ready", RED, color) + f" ({why})\n"
