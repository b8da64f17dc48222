"""Rules of the stateful evidence ledger: stamping, per-attempt tokens, listeners, persistence shape.

Time comes from an injected fake clock; no sleeps.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from agentctl.evidence import ledger as ledger_mod
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import (
    CONTRACT_VERSION,
    MAX_ATTEMPTS,
    ClientInfo,
    EndpointTestResult,
    EvidenceEvent,
    ToolCatalog,
    ToolSummary,
    decode_history,
)
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from tests.evidence.fixed import IDENT, T0


SEEDS = [
    ServerSeed(name="kandev", source="builtin", transport="http", target="http://127.0.0.1:7000"),
    ServerSeed(name="github", source="profile", transport="stdio", target="github-mcp"),
]


class FakeClock:
    """Returns successive datetimes the test controls: each call moves time on by `step`."""

    def __init__(self, start: datetime = T0, step: timedelta = timedelta(seconds=1)) -> None:
        self._next = start
        self.step = step
        self.calls = 0

    def __call__(self) -> datetime:
        self.calls += 1
        now = self._next
        self._next = now + self.step
        return now

    def advance(self, delta: timedelta) -> None:
        self._next += delta


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ledger(clock: FakeClock) -> Ledger:
    return Ledger(IDENT, clock=clock)


def test_ledger_starts_with_empty_history_stamped_by_injected_clock(ledger: Ledger) -> None:
    h = ledger.history
    assert (h.version, h.identity, h.updated_at, h.current, h.previous) == (CONTRACT_VERSION, IDENT, T0, None, [])
    assert ledger.current_attempt_id is None


def test_begin_attempt_makes_new_attempt_current_and_records_configured_for_each_seed(ledger: Ledger) -> None:
    attempt_id, token = ledger.begin_attempt("session_new", SEEDS)
    assert ledger.current_attempt_id == attempt_id
    current = ledger.history.current
    assert current is not None and current.origin == "session_new"
    rows = {r.name: r for r in current.servers}
    assert {n: r.status for n, r in rows.items()} == {"kandev": "configured", "github": "configured"}
    assert (rows["kandev"].source, rows["kandev"].transport, rows["kandev"].target) == (
        "builtin",
        "http",
        "http://127.0.0.1:7000",
    )
    assert (rows["github"].source, rows["github"].transport, rows["github"].target) == (
        "profile",
        "stdio",
        "github-mcp",
    )
    assert token and token not in encode(ledger.history).decode()  # tokens are never in the report


def test_record_stamps_identity_clock_time_and_monotonic_seq(ledger: Ledger, clock: FakeClock) -> None:
    attempt_id, _ = ledger.begin_attempt("session_new")
    first = ledger.record("delivered", attempt_id, "kandev", transport="http")
    second = ledger.record("initialize_observed", attempt_id, "kandev", client=ClientInfo(name="c"))
    assert first is not None and second is not None
    assert (first.task_id, first.session_id, first.execution_id, first.instance_id) == (
        IDENT.task_id,
        IDENT.session_id,
        IDENT.execution_id,
        IDENT.instance_id,
    )
    assert first.attempt_id == attempt_id
    assert 0 < first.seq < second.seq
    assert first.occurred_at < second.occurred_at  # both read from the fake clock
    assert ledger.history.last_seq == second.seq


def test_record_honours_explicit_occurred_at_over_clock(ledger: Ledger) -> None:
    attempt_id, _ = ledger.begin_attempt("session_new")
    at = T0 + timedelta(days=3)
    event = ledger.record("delivered", attempt_id, "kandev", occurred_at=at)
    assert event is not None and event.occurred_at == at


def test_absence_never_failure_delivered_row_stays_delivered_as_clock_runs_on(
    ledger: Ledger, clock: FakeClock
) -> None:
    attempt_id, _ = ledger.begin_attempt("session_new", SEEDS)
    ledger.record("delivered", attempt_id, "github")
    clock.advance(timedelta(days=365))
    ledger.record("session_accepted", attempt_id, acp_session_id="acp_1")
    ledger.count_refusal("/mcp", "POST", 401)
    row = next(r for r in ledger.history.current.servers if r.name == "github")  # type: ignore[union-attr]
    assert row.status == "delivered"


def test_tokens_minted_per_attempt_differ_and_map_back_to_their_attempt(ledger: Ledger) -> None:
    a1, t1 = ledger.begin_attempt("session_new")
    a2, t2 = ledger.begin_attempt("reset")
    assert a1 != a2
    assert t1 != t2
    assert ledger.tokens.attempt_for(t1) == a1
    assert ledger.tokens.attempt_for(t2) == a2
    assert ledger.tokens.attempt_for("not-a-token") is None
    assert ledger.tokens.attempt_for(None) is None


def test_old_token_resolves_to_old_attempt_while_kept_and_to_none_after_it_falls_out(ledger: Ledger) -> None:
    first, first_token = ledger.begin_attempt("session_new")
    for _ in range(MAX_ATTEMPTS - 1):
        ledger.begin_attempt("reset")
        assert ledger.tokens.attempt_for(first_token) == first  # still one of the 3 kept
    assert ledger.history.previous[-1].attempt_id == first
    ledger.begin_attempt("reset")  # first is now the 4th back
    assert all(a.attempt_id != first for a in ledger.history.previous)
    assert ledger.tokens.attempt_for(first_token) is None


def test_old_token_evidence_lands_in_old_attempt_and_never_makes_current_green(ledger: Ledger) -> None:
    _, old_token = ledger.begin_attempt("session_new", SEEDS)
    new_id, _ = ledger.begin_attempt("reset", SEEDS)
    current_before = encode(ledger.history.current)
    attributed = ledger.tokens.attempt_for(old_token)
    assert attributed is not None and attributed != new_id
    assert ledger.record("tools_list_observed", attributed, "kandev", tool_count=3) is not None
    assert encode(ledger.history.current) == current_before
    old_row = next(r for r in ledger.history.previous[0].servers if r.name == "kandev")
    assert old_row.status == "active"
    new_row = next(r for r in ledger.history.current.servers if r.name == "kandev")  # type: ignore[union-attr]
    assert new_row.status == "configured"


def test_record_for_attempt_no_longer_kept_returns_none_and_counts_rejection(ledger: Ledger) -> None:
    first, _ = ledger.begin_attempt("session_new")
    for _ in range(MAX_ATTEMPTS):
        ledger.begin_attempt("reset")
    seen: list[EvidenceEvent | None] = []
    ledger.subscribe(seen.append)
    assert ledger.record("tools_list_observed", first, "kandev") is None
    assert ledger.history.rejected_events == 1
    assert seen == [None]  # listeners still hear that the history (its counter) changed


def test_listeners_called_for_each_record_with_the_event(ledger: Ledger) -> None:
    attempt_id, _ = ledger.begin_attempt("session_new")
    a: list[EvidenceEvent | None] = []
    b: list[EvidenceEvent | None] = []
    ledger.subscribe(a.append)
    ledger.subscribe(b.append)
    recorded = [
        ledger.record("delivered", attempt_id, "kandev"),
        ledger.record("initialize_observed", attempt_id, "kandev", connection_id="conn_a"),
        ledger.record("tool_call_observed", attempt_id, "kandev", tool_name="x", outcome="error"),
    ]
    assert a == recorded
    assert b == recorded


def test_listeners_hear_begin_attempt_seeds_endpoint_tests_and_refusals(ledger: Ledger) -> None:
    seen: list[EvidenceEvent | None] = []
    ledger.subscribe(seen.append)
    attempt_id, _ = ledger.begin_attempt("session_new", SEEDS)
    assert [e.server for e in seen if e is not None] == ["kandev", "github"]
    assert seen[-1] is None
    seen.clear()
    ledger.begin_attempt("reset")
    assert seen and all(e is None for e in seen)  # the supersession itself is announced
    seen.clear()
    new_id = ledger.current_attempt_id
    assert new_id is not None
    ledger.record("delivered", new_id, "kandev")
    seen.clear()
    result = EndpointTestResult(succeeded=False, tested_at=ledger.now(), reason_code="refused")
    assert ledger.set_endpoint_test(new_id, "kandev", result) is True
    assert ledger.set_endpoint_test(new_id, "missing", result) is False
    ledger.count_refusal("/mcp", "POST", 401)
    assert seen == [None, None]  # the stored test and the refusal; not the unstored test


def test_listener_raising_does_not_break_record_or_other_listeners(
    ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    attempt_id, _ = ledger.begin_attempt("session_new")
    after: list[EvidenceEvent | None] = []

    def broken(event: EvidenceEvent | None) -> None:
        raise RuntimeError("listener bug")

    ledger.subscribe(broken)
    ledger.subscribe(after.append)
    with caplog.at_level("ERROR", logger=ledger_mod.__name__):
        event = ledger.record("tools_list_observed", attempt_id, "kandev", tool_count=1)
    assert event is not None
    assert after == [event]
    row = ledger.history.current.servers[0]  # type: ignore[union-attr]
    assert row.status == "active"
    assert "evidence listener failed" in caplog.text
    ledger.count_refusal("/mcp", "GET", 405)  # other entry points survive it too
    assert ledger.history.http_refusals[0].count == 1


def test_endpoint_test_through_ledger_never_changes_status(ledger: Ledger) -> None:
    attempt_id, _ = ledger.begin_attempt("session_new", SEEDS)
    ledger.record("delivered", attempt_id, "github")
    ledger.record("explicit_error", attempt_id, "kandev", reason_code="initialize_failed")
    ok = EndpointTestResult(succeeded=True, tested_at=ledger.now(), tool_count=4)
    bad = EndpointTestResult(succeeded=False, tested_at=ledger.now(), reason_code="connect_refused")
    assert ledger.set_endpoint_test(attempt_id, "kandev", ok)
    assert ledger.set_endpoint_test(attempt_id, "github", bad)
    rows = {r.name: r for r in ledger.history.current.servers}  # type: ignore[union-attr]
    assert (rows["kandev"].status, rows["kandev"].endpoint_test) == ("failed", ok)
    assert (rows["github"].status, rows["github"].endpoint_test) == ("delivered", bad)


def test_history_json_round_trip_gives_an_equal_struct(ledger: Ledger) -> None:
    first, _ = ledger.begin_attempt("session_new", SEEDS)
    ledger.record("session_accepted", first, acp_session_id="acp_1")
    ledger.record("delivered", first, "kandev", transport="http")
    ledger.record(
        "initialize_observed",
        first,
        "kandev",
        connection_id="conn_a",
        era="legacy",
        protocol_version="2025-06-18",
        client=ClientInfo(name="agent", version="1.0"),
    )
    ledger.record(
        "tools_list_observed",
        first,
        "kandev",
        connection_id="conn_a",
        tool_count=2,
        catalog=ToolCatalog(tools=[ToolSummary(name="a", input_schema={"type": "object"})], truncated=True),
    )
    ledger.record("tool_call_observed", first, "kandev", tool_name="a", outcome="error")
    ledger.record("connection_closed", first, "kandev", connection_id="conn_a")
    ledger.record("filtered", first, "github", reason_code="transport_unsupported", summary="stdio")
    second, _ = ledger.begin_attempt("reset", SEEDS)
    ledger.record("explicit_error", second, None, reason_code="acp_session_failed", summary="x")
    ledger.set_endpoint_test(second, "kandev", EndpointTestResult(succeeded=True, tested_at=ledger.now()))
    ledger.count_refusal("/mcp", "POST", 401)
    ledger.record("delivered", "att_unknown", "kandev")

    data = encode(ledger.history)
    decoded = decode_history(data)
    assert decoded == ledger.history
    assert encode(decoded) == data


def test_self_test_token_authenticates_but_its_evidence_is_dropped_without_a_seq(ledger: Ledger) -> None:
    attempt, _ = ledger.begin_attempt("manual", [ServerSeed(name="kandev", source="builtin", transport="http", target=None)])
    before = ledger.history.last_seq
    self_id, token = ledger.mint_self_test_token()
    assert ledger.tokens.attempt_for(token) == self_id
    assert ledger.record("tools_list_observed", self_id, "kandev", tool_count=3) is None
    assert ledger.history.last_seq == before and ledger.history.rejected_events == 0
    assert ledger.history.current.servers[0].status == "configured"
    ledger.forget_self_test(self_id)
    assert ledger.tokens.attempt_for(token) is None
    assert ledger.current_attempt_id == attempt


def test_a_new_attempt_does_not_revoke_a_running_self_test_credential(ledger: Ledger) -> None:
    ledger.begin_attempt("manual", [])
    self_id, token = ledger.mint_self_test_token()
    ledger.begin_attempt("reset", [])
    assert ledger.tokens.attempt_for(token) == self_id
    ledger.forget_self_test(self_id)
    assert ledger.tokens.attempt_for(token) is None


@pytest.mark.parametrize("char", ["x", "é"])  # one byte a character, and two: the byte and character bounds differ
def test_free_text_recorded_over_the_contracts_bounds_is_cut_so_the_report_stays_readable(
    ledger: Ledger, char: str
) -> None:
    # The type refuses an over-long field of a foreign report; the ledger must never write one itself, or its
    # own report would be unreadable after a restart and refused by every hub.
    from agentctl.evidence.contract.report import AgentNotice

    attempt, _ = ledger.begin_attempt("session_new", SEEDS)
    long = char * 2000
    ledger.record("explicit_error", attempt, "github", reason_code="x", summary=long)
    ledger.add_notice(attempt, AgentNotice(severity="info", title=long, description=long, occurred_at=T0))
    ledger.update_agent(name=long, version=long, exit_reason=long)
    history = decode_history(encode(ledger.history))
    assert history.current.notices[0].title and history.agent.exit_reason
