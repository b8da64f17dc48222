"""How the agent, its session and the daemon read: the agent's line, an agent that is gone, its own report and
authentication, its notices, a session error or refusal, the daemon's readiness and health (with their tones),
what is degraded, the upstream's state (pure, no I/O)."""

from __future__ import annotations

import signal
from collections.abc import Mapping

from agentctl.evidence.contract.control import HealthResponse, StatusResponse, UpstreamStatus
from agentctl.evidence.contract.diagnostics import Diagnostics
from agentctl.evidence.contract.report import (
    MAX_NOTICES_PER_ATTEMPT,
    AgentNotice,
    AgentState,
    Attempt,
    ErrorSummary,
)
from agentctl.evidence.reasons import meaning
from agentctl.present.tones import Tone
from agentctl.present.words import code_detail, plural, when


# How an agent that never got through its start ended, by the start failure's reason code.
_START_FAILURES = {
    "agent_start_failed": "could not be started",
    "agent_exited_before_initialize": "exited before answering initialize",
    "initialize_timeout": "did not answer initialize in time",
    "initialize_rejected": "refused initialize",
    "initialize_invalid": "answered initialize with something unusable",
    "materialize_failed": "was not started: its MCP configuration could not be written",
}


#R2
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


def degraded_text(degraded: Mapping[str, str]) -> str:
    """`persistence: report_write_failed, ...`: what works but not fully, by component and reason code."""
    return ", ".join(f"{name}: {code}" for name, code in sorted(degraded.items()))


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


def agent_words(agent: AgentState | None) -> list[str]:
    """`Agent: name version (protocol); what it advertises; how it stands`, and its report's line: one paragraph
    each, for the surface to wrap."""
    if agent is None:
        return ["Agent: none (this daemon hosts MCP only)"]
    who = " ".join(x for x in (agent.name, agent.version) if x) or "unnamed"
    text = f"Agent: {who} ({'ACP' if agent.protocol == 'acp' else agent.protocol}"
    if agent.protocol_version is not None:
        text += f" protocol {agent.protocol_version}"
    text += ")"
    caps = agent.mcp_capabilities
    if caps is not None:
        advertised = [name for name, on in (("http", caps.http), ("sse", caps.sse)) if on]
        text += f"; advertises MCP over {', '.join(['stdio', *advertised])}"
    if agent.state == "exited":
        how = f"exited ({agent.exit_reason or 'no reason recorded'})"
        if agent.exited_at:
            how += f" at {when(agent.exited_at)}"
        if agent.stopped_by_daemon:
            how += ", stopped by the daemon"
        text += f"; {how}"
    else:
        text += f"; {agent.state}"
    if agent.stdout_skipped_lines:
        text += f"; {plural(agent.stdout_skipped_lines, 'non-frame stdout line')} skipped"
    report = agent_report_line(agent)
    return [text, report] if report else [text]


def upstream_words(upstream: UpstreamStatus | None) -> str:
    """`Upstream: state; counters`; without an [upstream], what answers tool calls instead."""
    if upstream is None:
        return "Upstream: not configured (the embedded backend answers tool calls)"
    extra = [plural(upstream.connects, "connect")]
    if upstream.superseded_at:
        extra.append(f"superseded {when(upstream.superseded_at)}")
    if upstream.last_connected_at:
        extra.append(f"last connected {when(upstream.last_connected_at)}")
    if upstream.dropped_events:
        extra.append(
            f"{plural(upstream.dropped_events, 'event')} dropped, {plural(upstream.resyncs, 'resync snapshot')}"
        )
    if upstream.buffered_bytes:
        extra.append(f"{upstream.buffered_bytes:,} bytes buffered")
    if upstream.last_error:
        extra.append(f"last error {upstream.last_error}")
    buffering = " (evidence is kept and sent with the next snapshot)" if upstream.state == "buffering" else ""
    return f"Upstream: {upstream_text(upstream)}{buffering}; " + "; ".join(extra)


def readiness_words(view: StatusResponse | Diagnostics) -> tuple[str, Tone, str | None]:
    """The daemon's readiness (`ready`, `ready, degraded`, `not ready`), its tone, and why: a gone agent says how
    it ended."""
    degraded = view.degraded
    if view.ready:
        if degraded:
            return "ready, degraded", "amber", degraded_text(degraded)
        return "ready", "green", None
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
    return "not ready", "amber", why


def health_words(health: HealthResponse, ready_mode: bool) -> tuple[str, Tone, str | None]:
    """Liveness (or readiness, in ready mode), its tone, and, when not ready, which checks are failing."""
    if not ready_mode:
        return ("live", "green", None) if health.live else ("not live", "red", None)
    if health.ready:
        return "ready", "green", f"degraded: {degraded_text(health.degraded)}" if health.degraded else None
    failing = [f"{name} ({check.detail})" if check.detail else name for name, check in health.checks.items() if not check.ok]
    if health.stopping:
        why = "stopping"
    elif failing:
        why = "failing: " + ", ".join(failing)
    elif not health.checks:
        why = "no readiness checks reported yet"
    else:
        why = "not ready"
    return "not ready", "red", why
