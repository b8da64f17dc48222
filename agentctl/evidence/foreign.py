"""Owns re-redacting evidence that another process sanitized: every free-text field of a history, an event or
an agent state passes the generic rules again, within its bound, before the hub keeps it.

A hub must not trust a daemon's redaction: an old daemon, a bug, or a hostile one may send a summary with a
credential or a URL in it. The hub does not know the daemon's registered secrets, so only the generic rules
apply here (credentials after a key or a scheme, prefixed tokens, random runs, URLs, paths, user info); they
leave text the daemon already redacted as it is. Only what a rule matches is replaced: line breaks, control
and format characters stay for the renderer to make visible and for `--json` to keep exact (rewriting them
here would hide what the daemon really sent). Pure: changes only the structures it is given.
"""

from __future__ import annotations

from agentctl.evidence.contract.report import (
    AgentState,
    AttachmentHistory,
    Attempt,
    ErrorSummary,
    EvidenceEvent,
    ServerRow,
)
from agentctl.evidence.sanitize import redact_in_place

__all__ = ["reredact_agent", "reredact_event", "reredact_history"]

_NAME_BYTES = 128


def _summary(text: str | None) -> str | None:
    if not text:
        return text
    return redact_in_place(text)


def _error(error: ErrorSummary | None) -> None:
    if error is not None and error.summary:
        error.summary = redact_in_place(error.summary)


def _name(text: str | None) -> str | None:
    return (redact_in_place(text, _NAME_BYTES) or None) if text else text


def reredact_event(event: EvidenceEvent) -> EvidenceEvent:
    event.summary = _summary(event.summary)
    return event


def reredact_agent(agent: AgentState | None) -> AgentState | None:
    if agent is not None:
        agent.name, agent.version = _name(agent.name), _name(agent.version)
        agent.report_note = _summary(agent.report_note)
    return agent


def _row(row: ServerRow) -> None:
    row.summary = _summary(row.summary)
    _error(row.last_failure)
    if row.endpoint_test is not None:
        row.endpoint_test.summary = _summary(row.endpoint_test.summary) or ""
    if row.reported is not None:
        row.reported.summary = _summary(row.reported.summary)
    if row.client is not None:
        row.client.name = _name(row.client.name) or ""
        row.client.version = _name(row.client.version)


def _attempt(attempt: Attempt) -> None:
    for row in attempt.servers:
        _row(row)
    for event in attempt.evidence:
        reredact_event(event)
    _error(attempt.session_error)
    for notice in attempt.notices:
        notice.title = _summary(notice.title) or ""
        notice.description = _summary(notice.description)


def reredact_history(history: AttachmentHistory) -> AttachmentHistory:
    """`history` with every free-text field redacted again by the generic rules, each within its bound (a
    marker may be longer than what it replaced)."""
    for attempt in ([history.current] if history.current else []) + history.previous:
        _attempt(attempt)
    reredact_agent(history.agent)
    return history

