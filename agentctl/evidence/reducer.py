"""The pure evidence reducer: folds events into an AttachmentHistory by the evidence rules of docs/design.md.

No I/O and no clock reads: every time comes from the event or from the caller. The functions mutate
only the history they are given, so the daemon's ledger and the hub apply exactly the same rules.
"""

from __future__ import annotations

import bisect
from datetime import datetime, timezone
from typing import Literal

import msgspec

from agentctl.evidence import reasons
from agentctl.evidence.contract.report import (
    MAX_ATTEMPTS,
    MAX_CONNECTIONS_PER_ROW,
    MAX_EVENTS_PER_ATTEMPT,
    MAX_NOTICES_PER_ATTEMPT,
    AgentNotice,
    AgentReport,
    Attempt,
    AttachmentHistory,
    AttemptOrigin,
    ConnectionState,
    EndpointTestResult,
    ErrorSummary,
    EvidenceEvent,
    RefusalCount,
    ServerRow,
    Status,
    StatusSource,
)

ApplyResult = Literal["applied", "duplicate", "unknown_attempt", "foreign_execution", "unknown_server"]

# Kinds that prove the built-in endpoint was reached; they carry the connection (legacy) if any.
_CONTACT_KINDS = frozenset({"initialize_observed", "tools_list_observed", "tool_call_observed"})
# The reasons of an error recorded without one: server-specific, and report-level.
ATTACHMENT_ERROR = reasons.code("attachment_error")
SESSION_ERROR = reasons.code("session_error")
# The reasons of a reported failure recorded without one.
REPORTED_FAILED = reasons.code("agent_reported_failed")
REPORTED_NEEDS_AUTH = reasons.code("agent_reported_needs_auth")
# Reported states that are an explicit agent error naming the server (an attachment failure).
REPORTED_FAILURES = frozenset({"failed", "needs_auth"})
# Observed states that outrank any report: agentctl saw contact, or a current failure, itself.
_OBSERVED_ATTACHMENT = frozenset({"failed", "active", "connected"})


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
    """The row's status: agentctl's observation (`observed_status`), or the agent's report where that is
    stronger evidence than anything agentctl observed (see `status_with_source`)."""
    return status_with_source(row)[0]


def status_with_source(row: ServerRow) -> tuple[Status, StatusSource]:
    """The status and whose evidence it rests on. Host observation always outranks a report about the same
    server: a report counts only on a delivered row where agentctl observed neither contact nor a current
    failure. There a reported failure (`failed`, `needs_auth`) is an explicit agent error (`failed`), and a
    reported connection is `active` when the agent listed tools of the server, else `connected`, except on the
built-in row, whose endpoint is agentctl's own: there only agentctl's observation connects. Every other
    reported state (pending, disabled, cancelled, unknown) is detail: it claims nothing agentctl can show."""
    observed = observed_status(row)
    report = row.reported
    if report is None or observed in _OBSERVED_ATTACHMENT or row.delivered_at is None:
        return observed, "observed"
    if report.state in REPORTED_FAILURES:
        return "failed", "reported"
    if report.state == "connected" and row.source == "builtin":
        # agentctl serves the built-in endpoint itself: a claimed connection it saw no request for is a
        # disagreement to show (agentctl.present.rows), never a status.
        return observed, "observed"
    if report.state == "connected":
        return ("active" if report.tool_count else "connected"), "reported"
    return observed, "observed"


def observed_status(row: ServerRow) -> Status:
    """The strongest current evidence agentctl observed itself: failed > active > connected > delivered >
    filtered/unavailable > configured.

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
    # Superseded attempts keep the tool count and the catalog's hash but not the catalog: history stays small.
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
    if event.server is None:
        if event.kind == "agent_reported":
            history.rejected_events += 1  # a report names a server or says nothing
            return "unknown_server"
        _log(history, attempt, event)
        _apply_attempt_level(attempt, event)
        return "applied"
    row = find_row(attempt, event.server)
    if row is None:
        if event.kind == "agent_reported":
            # A name the agent chose never creates a row: only servers agentctl configured have one.
            history.rejected_events += 1
            return "unknown_server"
        row = ServerRow(name=event.server, source=event.source or "profile", status="configured")
        attempt.servers.append(row)
    _log(history, attempt, event)
    reported_failure_shown = row.status_source == "reported" and row.status == "failed"
    _apply_row(attempt, row, event)
    _show_failure_reason(row)
    row.status, row.status_source = status_with_source(row)
    _show_reported_reason(attempt, row, reported_failure_shown)
    return "applied"


def _log(history: AttachmentHistory, attempt: Attempt, event: EvidenceEvent) -> None:
    # The catalog lives on the row only: one bounded copy per attempt, not one per logged event.
    logged = msgspec.structs.replace(event, catalog=None) if event.catalog is not None else event
    _append_event(attempt, logged)
    attempt.updated_at = _later(attempt.updated_at, event.occurred_at)
    history.updated_at = _later(history.updated_at, event.occurred_at)


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
        # A close counts for its own connection, and only if no contact on it came after it.
        if event.connection_id is not None:
            conn = _connection(row, event.connection_id)
            if _newer(t, conn.seen_at) and _newer(t, conn.closed_at):
                conn.closed_at = t
            _show_connection(row)
    elif kind in _CONTACT_KINDS:
        _apply_contact(attempt, row, event)
    elif kind == "agent_reported":
        _apply_report(row, event)
    elif kind == "server_exited":
        if _newer(t, row.exited_at):
            row.exited_at = t
            row.exit_code = event.exit_code
    if event.observed_by is not None and row.source == "profile":
        row.observed_by = event.observed_by


def _apply_report(row: ServerRow, event: EvidenceEvent) -> None:
    """Keep the newest report (by occurrence time; at one instant a failure, then by content, so that the
    result never depends on arrival order). A report without a state or a source is not one."""
    if event.reported_state is None or event.report_source is None:
        return
    failure = event.reported_state in REPORTED_FAILURES
    reason = event.reason_code
    if failure and not reason:
        reason = REPORTED_NEEDS_AUTH if event.reported_state == "needs_auth" else REPORTED_FAILED
    report = AgentReport(
        state=event.reported_state,
        source=event.report_source,
        reported_at=event.occurred_at,
        raw_state=event.raw_state,
        tool_count=event.tool_count,
        reason_code=reason,
        summary=event.summary or None,
        exposed_tools=event.exposed_tools,
    )
    if row.reported is None or _report_key(report) > _report_key(row.reported):
        row.reported = report


def _report_key(report: AgentReport) -> tuple[datetime, bool, str, str, int, str, str, str, tuple[str, ...]]:
    return (
        report.reported_at,
        report.state in REPORTED_FAILURES,
        report.state,
        report.source,
        -1 if report.tool_count is None else report.tool_count,
        report.reason_code or "",
        report.summary or "",
        report.raw_state or "",
        tuple(report.exposed_tools or ()),
    )


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


def _connection(row: ServerRow, connection_id: str) -> ConnectionState:
    """The row's state of one legacy connection, added when new (bounded: an open one is never dropped before a
    closed one, and among equals the oldest goes)."""
    for conn in row.connections:
        if conn.connection_id == connection_id:
            return conn
    conn = ConnectionState(connection_id=connection_id)
    if len(row.connections) >= MAX_CONNECTIONS_PER_ROW:
        row.connections.remove(min(row.connections, key=_keep_rank))
    row.connections.append(conn)
    row.connections.sort(key=lambda c: c.connection_id)  # the same list whatever order the events came in
    return conn


_EPOCH = datetime.min.replace(tzinfo=timezone.utc)


def _keep_rank(conn: ConnectionState) -> tuple[bool, datetime, str]:
    is_open = conn.seen_at is not None and conn.closed_at is None
    return (is_open, conn.seen_at or conn.closed_at or _EPOCH, conn.connection_id)


def _show_connection(row: ServerRow) -> None:
    """connection_id / connection_seen_at / disconnected_at from the connections: the newest open one, else the
    one that closed last, and its close. The order the events arrived in does not matter."""
    seen = [c for c in row.connections if c.seen_at is not None]
    if not seen:
        return
    open_ = [c for c in seen if c.closed_at is None]
    if open_:
        shown = max(open_, key=lambda c: (c.seen_at, c.connection_id))
    else:  # every one closed: the row lost its last connection when the last of them closed
        shown = max(seen, key=lambda c: (c.closed_at, c.seen_at, c.connection_id))
    row.connection_id, row.connection_seen_at = shown.connection_id, shown.seen_at
    row.disconnected_at = None if open_ else shown.closed_at


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
            row.server_info = event.server_info or row.server_info
    elif kind == "tools_list_observed":
        if _newer(t, row.tools_list_observed_at):
            row.tools_list_observed_at = t
            if event.tool_count is not None:
                row.tool_count = event.tool_count
            row.catalog = None if superseded else event.catalog
            # The hash goes with the newest list: an older list's hash beside a newer count would claim
            # "same tools" about tools nobody hashed.
            row.catalog_hash = event.catalog.hash if event.catalog is not None else None
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
    conn = _connection(row, connection)
    if _newer(t, conn.seen_at):
        conn.seen_at = t
    if conn.closed_at is not None and t > conn.closed_at:
        conn.closed_at = None  # contact on this connection after its close: the close is old news
    _show_connection(row)


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


def _show_reported_reason(attempt: Attempt, row: ServerRow, was_shown: bool) -> None:
    """While a reported failure is the row's status, its reason is the row's. When it stops being the
    status, the reason the row would have without it comes back: a current observed failure's (already
    set), else the newest filtering or unavailability decision still in the log, else none."""
    report = row.reported
    if row.status_source == "reported" and row.status == "failed" and report is not None:
        row.reason_code, row.summary = report.reason_code, report.summary
    elif was_shown and row.failed_at is None:
        row.reason_code = row.summary = None
        for kind in ("filtered", "unavailable"):
            decisions = [e for e in attempt.evidence if e.kind == kind and e.server == row.name]
            if decisions:
                newest = max(decisions, key=lambda e: (e.occurred_at, e.seq))
                row.reason_code, row.summary = newest.reason_code, newest.summary
                break


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


def add_notice(history: AttachmentHistory, attempt_id: str, notice: AgentNotice) -> bool:
    """Count an agent's session notice on its attempt, keeping the first MAX_NOTICES_PER_ATTEMPT. A notice
    is the agent's words, report-level only: no row, status or session error is touched."""
    attempt = find_attempt(history, attempt_id)
    if attempt is None:
        return False
    attempt.notice_count += 1
    if len(attempt.notices) < MAX_NOTICES_PER_ATTEMPT:
        attempt.notices.append(notice)
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
    _drop_overflow(attempt)


def _drop_overflow(attempt: Attempt) -> None:
    overflow = len(attempt.evidence) - MAX_EVENTS_PER_ATTEMPT
    if overflow > 0:
        del attempt.evidence[:overflow]
        attempt.dropped_events += overflow


def enforce_bounds(history: AttachmentHistory) -> AttachmentHistory:
    """The reducer's bounds on a history from outside (a snapshot the hub receives): MAX_ATTEMPTS attempts,
    MAX_EVENTS_PER_ATTEMPT events each, the oldest dropped and counted; MAX_NOTICES_PER_ATTEMPT notices each, the
    newest dropped (they are counted already).

    A history this reducer built already holds them; this only trims one that does not. Nothing is derived,
    only cut.
    """
    del history.previous[MAX_ATTEMPTS - 1 :]
    for attempt in ([history.current] if history.current else []) + history.previous:
        _drop_overflow(attempt)
        attempt.notice_count = max(attempt.notice_count, len(attempt.notices))
        del attempt.notices[MAX_NOTICES_PER_ATTEMPT:]
    return history


def _newer(t: datetime, current: datetime | None) -> bool:
    return current is None or t >= current


def _later(a: datetime, b: datetime) -> datetime:
    return b if b > a else a
