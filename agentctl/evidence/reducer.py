"""The pure evidence reducer: folds events into an AttachmentHistory by the evidence rules of docs/design.md.

No I/O and no clock reads: every time comes from the event or from the caller. The functions mutate
only the history they are given, so the daemon's ledger and the hub apply exactly the same rules.
"""

from __future__ import annotations

import bisect
from datetime import datetime
from typing import Literal

import msgspec

from agentctl.evidence import reasons
from agentctl.evidence.contract import (
    MAX_ATTEMPTS,
    MAX_EVENTS_PER_ATTEMPT,
    Attempt,
    AttachmentHistory,
    AttemptOrigin,
    EndpointTestResult,
    ErrorSummary,
    EvidenceEvent,
    RefusalCount,
    ServerRow,
    Status,
)

ApplyResult = Literal["applied", "duplicate", "unknown_attempt", "foreign_execution"]

# Kinds that prove the built-in endpoint was reached; they carry the connection (legacy) if any.
_CONTACT_KINDS = frozenset({"initialize_observed", "tools_list_observed", "tool_call_observed"})
# The reasons of an error recorded without one: server-specific, and report-level.
ATTACHMENT_ERROR = reasons.code("attachment_error")
SESSION_ERROR = reasons.code("session_error")


def failure_is_current(row: ServerRow) -> bool:
    """A row's attachment failure is current while it is the row's most recent attachment observation.

    Attachment observations are the failure itself and contact with the endpoint (initialize, tools/list,
    a tool call). A contact that occurred after the failure makes it detail; a failure at the same instant
    as the newest contact stays current. Judged by occurrence time only, so arrival order cannot matter.
    """
    if row.failed_at is None:
        return False
    contact = _last_contact(row)
    return contact is None or row.failed_at >= contact


def derive_status(row: ServerRow) -> Status:
    """The strongest current evidence: failed > active > connected > delivered > filtered/unavailable > configured.

    Derived from which evidence exists and when it occurred, never from arrival order, so a late event
    cannot weaken a row and the absence of evidence can never produce `failed`. A failure that a later
    contact superseded leaves the row at the strongest success evidence it has.
    """
    if failure_is_current(row):
        return "failed"
    if row.tools_list_observed_at is not None:
        return "active"
    if row.initialize_observed_at is not None or row.tool_call_observed_at is not None:
        return "connected"
    if row.delivered_at is not None:
        return "delivered"
    if row.filtered_at is not None:
        return "filtered"
    if row.unavailable_at is not None:
        return "unavailable"
    return "configured"


def find_attempt(history: AttachmentHistory, attempt_id: str) -> Attempt | None:
    if history.current is not None and history.current.attempt_id == attempt_id:
        return history.current
    for attempt in history.previous:
        if attempt.attempt_id == attempt_id:
            return attempt
    return None


def find_row(attempt: Attempt, server: str) -> ServerRow | None:
    for row in attempt.servers:
        if row.name == server:
            return row
    return None


def begin_attempt(
    history: AttachmentHistory, *, attempt_id: str, origin: AttemptOrigin, now: datetime
) -> Attempt:
    """Make a new attempt current at once (before anything is delivered for it).

    The old current attempt is superseded in the same step, so a slow or failed delivery can never leave
    old evidence looking current.
    """
    ident = history.identity
    old = history.current
    if old is not None:
        _supersede(old, now)
        history.previous.insert(0, old)
        del history.previous[MAX_ATTEMPTS - 1 :]
    history.current = Attempt(
        attempt_id=attempt_id,
        task_id=ident.task_id,
        session_id=ident.session_id,
        execution_id=ident.execution_id,
        instance_id=ident.instance_id,
        origin=origin,
        started_at=now,
        updated_at=now,
    )
    history.updated_at = _later(history.updated_at, now)
    return history.current


def _supersede(attempt: Attempt, now: datetime) -> None:
    attempt.superseded_at = now
    ident_event = EvidenceEvent(
        kind="attempt_superseded",
        occurred_at=now,
        task_id=attempt.task_id,
        session_id=attempt.session_id,
        execution_id=attempt.execution_id,
        instance_id=attempt.instance_id,
        attempt_id=attempt.attempt_id,
    )
    _append_event(attempt, ident_event)
    # Superseded attempts keep the tool count but not the catalog: history stays small.
    for row in attempt.servers:
        row.catalog = None


def apply(history: AttachmentHistory, event: EvidenceEvent) -> ApplyResult:
    """Fold one event into the attempt it names. Never touches any other attempt."""
    ident = history.identity
    if event.execution_id != ident.execution_id or event.instance_id != ident.instance_id:
        history.rejected_events += 1
        return "foreign_execution"
    if event.seq and event.seq <= history.last_seq:
        return "duplicate"
    if event.seq:
        # Our own sequence, even when the attempt is gone: a re-sent rejected event is then a duplicate,
        # not a second rejection.
        history.last_seq = event.seq
    attempt = find_attempt(history, event.attempt_id)
    if attempt is None:
        history.rejected_events += 1
        return "unknown_attempt"
    # The catalog lives on the row only: one bounded copy per attempt, not one per logged event.
    logged = msgspec.structs.replace(event, catalog=None) if event.catalog is not None else event
    _append_event(attempt, logged)
    attempt.updated_at = _later(attempt.updated_at, event.occurred_at)
    history.updated_at = _later(history.updated_at, event.occurred_at)

    if event.server is None:
        _apply_attempt_level(attempt, event)
        return "applied"
    row = find_row(attempt, event.server)
    if row is None:
        row = ServerRow(name=event.server, source=event.source or "profile", status="configured")
        attempt.servers.append(row)
    _apply_row(attempt, row, event)
    _show_failure_reason(row)
    row.status = derive_status(row)
    return "applied"


def _apply_attempt_level(attempt: Attempt, event: EvidenceEvent) -> None:
    t = event.occurred_at
    if event.kind == "session_accepted":
        if _newer(t, attempt.accepted_at):
            attempt.accepted_at = t
            if event.acp_session_id is not None:
                attempt.acp_session_id = event.acp_session_id
    elif event.kind == "explicit_error":
        # An error that cannot be tied to one server is a report-level diagnostic: it marks nothing failed.
        # The newest such error is shown; a late-arriving older one does not replace it.
        shown_at = attempt.session_error_at
        if attempt.session_error is None or (
            _newer(t, shown_at) if shown_at is not None else _is_newest_session_error(attempt, event)
        ):
            attempt.session_error = ErrorSummary(
                reason_code=event.reason_code or SESSION_ERROR, summary=event.summary or ""
            )
            attempt.session_error_at = t
    elif event.kind == "attempt_superseded":
        if attempt.superseded_at is None or t < attempt.superseded_at:
            attempt.superseded_at = t


def _is_newest_session_error(attempt: Attempt, event: EvidenceEvent) -> bool:
    """True when `event` is still in the log and no report-level error in the log occurred after it."""
    if not any(e is event for e in attempt.evidence):
        return False  # dropped at once: older than everything kept
    t = event.occurred_at
    return not any(
        e.kind == "explicit_error" and e.server is None and e.occurred_at > t for e in attempt.evidence
    )


def _apply_row(attempt: Attempt, row: ServerRow, event: EvidenceEvent) -> None:
    t = event.occurred_at
    kind = event.kind
    if kind == "configured":
        if _newer(t, row.configured_at):
            row.configured_at = t
            row.source = event.source or row.source
            row.transport = event.transport or row.transport
            row.target = event.target or row.target
    elif kind in ("filtered", "unavailable"):
        attr = f"{kind}_at"
        if _newer(t, getattr(row, attr)):
            setattr(row, attr, t)
            # One reason is shown: an error's, else a filter's, else an unavailability's; never by arrival.
            if _reason_kind(row) == kind:
                _set_reason(row, event)
    elif kind == "delivered":
        if _newer(t, row.delivered_at):
            row.delivered_at = t
            row.transport = event.transport or row.transport
            row.target = event.target or row.target
    elif kind == "explicit_error":
        if _newer(t, row.failed_at):
            row.failed_at = t
            row.last_failure = ErrorSummary(
                reason_code=event.reason_code or ATTACHMENT_ERROR, summary=event.summary or ""
            )
    elif kind == "connection_closed":
        # A close counts only for the row's connection, and only if no contact on it came after it.
        if (
            event.connection_id is not None
            and event.connection_id == row.connection_id
            and _newer(t, row.connection_seen_at)
            and (row.disconnected_at is None or t > row.disconnected_at)
        ):
            row.disconnected_at = t
    elif kind in _CONTACT_KINDS:
        _apply_contact(attempt, row, event)


def _reason_kind(row: ServerRow) -> str | None:
    # Once a row has a failure, filters and unavailability never write its reason: a failure stops being
    # current only through contact, and a contacted row is beyond filtered or unavailable.
    if row.failed_at is not None:
        return "explicit_error"
    if row.filtered_at is not None:
        return "filtered"
    if row.unavailable_at is not None:
        return "unavailable"
    return None


def _last_contact(row: ServerRow) -> datetime | None:
    times = [
        t
        for t in (row.initialize_observed_at, row.tools_list_observed_at, row.tool_call_observed_at)
        if t is not None
    ]
    return max(times) if times else None


def _close_after_last_contact(attempt: Attempt, row: ServerRow) -> datetime | None:
    """A close for the row's connection that arrived before the contact it follows (occurrence order)."""
    last = row.connection_seen_at
    found: datetime | None = None
    for e in attempt.evidence:
        if (
            e.kind == "connection_closed"
            and e.server == row.name
            and e.connection_id == row.connection_id
            and _newer(e.occurred_at, last)
            and (found is None or e.occurred_at > found)
        ):
            found = e.occurred_at
    return found


def _apply_contact(attempt: Attempt, row: ServerRow, event: EvidenceEvent) -> None:
    superseded = attempt.superseded_at is not None
    t = event.occurred_at
    kind = event.kind
    if kind == "initialize_observed":
        if _newer(t, row.initialize_observed_at):
            row.initialize_observed_at = t
            row.client = event.client or row.client
            row.era = event.era or row.era
            row.protocol_version = event.protocol_version or row.protocol_version
            row.requested_protocol_version = event.requested_protocol_version or row.requested_protocol_version
    elif kind == "tools_list_observed":
        if _newer(t, row.tools_list_observed_at):
            row.tools_list_observed_at = t
            if event.tool_count is not None:
                row.tool_count = event.tool_count
            row.catalog = None if superseded else event.catalog
            row.era = event.era or row.era
    elif kind == "tool_call_observed":
        row.tool_calls += 1
        if event.outcome == "error":
            row.tool_errors += 1
        if _newer(t, row.tool_call_observed_at):
            row.tool_call_observed_at = t
            row.last_tool = event.tool_name
            row.era = row.era or event.era
    connection = event.connection_id
    if connection is None:
        # A modern-era (stateless) contact has no connection: it neither reopens nor replaces a closed
        # legacy connection, which stays on the row as detail with its disconnected_at.
        return
    if connection == row.connection_id and row.disconnected_at is not None and t > row.disconnected_at:
        row.disconnected_at = None  # contact on this connection after its close: the close is old news
    if _newer(t, row.connection_seen_at):
        row.connection_seen_at = t
        if connection != row.connection_id:
            row.connection_id = connection
            row.disconnected_at = _close_after_last_contact(attempt, row)


def _set_reason(row: ServerRow, event: EvidenceEvent) -> None:
    row.reason_code = event.reason_code
    row.summary = event.summary


def _show_failure_reason(row: ServerRow) -> None:
    """The row's reason is its failure's while the failure is current; after a later contact it is none."""
    failure = row.last_failure
    if row.failed_at is None or failure is None:
        return
    if failure_is_current(row):
        row.reason_code, row.summary = failure.reason_code, failure.summary or None
    else:
        row.reason_code = row.summary = None


def record_endpoint_test(
    history: AttachmentHistory, attempt_id: str, server: str, result: EndpointTestResult
) -> bool:
    """Store a reachability result beside the row. Reachability is not attachment: status is untouched."""
    attempt = find_attempt(history, attempt_id)
    if attempt is None:
        return False
    row = find_row(attempt, server)
    if row is None:
        return False
    row.endpoint_test = result
    return True


def count_refusal(history: AttachmentHistory, route: str, method: str, status: int) -> None:
    for entry in history.http_refusals:
        if entry.route == route and entry.method == method and entry.status == status:
            entry.count += 1
            return
    history.http_refusals.append(RefusalCount(route=route, method=method, status=status, count=1))


def _append_event(attempt: Attempt, event: EvidenceEvent) -> None:
    """Keep the log in occurrence order; when full, drop the oldest and count it."""
    log = attempt.evidence
    key = (event.occurred_at, event.seq)
    if not log or (log[-1].occurred_at, log[-1].seq) <= key:
        log.append(event)  # the common case (events arrive in order): no key list to build
    else:
        index = bisect.bisect_right(log, key, key=lambda e: (e.occurred_at, e.seq))
        log.insert(index, event)
    overflow = len(log) - MAX_EVENTS_PER_ATTEMPT
    if overflow > 0:
        del log[:overflow]
        attempt.dropped_events += overflow


def _newer(t: datetime, current: datetime | None) -> bool:
    return current is None or t >= current


def _later(a: datetime, b: datetime) -> datetime:
    return b if b > a else a
