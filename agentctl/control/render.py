"""Human output for status, report and health: pure functions from contract data to text.

Inputs are the JSON the control socket returns (dicts) or the contract structs themselves. Output fits
80 columns: one block per server (name, coloured display state, one plain-language line), with attempt
and execution ids as secondary detail lines. Colour only when asked (see `use_color`).
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from collections.abc import Mapping
from datetime import datetime
from typing import Any, TextIO

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


def _plain(obj: Any) -> Any:
    """Contract structs become the same builtins their JSON would decode to, every string in them with its
    control characters made visible (text from an agent, a server or a frame must not drive the terminal)."""
    if hasattr(obj, "__struct_fields__"):
        import msgspec

        obj = msgspec.to_builtins(obj)
    return neutralize_data(obj)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        value = obj.get(key, default)
    else:
        value = getattr(obj, key, default)
    return default if value is None else value


def _paint(text: str, ansi: str | None, color: bool) -> str:
    return f"{ansi}{text}{RESET}" if color and ansi else text


def display_label(row: Any) -> str:
    """The display state of a server row as people read it."""
    status = _get(row, "status", "configured")
    return DELIVERED_LABEL if status == "delivered" else str(status)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _when(value: Any) -> str:
    """An ISO timestamp as `YYYY-MM-DD HH:MM:SS` (UTC, as stored); anything else verbatim."""
    if hasattr(value, "isoformat"):
        value = value.isoformat()
    text = str(value)
    if len(text) >= 19 and text[10] in "T ":
        return text[:10] + " " + text[11:19]
    return text


def row_explanation(row: Any) -> str:
    """The plain-language line that says what a row's state means."""
    status = _get(row, "status", "configured")
    reason = _get(row, "reason_code")
    if status == "active":
        count = _get(row, "tool_count")
        text = _plural(count, "tool") + " loaded" if isinstance(count, int) else "tools loaded"
        # Say whether the tools were used either way: silence would read as "unknown".
        text += ", used" if _get(row, "tool_calls", 0) else ", none used yet"
        return text
    if status == "connected":
        return "initialized, tools not listed yet"
    if status == "delivered":
        if _get(row, "source", "profile") == "builtin":
            return "sent to the agent; the agent has not contacted this endpoint yet"
        return "sent to the agent; third-party servers connect directly to the agent, so this is expected"
    if status in ("failed", "filtered", "unavailable"):
        return meaning(reason)  # the words; the bare code is a detail line
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


def agent_gone(agent: Any) -> str | None:
    """One line for an agent whose process has ended (crashed, exited, killed, never started), else None."""
    if not agent or _get(agent, "state") != "exited":
        return None
    code, signum = _get(agent, "exit_code"), _get(agent, "exit_signal")
    if code is not None:
        end = f"exit code {code}"
    elif signum is not None:
        end = f"killed by {_signal_name(int(signum))}"
    else:
        end = None
    failure = _get(agent, "start_failure")
    if failure:
        head = "the agent " + _START_FAILURES.get(str(failure), f"did not start ({failure})")
    elif _get(agent, "stopped_by_daemon", False):
        head = "the agent was stopped by the daemon"
    else:
        head = "the agent has exited"
    return f"{head}, {end}" if end else head


def code_detail(reason: Any, summary: Any) -> str:
    """The detail beside a plain-language line: the bare reason code and the redacted summary."""
    code = str(reason or "no_reason_code")
    return f"{code}: {summary}" if summary else code


def _row_details(row: Any, agent: Any = None) -> list[str]:
    details: list[str] = []
    status = _get(row, "status", "configured")
    if status in ("failed", "filtered", "unavailable") and _get(row, "reason_code"):
        details.append(code_detail(_get(row, "reason_code"), _get(row, "summary")))
    failure = _get(row, "last_failure")
    if status != "failed" and failure:
        # A failure a later contact superseded: still shown, as what it was and when.
        code = _get(failure, "reason_code")
        details.append(
            f"earlier attachment error, no longer current: {meaning(code)} at {_when(_get(row, 'failed_at'))} "
            f"({code_detail(code, _get(failure, 'summary'))}); a later contact succeeded"
        )
    calls = _get(row, "tool_calls", 0)
    errors = _get(row, "tool_errors", 0)
    if calls and errors:
        details.append(f"{_plural(calls, 'tool call')}, {errors} returned an error")
    closed = _instant(_get(row, "disconnected_at"))
    if status in ("active", "connected") and closed:
        text = f"legacy connection closed at {_when(closed)}"
        contacts = [_instant(_get(row, k)) for k in ("initialize_observed_at", "tools_list_observed_at",
                                                     "tool_call_observed_at")]
        if any(t is not None and t > closed for t in contacts):
            # Only a connection-less (modern-era) request can come after the close without replacing it.
            text += "; modern-era requests since (stateless: they have no connection)"
        details.append(text)
    test = _get(row, "endpoint_test")
    if test:
        if _get(test, "succeeded", False):
            count = _get(test, "tool_count")
            extra = f", {_plural(count, 'tool')}" if isinstance(count, int) else ""
            details.append(f"endpoint test: reachable from the daemon{extra} (reachability, not attachment)")
        else:
            code = _get(test, "reason_code", "error")
            details.append(
                f"endpoint test failed: {meaning(code)} [{code}] (a test from the daemon, not what the agent saw)"
            )
    gone = agent_gone(agent)
    if gone:
        # The row keeps its strongest evidence; this says no more will come from this agent.
        details.append(f"{gone}; no more evidence will come from it")
    return details


def _instant(value: Any) -> datetime | None:
    """A timestamp from a struct (datetime) or its JSON (ISO text); None when absent or unreadable."""
    if value is None or isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def session_error_lines(error: Any) -> tuple[str, str]:
    """A report-level session error: the plain line (it fails no row) and its code detail."""
    code = _get(error, "reason_code", "session_error")
    return (f"session error (not tied to one server): {meaning(code)}", code_detail(code, _get(error, "summary")))


def _wrap(text: str, indent: int) -> list[str]:
    return textwrap.wrap(
        text,
        width=WIDTH,
        initial_indent=" " * indent,
        subsequent_indent=" " * indent,
        break_on_hyphens=False,
    ) or [" " * indent]


def _name_cell(name: str, width: int) -> str:
    if len(name) > width:
        name = name[: width - 1] + "…"
    return name.ljust(width)


def render_rows(servers: list[Any], color: bool, indent: int = 2, agent: Any = None) -> list[str]:
    """One block per server: `name  state`, then the explanation (and details) under the state column."""
    servers = [_plain(row) for row in servers]
    if not servers:
        return [" " * indent + "no MCP servers in this attempt"]
    names = [str(_get(row, "name", "?")) for row in servers]
    width = min(max(NAME_MIN, *(len(n) for n in names)), NAME_MAX)
    text_col = indent + width + 2
    lines: list[str] = []
    for name, row in zip(names, servers):
        status = _get(row, "status", "configured")
        label = _paint(display_label(row), STATE_COLORS.get(status), color)
        lines.append(f"{' ' * indent}{_name_cell(name, width)}  {label}")
        lines.extend(_wrap(row_explanation(row), text_col))
        for detail in _row_details(row, agent):
            lines.extend(_paint(line, GREY, color) for line in _wrap(detail, text_col))
    return lines


def _detail(key: str, value: str, color: bool) -> list[str]:
    head = f"  {key:<10} "
    wrapped = textwrap.wrap(
        value, width=WIDTH, initial_indent=head, subsequent_indent=" " * len(head), break_on_hyphens=False
    ) or [head.rstrip()]
    return [_paint(line, GREY, color) for line in wrapped]


def _attempt_line(attempt: Any) -> str:
    parts = [str(_get(attempt, "attempt_id", "?")), f"({_get(attempt, 'origin', 'manual')})"]
    acp = _get(attempt, "acp_session_id")
    text = " ".join(parts)
    if acp:
        text += f" · ACP session {acp}"
    return text


def degraded_text(degraded: Mapping[str, Any] | None) -> str:
    """`persistence: report_write_failed, ...`: what works but not fully, by component and reason code."""
    return ", ".join(f"{name}: {code}" for name, code in sorted((degraded or {}).items()))


def _readiness_line(status: Mapping[str, Any], color: bool) -> str | None:
    if "ready" not in status:
        return None
    degraded = status.get("degraded") or {}
    if status.get("ready"):
        if degraded:
            return "Daemon: " + _paint("ready, degraded", AMBER, color) + f" ({degraded_text(degraded)})"
        return "Daemon: " + _paint("ready", GREEN, color)
    checks = status.get("checks") or {}
    failing = [name for name, ok in checks.items() if not ok]
    gone = agent_gone(status.get("agent")) if "agent" in failing else None
    if failing:
        # An agent that has exited will not come back by waiting: say what happened to it instead.
        waits = [name for name in failing if not (gone and name == "agent")]
        why = "; ".join(filter(None, [gone, "waiting for " + ", ".join(waits) if waits else None]))
    elif status.get("stopping") or checks:
        why = "stopping"
    else:
        why = "starting"
    if degraded:
        why += f"; degraded: {degraded_text(degraded)}"
    return "Daemon: " + _paint("not ready", AMBER, color) + f" ({why})"


def upstream_text(upstream: Any) -> str:
    """The upstream's state as people read it: `superseded` says by what, never "connected"."""
    state = str(_get(upstream, "state"))
    if state == "superseded":
        reason = _get(upstream, "superseded_reason")
        by = {"stale_execution": "a newer execution of this session is current",
              "stale_instance": "a newer daemon instance of this execution is current"}.get(reason, reason)
        return f"superseded ({by}; the upstream rejects this daemon's evidence)" if by else "superseded"
    return state


def render_attempt(attempt: Any, color: bool, agent: Any = None) -> list[str]:
    """The server rows of one attempt, plus its session-level error (a diagnostic, not a row failure)."""
    attempt = _plain(attempt)
    lines = render_rows(list(_get(attempt, "servers", []) or []), color, agent=agent)
    error = _get(attempt, "session_error")
    if error:
        text, detail = session_error_lines(error)
        lines.extend(_wrap(text, 2))
        lines.extend(_paint(line, GREY, color) for line in _wrap(detail, 4))
    return lines


def render_status(status: Any, color: bool) -> str:
    """A status (GET /v1/status), a whole report, or one attempt, for a person at an 80-column terminal."""
    data = _plain(status) or {}
    if "servers" in data and "attempt_id" in data:  # a bare Attempt
        attempt, identity = data, None
    else:
        attempt, identity = data.get("current"), data.get("identity")

    lines: list[str] = []
    headline = _readiness_line(data, color)
    if headline:
        lines += [headline, ""]
    if attempt:
        lines += render_attempt(attempt, color, agent=data.get("agent"))
    else:
        lines.append("  no attachment attempt yet (no session has been opened)")
        gone = agent_gone(data.get("agent"))
        if gone:
            lines.extend(_wrap(gone, 2))
    lines.append("")
    if attempt:
        lines += _detail("attempt", _attempt_line(attempt), color)
    execution = _get(identity, "execution_id") if identity else _get(attempt, "execution_id")
    if execution:
        lines += _detail("execution", str(execution), color)
        task = _get(identity or attempt, "task_id")
        session = _get(identity or attempt, "session_id")
        if task or session:
            lines += _detail("task", " · ".join(x for x in (task and str(task), session and f"session {session}") if x), color)
    if data.get("mcp_url"):
        lines += _detail("MCP", str(data["mcp_url"]), color)
    upstream = data.get("upstream")
    if upstream:
        dropped = _get(upstream, "dropped_events") or 0
        state = upstream_text(upstream)
        lines += _detail("upstream", state + (f", {_plural(dropped, 'event')} resynced" if dropped else ""), color)
    if data.get("report_path"):
        lines += _detail("report", str(data["report_path"]), color)
    rejected = data.get("rejected_events") or 0
    if rejected:
        lines += _detail("rejected", f"{_plural(rejected, 'event')} for attempts no longer kept", color)
    return "\n".join(lines).rstrip("\n") + "\n"


def render_report(history: Any, color: bool) -> str:
    """The whole report: the current attempt like `status`, then each previous attempt, newest first."""
    data = _plain(history) or {}
    text = render_status(data, color)
    previous = data.get("previous") or []
    parts = [text]
    for attempt in previous:
        head = f"Previous attempt {_attempt_line(attempt)}"
        superseded = attempt.get("superseded_at")
        if superseded:
            head += f", superseded {_when(superseded)}"
        lines = ["", *_wrap(head, 0), *render_attempt(attempt, color)]
        parts.append("\n".join(lines) + "\n")
    refusals = data.get("http_refusals") or []
    if refusals:
        total = sum(int(r.get("count", 0)) for r in refusals)
        parts.append("\n" + "\n".join(_detail("refused", f"{_plural(total, 'HTTP request')} before MCP", color)) + "\n")
    return "".join(parts)


def render_health(health: Any, ready_mode: bool, color: bool) -> str:
    """One line: liveness (or readiness with --ready) and, when not ready, which checks are failing."""
    data = _plain(health) or {}
    if not ready_mode:
        if data.get("live"):
            return _paint("live", GREEN, color) + "\n"
        return _paint("not live", RED, color) + "\n"
    degraded = data.get("degraded") or {}
    if data.get("ready"):
        if degraded:
            return _paint("ready", GREEN, color) + f" (degraded: {degraded_text(degraded)})\n"
        return _paint("ready", GREEN, color) + "\n"
    checks = data.get("checks") or {}
    details = data.get("details") or {}
    failing = [
        f"{name} ({details[name]})" if details.get(name) else name for name, ok in checks.items() if not ok
    ]
    if data.get("stopping"):
        why = "stopping"
    elif failing:
        why = "failing: " + ", ".join(failing)
    elif not checks:
        why = "no readiness checks reported yet"
    else:
        why = "not ready"
    return _paint("not ready", RED, color) + f" ({why})\n"
