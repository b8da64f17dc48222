"""Which evidence is current: a failure only while it is the newest attachment observation of its row, and a
closed legacy connection never as the row's live connection, whatever came later and in whatever order.

Table-driven over the pure reducer: each case is a list of (minute, kind, fields) observations of one row,
folded in every arrival order, so a late-arriving older observation can never decide the outcome.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest

from agentctl.evidence import reducer
from agentctl.evidence.contract.report import MAX_CONNECTIONS_PER_ROW, ClientInfo, EndpointTestResult, ErrorSummary
from tests.evidence.fixed import T0
from tests.evidence.test_reducer import World, catalog, expected_status

Obs = tuple[int, str, dict[str, Any]]

INIT_FAILED: dict[str, Any] = {"reason_code": "initialize_failed", "summary": "the initialize request failed (x)"}
LIST_FAILED: dict[str, Any] = {"reason_code": "tools_list_failed", "summary": "the tools/list request failed (x)"}
SESSION_REFUSED: dict[str, Any] = {"reason_code": "session_rejected", "summary": "server kandev unreachable"}
LEGACY_A: dict[str, Any] = {"connection_id": "conn_a", "era": "legacy", "client": ClientInfo(name="legacy")}
MODERN: dict[str, Any] = {"era": "modern", "protocol_version": "2026-07-28", "client": ClientInfo(name="modern")}
LIST: dict[str, Any] = {"tool_count": 2, "catalog": catalog("a", "b")}


def _fold(observations: list[Obs], order: tuple[int, ...]) -> World:
    w = World()
    w.begin()
    w.apply("configured", "kandev", at=T0, source="builtin")
    w.apply("delivered", "kandev", at=T0, transport="http")
    for i in order:
        minute, kind, fields = observations[i]
        assert w.apply(kind, "kandev", at=T0 + timedelta(minutes=minute), **fields) == "applied"
    return w


def _orders(observations: list[Obs]) -> list[tuple[int, ...]]:
    return list(itertools.permutations(range(len(observations))))


# --------------------------------------------------------------------------------------------------
# A failure is current only while it is the row's most recent attachment observation
# --------------------------------------------------------------------------------------------------

# (observations, status, reason shown on the row, last failure kept as detail)
FAILURE_CASES = [
    pytest.param([(1, "tools_list_observed", LIST), (2, "explicit_error", LIST_FAILED)],
                 "failed", "tools_list_failed", "tools_list_failed", id="failure_after_success_is_failed"),
    pytest.param([(1, "explicit_error", INIT_FAILED), (2, "initialize_observed", LEGACY_A)],
                 "connected", None, "initialize_failed", id="malformed_initialize_then_valid_initialize_is_connected"),
    pytest.param([(1, "explicit_error", INIT_FAILED), (2, "initialize_observed", LEGACY_A),
                  (3, "tools_list_observed", LIST)],
                 "active", None, "initialize_failed", id="malformed_initialize_then_a_client_lists_tools_is_active"),
    pytest.param([(1, "initialize_observed", MODERN), (2, "explicit_error", LIST_FAILED),
                  (3, "tools_list_observed", {**LIST, "era": "modern"})],
                 "active", None, "tools_list_failed", id="bad_cursor_then_valid_tools_list_is_active"),
    pytest.param([(1, "tools_list_observed", LIST), (2, "explicit_error", LIST_FAILED),
                  (3, "initialize_observed", LEGACY_A)],
                 "active", None, "tools_list_failed", id="recovery_restores_the_strongest_success_not_the_newest"),
    pytest.param([(1, "tools_list_observed", LIST), (2, "explicit_error", LIST_FAILED),
                  (3, "tool_call_observed", {"tool_name": "a", "outcome": "ok"})],
                 "active", None, "tools_list_failed", id="a_tool_call_after_the_failure_is_contact_too"),
    pytest.param([(1, "tools_list_observed", LIST), (2, "explicit_error", LIST_FAILED),
                  (3, "tool_call_observed", {"tool_name": "a", "outcome": "error"})],
                 "active", None, "tools_list_failed", id="a_tool_error_after_the_failure_still_proves_contact"),
    pytest.param([(1, "tools_list_observed", LIST), (2, "explicit_error", LIST_FAILED),
                  (2, "initialize_observed", LEGACY_A)],
                 "failed", "tools_list_failed", "tools_list_failed", id="a_contact_at_the_same_instant_keeps_it_failed"),
    pytest.param([(1, "explicit_error", INIT_FAILED), (2, "tools_list_observed", LIST),
                  (3, "explicit_error", LIST_FAILED)],
                 "failed", "tools_list_failed", "tools_list_failed", id="a_newer_failure_after_recovery_is_failed_again"),
    pytest.param([(1, "explicit_error", INIT_FAILED), (2, "tools_list_observed", LIST),
                  (3, "connection_closed", {"connection_id": "conn_a"})],
                 "active", None, "initialize_failed", id="a_close_after_recovery_changes_nothing"),
    pytest.param([(1, "tools_list_observed", {**LIST, **LEGACY_A}), (2, "explicit_error", LIST_FAILED),
                  (3, "connection_closed", {"connection_id": "conn_a"})],
                 "failed", "tools_list_failed", "tools_list_failed", id="a_close_is_not_contact_and_never_recovers"),
    pytest.param([(1, "explicit_error", SESSION_REFUSED)],
                 "failed", "session_rejected", "session_rejected", id="a_failure_with_no_contact_is_failed"),
]


@pytest.mark.parametrize(("observations", "status", "reason", "kept"), FAILURE_CASES)
def test_a_failure_is_current_only_while_it_is_the_newest_attachment_observation_in_every_arrival_order(
    observations: list[Obs], status: str, reason: str | None, kept: str
) -> None:
    newest_failure = max(m for m, kind, _ in observations if kind == "explicit_error")
    for order in _orders(observations):
        row = _fold(observations, order).row()
        assert row.status == status == reducer.derive_status(row), order
        assert row.reason_code == reason, order
        # The failure stays visible as detail, current or not: its time, reason and summary.
        assert row.failed_at == T0 + timedelta(minutes=newest_failure)
        assert row.last_failure is not None and row.last_failure.reason_code == kept
        assert row.last_failure.summary
    assert expected_status((kind, T0 + timedelta(minutes=m)) for m, kind, _ in observations) == status


def test_a_failure_without_a_reason_keeps_a_stable_code_as_detail(world: World) -> None:
    world.apply("explicit_error", "kandev", at=T0 + timedelta(minutes=1))
    row = world.row()
    assert (row.status, row.reason_code, row.last_failure) == (
        "failed", reducer.ATTACHMENT_ERROR, ErrorSummary(reason_code=reducer.ATTACHMENT_ERROR))
    world.apply("initialize_observed", "kandev", at=T0 + timedelta(minutes=2))
    assert (world.row().status, world.row().reason_code) == ("connected", None)


@pytest.mark.parametrize("other", ["session_error", "endpoint_test", "tool_error", "close"])
def test_nothing_but_a_server_specific_attachment_error_makes_a_row_failed(world: World, other: str) -> None:
    world.apply("tools_list_observed", "kandev", at=T0 + timedelta(minutes=1), connection_id="conn_a", **LIST)
    later = T0 + timedelta(minutes=2)
    if other == "session_error":
        world.apply("explicit_error", None, at=later, **SESSION_REFUSED)
    elif other == "endpoint_test":
        failed = EndpointTestResult(succeeded=False, tested_at=later, reason_code="connect_failed")
        assert reducer.record_endpoint_test(world.history, world.current.attempt_id, "kandev", failed)
    elif other == "tool_error":
        world.apply("tool_call_observed", "kandev", at=later, tool_name="a", outcome="error", connection_id="conn_a")
    else:
        world.apply("connection_closed", "kandev", at=later, connection_id="conn_a")
    row = world.row()
    assert (row.status, row.failed_at, row.last_failure) == ("active", None, None)


def test_a_filter_reason_never_replaces_a_failure_and_a_recovered_row_shows_no_reason(world: World) -> None:
    world.apply("explicit_error", "kandev", at=T0 + timedelta(minutes=1), **INIT_FAILED)
    world.apply("filtered", "kandev", at=T0 + timedelta(minutes=2), reason_code="no_supported_transport")
    assert (world.row().status, world.row().reason_code) == ("failed", "initialize_failed")
    world.apply("tools_list_observed", "kandev", at=T0 + timedelta(minutes=3), **LIST)
    world.apply("filtered", "kandev", at=T0 + timedelta(minutes=4), reason_code="no_supported_transport")
    row = world.row()
    assert (row.status, row.reason_code, row.summary) == ("active", None, None)
    assert row.last_failure is not None and row.last_failure.reason_code == "initialize_failed"


# --------------------------------------------------------------------------------------------------
# A closed connection is never shown as the current one
# --------------------------------------------------------------------------------------------------

CLOSE_A: dict[str, Any] = {"connection_id": "conn_a", "era": "legacy"}
LEGACY_B: dict[str, Any] = {"connection_id": "conn_b", "era": "legacy", "client": ClientInfo(name="legacy-b")}
CLOSE_B: dict[str, Any] = {"connection_id": "conn_b", "era": "legacy"}

# (observations, connection_id, minute of disconnected_at or None)
CONNECTION_CASES = [
    pytest.param([(1, "tools_list_observed", {**LIST, **LEGACY_A}), (2, "connection_closed", CLOSE_A),
                  (3, "tools_list_observed", {**LIST, **MODERN})],
                 "conn_a", 2, id="legacy_closed_then_modern_contact_keeps_the_close"),
    pytest.param([(1, "initialize_observed", LEGACY_A), (3, "connection_closed", CLOSE_A),
                  (2, "tool_call_observed", {"tool_name": "a", "outcome": "ok", **MODERN})],
                 "conn_a", 3, id="modern_contact_before_the_close_does_not_hide_it"),
    pytest.param([(1, "initialize_observed", LEGACY_A), (2, "connection_closed", CLOSE_A),
                  (3, "initialize_observed", MODERN)],
                 "conn_a", 2, id="a_close_counts_against_its_connections_contact_not_a_later_modern_one"),
    pytest.param([(1, "initialize_observed", LEGACY_A), (2, "connection_closed", CLOSE_A),
                  (3, "initialize_observed", MODERN), (4, "initialize_observed", LEGACY_B)],
                 "conn_b", None, id="a_new_legacy_connection_is_current_and_open"),
    pytest.param([(1, "initialize_observed", LEGACY_A), (2, "initialize_observed", LEGACY_B),
                  (3, "connection_closed", CLOSE_A), (4, "initialize_observed", MODERN)],
                 "conn_b", None, id="closing_an_older_connection_leaves_the_newer_one_current"),
    pytest.param([(1, "initialize_observed", LEGACY_A), (2, "connection_closed", CLOSE_A),
                  (3, "tools_list_observed", {**LIST, **LEGACY_A})],
                 "conn_a", None, id="contact_on_the_same_connection_after_its_close_reopens_it"),
    pytest.param([(1, "initialize_observed", MODERN), (2, "tools_list_observed", {**LIST, **MODERN}),
                  (3, "connection_closed", {"era": "modern"})],
                 None, None, id="modern_contact_alone_has_no_connection_and_no_close"),
    pytest.param([(1, "tools_list_observed", {**LIST, **LEGACY_A}), (2, "initialize_observed", LEGACY_B),
                  (3, "connection_closed", CLOSE_B)],
                 "conn_a", None, id="a_second_connection_that_opened_and_closed_leaves_the_agents_own_open"),
    pytest.param([(1, "tools_list_observed", {**LIST, **LEGACY_A}), (2, "initialize_observed", LEGACY_B),
                  (3, "connection_closed", CLOSE_B), (4, "connection_closed", CLOSE_A)],
                 "conn_a", 4, id="disconnected_only_when_the_last_open_connection_closes"),
]


@pytest.mark.parametrize(("observations", "connection", "closed"), CONNECTION_CASES)
def test_a_closed_connection_is_detail_never_the_current_one_in_every_arrival_order(
    observations: list[Obs], connection: str | None, closed: int | None
) -> None:
    for order in _orders(observations):
        row = _fold(observations, order).row()
        assert row.connection_id == connection, order
        assert row.disconnected_at == (T0 + timedelta(minutes=closed) if closed is not None else None), order
        assert row.status in ("connected", "active"), "a close never lowers the status"


def test_a_modern_contact_after_a_legacy_close_is_row_evidence_without_a_connection(world: World) -> None:
    world.apply("initialize_observed", "kandev", at=T0 + timedelta(minutes=1), **LEGACY_A)
    world.apply("tools_list_observed", "kandev", at=T0 + timedelta(minutes=2), **LIST, **LEGACY_A)
    world.apply("connection_closed", "kandev", at=T0 + timedelta(minutes=3), **CLOSE_A)
    world.apply("initialize_observed", "kandev", at=T0 + timedelta(minutes=4), **MODERN)
    world.apply("tools_list_observed", "kandev", at=T0 + timedelta(minutes=5), **LIST, **MODERN)
    row = world.row()
    assert (row.status, row.era, row.client) == ("active", "modern", ClientInfo(name="modern"))
    assert row.tools_list_observed_at == T0 + timedelta(minutes=5)
    # The legacy connection is history: its id, its last contact and its close, all older than the contact.
    assert (row.connection_id, row.connection_seen_at, row.disconnected_at) == (
        "conn_a", T0 + timedelta(minutes=2), T0 + timedelta(minutes=3))


def test_connections_tracked_per_row_stay_bounded_and_an_open_one_outlives_every_closed_one(world: World) -> None:
    world.apply("initialize_observed", "kandev", at=T0 + timedelta(minutes=1), **LEGACY_A)
    for n in range(2, 30):  # a client reconnecting over and over with the same token
        conn = {"connection_id": f"conn_x{n:02d}", "era": "legacy"}
        world.apply("initialize_observed", "kandev", at=T0 + timedelta(minutes=n), **conn)
        world.apply("connection_closed", "kandev", at=T0 + timedelta(minutes=n, seconds=30), **conn)
    row = world.row()
    assert len(row.connections) == MAX_CONNECTIONS_PER_ROW
    assert (row.connection_id, row.disconnected_at) == ("conn_a", None), "the agent's own connection is still open"
