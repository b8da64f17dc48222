"""Rules of the pure evidence reducer (docs/design.md "Evidence model", "Ownership and attempts", bounds).

Every test, or parametrized case id, is named after the rule it protects. Time comes from a fake clock
the test advances by hand: no sleeps, no wall clock.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentctl.evidence import reducer
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import (
    CONTRACT_VERSION,
    MAX_ATTEMPTS,
    MAX_EVENTS_PER_ATTEMPT,
    AttachmentHistory,
    Attempt,
    ClientInfo,
    EndpointTestResult,
    EvidenceEvent,
    RefusalCount,
    ServerRow,
    ToolCatalog,
    ToolSummary,
    decode_history,
)
from tests.evidence.fixed import IDENT, T0



class FakeClock:
    """Returns successive datetimes the test controls: each call moves time on by `step`."""

    def __init__(self, start: datetime = T0, step: timedelta = timedelta(seconds=1)) -> None:
        self._next = start
        self.step = step

    def __call__(self) -> datetime:
        now = self._next
        self._next = now + self.step
        return now

    def advance(self, delta: timedelta) -> None:
        self._next += delta


class World:
    """A history plus the fake clock and helpers to build events for it."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.history = AttachmentHistory(version=CONTRACT_VERSION, identity=IDENT, updated_at=self.clock())
        self._attempts = itertools.count(1)

    def begin(self, origin: str = "session_new") -> str:
        attempt_id = f"att_{next(self._attempts)}"
        reducer.begin_attempt(self.history, attempt_id=attempt_id, origin=origin, now=self.clock())  # type: ignore[arg-type]
        return attempt_id

    def event(
        self,
        kind: str,
        server: str | None = None,
        *,
        attempt: str | None = None,
        at: datetime | None = None,
        **fields: Any,
    ) -> EvidenceEvent:
        attempt_id = attempt or self.current.attempt_id
        base: dict[str, Any] = {
            "task_id": IDENT.task_id,
            "session_id": IDENT.session_id,
            "execution_id": IDENT.execution_id,
            "instance_id": IDENT.instance_id,
        }
        base.update(fields)
        return EvidenceEvent(
            kind=kind,  # type: ignore[arg-type]
            occurred_at=at or self.clock(),
            attempt_id=attempt_id,
            server=server,
            **base,
        )

    def apply(self, kind: str, server: str | None = None, **kw: Any) -> str:
        return reducer.apply(self.history, self.event(kind, server, **kw))

    @property
    def current(self) -> Attempt:
        assert self.history.current is not None
        return self.history.current

    def row(self, server: str = "kandev", attempt: Attempt | None = None) -> ServerRow:
        row = reducer.find_row(attempt or self.current, server)
        assert row is not None, f"no row {server}"
        return row


def catalog(*names: str) -> ToolCatalog:
    return ToolCatalog(tools=[ToolSummary(name=n) for n in names])


# Minimal, valid payloads per kind so any kind can be applied on its own.
KIND_FIELDS: dict[str, dict[str, Any]] = {
    "configured": {"source": "builtin", "transport": "http", "target": "http://127.0.0.1:7000"},
    "filtered": {"reason_code": "transport_unsupported"},
    "unavailable": {"reason_code": "no_strategy"},
    "delivered": {"transport": "http"},
    "initialize_observed": {"connection_id": "conn_a", "era": "legacy", "client": ClientInfo(name="c")},
    "tools_list_observed": {"connection_id": "conn_a", "tool_count": 3, "catalog": catalog("a", "b", "c")},
    "tool_call_observed": {"connection_id": "conn_a", "tool_name": "a", "outcome": "ok"},
    "explicit_error": {"reason_code": "initialize_failed", "summary": "boom"},
}

# Evidence tiers, strongest first (docs/design.md "Evidence model"). `filtered` is listed before `unavailable`
# because derive_status resolves that tie the same way; they never co-occur in practice.
TIER_OF_KIND = {
    "explicit_error": "failed",
    "tools_list_observed": "active",
    "initialize_observed": "connected",
    "tool_call_observed": "connected",
    "delivered": "delivered",
    "filtered": "filtered",
    "unavailable": "unavailable",
    "configured": "configured",
}
TIER_ORDER = ["failed", "active", "connected", "delivered", "filtered", "unavailable", "configured"]


def strongest(kinds: Iterable[str]) -> str:
    tiers = {TIER_OF_KIND[k] for k in kinds if k in TIER_OF_KIND} | {"configured"}
    return min(tiers, key=TIER_ORDER.index)


CONTACT_KINDS = ("initialize_observed", "tools_list_observed", "tool_call_observed")


def expected_status(observed: Iterable[tuple[str, datetime]]) -> str:
    """The model of derive_status over (kind, occurred_at): a failure is current while no contact occurred
    after it (a tie keeps the failure); otherwise the strongest success tier, as if it never happened."""
    observed = list(observed)
    failures = [t for k, t in observed if k == "explicit_error"]
    contacts = [t for k, t in observed if k in CONTACT_KINDS]
    if failures and (not contacts or max(failures) >= max(contacts)):
        return "failed"
    return strongest(k for k, _ in observed if k != "explicit_error")


# --------------------------------------------------------------------------------------------------
# Status precedence
# --------------------------------------------------------------------------------------------------

PRECEDENCE_CASES = [
    pytest.param({"configured"}, "configured", id="configured_alone_is_configured"),
    pytest.param({"configured", "filtered"}, "filtered", id="filtered_beats_configured"),
    pytest.param({"configured", "unavailable"}, "unavailable", id="unavailable_beats_configured"),
    pytest.param({"configured", "filtered", "delivered"}, "delivered", id="delivered_beats_filtered"),
    pytest.param({"configured", "unavailable", "delivered"}, "delivered", id="delivered_beats_unavailable"),
    pytest.param({"configured", "delivered", "initialize_observed"}, "connected", id="connected_beats_delivered"),
    pytest.param(
        {"configured", "delivered", "initialize_observed", "tools_list_observed"},
        "active",
        id="active_beats_connected",
    ),
    pytest.param({"delivered", "tools_list_observed"}, "active", id="active_without_initialize_is_active"),
    pytest.param(
        {"configured", "delivered", "initialize_observed", "tools_list_observed", "explicit_error"},
        "failed",
        id="failed_beats_active",
    ),
    pytest.param({"configured", "explicit_error"}, "failed", id="failed_beats_configured"),
    pytest.param({"delivered", "filtered", "explicit_error"}, "failed", id="failed_beats_delivered_and_filtered"),
    pytest.param(
        {"delivered", "initialize_observed", "tools_list_observed", "tool_call_observed"},
        "active",
        id="tool_call_on_active_row_keeps_active",
    ),
    pytest.param({"delivered", "tool_call_observed"}, "connected", id="tool_call_proves_contact_like_initialize"),
]


@pytest.mark.parametrize(("kinds", "expected"), PRECEDENCE_CASES)
@pytest.mark.parametrize("arrival", ["oldest_first", "newest_first"])
def test_status_is_the_strongest_evidence_present_in_any_arrival_order(
    kinds: set[str], expected: str, arrival: str
) -> None:
    w = World()
    w.begin()
    ordered = sorted(kinds, key=list(KIND_FIELDS).index)  # natural lifecycle order
    times = {k: T0 + timedelta(minutes=i + 1) for i, k in enumerate(ordered)}
    if arrival == "newest_first":
        ordered = list(reversed(ordered))
    for kind in ordered:
        assert w.apply(kind, "kandev", at=times[kind], **KIND_FIELDS[kind]) == "applied"
    row = w.row()
    assert row.status == expected
    assert reducer.derive_status(row) == expected
    assert expected_status(times.items()) == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({}, "configured", id="no_evidence_derives_configured"),
        pytest.param({"unavailable_at": T0}, "unavailable", id="unavailable_at_derives_unavailable"),
        pytest.param({"filtered_at": T0}, "filtered", id="filtered_at_derives_filtered"),
        pytest.param({"delivered_at": T0}, "delivered", id="delivered_at_derives_delivered"),
        pytest.param({"initialize_observed_at": T0}, "connected", id="initialize_derives_connected"),
        pytest.param({"tool_call_observed_at": T0}, "connected", id="tool_call_derives_connected"),
        pytest.param({"tools_list_observed_at": T0}, "active", id="tools_list_derives_active"),
        pytest.param({"failed_at": T0, "tools_list_observed_at": T0}, "failed", id="failed_at_derives_failed"),
        pytest.param(
            {"disconnected_at": T0, "tools_list_observed_at": T0}, "active", id="disconnect_never_lowers_status"
        ),
        pytest.param(
            {"delivered_at": T0, "endpoint_test": EndpointTestResult(succeeded=False, tested_at=T0)},
            "delivered",
            id="failed_endpoint_test_never_derives_failed",
        ),
    ],
)
def test_derive_status_reads_only_which_evidence_exists(fields: dict[str, Any], expected: str) -> None:
    assert reducer.derive_status(ServerRow(name="s", status="configured", **fields)) == expected


# --------------------------------------------------------------------------------------------------
# Absence is never failure; only attachment errors fail a row
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("idle", [timedelta(0), timedelta(minutes=5), timedelta(days=30)], ids=str)
def test_absence_never_failure_delivered_stays_delivered_however_long_nothing_arrives(
    world: World, idle: timedelta
) -> None:
    world.apply("configured", "github", source="profile", transport="stdio", target="gh")
    world.apply("delivered", "github", transport="stdio")
    world.clock.advance(idle)
    # Later evidence about *other* things must not age the silent row into failure.
    world.apply("session_accepted", acp_session_id="acp_1")
    world.apply("initialize_observed", "kandev", connection_id="conn_a")
    world.apply("tools_list_observed", "kandev", connection_id="conn_a", tool_count=1)
    row = world.row("github")
    assert row.status == "delivered"
    assert row.failed_at is None
    assert reducer.derive_status(row) == "delivered"


@pytest.mark.parametrize(
    ("prior", "expected_before"),
    [
        pytest.param(["delivered"], "delivered", id="explicit_server_error_fails_delivered_row"),
        pytest.param(["delivered", "initialize_observed"], "connected", id="failed_initialize_fails_connected_row"),
        pytest.param(
            ["delivered", "initialize_observed", "tools_list_observed"], "active", id="server_error_fails_active_row"
        ),
    ],
)
def test_explicit_error_with_server_makes_that_row_failed(
    world: World, prior: list[str], expected_before: str
) -> None:
    for kind in prior:
        world.apply(kind, "kandev", **KIND_FIELDS[kind])
    world.apply("delivered", "github")
    assert world.row().status == expected_before
    assert world.apply("explicit_error", "kandev", reason_code="tools_list_failed", summary="bad") == "applied"
    row = world.row()
    assert row.status == "failed"
    assert (row.reason_code, row.summary) == ("tools_list_failed", "bad")
    assert world.row("github").status == "delivered"
    assert world.current.session_error is None


def test_tool_call_error_is_detail_row_stays_active_and_errors_counted(world: World) -> None:
    world.apply("delivered", "kandev")
    world.apply("tools_list_observed", "kandev", connection_id="conn_a", tool_count=2)
    world.apply("tool_call_observed", "kandev", tool_name="a", outcome="error", connection_id="conn_a")
    world.apply("tool_call_observed", "kandev", tool_name="b", outcome="ok", connection_id="conn_a")
    world.apply("tool_call_observed", "kandev", tool_name="c", outcome="error", connection_id="conn_a")
    row = world.row()
    assert row.status == "active"
    assert row.failed_at is None
    assert (row.tool_calls, row.tool_errors, row.last_tool) == (3, 2, "c")


def test_session_error_without_server_is_report_level_and_fails_no_row(world: World) -> None:
    for name in ("kandev", "github", "linear"):
        world.apply("configured", name)
        world.apply("delivered", name)
    before = {r.name: (r.status, r.reason_code) for r in world.current.servers}
    assert world.apply("explicit_error", None, reason_code="acp_session_failed", summary="nope") == "applied"
    attempt = world.current
    assert attempt.session_error is not None
    assert (attempt.session_error.reason_code, attempt.session_error.summary) == ("acp_session_failed", "nope")
    assert {r.name: (r.status, r.reason_code) for r in attempt.servers} == before
    assert all(r.status == "delivered" and r.failed_at is None for r in attempt.servers)


def test_session_error_without_reason_gets_stable_default_code(world: World) -> None:
    world.apply("explicit_error", None)
    assert world.current.session_error is not None
    assert world.current.session_error.reason_code == "session_error"


def test_late_older_session_error_does_not_override_newer_one(world: World) -> None:
    world.apply("explicit_error", None, reason_code="newer", at=T0 + timedelta(minutes=10))
    world.apply("explicit_error", None, reason_code="older", at=T0 + timedelta(minutes=5))
    assert world.current.session_error is not None
    assert world.current.session_error.reason_code == "newer"


@pytest.mark.parametrize("late_kind", ["filtered", "unavailable"])
def test_failed_row_keeps_its_error_reason_when_weaker_evidence_with_a_reason_arrives(
    world: World, late_kind: str
) -> None:
    world.apply("explicit_error", "github", reason_code="agent_reported_error", at=T0 + timedelta(minutes=5))
    world.apply(late_kind, "github", reason_code="weaker_reason", at=T0 + timedelta(minutes=1))
    world.apply(late_kind, "github", reason_code="weaker_reason", at=T0 + timedelta(minutes=9))
    row = world.row("github")
    assert row.status == "failed"
    assert row.reason_code == "agent_reported_error"


def test_session_accepted_records_acp_session_id_and_keeps_the_newest(world: World) -> None:
    world.apply("session_accepted", acp_session_id="acp_new", at=T0 + timedelta(minutes=2))
    world.apply("session_accepted", acp_session_id="acp_old", at=T0 + timedelta(minutes=1))
    assert world.current.acp_session_id == "acp_new"
    assert world.current.accepted_at == T0 + timedelta(minutes=2)
    assert world.current.servers == []


# --------------------------------------------------------------------------------------------------
# Occurrence order beats arrival order
# --------------------------------------------------------------------------------------------------


def test_late_arriving_older_initialize_does_not_override_newer_client_info(world: World) -> None:
    newer = T0 + timedelta(minutes=10)
    older = T0 + timedelta(minutes=5)
    world.apply(
        "initialize_observed",
        "kandev",
        at=newer,
        connection_id="conn_b",
        client=ClientInfo(name="new-client", version="2"),
        protocol_version="2025-06-18",
        era="legacy",
    )
    world.apply(
        "initialize_observed",
        "kandev",
        at=older,
        connection_id="conn_a",
        client=ClientInfo(name="old-client", version="1"),
        protocol_version="2024-11-05",
        era="legacy",
    )
    row = world.row()
    assert row.client == ClientInfo(name="new-client", version="2")
    assert row.protocol_version == "2025-06-18"
    assert row.initialize_observed_at == newer
    assert row.connection_id == "conn_b"
    assert row.connection_seen_at == newer


def test_late_arriving_older_tools_list_does_not_override_newer_count(world: World) -> None:
    world.apply("tools_list_observed", "kandev", at=T0 + timedelta(minutes=10), tool_count=7, catalog=catalog("x"))
    world.apply("tools_list_observed", "kandev", at=T0 + timedelta(minutes=5), tool_count=3, catalog=catalog("y"))
    row = world.row()
    assert row.tool_count == 7
    assert row.catalog == catalog("x")


def test_older_connection_closed_for_previous_connection_does_not_set_disconnected_at(world: World) -> None:
    world.apply("initialize_observed", "kandev", connection_id="conn_a", at=T0 + timedelta(minutes=1))
    world.apply("initialize_observed", "kandev", connection_id="conn_b", at=T0 + timedelta(minutes=3))
    world.apply("connection_closed", "kandev", connection_id="conn_a", at=T0 + timedelta(minutes=2))
    row = world.row()
    assert row.connection_id == "conn_b"
    assert row.disconnected_at is None


def test_closed_event_older_than_last_contact_on_same_connection_is_ignored(world: World) -> None:
    world.apply("tools_list_observed", "kandev", connection_id="conn_a", at=T0 + timedelta(minutes=5))
    world.apply("connection_closed", "kandev", connection_id="conn_a", at=T0 + timedelta(minutes=4))
    assert world.row().disconnected_at is None


def test_close_arriving_before_the_contact_it_follows_still_marks_disconnect(world: World) -> None:
    # The close occurred after the initialize but was recorded first (e.g. relayed out of order).
    world.apply("connection_closed", "kandev", connection_id="conn_a", at=T0 + timedelta(minutes=5))
    world.apply("initialize_observed", "kandev", connection_id="conn_a", at=T0 + timedelta(minutes=4))
    row = world.row()
    assert row.status == "connected"
    assert row.connection_id == "conn_a"
    assert row.disconnected_at == T0 + timedelta(minutes=5)


def test_evidence_log_is_sorted_by_occurred_at_not_arrival(world: World) -> None:
    offsets = [7, 2, 9, 1, 5, 3]
    for n, minutes in enumerate(offsets, start=1):
        world.apply("tool_call_observed", "kandev", at=T0 + timedelta(minutes=minutes), seq=n, tool_name="t")
    times = [e.occurred_at for e in world.current.evidence]
    assert times == sorted(times)
    assert world.row().last_tool == "t"
    assert world.row().tool_call_observed_at == T0 + timedelta(minutes=9)


def test_updated_at_never_moves_backwards_for_late_older_evidence(world: World) -> None:
    world.apply("delivered", "kandev", at=T0 + timedelta(hours=1))
    world.apply("configured", "kandev", at=T0 + timedelta(minutes=1))
    assert world.current.updated_at == T0 + timedelta(hours=1)
    assert world.history.updated_at == T0 + timedelta(hours=1)


# --------------------------------------------------------------------------------------------------
# Connections: closed is detail, new connection gets its own id
# --------------------------------------------------------------------------------------------------


def test_connection_closed_is_detail_row_keeps_active_and_disconnected_at_set(world: World) -> None:
    world.apply("delivered", "kandev")
    world.apply("initialize_observed", "kandev", connection_id="conn_a")
    world.apply("tools_list_observed", "kandev", connection_id="conn_a", tool_count=4)
    closed_at = world.clock()
    world.apply("connection_closed", "kandev", connection_id="conn_a", at=closed_at)
    row = world.row()
    assert row.status == "active"
    assert row.disconnected_at == closed_at
    assert row.connection_id == "conn_a"


def test_newer_contact_on_new_connection_clears_disconnect_and_takes_new_id(world: World) -> None:
    world.apply("tools_list_observed", "kandev", connection_id="conn_a")
    world.apply("connection_closed", "kandev", connection_id="conn_a")
    assert world.row().disconnected_at is not None
    seen = world.clock()
    world.apply("initialize_observed", "kandev", connection_id="conn_b", at=seen)
    row = world.row()
    assert row.status == "active"
    assert row.disconnected_at is None
    assert row.connection_id == "conn_b"
    assert row.connection_seen_at == seen


def test_later_contact_on_same_connection_clears_disconnect(world: World) -> None:
    world.apply("initialize_observed", "kandev", connection_id="conn_a", at=T0 + timedelta(minutes=1))
    world.apply("connection_closed", "kandev", connection_id="conn_a", at=T0 + timedelta(minutes=2))
    world.apply("tool_call_observed", "kandev", connection_id="conn_a", at=T0 + timedelta(minutes=3))
    row = world.row()
    assert (row.connection_id, row.disconnected_at) == ("conn_a", None)
    assert row.connection_seen_at == T0 + timedelta(minutes=3)


def test_modern_stateless_contact_invents_no_connection(world: World) -> None:
    world.apply("initialize_observed", "kandev", era="modern", protocol_version="2026-07-28")
    world.apply("tools_list_observed", "kandev", era="modern", tool_count=2)
    row = world.row()
    assert row.status == "active"
    assert (row.connection_id, row.connection_seen_at, row.disconnected_at) == (None, None, None)
    assert row.era == "modern"


def test_close_without_connection_id_sets_nothing(world: World) -> None:
    world.apply("tools_list_observed", "kandev", era="modern")
    world.apply("connection_closed", "kandev")
    assert world.row().disconnected_at is None


# --------------------------------------------------------------------------------------------------
# Endpoint tests never change status
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "status"),
    [
        pytest.param(["delivered"], "delivered", id="endpoint_test_failure_does_not_fail_delivered_row"),
        pytest.param(["delivered", "explicit_error"], "failed", id="endpoint_test_success_does_not_heal_failed_row"),
        pytest.param(
            ["delivered", "tools_list_observed"], "active", id="endpoint_test_failure_does_not_lower_active_row"
        ),
    ],
)
@pytest.mark.parametrize("succeeded", [True, False], ids=["succeeded", "failed"])
def test_endpoint_test_result_is_stored_beside_row_and_never_changes_status(
    world: World, setup: list[str], status: str, succeeded: bool
) -> None:
    for kind in setup:
        world.apply(kind, "kandev", **KIND_FIELDS[kind])
    before = world.row().status
    assert before == status
    result = EndpointTestResult(succeeded=succeeded, tested_at=world.clock(), reason_code=None if succeeded else "x")
    assert reducer.record_endpoint_test(world.history, world.current.attempt_id, "kandev", result) is True
    row = world.row()
    assert row.endpoint_test == result
    assert row.status == status == reducer.derive_status(row)


def test_endpoint_test_for_unknown_row_or_attempt_is_not_stored(world: World) -> None:
    result = EndpointTestResult(succeeded=True, tested_at=T0)
    assert reducer.record_endpoint_test(world.history, world.current.attempt_id, "nope", result) is False
    assert reducer.record_endpoint_test(world.history, "att_missing", "kandev", result) is False
    assert world.current.servers == []


# --------------------------------------------------------------------------------------------------
# Attempts: supersession, attribution, rejection
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("origin", ["session_new", "session_load", "reset", "passthrough_start"])
def test_new_attempt_supersedes_current_at_once_before_any_delivery(world: World, origin: str) -> None:
    old_id = world.current.attempt_id
    world.apply("delivered", "kandev")
    world.apply("tools_list_observed", "kandev", connection_id="c", tool_count=5, catalog=catalog("a", "b"))
    assert world.row().catalog is not None
    new_id = world.begin(origin)
    current = world.current
    assert current.attempt_id == new_id
    assert current.origin == origin
    assert current.servers == []  # nothing delivered for it yet, and it is already current
    assert current.superseded_at is None
    previous = world.history.previous[0]
    assert previous.attempt_id == old_id
    assert previous.superseded_at == current.started_at
    assert [e.kind for e in previous.evidence][-1] == "attempt_superseded"
    old_row = world.row("kandev", previous)
    assert old_row.catalog is None
    assert old_row.tool_count == 5
    assert old_row.status == "active"  # history keeps what the old attempt achieved


def test_reset_supersedes_active_attempt_before_delivery_so_old_green_is_not_current(world: World) -> None:
    world.apply("tools_list_observed", "kandev", tool_count=1)
    world.begin("reset")
    assert reducer.find_row(world.current, "kandev") is None
    # a reset that then fails leaves the current attempt with a session error, not old green evidence
    world.apply("explicit_error", None, reason_code="reset_failed")
    assert world.current.servers == []
    assert world.current.session_error is not None


def test_evidence_for_superseded_attempt_lands_there_and_never_touches_current(world: World) -> None:
    old_id = world.current.attempt_id
    world.apply("delivered", "kandev")
    world.begin("reset")
    world.apply("delivered", "kandev")
    current_before = encode(world.current)
    for kind in ("initialize_observed", "tools_list_observed", "tool_call_observed", "explicit_error"):
        assert world.apply(kind, "kandev", attempt=old_id, **KIND_FIELDS[kind]) == "applied"
    assert world.apply("explicit_error", None, attempt=old_id, reason_code="late") == "applied"
    assert encode(world.current) == current_before
    old = world.history.previous[0]
    old_row = world.row("kandev", old)
    assert old_row.status == "failed"
    assert old_row.catalog is None  # superseded attempts never take a catalog
    assert old_row.tool_count == 3
    assert old.session_error is not None
    assert world.row().status == "delivered"


def test_superseded_event_catalog_is_stripped_even_on_the_event(world: World) -> None:
    old_id = world.current.attempt_id
    world.begin()
    event = world.event("tools_list_observed", "kandev", attempt=old_id, tool_count=2, catalog=catalog("a", "b"))
    assert reducer.apply(world.history, event) == "applied"
    logged = [e for e in world.history.previous[0].evidence if e.kind == "tools_list_observed"]
    assert logged and all(e.catalog is None for e in logged)


def test_attempt_no_longer_kept_fourth_back_is_rejected_and_counted(world: World) -> None:
    first = world.current.attempt_id
    world.begin()
    world.begin()
    assert reducer.find_attempt(world.history, first) is not None  # third back: still kept
    world.begin()
    assert reducer.find_attempt(world.history, first) is None
    snapshot = encode(world.history)
    assert world.apply("tools_list_observed", "kandev", attempt=first) == "unknown_attempt"
    assert world.history.rejected_events == 1
    after = decode_history(encode(world.history))
    after.rejected_events = 0
    assert encode(after) == snapshot


def test_evidence_for_never_seen_attempt_is_rejected_and_counted(world: World) -> None:
    assert world.apply("delivered", "kandev", attempt="att_forged") == "unknown_attempt"
    assert world.history.rejected_events == 1
    assert world.current.servers == []


def test_evidence_before_any_attempt_is_rejected() -> None:
    w = World()
    assert w.apply("delivered", "kandev", attempt="att_1") == "unknown_attempt"
    assert w.history.current is None
    assert w.history.rejected_events == 1


@pytest.mark.parametrize(
    "override",
    [
        pytest.param({"execution_id": "exec_other"}, id="foreign_execution_id_rejected"),
        pytest.param({"instance_id": "inst_other"}, id="foreign_instance_rejected"),
        pytest.param({"execution_id": "exec_other", "instance_id": "inst_other"}, id="foreign_both_rejected"),
    ],
)
def test_evidence_from_foreign_execution_is_rejected_and_counted(world: World, override: dict[str, str]) -> None:
    before = encode(world.current)
    assert world.apply("tools_list_observed", "kandev", seq=5, **override) == "foreign_execution"
    assert world.history.rejected_events == 1
    assert world.history.last_seq == 0  # a foreign seq never advances ours
    assert encode(world.current) == before


# --------------------------------------------------------------------------------------------------
# Bounds
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attempts", [1, 2, 3, 4, 7])
def test_at_most_three_attempts_kept_current_plus_two_previous_newest_first(attempts: int) -> None:
    w = World()
    ids = [w.begin() for _ in range(attempts)]
    kept = [w.current.attempt_id] + [a.attempt_id for a in w.history.previous]
    assert len(kept) == min(attempts, MAX_ATTEMPTS)
    assert kept == list(reversed(ids))[:MAX_ATTEMPTS]
    assert all(a.superseded_at is not None for a in w.history.previous)


@pytest.mark.parametrize("extra", [0, 1, 10])
def test_at_most_64_events_per_attempt_oldest_dropped_and_drop_counted(world: World, extra: int) -> None:
    total = MAX_EVENTS_PER_ATTEMPT + extra
    # Arrive newest first so "oldest" cannot be confused with "first to arrive".
    times = [T0 + timedelta(seconds=i) for i in range(total)]
    for n, t in enumerate(reversed(times), start=1):
        assert world.apply("tool_call_observed", "kandev", at=t, seq=n) == "applied"
    attempt = world.current
    assert len(attempt.evidence) == MAX_EVENTS_PER_ATTEMPT
    assert attempt.dropped_events == extra
    assert [e.occurred_at for e in attempt.evidence] == times[extra:]
    assert world.row().tool_calls == total  # counters keep the full count


def test_supersede_event_counts_against_the_bound_of_the_old_attempt(world: World) -> None:
    for _ in range(MAX_EVENTS_PER_ATTEMPT):
        world.apply("tool_call_observed", "kandev")
    world.begin()
    old = world.history.previous[0]
    assert len(old.evidence) == MAX_EVENTS_PER_ATTEMPT
    assert old.dropped_events == 1
    assert old.evidence[-1].kind == "attempt_superseded"


# --------------------------------------------------------------------------------------------------
# Duplicates, enrichment, counters
# --------------------------------------------------------------------------------------------------


def test_duplicate_seq_is_ignored(world: World) -> None:
    assert world.apply("tool_call_observed", "kandev", seq=1, outcome="error") == "applied"
    before = encode(world.history)
    assert world.apply("tool_call_observed", "kandev", seq=1, outcome="error") == "duplicate"
    assert world.apply("explicit_error", "kandev", seq=1) == "duplicate"
    assert encode(world.history) == before
    assert world.history.rejected_events == 0
    assert world.row().tool_calls == 1
    assert world.history.last_seq == 1


def test_rejected_event_resent_with_same_seq_is_a_duplicate_not_a_second_rejection(world: World) -> None:
    assert world.apply("delivered", "kandev", attempt="att_gone", seq=4) == "unknown_attempt"
    assert world.apply("delivered", "kandev", attempt="att_gone", seq=4) == "duplicate"
    assert world.history.rejected_events == 1


def test_seq_zero_is_unsequenced_and_never_treated_as_duplicate(world: World) -> None:
    world.apply("tool_call_observed", "kandev", seq=0)
    world.apply("tool_call_observed", "kandev", seq=0)
    assert world.row().tool_calls == 2


def test_tool_calls_enrich_active_row_without_changing_status(world: World) -> None:
    world.apply("initialize_observed", "kandev", connection_id="c", era="legacy")
    world.apply("tools_list_observed", "kandev", connection_id="c", tool_count=2)
    before = world.row().status
    for name in ("create_task", "get_task"):
        world.apply("tool_call_observed", "kandev", connection_id="c", tool_name=name, outcome="ok")
        assert world.row().status == before == "active"
    row = world.row()
    assert (row.tool_calls, row.tool_errors, row.last_tool) == (2, 0, "get_task")
    assert row.era == "legacy"


def test_count_refusal_aggregates_by_route_method_and_status(world: World) -> None:
    calls = [
        ("/mcp", "POST", 401),
        ("/mcp", "POST", 401),
        ("/mcp", "GET", 401),
        ("/mcp", "POST", 403),
        ("/sse", "GET", 401),
        ("/mcp", "POST", 401),
    ]
    for route, method, status in calls:
        reducer.count_refusal(world.history, route, method, status)
    assert world.history.http_refusals == [
        RefusalCount(route="/mcp", method="POST", status=401, count=3),
        RefusalCount(route="/mcp", method="GET", status=401, count=1),
        RefusalCount(route="/mcp", method="POST", status=403, count=1),
        RefusalCount(route="/sse", method="GET", status=401, count=1),
    ]
    assert world.current.servers == []  # refusals are reachability detail, never row evidence


def test_configured_evidence_records_sanitized_target_and_transport(world: World) -> None:
    world.apply("configured", "github", source="profile", transport="stdio", target="github-mcp")
    row = world.row("github")
    assert (row.status, row.source, row.transport, row.target) == ("configured", "profile", "stdio", "github-mcp")


def test_history_round_trips_through_contract_json(world: World) -> None:
    world.apply("configured", "kandev", source="builtin", transport="http", target="http://127.0.0.1:1")
    world.apply("tools_list_observed", "kandev", connection_id="c", tool_count=2, catalog=catalog("a", "b"))
    world.begin()
    world.apply("explicit_error", None, reason_code="x")
    reducer.count_refusal(world.history, "/mcp", "POST", 401)
    assert decode_history(encode(world.history)) == world.history


# --------------------------------------------------------------------------------------------------
# Properties over random event sequences
# --------------------------------------------------------------------------------------------------

SERVERS = ("kandev", "github", "linear")
ROW_KINDS = (*KIND_FIELDS, "connection_closed")
CONNS = ("conn_a", "conn_b", None)

row_event = st.fixed_dictionaries(
    {
        "op": st.just("event"),
        "back": st.sampled_from([0, 0, 0, 1, 2, 3]),  # 0 = current; 3 = no longer kept
        "kind": st.sampled_from(ROW_KINDS),
        "server": st.sampled_from(SERVERS),
        "minutes": st.integers(0, 240),
        "conn": st.sampled_from(CONNS),
        "outcome": st.sampled_from(["ok", "error"]),
        "dup": st.booleans(),
    }
)
attempt_event = st.fixed_dictionaries(
    {
        "op": st.just("attempt_event"),
        "back": st.sampled_from([0, 1, 2]),
        "kind": st.sampled_from(["session_accepted", "explicit_error"]),
        "minutes": st.integers(0, 240),
    }
)
begin = st.fixed_dictionaries({"op": st.just("begin")})
foreign = st.fixed_dictionaries({"op": st.just("foreign"), "minutes": st.integers(0, 240)})
ops = st.lists(
    st.one_of(row_event, row_event, row_event, attempt_event, begin, foreign), min_size=1, max_size=120
)


def _fields_for(op: dict[str, Any]) -> dict[str, Any]:
    kind = op["kind"]
    fields: dict[str, Any] = {}
    if kind in ("initialize_observed", "tools_list_observed", "tool_call_observed", "connection_closed"):
        fields["connection_id"] = op["conn"]
    if kind == "tools_list_observed":
        fields["tool_count"] = op["minutes"] % 7
        fields["catalog"] = catalog("t")
    if kind == "tool_call_observed":
        fields["outcome"] = op["outcome"]
        fields["tool_name"] = "t"
    if kind in ("explicit_error", "filtered", "unavailable"):
        fields["reason_code"] = kind
    if kind == "initialize_observed":
        fields["client"] = ClientInfo(name=f"c{op['minutes']}")
    return fields


def _attempt_ids(history: AttachmentHistory) -> list[str]:
    ids = [history.current.attempt_id] if history.current else []
    return ids + [a.attempt_id for a in history.previous]


def _check_invariants(
    history: AttachmentHistory, seen_kinds: dict[tuple[str, str], list[tuple[str, datetime]]]
) -> None:
    assert len(history.previous) <= MAX_ATTEMPTS - 1
    attempts = ([history.current] if history.current else []) + history.previous
    assert len({a.attempt_id for a in attempts}) == len(attempts)
    for n, attempt in enumerate(attempts):
        assert (attempt.superseded_at is None) == (n == 0)
        assert len(attempt.evidence) <= MAX_EVENTS_PER_ATTEMPT
        keys = [(e.occurred_at, e.seq) for e in attempt.evidence]
        assert keys == sorted(keys)
        if n > 0:
            assert all(r.catalog is None for r in attempt.servers)
        for row in attempt.servers:
            assert row.status == reducer.derive_status(row)
            assert row.status == expected_status(seen_kinds[(attempt.attempt_id, row.name)])
            assert row.tool_errors <= row.tool_calls
            if row.disconnected_at is not None:
                assert row.connection_id is not None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_random_sequences_keep_bounds_status_and_superseded_isolation(sequence: list[dict[str, Any]]) -> None:
    w = World()
    w.begin()
    seen_kinds: dict[tuple[str, str], list[tuple[str, datetime]]] = {}
    all_ids: list[str] = [w.current.attempt_id]
    seq = 0
    rejected = 0
    for op in sequence:
        if op["op"] == "begin":
            all_ids.append(w.begin())
            _check_invariants(w.history, seen_kinds)
            continue
        at = T0 + timedelta(minutes=op["minutes"])
        if op["op"] == "foreign":
            before = encode(w.history)
            assert reducer.apply(w.history, w.event("delivered", "kandev", at=at, execution_id="x")) == (
                "foreign_execution"
            )
            rejected += 1
            after = decode_history(encode(w.history))
            after.rejected_events -= 1
            assert encode(after) == before
            continue
        back = min(op["back"], len(all_ids) - 1)
        attempt_id = all_ids[-1 - back]
        kept = attempt_id in _attempt_ids(w.history)
        is_current = attempt_id == w.current.attempt_id
        server = op.get("server")
        fields = _fields_for(op) if server else ({"reason_code": "s"} if op["kind"] == "explicit_error" else {})
        seq += 1
        event = w.event(op["kind"], server, attempt=attempt_id, at=at, seq=seq, **fields)
        current_before = encode(w.current)
        result = reducer.apply(w.history, event)
        if not kept:
            assert result == "unknown_attempt"
            rejected += 1
        else:
            assert result == "applied"
            if server is not None:
                seen_kinds.setdefault((attempt_id, server), []).append((op["kind"], at))
        if not is_current:
            assert encode(w.current) == current_before
        if op.get("dup"):
            snapshot = encode(w.history)
            assert reducer.apply(w.history, event) == "duplicate"
            assert encode(w.history) == snapshot
        _check_invariants(w.history, seen_kinds)
    assert w.history.rejected_events == rejected
    assert decode_history(encode(w.history)) == w.history


# Events for one attempt with distinct occurrence times: the folded result must not depend on the order
# they arrived in (a late-arriving older observation never overrides a newer one).
single_attempt_events = st.lists(
    st.fixed_dictionaries(
        {
            "kind": st.sampled_from([*ROW_KINDS, "attempt_explicit_error", "session_accepted"]),
            "server": st.sampled_from(SERVERS[:2]),
            "conn": st.sampled_from(CONNS),
            "outcome": st.sampled_from(["ok", "error"]),
            "minutes": st.integers(0, 10_000),
        }
    ),
    min_size=1,
    max_size=30,
    unique_by=lambda d: d["minutes"],
)


def _fold(w_events: list[dict[str, Any]]) -> bytes:
    w = World()
    w.begin()
    for op in w_events:
        at = T0 + timedelta(minutes=op["minutes"])
        kind = op["kind"]
        if kind == "attempt_explicit_error":
            w.apply("explicit_error", None, at=at, reason_code=f"r{op['minutes']}")
        elif kind == "session_accepted":
            w.apply("session_accepted", None, at=at, acp_session_id=f"acp{op['minutes']}")
        else:
            fields = _fields_for(op)
            if kind in ("explicit_error", "filtered", "unavailable"):
                fields["summary"] = f"{kind}{op['minutes']}"
            w.apply(kind, op["server"], at=at, **fields)
    attempt = w.current
    attempt.servers.sort(key=lambda r: r.name)
    for row in attempt.servers:
        row.era = None  # era mixes kinds on purpose (first tool-call era is kept); not an ordering rule
    return encode(attempt)


@settings(max_examples=150, deadline=None)
@given(single_attempt_events, st.randoms(use_true_random=False))
def test_occurrence_order_beats_arrival_order_for_any_permutation(
    events: list[dict[str, Any]], rnd: Any
) -> None:
    shuffled = list(events)
    rnd.shuffle(shuffled)
    by_time = sorted(events, key=lambda d: d["minutes"])
    assert _fold(shuffled) == _fold(by_time)



def test_catalog_is_kept_once_on_the_row_not_in_every_logged_event(world: World) -> None:
    catalog = ToolCatalog(tools=[ToolSummary(name="get_task", description="d" * 500)])
    for _ in range(70):
        assert world.apply("tools_list_observed", "kandev", tool_count=1, catalog=catalog) == "applied"
    assert world.row().catalog == catalog and world.row().tool_count == 1
    assert all(e.catalog is None for e in world.current.evidence)
    assert len(encode(world.history)) < 40_000
