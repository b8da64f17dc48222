"""The views of the hub's state, pure: the live hub, its page and the read-only CLI build the same contract shapes.

A session's listing (`HubSession`: its current execution and attempt, without the evidence log or the catalogs)
is also what a session that left memory is held as (`evict`).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from agentctl.evidence.contract.hub import HubExecution, HubSession, HubSessionReport, HubStatus
from agentctl.evidence.contract.report import CONTRACT_VERSION, Attempt
from agentctl.hub.state import ExecutionState, SessionState


def _listing(attempt: Attempt | None) -> Attempt | None:
    """The current attempt for a listing: rows and times, without the evidence log and the catalogs."""
    if attempt is None:
        return None
    copy = msgspec.structs.replace(attempt, evidence=[])
    copy.servers = [msgspec.structs.replace(row, catalog=None) for row in attempt.servers]
    return copy


def session_listing(session: SessionState) -> HubSession:
    """The session as `hub status` lists it: its current execution and attempt, without evidence or catalogs."""
    current = session.current
    history = current.history
    return HubSession(
        task_id=session.task_id,
        session_id=session.session_id,
        current_execution_id=session.current_execution_id,
        connected=current.connected,
        last_contact_at=session.last_contact_at,
        executions=len(session.executions),
        stale_rejected=session.stale_rejected,
        current_attempt=_listing(history.current) if history else None,
        agent=history.agent if history else None,
    )


def status_view(sessions: dict[str, SessionState], cold: Iterable[HubSession] = ()) -> HubStatus:
    """Every session, most recent contact first: `sessions` held whole, `cold` ones by their listing."""
    views = [session_listing(s) for s in sessions.values()] + list(cold)
    views.sort(key=lambda v: (v.last_contact_at, v.session_id), reverse=True)
    return HubStatus(version=CONTRACT_VERSION, sessions=views)


def evict(sessions: dict[str, SessionState], cold: dict[str, HubSession], keep: int, busy: set[str]) -> int:
    """Move the sessions least recently in contact beyond `keep` from `sessions` to their listing in `cold`.

    Only sessions the file already holds as they are may go (the caller passes, in `busy`, every session
    with a connection or unflushed changes); returns how many went.
    """
    over = len(sessions) - keep
    if over <= 0:
        return 0
    idle = sorted((s for s in sessions.values() if s.session_id not in busy),
                  key=lambda s: (s.last_contact_at, s.session_id))
    for session in idle[:over]:
        cold[session.session_id] = session_listing(session)
        del sessions[session.session_id]
    return min(over, len(idle))


def execution_view(session: SessionState, execution: ExecutionState) -> HubExecution:
    ident = execution.identity
    return HubExecution(
        execution_id=ident.execution_id,
        instance_id=ident.instance_id,
        agent_id=ident.agent_id,
        agent_profile_id=ident.agent_profile_id,
        daemon_version=execution.daemon_version,
        current=ident.execution_id == session.current_execution_id,
        connected=execution.connected,
        first_hello_at=execution.first_hello_at,
        last_contact_at=execution.last_contact_at,
        rejected_frames=execution.rejected_frames,
    )


def report_view(session: SessionState, execution_id: str | None = None) -> HubSessionReport | None:
    """The session's report; None when `execution_id` names no execution of this session."""
    chosen = session.executions.get(execution_id or session.current_execution_id)
    if chosen is None:
        return None
    executions = sorted(session.executions.values(), key=lambda e: e.hello_order, reverse=True)
    return HubSessionReport(
        version=CONTRACT_VERSION,
        session=session_listing(session),
        executions=[execution_view(session, e) for e in executions],
        history=chosen.history,
    )


def daemon_link(connected: bool) -> str:
    """The daemon's link to the hub, named as such: a bare "connected" beside a session reads as MCP state."""
    return "daemon connected" if connected else "daemon not connected"
