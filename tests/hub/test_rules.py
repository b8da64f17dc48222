"""The orchestrator's rules, pure (agentctl.hub.rules): which execution and instance of a session is current, which
frames are taken, who is told what. Tested like the reducer: table-driven, with a clock the test sets, no socket.

A `Session` world drives the rules the way the hub's connection layer does: connections are names, each says
hello with an identity, and what the rules say to each connection is collected in order. The adversarial
orders (instances racing, an old instance coming back after a newer one, a late hello of an older execution,
the superseder leaving) are rows of the tables below; the same rules over real sockets are in test_hub.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import msgspec
import pytest

from agentctl.evidence import reducer
from agentctl.evidence.contract.report import (
    CONTRACT_VERSION,
    MAX_ATTEMPTS,
    MAX_EVENTS_PER_ATTEMPT,
    AgentState,
    AttachmentHistory,
    EvidenceEvent,
    Identity,
)
from agentctl.hub import rules
from agentctl.hub.state import SessionState
from agentctl.upstream import protocol as P
from tests.evidence.fixed import T0
from tests.upstream.support import identity


def ident(execution: str = "exec-1", instance: str = "inst-1") -> Identity:
    return identity(execution=execution, instance=instance)


def hello_frame(who: Identity, *, contract: int = CONTRACT_VERSION) -> P.HelloFrame:
    return P.frame(P.HelloFrame, identity=who, daemon_version="test", contract_version=contract, heartbeat_ms=1000)


def history(who: Identity) -> AttachmentHistory:
    h = AttachmentHistory(version=CONTRACT_VERSION, identity=who, updated_at=T0)
    reducer.begin_attempt(h, attempt_id="att_1", origin="manual", now=T0)
    return h


def event(who: Identity, seq: int = 1, **fields: object) -> EvidenceEvent:
    base = dict(kind="delivered", occurred_at=T0 + timedelta(seconds=seq), task_id=who.task_id,
                session_id=who.session_id, execution_id=who.execution_id, instance_id=who.instance_id,
                attempt_id="att_1", seq=seq, server="kandev")
    return EvidenceEvent(**{**base, **fields})  # type: ignore[arg-type]


@dataclass
class Session:
    """The hub's state of one session and its open connections, changed through the rules only."""

    state: SessionState | None = None
    links: dict[str, Identity] = field(default_factory=dict)  # open connections that said hello
    snapshots: set[str] = field(default_factory=set)  # connections whose snapshot was taken
    said: list[tuple[str, str]] = field(default_factory=list)  # (connection, error code), in order
    order: int = 0
    seconds: int = 0

    def now(self):
        self.seconds += 1
        return T0 + timedelta(seconds=self.seconds)

    def hello(self, conn: str, who: Identity) -> rules.Hello[str]:
        taken = rules.hello(self.state, hello_frame(who), links=dict(self.links), order=self.order + 1, now=self.now())
        self.order += taken.new_execution
        self.state = taken.session
        self.links[conn] = who
        if taken.notice is not None:
            self.said.append((conn, taken.notice.code))
        self.said += [(other, notice.code) for other, notice in taken.told]
        return taken

    def frame(self, conn: str, frame: P.SnapshotFrame | P.EvidenceFrame | P.AgentFrame):
        assert self.state is not None
        who = self.links[conn]
        outcome = rules.state_frame(self.state, self.state.executions[who.execution_id], who, conn in self.snapshots,
                                    frame)
        if isinstance(outcome, rules.Taken) and outcome.snapshot:
            self.snapshots.add(conn)
        return outcome

    def leave(self, conn: str, *, stopping: bool = False) -> rules.Departure[str]:
        assert self.state is not None
        who = self.links.pop(conn)
        self.snapshots.discard(conn)
        left = rules.departure(self.state, self.state.executions[who.execution_id], who, self.links, stopping=stopping)
        self.said += [(other, rules.RECONNECT.code) for other in left.reconnect]
        for other in left.reconnect:  # asked back with a fatal frame: the hub closes them
            self.links.pop(other)
        return left

    def standings(self) -> dict[str, rules.Standing]:
        assert self.state is not None
        return {conn: rules.standing(self.state, who) for conn, who in self.links.items()}


def play(script: list[tuple[str, ...]]) -> Session:
    """("hello", conn, execution, instance) and ("leave", conn) steps, in order."""
    world = Session()
    for step in script:
        if step[0] == "hello":
            world.hello(step[1], ident(step[2], step[3]))
        else:
            world.leave(step[1])
    return world


# -- which execution and instance is current, and who is told ---------------------------------------------------

ORDERS = {
    "the first hello of a session makes its execution and instance current": (
        [("hello", "a", "exec-1", "inst-1")],
        "exec-1", {"a": "current"}, [],
    ),
    "a newer execution supersedes the followed one, which is told once and stays open": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-2", "inst-2")],
        "exec-2", {"a": "stale_execution", "b": "current"}, [("a", "stale_execution")],
    ),
    "two instances of one execution racing: the later hello is current, the earlier told": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-1", "inst-2")],
        "exec-1", {"a": "stale_instance", "b": "current"}, [("a", "stale_instance")],
    ),
    "a late hello of an older execution is rejected and told, and the newer stays current": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-2", "inst-2"), ("leave", "a"),
         ("hello", "c", "exec-1", "inst-1")],
        "exec-2", {"b": "current", "c": "stale_execution"}, [("a", "stale_execution"), ("c", "stale_execution")],
    ),
    "an old instance coming back after a newer one is current again and the newer one is told": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-1", "inst-2"), ("leave", "a"),
         ("hello", "c", "exec-1", "inst-1")],
        "exec-1", {"b": "stale_instance", "c": "current"}, [("a", "stale_instance"), ("b", "stale_instance")],
    ),
    "when the superseding instance leaves, the older live instance is asked to reconnect": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-1", "inst-2"), ("leave", "b")],
        "exec-1", {}, [("a", "stale_instance"), ("a", "reconnect")],
    ),
    "every older live instance is asked back, not only the last one superseded": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-1", "inst-2"), ("hello", "c", "exec-1", "inst-3"),
         ("leave", "c")],
        "exec-1", {}, [("a", "stale_instance"), ("b", "stale_instance"), ("a", "reconnect"), ("b", "reconnect")],
    ),
    "the instance asked back says hello again and is current, told nothing": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-1", "inst-2"), ("leave", "b"),
         ("hello", "a2", "exec-1", "inst-1")],
        "exec-1", {"a2": "current"}, [("a", "stale_instance"), ("a", "reconnect")],
    ),
    "an older execution is never asked back when the newer one leaves": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-2", "inst-2"), ("leave", "b")],
        "exec-2", {"a": "stale_execution"}, [("a", "stale_execution")],
    ),
    "a superseded connection leaving changes nobody's standing": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-1", "inst-2"), ("leave", "a")],
        "exec-1", {"b": "current"}, [("a", "stale_instance")],
    ),
    "a newer execution's hello tells every connection it supersedes, of both older instances": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-1", "inst-1"), ("hello", "c", "exec-2", "inst-2")],
        "exec-2", {"a": "stale_execution", "b": "stale_execution", "c": "current"},
        [("a", "stale_execution"), ("b", "stale_execution")],
    ),
}


@pytest.mark.parametrize("script, current, standings, said", ORDERS.values(), ids=ORDERS.keys())
def test_orders_of_hello_and_leave(script, current, standings, said):
    world = play(script)
    assert world.state is not None and world.state.current_execution_id == current
    assert world.standings() == standings
    assert world.said == said


def test_a_new_execution_takes_the_next_hello_order_and_a_known_one_keeps_its_own():
    world = Session()
    first = world.hello("a", ident("exec-1", "inst-1"))
    again = world.hello("b", ident("exec-1", "inst-2"))
    newer = world.hello("c", ident("exec-2", "inst-3"))
    assert (first.new_session, first.new_execution, first.now_current) == (True, True, False)
    assert (again.new_session, again.new_execution, again.now_current) == (False, False, False)
    assert (newer.new_session, newer.new_execution, newer.now_current) == (False, True, True)
    assert world.state is not None
    assert {eid: e.hello_order for eid, e in world.state.executions.items()} == {"exec-1": 1, "exec-2": 2}
    assert world.state.executions["exec-1"].identity.instance_id == "inst-2", "the newest instance that said hello"


def test_a_stale_hello_is_counted_and_changes_neither_the_current_execution_nor_its_instance():
    world = play([("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-2", "inst-2")])
    assert world.state is not None
    late = world.hello("c", ident("exec-1", "inst-9"))
    assert late.standing == "stale_execution" and late.told == []
    assert world.state.stale_rejected == 1 and world.state.executions["exec-1"].rejected_frames == 1
    assert world.state.executions["exec-1"].identity.instance_id == "inst-1"
    assert world.state.current_execution_id == "exec-2"


def test_the_superseded_notice_names_what_superseded_it():
    assert rules.superseded("stale_execution").message == (
        "a newer execution of this session said hello; this execution's frames are rejected")
    assert rules.superseded("stale_instance").message == (
        "a newer instance of this execution said hello; this instance's frames are rejected")
    assert not rules.superseded("stale_instance").fatal and rules.RECONNECT.fatal


# -- departures ------------------------------------------------------------------------------------------------

DEPARTURES = {
    "the last connection of the current instance leaving disconnects its execution": (
        [("hello", "a", "exec-1", "inst-1")], "a", False, True, [],
    ),
    "another connection of the current instance keeps its execution connected": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-1", "inst-1")], "a", False, False, [],
    ),
    "while the hub itself stops nobody is asked to reconnect": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-1", "inst-2")], "b", True, True, [],
    ),
    "a superseded connection leaving does not disconnect the current one": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-1", "inst-2")], "a", False, False, [],
    ),
    "the superseder leaving asks the older live instance back": (
        [("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-1", "inst-2")], "b", False, True, ["a"],
    ),
}


@pytest.mark.parametrize("script, leaving, stopping, disconnected, reconnect", DEPARTURES.values(),
                         ids=DEPARTURES.keys())
def test_departures(script, leaving, stopping, disconnected, reconnect):
    world = play(script)
    assert world.state is not None
    execution = world.state.executions[world.links[leaving].execution_id]
    connected_before = execution.connected
    left = world.leave(leaving, stopping=stopping)
    assert (left.disconnected, left.reconnect) == (disconnected, reconnect)
    assert execution.connected == (connected_before and not disconnected)


# -- frames ----------------------------------------------------------------------------------------------------

ME = ident("exec-1", "inst-1")
STRANGER = identity(session="session-2", execution="exec-1", instance="inst-1")


def snapshot(who: Identity = ME) -> P.SnapshotFrame:
    return P.frame(P.SnapshotFrame, history=history(who))


def evidence(**fields: object) -> P.EvidenceFrame:
    return P.frame(P.EvidenceFrame, event=event(ME, **fields))


def agent() -> P.AgentFrame:
    return P.frame(P.AgentFrame, agent=AgentState(protocol="acp", state="running"))


REFUSED = {
    "evidence before a snapshot is refused": ([evidence()], "snapshot_required"),
    "an agent frame before a snapshot is refused": ([agent()], "snapshot_required"),
    "a snapshot of another identity than the hello's is refused": ([snapshot(STRANGER)], "identity_mismatch"),
    "an event of another session than the hello's is refused": ([snapshot(), evidence(session_id="session-2")],
                                                                 "identity_mismatch"),
    "an event of another task than the hello's is refused": ([snapshot(), evidence(task_id="task-2")],
                                                              "identity_mismatch"),
}


@pytest.mark.parametrize("frames, code", REFUSED.values(), ids=REFUSED.keys())
def test_refused_frames(frames, code):
    world = play([("hello", "a", "exec-1", "inst-1")])
    *before, last = frames
    for frame in before:
        assert isinstance(world.frame("a", frame), rules.Taken)
    assert world.state is not None
    kept = msgspec.json.encode(world.state.executions["exec-1"].history)
    outcome = world.frame("a", last)
    assert isinstance(outcome, rules.Refusal) and outcome.code == code
    assert msgspec.json.encode(world.state.executions["exec-1"].history) == kept, "a refusal changes nothing"


@pytest.mark.parametrize("frame", [snapshot(), snapshot(STRANGER), evidence(), agent()],
                         ids=["snapshot", "snapshot-of-another-identity", "evidence", "agent"])
def test_a_superseded_connections_frames_are_rejected_and_counted_never_refused(frame):
    world = play([("hello", "a", "exec-1", "inst-1")])
    world.frame("a", snapshot())
    world.hello("b", ident("exec-1", "inst-2"))
    assert world.state is not None
    kept = msgspec.json.encode(world.state.executions["exec-1"].history)
    assert isinstance(world.frame("a", frame), rules.Rejected)
    assert world.state.stale_rejected == 1 and world.state.executions["exec-1"].rejected_frames == 1
    assert msgspec.json.encode(world.state.executions["exec-1"].history) == kept


def test_a_snapshot_replaces_the_history_within_the_reducers_bounds():
    world = play([("hello", "a", "exec-1", "inst-1")])
    big = history(ME)
    big.previous = [msgspec.structs.replace(big.current, attempt_id=f"old_{n}") for n in range(MAX_ATTEMPTS + 2)]
    big.current.evidence = [event(ME, seq=n + 1, server=f"s{n}") for n in range(MAX_EVENTS_PER_ATTEMPT + 10)]
    assert world.frame("a", P.frame(P.SnapshotFrame, history=big)) == rules.Taken(snapshot=True)
    assert world.state is not None
    kept = world.state.executions["exec-1"].history
    assert kept is not None and kept.current is not None
    assert len(kept.previous) == MAX_ATTEMPTS - 1
    assert len(kept.current.evidence) == MAX_EVENTS_PER_ATTEMPT and kept.current.dropped_events == 10
    assert kept.current.evidence[-1].server == f"s{MAX_EVENTS_PER_ATTEMPT + 9}", "the newest events are kept"


def test_evidence_is_folded_by_the_reducer_once_and_a_repeat_is_not_applied():
    world = play([("hello", "a", "exec-1", "inst-1")])
    world.frame("a", snapshot())
    assert world.frame("a", evidence(seq=1)) == rules.Taken(applied=True)
    assert world.frame("a", evidence(seq=1)) == rules.Taken(applied=False)
    assert world.frame("a", agent()) == rules.Taken()
    assert world.state is not None
    kept = world.state.executions["exec-1"].history
    assert kept is not None and kept.current is not None and kept.agent is not None
    assert [e.seq for e in kept.current.evidence] == [1] and kept.agent.state == "running"


def test_contact_moves_only_for_the_followed_connection():
    world = play([("hello", "a", "exec-1", "inst-1"), ("hello", "b", "exec-1", "inst-2")])
    assert world.state is not None
    execution = world.state.executions["exec-1"]
    before = (execution.last_contact_at, world.state.last_contact_at)
    later = T0 + timedelta(hours=1)
    assert not rules.contact(world.state, execution, world.links["a"], later)
    assert (execution.last_contact_at, world.state.last_contact_at) == before
    assert rules.contact(world.state, execution, world.links["b"], later)
    assert (execution.last_contact_at, world.state.last_contact_at) == (later, later)


# -- one connection's order ---------------------------------------------------------------------------------------

ADMISSION = {
    "a heartbeat before hello is refused": (False, P.frame(P.HeartbeatFrame), "expected_hello"),
    "a snapshot before hello is refused": (False, snapshot(), "expected_hello"),
    "a second hello is refused": (True, hello_frame(ME), "duplicate_hello"),
    "a hello of another contract version is refused": (False, hello_frame(ME, contract=CONTRACT_VERSION + 1),
                                                        "contract_mismatch"),
    "a first hello is admitted": (False, hello_frame(ME), None),
    "frames after hello are admitted": (True, snapshot(), None),
}


@pytest.mark.parametrize("identified, frame, code", ADMISSION.values(), ids=ADMISSION.keys())
def test_admission(identified, frame, code):
    refusal = rules.admit(identified, frame)
    assert (refusal.code if refusal else None) == code


# -- tool calls ----------------------------------------------------------------------------------------------------


def call(*, deadline_ms: int = 5000, sent: float = 0.0, who: Identity = ME) -> P.ToolCallFrame:
    return P.frame(P.ToolCallFrame, id="c1", op="task.get", identity=who, args={}, deadline_ms=deadline_ms,
                   sent_at=T0 + timedelta(seconds=sent))


BUDGETS = {
    "a fresh call runs for its deadline less its time on the way": ("current", call(deadline_ms=5000), 1.0, 4.0),
    "no call runs longer than a minute": ("current", call(deadline_ms=600_000), 0.0, rules.MAX_TOOL_SECONDS),
    "a call sent from a clock ahead of the hub's gets its whole deadline": ("current", call(sent=30), 0.0, 5.0),
    "a call read after its deadline does not run": (
        "current", call(deadline_ms=1000), 2.0,
        rules.ToolRefused("the call's deadline passed before the hub read it; the tool did not run")),
    "a call of an older execution does not run": (
        "stale_execution", call(), 0.0,
        rules.ToolRefused("a newer execution of this session is current; the tool did not run")),
    "a call of an older instance does not run": (
        "stale_instance", call(), 0.0,
        rules.ToolRefused("a newer daemon instance of this execution is current; the tool did not run")),
}


@pytest.mark.parametrize("why, frame, read_after, budget", BUDGETS.values(), ids=BUDGETS.keys())
def test_tool_call_budgets(why, frame, read_after, budget):
    assert rules.tool_call_budget(why, frame, T0 + timedelta(seconds=read_after)) == budget


def test_a_tool_call_must_carry_the_hellos_identity():
    assert rules.admit_tool_call(ME, call()) is None
    refusal = rules.admit_tool_call(ME, call(who=ident("exec-1", "inst-2")))
    assert refusal is not None and refusal.code == "identity_mismatch"


# ---- sync: the database's view of a session (hubs sharing one database) ----------------------------------


def _stored(*executions: tuple[str, int], current: str, rejected: dict[str, int] | None = None) -> SessionState:
    """The session as the shared database holds it: executions (id, hello order), the current one named."""
    from agentctl.hub.state import ExecutionState

    state = SessionState(session_id="session-1", task_id="task-1", current_execution_id=current, last_contact_at=T0)
    for eid, order in executions:
        state.executions[eid] = ExecutionState(identity=ident(eid, f"inst-{eid}"), daemon_version="test",
                                               hello_order=order, first_hello_at=T0, last_contact_at=T0,
                                               rejected_frames=(rejected or {}).get(eid, 0))
    return state


def test_a_newer_execution_claimed_through_another_hub_fences_the_connections_here_once():
    world = play([("hello", "a", "exec-1", "inst-1")])
    assert world.state is not None
    synced = rules.sync(world.state, _stored(("exec-1", 1), ("exec-2", 2), current="exec-2"), world.links, {"exec-1"})
    assert synced.now_current and [(k, n.code, n.fatal) for k, n in synced.told] == [("a", "stale_execution", False)]
    assert world.standings() == {"a": "stale_execution"}
    assert world.state.executions["exec-2"].hello_order == 2
    outcome = world.frame("a", P.frame(P.SnapshotFrame, history=history(ident("exec-1", "inst-1"))))
    assert isinstance(outcome, rules.Rejected), "its late frames are rejected from now on"
    again = rules.sync(world.state, _stored(("exec-1", 1), ("exec-2", 2), current="exec-2"), world.links, {"exec-1"})
    assert not again.now_current and again.told == [], "told once"


def test_a_view_read_before_a_later_claim_never_moves_the_current_execution_back():
    world = play([("hello", "a", "exec-3", "inst-1")])
    assert world.state is not None
    world.state.executions["exec-3"].hello_order = 3
    synced = rules.sync(world.state, _stored(("exec-2", 2), ("exec-3", 3), current="exec-2"), world.links, {"exec-3"})
    assert not synced.now_current and synced.told == []
    assert world.state.current_execution_id == "exec-3" and world.standings() == {"a": "current"}


def test_executions_held_here_keep_this_hubs_state_and_the_others_are_taken_as_stored():
    world = play([("hello", "a", "exec-1", "inst-1")])
    assert world.state is not None
    world.state.executions["exec-1"].rejected_frames = 2  # counted here, not yet written
    stored = _stored(("exec-1", 1), ("exec-2", 2), current="exec-2", rejected={"exec-1": 0, "exec-2": 5})
    rules.sync(world.state, stored, world.links, {"exec-1"})
    assert world.state.executions["exec-1"].rejected_frames == 2
    assert world.state.executions["exec-2"] is stored.executions["exec-2"]
    assert world.state.stale_rejected == 7, "the session's count is its executions' sum"
