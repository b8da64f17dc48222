"""The orchestrator's rules, pure: which execution and which instance of a session is current, which frames are
taken, and who must be told what.

Inputs are the hub's state for one session (agentctl.hub.state), what it knows of the session's connections
(the identity each said hello with, under a key of the caller's choosing) and a frame; outputs are decisions
the connection layer (agentctl.hub.hub) applies: a frame is taken, rejected and counted, or refused with a
fatal error code; connections are told they are superseded or asked to reconnect. No I/O and no clock reads:
times come from the caller. Like the evidence reducer, these functions change only the state they are given.

- Per session, the newest execution that said hello is current, and within it the newest instance that said
  hello (order of hello, not of start: the hub cannot tell an execution's age otherwise). Frames from an older
  execution, or from an older instance of the current one, are rejected and counted, its tool calls refused;
  it is told so once (`stale_execution`, `stale_instance`) and stays connected.
- When the current instance of an execution leaves, the older instances of it still connected (alive: they
  talk) are asked to reconnect; the next hello and its snapshot make one of them current again. An older
  execution is never asked back: a newer execution superseded it.
- A connection's first frame is its hello, once, of a contract version this hub reads. A snapshot comes before evidence
  and agent frames; a snapshot names the hello's identity, an event its task and session.
- With hubs sharing one database, the database decides which execution is current (`sync` takes its view):
  a connection of an execution another hub's hello superseded is told `stale_execution` like one superseded here.
- A snapshot replaces the execution's history within the reducer's bounds (3 attempts, 64 events each); an
  evidence frame is folded by the reducer itself, never by a second one. Free text in either, and in an agent
  frame, is redacted again by the generic rules first (agentctl.evidence.foreign).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, Literal, TypeVar

from agentctl.evidence import reducer
from agentctl.evidence.contract.report import READABLE_CONTRACT_VERSIONS, Identity
from agentctl.evidence.foreign import reredact_agent, reredact_event, reredact_history
from agentctl.hub.state import ExecutionState, SessionState
from agentctl.upstream import protocol as P

K = TypeVar("K", bound=Hashable)
Standing = Literal["current", "stale_execution", "stale_instance"]
MAX_TOOL_SECONDS = 60.0


@dataclass(frozen=True)
class Refusal:
    """Refuse the connection: a fatal error frame with `code`, then it is closed. Nothing else changes."""

    code: str
    message: str


@dataclass(frozen=True)
class Notice:
    """An error frame for a connection: `fatal` ones close it."""

    code: str
    message: str
    fatal: bool = False


RECONNECT = Notice(
    "reconnect", "the instance that superseded this one disconnected; reconnect with hello and a snapshot", fatal=True
)


def standing(session: SessionState, identity: Identity) -> Standing:
    """Whether frames under `identity` are taken for `session` now."""
    if session.current_execution_id != identity.execution_id:
        return "stale_execution"
    execution = session.executions.get(identity.execution_id)
    if execution is None or execution.identity.instance_id != identity.instance_id:
        return "stale_instance"
    return "current"


def superseded(why: Standing) -> Notice:
    """What a connection is told when its frames stop being taken (it stays open)."""
    what = "execution of this session" if why == "stale_execution" else "instance of this execution"
    return Notice(why, f"a newer {what} said hello; this {what.split()[0]}'s frames are rejected")


# -- one connection's order ----------------------------------------------------------------------------------


def admit(identified: bool, frame: P.DaemonFrame) -> Refusal | None:
    """A connection's first frame is its hello, once, of a contract version this hub reads."""
    if not isinstance(frame, P.HelloFrame):
        if identified:
            return None
        return Refusal("expected_hello", "the first frame of a connection must be hello")
    if identified:
        return Refusal("duplicate_hello", "hello was already received on this connection")
    if frame.contract_version not in READABLE_CONTRACT_VERSIONS:  # an older daemon's shapes are a subset
        return Refusal(
            "contract_mismatch",
            f"contract version {frame.contract_version}; this hub reads versions "
            f"{', '.join(map(str, READABLE_CONTRACT_VERSIONS))}",
        )
    return None


# -- hello -----------------------------------------------------------------------------------------------------


@dataclass
class Hello(Generic[K]):
    """A hello taken: the connection belongs to `session` and `execution` from now on."""

    session: SessionState
    execution: ExecutionState
    standing: Standing  # of the connection that said hello
    new_session: bool = False
    new_execution: bool = False  # the hub's hello order was used
    now_current: bool = False  # another execution than before is current from now on
    notice: Notice | None = None  # for the connection that said hello
    told: list[tuple[K, Notice]] = field(default_factory=list)  # connections followed before, not any more


def hello(
    session: SessionState | None, frame: P.HelloFrame, *, links: Mapping[K, Identity], order: int, now: datetime
) -> Hello[K]:
    """Take an admitted hello. `session` is the hub's state of the hello's session (None: never seen), `links`
    the session's other connections that said hello, `order` the hub's next hello order (used only for a new
    execution), `now` the time of the hello.

    An execution the session has not seen becomes current: the newest hello wins. A known execution that is not
    current is stale: its hello is counted and it is told so. The current execution's hello makes its instance
    the current one: the connections followed until now that are not any more are told so.
    """
    ident = frame.identity
    followed = [key for key, other in links.items() if session is not None and standing(session, other) == "current"]
    execution = session.executions.get(ident.execution_id) if session is not None else None
    outcome_new_session = outcome_new_execution = now_current = False
    if execution is None:
        outcome_new_execution = True
        execution = ExecutionState(identity=ident, daemon_version=frame.daemon_version, hello_order=order,
                                   first_hello_at=now, last_contact_at=now)
        if session is None:
            outcome_new_session = True
            session = SessionState(session_id=ident.session_id, task_id=ident.task_id,
                                   current_execution_id=ident.execution_id, last_contact_at=now)
        session.executions[ident.execution_id] = execution
        now_current = session.current_execution_id != ident.execution_id
        session.current_execution_id = ident.execution_id
    assert session is not None
    outcome: Hello[K] = Hello(session, execution, "current", new_session=outcome_new_session,
                              new_execution=outcome_new_execution, now_current=now_current)
    if ident.execution_id != session.current_execution_id:
        execution.rejected_frames += 1
        session.stale_rejected += 1
        outcome.standing = "stale_execution"
        outcome.notice = superseded("stale_execution")
        return outcome
    execution.identity = ident
    execution.daemon_version = frame.daemon_version
    execution.connected = True
    for key in followed:
        now_standing = standing(session, links[key])
        if now_standing != "current":
            outcome.told.append((key, superseded(now_standing)))
    return outcome


# -- another hub changed the session (a shared database) -------------------------------------------------------


@dataclass
class Synced(Generic[K]):
    """What taking the database's view of a session changed here."""

    now_current: bool = False  # the database made another execution current
    told: list[tuple[K, Notice]] = field(default_factory=list)  # connections followed before, not any more


def sync(session: SessionState, stored: SessionState, links: Mapping[K, Identity], local: set[str]) -> Synced[K]:
    """Take `stored` (the session as the shared database holds it, other hubs' changes included) into this hub's
    `session`. The database decides which execution is current. Executions in `local` (this hub holds a
    connection of them or changes not yet written) keep this hub's state; every other one is taken as stored.
    The connections of this hub followed until now that are not any more are told so (`stale_execution`); they
    stay connected, and their frames are rejected and counted from now on."""
    outcome: Synced[K] = Synced()
    followed = [key for key, other in links.items() if standing(session, other) == "current"]
    for execution_id, execution in stored.executions.items():
        if execution_id not in local or execution_id not in session.executions:
            session.executions[execution_id] = execution
    # Hello orders come from one database sequence: a view read before a later claim never moves current back.
    mine = session.executions.get(session.current_execution_id)
    theirs = session.executions.get(stored.current_execution_id)
    if theirs is not None and theirs.execution_id != session.current_execution_id and (
            mine is None or theirs.hello_order > mine.hello_order):
        session.current_execution_id = theirs.execution_id
        outcome.now_current = True
    # Every rejected frame is counted on its execution and on the session: the sum is the session's count.
    session.stale_rejected = sum(e.rejected_frames for e in session.executions.values())
    session.last_contact_at = max(session.last_contact_at, stored.last_contact_at)
    for key in followed:
        now_standing = standing(session, links[key])
        if now_standing != "current":
            outcome.told.append((key, superseded(now_standing)))
    return outcome


# -- frames of a connection that said hello -----------------------------------------------------------------


@dataclass(frozen=True)
class Taken:
    """The frame changed the execution's history."""

    snapshot: bool = False  # the connection's snapshot: its evidence and agent frames may follow
    applied: bool = False  # an evidence event the reducer applied (not a duplicate)


@dataclass(frozen=True)
class Rejected:
    """A frame of a superseded connection: dropped and counted; the connection stays open."""


def state_frame(
    session: SessionState,
    execution: ExecutionState,
    identity: Identity,
    snapshot_seen: bool,
    frame: P.SnapshotFrame | P.EvidenceFrame | P.AgentFrame,
) -> Taken | Rejected | Refusal:
    """A snapshot, evidence or agent frame on a connection that said hello as `identity`."""
    if standing(session, identity) != "current":
        execution.rejected_frames += 1
        session.stale_rejected += 1
        return Rejected()
    taken = Taken()
    if isinstance(frame, P.SnapshotFrame):
        if frame.history.identity != identity:
            return Refusal("identity_mismatch", "the snapshot is for another identity than the hello's")
        # A hub does not trust a daemon's redaction: free text passes the generic rules again before it is kept.
        execution.history = reredact_history(reducer.enforce_bounds(frame.history))
        taken = Taken(snapshot=True)
    elif not snapshot_seen or execution.history is None:
        return Refusal("snapshot_required", "evidence and agent frames must follow a snapshot")
    elif isinstance(frame, P.EvidenceFrame):
        event = frame.event
        if event.task_id != identity.task_id or event.session_id != identity.session_id:
            return Refusal("identity_mismatch", "the event names another task or session than the hello's")
        taken = Taken(applied=reducer.apply(execution.history, reredact_event(event)) == "applied")
    else:
        execution.history.agent = reredact_agent(frame.agent)
    execution.connected = True
    return taken


def contact(session: SessionState, execution: ExecutionState, identity: Identity, now: datetime) -> bool:
    """A frame from a connection: the last contact moves only for the followed one (True when it did)."""
    if standing(session, identity) != "current":
        return False
    execution.last_contact_at = now
    session.last_contact_at = now
    return True


# -- tool calls ------------------------------------------------------------------------------------------------


def admit_tool_call(identity: Identity, call: P.ToolCallFrame) -> Refusal | None:
    if call.identity != identity:
        return Refusal("identity_mismatch", "a tool call must carry the identity of the connection's hello")
    return None


@dataclass(frozen=True)
class ToolRefused:
    """The tool does not run: `error` is the tool_result's answer."""

    error: str


def tool_call_budget(why: Standing, call: P.ToolCallFrame, now: datetime) -> float | ToolRefused:
    """The seconds a tunnelled tool call may run (its deadline less its time on the way, at most a minute), or
    why it does not run at all. `now`: when the hub read the call."""
    if why != "current":
        newer = "execution of this session" if why == "stale_execution" else "daemon instance of this execution"
        return ToolRefused(f"a newer {newer} is current; the tool did not run")
    elapsed = (now - call.sent_at).total_seconds()
    remaining = min(call.deadline_ms / 1000 - max(elapsed, 0.0), MAX_TOOL_SECONDS)
    if remaining <= 0:
        return ToolRefused("the call's deadline passed before the hub read it; the tool did not run")
    return remaining


# -- a connection leaves ---------------------------------------------------------------------------------------


@dataclass
class Departure(Generic[K]):
    """What a connection's end changes."""

    disconnected: bool = False  # its execution has no followed connection left: it shows not connected
    reconnect: list[K] = field(default_factory=list)  # older live instances of that execution, asked back


def departure(
    session: SessionState, execution: ExecutionState, identity: Identity, links: Mapping[K, Identity], *,
    stopping: bool = False,
) -> Departure[K]:
    """The connection that said hello as `identity` ended; `links` are the session's other connections that said
    hello. While the hub itself is `stopping`, nobody is asked to reconnect."""
    outcome: Departure[K] = Departure()
    if standing(session, identity) != "current":
        return outcome  # a superseded connection leaving changes nothing
    same = {key: other for key, other in links.items() if other.execution_id == execution.execution_id}
    if any(standing(session, other) == "current" for other in same.values()):
        return outcome  # another connection of the current instance still talks
    execution.connected = False
    outcome.disconnected = True
    if not stopping:
        outcome.reconnect = [key for key, other in same.items() if standing(session, other) == "stale_instance"]
    return outcome


# -- a hello after retention pruned the session ------------------------------------------------------------------


def after_prune(was_current: bool | None, session_live: bool) -> Refusal | None:
    """A hello of an execution the session does not hold (or of a session the hub does not hold), checked
    against the tombstone retention left when it pruned the session: `was_current` is whether that execution
    was the pruned session's current one (None: no tombstone, a new execution), `session_live` whether the
    session is held again. Only the execution current when pruned may start the session again; a superseded
    one, or any pruned one once the session lives again, is stale forever: pruning never moves current back."""
    if was_current is None or (was_current and not session_live):
        return None
    return Refusal("stale_execution", "a newer execution of this session said hello before the hub pruned it; "
                                      "this execution's frames are rejected")
