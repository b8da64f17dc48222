"""A state machine over the evidence Ledger (and its pure reducer): every documented rule, after every step.

Steps: new attempts (with seeds), evidence of every kind for known and unknown servers and for the current,
previous, forgotten and never-seen attempts at past and future times, bursts that overflow the event log,
endpoint tests, refused requests, agent updates and self-test traffic. After each step the model (docs/design.md
"Evidence model", "Ownership and attempts", "Release-safe report") is checked against the ledger, the report
round-trips through the contract, and an upstream receiver that folds only the published frames (snapshots
and evidence lines, as agentctl.upstream.publisher sends them) holds exactly the ledger's history.
tests/evidence/test_reducer.py has the single-rule tests and the status property over the pure reducer;
tests/evidence/test_reducer_reports.py the single rules of agent-reported evidence, which the machine mixes in
(reports about known, unknown and undelivered servers, beside observations, in any order).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import event, settings
from hypothesis.control import currently_in_test_context
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from agentctl.evidence import reducer
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import (
    REPORTED_STATES,
    MAX_ATTEMPTS,
    MAX_EVENTS_PER_ATTEMPT,
    AttachmentHistory,
    Attempt,
    ClientInfo,
    EndpointTestResult,
    ToolCatalog,
    ToolSummary,
    decode_history,
)
from agentctl.evidence.display import reporter_name
from agentctl.present.rows import row_view
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from agentctl.evidence.store import ensure_state_dir, read_report, report_path, write_atomic
from agentctl.upstream import protocol as P
from tests.evidence.fixed import IDENT, T0
from tests.evidence.test_reducer import CONTACT_KINDS, expected_status
from tests.reliability.strategies import FUZZ

# Seeded servers, a server nobody configured, and a name only bytes-exact code gets right.
SERVERS = ("kandev", "github", "stray", "名前/ü")
SEEDABLE = SERVERS[:2]
ROW_KINDS = ("configured", "filtered", "unavailable", "delivered", "initialize_observed", "tools_list_observed",
             "tool_call_observed", "explicit_error", "connection_closed")
TIMESTAMPED = {"configured", "filtered", "unavailable", "delivered", "initialize_observed",
               "tools_list_observed", "tool_call_observed"}
NEVER = "att_never_begun"
REPORT_SOURCES = ("claude:stream-json-init", "codex:app-server")
# Provider words as they come, and text that is no token at all (the ledger must drop it).
RAW_STATES = (None, "needs-auth", "ready", "authenticationRequired", "not a token", "x" * 40, "ok\nthen")
FAILURE_STATES = frozenset({"failed", "needs_auth"})
OBSERVED_ATTACHMENT = frozenset({"failed", "active", "connected"})


@dataclass(frozen=True)
class Obs:
    """One applied row observation, as the model keeps it."""

    kind: str
    t: datetime
    fields: dict[str, Any]


def _newest(observations: list[Obs]) -> list[Obs]:
    """The observations at the latest occurrence time: any of them may be shown (ties have no order)."""
    if not observations:
        return []
    latest = max(o.t for o in observations)
    return [o for o in observations if o.t == latest]


def _reported_status(observed: str, seen: list[Obs]) -> set[tuple[str, str]]:
    """Every (status, status_source) the rules allow for a row: host observation first; otherwise the newest
    report of a delivered row (at one instant a failure; among other ties, any of them)."""
    reports = _newest([o for o in seen if o.kind == "agent_reported"])
    if not reports or observed in OBSERVED_ATTACHMENT or not any(o.kind == "delivered" for o in seen):
        return {(observed, "observed")}
    if any(o.fields["reported_state"] in FAILURE_STATES for o in reports):
        return {("failed", "reported")}
    allowed = set()
    for o in reports:
        if o.fields["reported_state"] == "connected":
            allowed.add(("active" if o.fields.get("tool_count") else "connected", "reported"))
        else:
            allowed.add((observed, "observed"))
    return allowed


class LedgerMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.now = T0
        self.ledger = Ledger(IDENT, clock=lambda: self.now)
        self.begun: list[str] = []
        self.rows: dict[tuple[str, str], list[Obs]] = {}
        self.session: dict[str, list[Obs]] = {}  # attempt-level observations per attempt
        self.logged: Counter[str] = Counter()  # events folded into each attempt's log, dropped ones included
        self.endpoint_tests: dict[tuple[str, str], EndpointTestResult] = {}
        self.records = self.rejected = 0
        self.refusals: Counter[tuple[str, str, int]] = Counter()
        self.agent: dict[str, Any] = {}
        # The upstream side: what the publisher would have sent, folded the way the hub folds it.
        self.receiver = self._snapshot()
        self.queue: list[bytes] = []
        self.need_snapshot = False
        self.ledger.subscribe(self._published)
        self.begin("session_new", list(SEEDABLE))  # most runs are about attempts; start inside one

    # ---- the upstream receiver ---------------------------------------------------------------------

    def _snapshot(self) -> AttachmentHistory:
        line = P.encode_frame(P.frame(P.SnapshotFrame, history=self.ledger.history))
        return reducer.enforce_bounds(P.decode_from_daemon(line[:-1]).history)

    def _published(self, event: Any) -> None:
        # As the publisher: an evidence line per event; a state change schedules a snapshot, which carries
        # (and so replaces) whatever was queued before it.
        if event is None:
            self.need_snapshot, self.queue = True, []
        elif not self.need_snapshot:
            self.queue.append(P.encode_frame(P.frame(P.EvidenceFrame, event=event)))

    def _pump(self) -> None:
        if self.need_snapshot:
            self.receiver, self.need_snapshot = self._snapshot(), False
        for line in self.queue:
            assert reducer.apply(self.receiver, P.decode_from_daemon(line[:-1]).event) == "applied"
        self.queue = []

    # ---- helpers -------------------------------------------------------------------------------------

    def _kept(self) -> list[str]:
        return list(reversed(self.begun[-MAX_ATTEMPTS:]))

    def _attempt_id(self, back: int) -> str:
        return self.begun[-1 - back] if back < len(self.begun) else NEVER

    def _record(self, kind: str, attempt_id: str, server: str | None, minutes: int, **fields: Any) -> None:
        current = self.ledger.history.current
        before = encode(current) if current is not None and current.attempt_id != attempt_id else None
        at = self.now + timedelta(minutes=minutes)
        event = self.ledger.record(kind, attempt_id, server, occurred_at=at, **fields)  # type: ignore[arg-type]
        self.records += 1
        if attempt_id not in self._kept():
            assert event is None
            self.rejected += 1
        else:
            assert event is not None and event.seq == self.records
            self.logged[attempt_id] += 1
            if server:
                self.rows.setdefault((attempt_id, server), []).append(Obs(kind, at, fields))
            else:
                self.session.setdefault(attempt_id, []).append(Obs(kind, at, fields))
        if before is not None:
            assert encode(self.ledger.history.current) == before, "evidence for another attempt changed the current one"

    # ---- rules ---------------------------------------------------------------------------------------

    @rule(origin=st.sampled_from(["session_new", "session_load", "reset", "passthrough_start", "manual"]),
          seeds=st.lists(st.sampled_from(SEEDABLE), unique=True))
    def begin(self, origin: str, seeds: list[str]) -> None:
        previous = self.ledger.current_attempt_id
        attempt_id, token = self.ledger.begin_attempt(origin, [  # type: ignore[arg-type]
            ServerSeed(name=s, source="builtin" if s == "kandev" else "profile", transport="http",
                       target="http://127.0.0.1:1") for s in seeds])
        assert self.ledger.tokens.attempt_for(token) == attempt_id
        if previous is not None:
            self.logged[previous] += 1  # its attempt_superseded marker
        self.begun.append(attempt_id)
        for server in seeds:
            self.records += 1
            self.logged[attempt_id] += 1
            self.rows.setdefault((attempt_id, server), []).append(Obs("configured", self.now, {}))

    @rule(kind=st.sampled_from(ROW_KINDS), server=st.sampled_from(SERVERS),
          back=st.sampled_from([0, 0, 0, 1, 2, 3, 9]), minutes=st.integers(-60, 2),
          conn=st.sampled_from([None, "conn_a", "conn_b"]), n=st.integers(0, 3), error=st.booleans())
    def row_evidence(self, kind: str, server: str, back: int, minutes: int, conn: str | None, n: int,
                     error: bool) -> None:
        fields: dict[str, Any] = {}
        if kind in ("initialize_observed", "tools_list_observed", "tool_call_observed", "connection_closed"):
            fields.update(connection_id=conn, era="legacy" if conn else "modern")
        if kind == "initialize_observed":
            fields["client"] = ClientInfo(name=f"client-{n}", version=str(minutes))
        elif kind == "tools_list_observed":
            fields.update(tool_count=n, catalog=ToolCatalog(tools=[ToolSummary(name=f"t{i}") for i in range(n)]))
        elif kind == "tool_call_observed":
            fields.update(tool_name=f"tool_{n}", outcome="error" if error else "ok")
        elif kind in ("explicit_error", "filtered", "unavailable"):
            fields.update(reason_code=f"{kind}_{n}", summary=f"{kind} {minutes}")
        self._record(kind, self._attempt_id(back), server, minutes, **fields)

    @rule(server=st.sampled_from(SERVERS[:2]), conn=st.sampled_from(["conn_a", "conn_b"]),
          gaps=st.tuples(st.integers(0, 2), st.integers(0, 2)), modern=st.booleans(),
          order=st.permutations(range(3)))
    def legacy_connection_closes(self, server: str, conn: str, gaps: tuple[int, int], modern: bool,
                                 order: list[int]) -> None:
        # A legacy contact, its connection's close and (maybe) a later modern-era contact, with ties, arriving in
        # any order: the combination a random walk rarely builds on its own.
        steps = [("tools_list_observed", conn, 0), ("connection_closed", conn, gaps[0]),
                 ("initialize_observed", None, gaps[0] + gaps[1])]
        for i in order:
            kind, connection, minutes = steps[i]
            if i == 2 and not modern:
                continue
            fields: dict[str, Any] = {"connection_id": connection, "era": "legacy" if connection else "modern"}
            if kind == "tools_list_observed":
                fields.update(tool_count=1, catalog=ToolCatalog(tools=[ToolSummary(name="t")]))
            elif kind == "initialize_observed":
                fields["client"] = ClientInfo(name="modern-client")
            self._record(kind, self._attempt_id(0), server, minutes, **fields)

    @rule(server=st.sampled_from(SERVERS[:2]), gap=st.integers(-2, 2), contact=st.sampled_from(
          ["initialize_observed", "tools_list_observed", "tool_call_observed"]), failure_first=st.booleans())
    def failure_and_contact(self, server: str, gap: int, contact: str, failure_first: bool) -> None:
        # One failed request and one successful contact `gap` minutes apart (ties included), in either arrival order.
        fields: dict[str, Any] = {"era": "modern"}
        if contact == "initialize_observed":
            fields["client"] = ClientInfo(name="recovered-client")
        elif contact == "tools_list_observed":
            fields.update(tool_count=2, catalog=ToolCatalog(tools=[ToolSummary(name="a"), ToolSummary(name="b")]))
        elif contact == "tool_call_observed":
            fields.update(tool_name="a", outcome="ok")
        steps = [("explicit_error", 0, {"reason_code": "tools_list_failed", "summary": "bad cursor"}),
                 (contact, gap, fields)]
        for kind, minutes, extra in steps if failure_first else reversed(steps):
            self._record(kind, self._attempt_id(0), server, minutes, **extra)

    @rule(kind=st.sampled_from(["session_accepted", "explicit_error"]), back=st.sampled_from([0, 0, 1, 3]),
          minutes=st.integers(-90, 2), n=st.integers(0, 3), bare=st.booleans())
    def attempt_evidence(self, kind: str, back: int, minutes: int, n: int, bare: bool) -> None:
        if kind == "session_accepted":
            fields: dict[str, Any] = {"acp_session_id": f"acp_{n}"}
        else:
            fields = {} if bare else {"reason_code": f"session_{n}", "summary": f"s{minutes}"}
        self._record(kind, self._attempt_id(back), None, minutes, **fields)

    @rule(count=st.integers(20, 70), minutes=st.integers(-3, 3), server=st.sampled_from(SERVERS[:2]))
    def burst(self, count: int, minutes: int, server: str) -> None:
        # Enough at once to overflow the per-attempt log, so the drop rules are exercised, not just reachable.
        for i in range(count):
            self._record("tool_call_observed", self._attempt_id(0), server, minutes, tool_name="burst",
                         outcome="error" if i % 7 == 0 else "ok", connection_id="conn_a", era="legacy")

    def _report(self, attempt_id: str, server: str, minutes: int, fields: dict[str, Any]) -> None:
        # A report lands only on a row agentctl has: a name the agent chose never makes one.
        at = self.now + timedelta(minutes=minutes)
        current = self.ledger.history.current
        before = encode(current) if current is not None and current.attempt_id != attempt_id else None
        event = self.ledger.record("agent_reported", attempt_id, server, occurred_at=at, **fields)
        self.records += 1
        if attempt_id not in self._kept() or (attempt_id, server) not in self.rows:
            assert event is None, "a report made a row, or landed in an attempt no longer kept"
            self.rejected += 1
        else:
            assert event is not None and event.seq == self.records
            self.logged[attempt_id] += 1
            self.rows[(attempt_id, server)].append(Obs("agent_reported", at, dict(fields, raw_state=event.raw_state)))
        if before is not None:
            assert encode(self.ledger.history.current) == before, "a report for another attempt changed the current one"

    @rule(server=st.sampled_from(SERVERS), back=st.sampled_from([0, 0, 0, 1, 3]), minutes=st.integers(-60, 2),
          state=st.sampled_from(REPORTED_STATES), source=st.sampled_from(REPORT_SOURCES),
          tools=st.none() | st.integers(0, 3), raw=st.sampled_from(RAW_STATES), reasoned=st.booleans())
    def agent_report(self, server: str, back: int, minutes: int, state: str, source: str, tools: int | None,
                     raw: str | None, reasoned: bool) -> None:
        fields: dict[str, Any] = {"reported_state": state, "report_source": source, "tool_count": tools,
                                  "raw_state": raw}
        if reasoned:
            fields.update(reason_code="agent_reported_failed", summary=f"said {state} at {minutes}")
        self._report(self._attempt_id(back), server, minutes, fields)

    @rule(server=st.sampled_from(SERVERS[:2]), gap=st.integers(-2, 2), contact=st.sampled_from(
          [None, None, "initialize_observed", "tools_list_observed", "explicit_error", "filtered"]),
          state=st.sampled_from(["failed", "connected", "needs_auth", "pending"]), report_first=st.booleans())
    def report_and_observation(self, server: str, gap: int, contact: str | None, state: str,
                               report_first: bool) -> None:
        # A delivered server, the agent's report and (maybe) one observation `gap` minutes apart (ties included),
        # in either arrival order: the agreements and disagreements a random walk rarely builds on its own.
        self._record("delivered", self._attempt_id(0), server, -3, transport="http")
        fields: dict[str, Any] = {"era": "modern"}
        if contact == "initialize_observed":
            fields["client"] = ClientInfo(name="reported-client")
        elif contact == "tools_list_observed":
            fields.update(tool_count=2, catalog=ToolCatalog(tools=[ToolSummary(name="a"), ToolSummary(name="b")]))
        elif contact == "explicit_error":
            fields = {"reason_code": "session_rejected", "summary": "refused"}
        elif contact == "filtered":
            fields = {"reason_code": "policy_denied", "summary": "not allowed"}
        report = {"reported_state": state, "report_source": REPORT_SOURCES[0], "tool_count": 2}
        steps = [lambda: self._report(self._attempt_id(0), server, 0, report)]
        if contact is not None:
            steps.append(lambda: self._record(contact, self._attempt_id(0), server, gap, **fields))
        for step in steps if report_first else reversed(steps):
            step()

    @rule(back=st.sampled_from([0, 0, 1, 2, 3]), server=st.sampled_from(SERVERS), ok=st.booleans())
    def endpoint_test(self, back: int, server: str, ok: bool) -> None:
        attempt_id = self._attempt_id(back)
        result = EndpointTestResult(succeeded=ok, tested_at=self.now, reason_code=None if ok else "connect_failed")
        current = self.ledger.history.current
        before = encode(current) if current is not None and current.attempt_id != attempt_id else None
        stored = self.ledger.set_endpoint_test(attempt_id, server, result)
        if before is not None:
            assert encode(self.ledger.history.current) == before
        # Stored beside an existing row of a kept attempt only; never a row of its own.
        assert stored == (attempt_id in self._kept() and (attempt_id, server) in self.rows)
        if stored:
            self.endpoint_tests[(attempt_id, server)] = result

    @rule(route=st.sampled_from(["/mcp", "/sse", "/messages/"]), method=st.sampled_from(["GET", "POST"]),
          status=st.sampled_from([401, 403, 404]))
    def refused(self, route: str, method: str, status: int) -> None:
        self.ledger.count_refusal(route, method, status)
        self.refusals[(route, method, status)] += 1

    @rule(state=st.sampled_from(["starting", "running", "exited"]), code=st.none() | st.integers(-255, 255),
          name=st.none() | st.text(max_size=8))
    def agent_update(self, state: str, code: int | None, name: str | None) -> None:
        self.ledger.update_agent(state=state, exit_code=code, name=name)
        self.agent.update(state=state, exit_code=code, name=name)

    @rule(kind=st.sampled_from(ROW_KINDS))
    def self_test_traffic(self, kind: str) -> None:
        before = encode(self.ledger.history)
        attempt_id, token = self.ledger.mint_self_test_token()
        assert self.ledger.tokens.attempt_for(token) == attempt_id
        assert self.ledger.record(kind, attempt_id, "kandev") is None  # type: ignore[arg-type]
        self.ledger.forget_self_test(attempt_id)
        assert self.ledger.tokens.attempt_for(token) is None
        assert encode(self.ledger.history) == before, "the daemon testing itself left evidence"

    @rule(minutes=st.integers(1, 30))
    def advance(self, minutes: int) -> None:
        self.now += timedelta(minutes=minutes)

    # ---- invariants ---------------------------------------------------------------------------------

    @invariant()
    def the_published_state_equals_the_ledger(self) -> None:
        self._pump()
        assert encode(self.receiver) == encode(self.ledger.history)

    @invariant()
    def the_report_round_trips_through_the_contract(self) -> None:
        assert decode_history(encode(self.ledger.history)) == self.ledger.history

    @invariant()
    def attempts_and_counters_match_the_model(self) -> None:
        history = self.ledger.history
        attempts = ([history.current] if history.current else []) + history.previous
        assert [a.attempt_id for a in attempts] == self._kept()
        assert len(history.previous) <= MAX_ATTEMPTS - 1
        assert (history.last_seq, history.rejected_events) == (self.records, self.rejected)
        assert {(r.route, r.method, r.status): r.count for r in history.http_refusals} == dict(self.refusals)
        assert len(history.http_refusals) == len(self.refusals)
        if self.agent:
            assert history.agent is not None
            assert {k: getattr(history.agent, k) for k in self.agent} == self.agent
        for n, attempt in enumerate(attempts):
            assert (attempt.superseded_at is None) == (n == 0)
            assert len(attempt.evidence) <= MAX_EVENTS_PER_ATTEMPT
            assert len(attempt.evidence) + attempt.dropped_events == self.logged[attempt.attempt_id]
            self._check_attempt_level(attempt)
            assert {r.name for r in attempt.servers} == {s for (a, s) in self.rows if a == attempt.attempt_id}
            for row in attempt.servers:
                self._check_row(attempt, n == 0, row)

    def _check_attempt_level(self, attempt: Attempt) -> None:
        seen = self.session.get(attempt.attempt_id, [])
        accepted = _newest([o for o in seen if o.kind == "session_accepted"])
        assert attempt.accepted_at == (accepted[0].t if accepted else None)
        assert attempt.acp_session_id in ({o.fields["acp_session_id"] for o in accepted} or {None})
        errors = _newest([o for o in seen if o.kind == "explicit_error"])
        shown = {(o.fields.get("reason_code") or "session_error", o.fields.get("summary") or "") for o in errors}
        error = attempt.session_error
        assert (error.reason_code, error.summary) in shown if error else not errors, "the newest session error is shown"

    def _rows(self) -> list[tuple[Attempt, Any, list[Obs]]]:
        history = self.ledger.history
        attempts = ([history.current] if history.current else []) + history.previous
        return [(a, row, self.rows[(a.attempt_id, row.name)]) for a in attempts for row in a.servers]

    # The four rules of the evidence model that make a status believable, each stated on its own.

    @invariant()
    def a_later_success_is_never_hidden_by_an_earlier_failure(self) -> None:
        for _, row, seen in self._rows():
            failures = [o.t for o in seen if o.kind == "explicit_error"]
            contacts = [o.t for o in seen if o.kind in CONTACT_KINDS]
            if failures and contacts and max(contacts) > max(failures):
                assert row.status != "failed", f"{row.name}: a contact after the last failure, still failed"
                assert row.status == ("active" if row.tools_list_observed_at else "connected")
                # The failure stays visible as detail: its time, reason and summary.
                newest = _newest([o for o in seen if o.kind == "explicit_error"])
                assert row.failed_at == newest[0].t
                assert row.last_failure is not None
                assert (row.last_failure.reason_code, row.last_failure.summary) in {
                    (o.fields["reason_code"], o.fields["summary"]) for o in newest}

    @invariant()
    def only_attachment_errors_make_a_row_failed(self) -> None:
        for _, row, seen in self._rows():
            if row.status != "failed":
                continue
            if row.status_source == "reported":  # the agent's own explicit error naming this delivered server
                newest = _newest([o for o in seen if o.kind == "agent_reported"])
                assert any(o.fields["reported_state"] in FAILURE_STATES for o in newest)
                assert not any(o.kind in CONTACT_KINDS for o in seen), f"{row.name}: observed contact, yet failed"
                continue
            # A server-specific explicit error, and nothing that proves attachment occurred after it: tool-call
            # errors, failed endpoint tests, session errors and closed connections never make a row red.
            failures = [o.t for o in seen if o.kind == "explicit_error"]
            assert failures, f"{row.name}: failed without an explicit error naming it"
            assert all(o.t <= max(failures) for o in seen if o.kind in CONTACT_KINDS)
            assert row.failed_at == max(failures) and row.reason_code == row.last_failure.reason_code

    @invariant()
    def no_row_is_filtered_without_a_recorded_filtering_decision(self) -> None:
        for _, row, seen in self._rows():
            if row.status == "filtered":
                decisions = _newest([o for o in seen if o.kind == "filtered"])
                assert decisions, f"{row.name}: filtered without a filtering decision"
                assert (row.reason_code, row.summary) in {
                    (o.fields["reason_code"], o.fields["summary"]) for o in decisions}

    @invariant()
    def a_report_never_outranks_an_observation_of_the_same_server(self) -> None:
        for _, row, seen in self._rows():
            observed = expected_status((o.kind, o.t) for o in seen)
            assert reducer.observed_status(row) == observed
            if observed in OBSERVED_ATTACHMENT:
                assert (row.status, row.status_source) == (observed, "observed"), f"{row.name}: a report won"
            if row.status_source == "reported":
                assert row.reported is not None and row.delivered_at is not None

    @invariant()
    def a_reported_state_is_labelled_as_reported_and_an_observed_one_never_is(self) -> None:
        for _, row, _ in self._rows():
            view = row_view(row)
            assert view.state == row.status and view.status_source == row.status_source
            if row.status_source == "reported":
                reporter = reporter_name(row.reported.source)
                assert view.label == f"{row.status} · reported by {reporter}" and view.sources[0] == row.reported.source
            else:
                assert "reported by" not in view.label and view.sources[0] == "agentctl"
            if row.reported is not None:
                assert row.reported.source in view.sources and view.reported == row.reported.state

    @invariant()
    def a_closed_connection_is_never_the_current_one(self) -> None:
        for attempt, row, seen in self._rows():
            legacy = [o for o in seen if o.kind in CONTACT_KINDS and o.fields.get("connection_id")]
            if not legacy:
                assert (row.connection_id, row.connection_seen_at, row.disconnected_at) == (None, None, None)
                continue
            # Each legacy connection on its own: its newest contact, and its close (the newest close at or after
            # that contact; a later contact reopened it otherwise). The row shows the newest open connection and
            # no close while any is open; once all are closed, the one that closed last, with its close. Modern-era
            # (connection-less) contact never counts.
            state: dict[str, tuple[datetime, datetime | None]] = {}
            for conn in {o.fields["connection_id"] for o in legacy}:
                seen_at = max(o.t for o in legacy if o.fields["connection_id"] == conn)
                closes = [o.t for o in seen if o.kind == "connection_closed"
                          and o.fields.get("connection_id") == conn and o.t >= seen_at]
                state[conn] = (seen_at, max(closes, default=None))
            open_ = {c: v for c, v in state.items() if v[1] is None}
            if open_:
                newest = max(v[0] for v in open_.values())
                assert row.connection_id in {c for c, v in open_.items() if v[0] == newest}
                assert (row.connection_seen_at, row.disconnected_at) == (newest, None), row.name
                continue
            last = max(v[1] for v in state.values())  # type: ignore[type-var]
            assert row.connection_id in {c for c, v in state.items() if v[1] == last}
            assert row.connection_seen_at == state[row.connection_id][0]
            assert row.disconnected_at == last, f"{row.name}: {row.connection_id}"

    def _check_row(self, attempt: Attempt, current: bool, row: Any) -> None:
        seen = self.rows[(attempt.attempt_id, row.name)]
        kinds = [o.kind for o in seen]
        observed = expected_status((o.kind, o.t) for o in seen)
        assert (row.status, row.status_source) in _reported_status(observed, seen), f"{row.name}: {row.status} from {kinds}"
        self._check_report(row, seen)
        calls = [o for o in seen if o.kind == "tool_call_observed"]
        assert (row.tool_calls, row.tool_errors) == (len(calls), sum(o.fields["outcome"] == "error" for o in calls))
        for kind in TIMESTAMPED:
            newest = _newest([o for o in seen if o.kind == kind])
            assert getattr(row, f"{kind.removesuffix('_observed')}_observed_at" if kind.endswith("_observed")
                           else f"{kind}_at") == (newest[0].t if newest else None), kind
        assert row.failed_at == max((o.t for o in seen if o.kind == "explicit_error"), default=None)
        lists = _newest([o for o in seen if o.kind == "tools_list_observed"])
        assert row.tool_count in ({o.fields["tool_count"] for o in lists} or {None})
        catalogs = [o.fields["catalog"] for o in lists] if current else []
        assert row.catalog in catalogs if catalogs else row.catalog is None, "a superseded attempt keeps no catalog"
        assert row.last_tool in ({o.fields["tool_name"] for o in _newest(calls)} or {None})
        inits = _newest([o for o in seen if o.kind == "initialize_observed"])
        assert row.client in ([o.fields["client"] for o in inits] or [None])
        # One reason is shown: a current failure's, else a filter's, else an unavailability's; the newest of that
        # kind. A failure a later contact superseded shows no reason (it stays as last_failure).
        failures = _newest([o for o in seen if o.kind == "explicit_error"])
        newest_failure = {(o.fields["reason_code"], o.fields["summary"]) for o in failures}
        last = row.last_failure
        assert (last.reason_code, last.summary) in newest_failure if last else not failures
        if row.status_source == "reported":
            if row.status == "failed":  # the report's own reason, or the stable code for its state
                assert (row.reason_code, row.summary) == (row.reported.reason_code, row.reported.summary)
                return self._check_tail(attempt, row)
        elif attempt.dropped_events and (row.reason_code, row.summary) == (None, None) and any(
                o.kind == "agent_reported" for o in seen) and not failures:
            # A reported failure stopped being current; the decision it replaced had left the bounded log.
            return self._check_tail(attempt, row)
        for kind in ("explicit_error", "filtered", "unavailable"):
            newest = _newest([o for o in seen if o.kind == kind])
            if newest and kind == "explicit_error" and row.status != "failed":
                assert (row.reason_code, row.summary) == (None, None), "a superseded failure is not the reason"
                break
            if newest:
                shown = {(o.fields["reason_code"], o.fields["summary"]) for o in newest}
                assert (row.reason_code, row.summary) in shown, f"the newest {kind} reason is shown"
                break
        else:
            assert (row.reason_code, row.summary) == (None, None)
        self._check_tail(attempt, row)

    def _check_tail(self, attempt: Attempt, row: Any) -> None:
        assert row.endpoint_test == self.endpoint_tests.get((attempt.attempt_id, row.name))
        if row.disconnected_at is not None:
            assert row.connection_id is not None

    def _check_report(self, row: Any, seen: list[Obs]) -> None:
        reports = _newest([o for o in seen if o.kind == "agent_reported"])
        if not reports:
            assert row.reported is None
            return
        report = row.reported
        assert report is not None and report.reported_at == reports[0].t
        assert report.state in {o.fields["reported_state"] for o in reports}
        if any(o.fields["reported_state"] in FAILURE_STATES for o in reports):
            assert report.state in FAILURE_STATES, "at one instant a reported failure wins"
        shown = [o for o in reports if o.fields["reported_state"] == report.state and
                 o.fields["report_source"] == report.source and o.fields.get("tool_count") == report.tool_count]
        assert shown, "the shown report is one the agent made"
        # A raw word is kept only as a short token: never free text.
        assert report.raw_state in {None, "needs-auth", "ready", "authenticationRequired"}
        if report.state in FAILURE_STATES:
            default = "agent_reported_needs_auth" if report.state == "needs_auth" else "agent_reported_failed"
            assert report.reason_code in {o.fields.get("reason_code") or default for o in shown}

    def teardown(self) -> None:
        # Last, the persisted form: the file the daemon writes reads back as the same report.
        if not hasattr(self, "ledger"):
            return
        if currently_in_test_context():  # --hypothesis-show-statistics: does the search reach the bounds?
            history = self.ledger.history
            attempts = ([history.current] if history.current else []) + history.previous
            event(f"attempts begun: {min(len(self.begun), 4)}+")
            event(f"a log overflowed: {any(a.dropped_events for a in attempts)}")
            rows = [r for a in attempts for r in a.servers]
            event(f"a status rests on a report: {any(r.status_source == 'reported' for r in rows)}")
            event(f"a report disagrees with an observation: {any(row_view(r).disagreement for r in rows)}")
        with tempfile.TemporaryDirectory(prefix="actl-fuzz-") as d:
            ensure_state_dir(Path(d), IDENT.execution_id)
            write_atomic(report_path(Path(d), IDENT.execution_id), encode(self.ledger.history))
            assert read_report(Path(d), IDENT.execution_id) == self.ledger.history


LedgerMachine.TestCase.settings = settings(FUZZ, max_examples=150, stateful_step_count=50)
TestTheLedgerKeepsEveryDocumentedRuleAfterEveryStep = LedgerMachine.TestCase


def test_a_session_error_newer_than_the_shown_one_is_shown_even_when_it_arrives_older_than_the_whole_log() -> None:
    """The machine's find, kept as its example: the newer error fell out of the full log at once and the older
    one stayed shown, because "newest" was judged from the bounded log (fixed with Attempt.session_error_at)."""
    machine = LedgerMachine()
    machine.start()
    machine.burst(count=42, minutes=0, server="kandev")
    machine.attempt_evidence(kind="explicit_error", back=0, minutes=-2, n=0, bare=False)
    machine.burst(count=20, minutes=0, server="kandev")
    machine.attempt_evidence(kind="explicit_error", back=0, minutes=-1, n=1, bare=False)
    error = machine.ledger.history.current.session_error
    assert error is not None and error.reason_code == "session_1"
    machine.attempts_and_counters_match_the_model()
    machine.the_published_state_equals_the_ledger()
    machine.teardown()
