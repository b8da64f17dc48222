"""The required-server gate's rule (agentctl/evidence/required.py): pure, on contract rows and an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from agentctl.evidence.contract.control import AttachedGate, RequiredServer
from agentctl.evidence.contract.report import (
    MAX_REQUIRED_SERVERS,
    AgentReport,
    Attempt,
    Identity,
    RequiredGate,
    RequiredReading,
    ServerRow,
    decode_history,
)
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.required import gate_lines, judge, reading, reading_line, required_names, same_reading

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _attempt(*rows: ServerRow) -> Attempt:
    return Attempt(attempt_id="att-1", task_id="t", session_id="s", execution_id="e", instance_id="i",
                   started_at=T0, updated_at=T0, servers=list(rows))


def _builtin(status: str = "delivered", **kw) -> ServerRow:
    return ServerRow(name="kandev", source="builtin", transport="http", status=status, **kw)


def _docs(status: str = "delivered", **kw) -> ServerRow:
    return ServerRow(name="docs", transport="http", status=status, **kw)


def _report(state: str, summary: str | None = None) -> AgentReport:
    return AgentReport(state=state, source="codex-acp:mcp-startup", reported_at=T0, summary=summary)


def _judge(attempt, required=("kandev",), after: float = 1.0, timeout: float = 30.0):
    return judge(attempt, list(required), builtin_name="kandev", timeout=timeout, now=T0 + timedelta(seconds=after))


def test_nothing_required_means_no_gate_at_all():
    assert _judge(_attempt(_builtin()), required=()) is None
    assert required_names("kandev", False, []) == []
    assert required_names("kandev", True, ["docs", "kandev"]) == ["kandev", "docs"]


def test_a_builtin_server_observed_active_opens_the_gate_and_connected_alone_does_not():
    assert _judge(_attempt(_builtin("active"))).state == "open"
    waiting = _judge(_attempt(_builtin("connected")))
    assert (waiting.state, waiting.servers[0].state, waiting.servers[0].policy) == ("waiting", "waiting",
                                                                                     "required, waiting")


def test_a_builtin_row_active_only_by_the_agents_report_is_not_attached():
    row = _builtin("active", status_source="reported", reported=_report("connected"))
    assert _judge(_attempt(row), after=31).state == "blocked"


def test_a_delivered_row_past_the_timeout_blocks_with_its_evidence_and_the_policy_beside_it():
    gate = _judge(_attempt(_builtin()), after=30)
    (server,) = gate.servers
    assert (gate.state, gate.waited, server.state) == ("blocked", 30.0, "not_attached")
    assert server.evidence == "delivered · connection unverified for 30 s"
    assert server.policy == "required, not attached after 30 s"
    assert gate_lines(gate) == ["kandev: required, not attached after 30 s "
                                "(delivered · connection unverified for 30 s)"]


def test_one_second_before_the_timeout_the_gate_still_waits():
    assert _judge(_attempt(_builtin()), after=29).state == "waiting"


def test_a_third_party_server_reported_connected_is_attached_and_one_reported_failed_blocks_at_once():
    connected = _docs("connected", status_source="reported", reported=_report("connected"))
    assert _judge(_attempt(connected), required=("docs",)).state == "open"
    failed = _docs("failed", status_source="reported", reported=_report("failed", "handshake refused"),
                   summary="handshake refused")
    gate = _judge(_attempt(failed), required=("docs",), after=0.5)
    assert (gate.state, gate.servers[0].state) == ("blocked", "failed")
    assert gate.servers[0].evidence == "failed · reported by codex-acp: handshake refused"


def test_a_filtered_server_can_never_attach_and_blocks_without_waiting_out_the_timeout():
    gate = _judge(_attempt(_docs("filtered", reason_code="transport_not_supported")), required=("docs",))
    assert (gate.state, gate.servers[0].policy) == ("blocked", "required, filtered")
    assert "transport_not_supported" in gate.servers[0].evidence


def test_every_required_server_must_attach_one_waiting_keeps_the_gate_waiting():
    rows = _attempt(_builtin("active"), _docs())
    assert _judge(rows, required=("kandev", "docs")).state == "waiting"
    assert _judge(rows, required=("kandev", "docs"), after=40).state == "blocked"


def test_without_an_attempt_the_gate_waits_however_long_it_has_been():
    gate = judge(None, ["kandev"], builtin_name="kandev", timeout=1.0, now=T0 + timedelta(days=1))
    assert (gate.state, gate.waited, gate.servers[0].evidence) == ("waiting", None, "no attempt yet")


def test_the_gate_never_changes_the_row_it_reads():
    row = _builtin()
    attempt = _attempt(row)
    before = attempt.servers[0].status
    _judge(attempt, after=99)
    assert attempt.servers[0].status == before == "delivered"


def test_once_the_agent_has_exited_what_is_not_attached_blocks_at_once_saying_so():
    gate = judge(_attempt(_builtin()), ["kandev"], builtin_name="kandev", timeout=30, now=T0 + timedelta(seconds=2),
                 agent_exited=True)
    assert (gate.state, gate.servers[0].policy) == ("blocked", "required, not attached (the agent exited)")
    assert gate.servers[0].evidence == "delivered · connection unverified"
    attached = judge(_attempt(_builtin("active")), ["kandev"], builtin_name="kandev", timeout=30, now=T0,
                     agent_exited=True)
    assert attached.state == "open"


def test_a_third_party_server_of_a_run_that_reports_nothing_blocks_at_once_saying_why_and_the_builtin_still_waits():
    why = "Claude Code runs interactively (no -p): no agent report is available"
    gate = judge(_attempt(_builtin(), _docs()), ["kandev", "docs"], builtin_name="kandev", timeout=30,
                 now=T0 + timedelta(seconds=1), no_report=why)
    kandev, docs = gate.servers
    assert (gate.state, kandev.state, docs.state, docs.policy) == ("blocked", "waiting", "failed",
                                                                   "required, cannot be proven attached")
    assert docs.evidence == f"delivered · connection unverified; {why}"
    observed = judge(_attempt(_docs("connected")), ["docs"], builtin_name="kandev", timeout=30, now=T0, no_report=why)
    assert observed.state == "open", "an observation still proves it"


def test_the_reading_the_report_keeps_has_each_servers_state_and_policy_and_none_of_the_evidence_words():
    failed = _docs("failed", status_source="reported", reported=_report("failed", "CANARY-summary"),
                   summary="CANARY-summary")
    gate = _judge(_attempt(_builtin(), failed), required=("kandev", "docs"), after=31)
    kept = reading(gate, T0)
    assert (kept.state, kept.timeout, kept.judged_at) == ("blocked", 30.0, T0)
    assert [(s.name, s.state, s.policy) for s in kept.servers] == [
        ("kandev", "not_attached", "required, not attached after 30 s"), ("docs", "failed", "required, failed")]
    assert b"CANARY" not in msgspec.json.encode(kept), "the row beside it is the evidence, not the reading"
    assert reading_line(kept) == "blocked: kandev required, not attached after 30 s; docs required, failed"


def test_a_reading_is_the_same_whatever_its_time_and_differs_once_a_server_does():
    waiting = reading(_judge(_attempt(_builtin()), after=1), T0)
    later = reading(_judge(_attempt(_builtin()), after=2), T0 + timedelta(seconds=1))
    assert same_reading(waiting, later) and not same_reading(None, later)
    assert not same_reading(waiting, reading(_judge(_attempt(_builtin("active"))), T0))


def test_the_kept_reading_is_bounded_in_the_contract_and_a_reader_refuses_more_servers():
    many = [RequiredReading(name=f"s{i}", state="waiting", policy="required, waiting")
            for i in range(MAX_REQUIRED_SERVERS + 1)]
    gate = reading(AttachedGate(state="waiting", timeout=1.0, servers=[
        RequiredServer(name=r.name, state=r.state, evidence="delivered", policy=r.policy) for r in many]), T0)
    assert len(gate.servers) == MAX_REQUIRED_SERVERS
    over = msgspec.json.encode(RequiredGate(state="waiting", timeout=1.0, judged_at=T0, servers=many))
    with pytest.raises(msgspec.ValidationError, match=r"servers"):
        msgspec.json.decode(over, type=RequiredGate)


def test_the_ledger_keeps_a_changed_reading_on_its_attempt_and_tells_its_listeners_only_then():
    ledger = Ledger(Identity(task_id="t", session_id="s", execution_id="e", instance_id="i", agent_id="a",
                             agent_profile_id="p"), clock=lambda: T0)
    attempt_id, _ = ledger.begin_attempt("session_new")
    heard: list[object] = []
    ledger.subscribe(heard.append)
    gate = reading(_judge(_attempt(_builtin())), T0)
    assert ledger.set_required(attempt_id, gate) and heard == [None]
    assert not ledger.set_required(attempt_id, msgspec.structs.replace(gate, judged_at=T0 + timedelta(seconds=5)))
    assert heard == [None] and ledger.history.current.required.judged_at == T0
    assert not ledger.set_required("att-gone", gate), "an attempt no longer kept takes no reading"
    decoded = decode_history(msgspec.json.encode(ledger.history))
    assert decoded.version == 3 and decoded.current.required == gate
