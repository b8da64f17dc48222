"""Agent-reported evidence in the pure reducer and in the display derivation (agentctl.present.rows).

The rules: host-observed evidence always outranks a report about the same server; a reported failure naming
a delivered server is an explicit agent error; a reported connection with tools is the strongest state a
third-party row can reach, labelled as reported; when report and observation disagree both are shown; among
reports the newest wins (at one instant a failure), in every arrival order; a report never creates a row.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from agentctl.evidence import reducer
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import decode_history
from agentctl.evidence.display import DELIVERED_LABEL, reporter_name
from agentctl.present.rows import row_view
from tests.evidence.fixed import T0
from tests.evidence.test_reducer import World, catalog

CLAUDE = "claude:stream-json-init"
CODEX = "codex:app-server"


def at(minutes: int):
    return T0 + timedelta(minutes=minutes)


def report(state: str, source: str = CLAUDE, **fields: Any) -> tuple[str, dict[str, Any]]:
    return "agent_reported", {"reported_state": state, "report_source": source, **fields}


DELIVERED = ("delivered", {"transport": "http"})
INIT = ("initialize_observed", {"era": "modern"})
LISTED = ("tools_list_observed", {"era": "modern", "tool_count": 3, "catalog": catalog("a", "b", "c")})
HOST_ERROR = ("explicit_error", {"reason_code": "session_rejected", "summary": "refused by the agent"})
FILTERED = ("filtered", {"reason_code": "policy_denied", "summary": "executor policy does not allow http"})

# (events as (minute, kind, fields), status, status_source, reason_code, label, disagreement)
CASES = [
    pytest.param([(1, *DELIVERED), (2, *report("connected", tool_count=2))],
                 "active", "reported", None, "active · reported by Claude Code", None,
                 id="a_reported_connection_with_tools_is_active_labelled_as_reported"),
    pytest.param([(1, *DELIVERED), (2, *report("connected", CODEX))],
                 "connected", "reported", None, "connected · reported by Codex", None,
                 id="a_reported_connection_without_a_tool_list_is_connected_not_active"),
    pytest.param([(1, *DELIVERED), (2, *report("connected", tool_count=0))],
                 "connected", "reported", None, "connected · reported by Claude Code", None,
                 id="a_reported_connection_with_zero_tools_is_connected_not_active"),
    pytest.param([(1, *DELIVERED), (2, *report("failed"))],
                 "failed", "reported", "agent_reported_failed", "failed · reported by Claude Code", None,
                 id="a_reported_failure_of_a_delivered_server_is_an_explicit_agent_error"),
    pytest.param([(1, *DELIVERED), (2, *report("needs_auth", raw_state="needs-auth"))],
                 "failed", "reported", "agent_reported_needs_auth", "failed · reported by Claude Code", None,
                 id="a_reported_need_for_authentication_fails_the_row_with_its_own_reason"),
    pytest.param([(1, *DELIVERED), (2, *report("failed", CODEX, reason_code="agent_reported_failed",
                                               summary="MCP client for `github` failed to start"))],
                 "failed", "reported", "agent_reported_failed", "failed · reported by Codex", None,
                 id="a_reported_failure_shows_its_sanitized_summary_as_the_rows_reason"),
    *[pytest.param([(1, *DELIVERED), (2, *report(state, raw_state="weird"))],
                   "delivered", "observed", None, DELIVERED_LABEL, None,
                   id=f"a_reported_{state}_state_is_detail_and_the_row_stays_delivered")
      for state in ("pending", "disabled", "cancelled", "unknown")],
    pytest.param([(1, *DELIVERED), (2, *LISTED), (3, *report("failed"))],
                 "active", "observed", None, "active", "agentctl observed active; Claude Code reported failed",
                 id="an_observed_active_row_stays_active_when_the_agent_later_reports_it_failed_and_both_show"),
    pytest.param([(1, *DELIVERED), (2, *report("failed")), (3, *LISTED)],
                 "active", "observed", None, "active", "agentctl observed active; Claude Code reported failed",
                 id="an_observation_after_a_reported_failure_outranks_it"),
    pytest.param([(1, *DELIVERED), (2, *INIT), (3, *report("connected", tool_count=5))],
                 "connected", "observed", None, "connected", None,
                 id="an_observed_connection_outranks_a_stronger_reported_state"),
    pytest.param([(1, *DELIVERED), (2, *HOST_ERROR), (3, *report("connected", tool_count=5))],
                 "failed", "observed", "session_rejected", "failed",
                 "agentctl observed failed; Claude Code reported connected",
                 id="a_report_of_connection_never_clears_an_observed_failure"),
    pytest.param([(1, *DELIVERED), (2, *report("failed")), (3, *report("connected", tool_count=2))],
                 "active", "reported", None, "active · reported by Claude Code", None,
                 id="a_newer_reported_connection_replaces_an_older_reported_failure"),
    pytest.param([(1, *DELIVERED), (2, *report("connected", tool_count=2)), (3, *report("failed"))],
                 "failed", "reported", "agent_reported_failed", "failed · reported by Claude Code", None,
                 id="a_newer_reported_failure_replaces_an_older_reported_connection"),
    pytest.param([(1, *DELIVERED), (2, *report("connected", tool_count=2)), (2, *report("failed"))],
                 "failed", "reported", "agent_reported_failed", "failed · reported by Claude Code", None,
                 id="at_one_instant_a_reported_failure_wins_over_a_reported_connection"),
    pytest.param([(1, *DELIVERED), (2, *report("pending")), (2, *report("failed"))],
                 "failed", "reported", "agent_reported_failed", "failed · reported by Claude Code", None,
                 id="at_one_instant_a_reported_failure_wins_over_any_other_reported_state"),
    pytest.param([(1, *report("connected", tool_count=2))],
                 "configured", "observed", None, "configured",
                 "Claude Code reported a server of this name, which agentctl did not deliver",
                 id="a_report_about_a_server_agentctl_did_not_deliver_claims_nothing"),
    pytest.param([(1, *FILTERED), (2, *report("failed"))],
                 "filtered", "observed", "policy_denied", "filtered",
                 "Claude Code reported a server of this name, which agentctl did not deliver",
                 id="a_report_never_replaces_a_filtering_decision_or_its_reason"),
    pytest.param([(1, *DELIVERED), (2, *report("failed")), (3, *HOST_ERROR)],
                 "failed", "observed", "session_rejected", "failed", None,
                 id="an_observed_failure_is_shown_with_its_own_reason_over_a_reported_one"),
    pytest.param([(1, *FILTERED), (2, *DELIVERED), (3, *report("failed")), (4, *report("connected", tool_count=1))],
                 "active", "reported", "policy_denied", "active · reported by Claude Code", None,
                 id="when_a_reported_failure_stops_being_current_the_reason_it_replaced_comes_back"),
]


def _fold(events: list[tuple[int, str, dict[str, Any]]], server: str = "github") -> World:
    w = World()
    w.begin()
    w.apply("configured", server, at=at(0), source="profile", transport="http", target="https://x.example")
    for minute, kind, fields in events:
        assert w.apply(kind, server, at=at(minute), **fields) == "applied"
    return w


@pytest.mark.parametrize(("events", "status", "source", "reason", "label", "disagreement"), CASES)
def test_reported_evidence_rules_in_every_arrival_order(
    events: list, status: str, source: str, reason: str | None, label: str, disagreement: str | None
) -> None:
    results = set()
    for order in itertools.permutations(events):
        w = _fold(list(order))
        row = w.row("github")
        assert (row.status, row.status_source, row.reason_code) == (status, source, reason), order
        assert reducer.status_with_source(row) == (status, source)
        view = row_view(row)
        assert (view.state, view.label, view.disagreement) == (status, label, disagreement), order
        results.add(encode(row))
    assert len(results) == 1, "the folded row depends on arrival order"


def test_the_view_lists_the_source_the_state_rests_on_first_and_says_what_the_agent_reported() -> None:
    row = _fold([(1, *DELIVERED), (2, *report("connected", tool_count=2))]).row("github")
    view = row_view(row)
    assert view.sources == [CLAUDE, "agentctl"] and view.observed == "delivered"
    assert (view.reporter, view.reported, view.report) == ("Claude Code", "connected", "Claude Code reported connected, 2 tools")
    builtin = _fold([(1, *DELIVERED), (2, *LISTED), (3, *report("failed"))], server="kandev").row("kandev")
    view = row_view(builtin)
    assert view.sources == ["agentctl", CLAUDE] and (view.state, view.observed, view.reported) == ("active", "active", "failed")
    plain = _fold([(1, *DELIVERED)]).row("github")
    assert row_view(plain).sources == ["agentctl"] and row_view(plain).reporter is None


def test_the_view_reads_a_row_as_its_json_decodes_the_same_as_the_struct() -> None:
    row = _fold([(1, *DELIVERED), (2, *report("needs_auth", raw_state="needs-auth"))]).row("github")
    as_dict = msgspec.json.decode(encode(row))
    assert row_view(as_dict) == row_view(row)
    assert row_view(as_dict).report == "Claude Code reported needs authentication"


def test_an_unknown_raw_state_is_shown_by_its_token() -> None:
    row = _fold([(1, *DELIVERED), (2, *report("unknown", raw_state="warming-up"))]).row("github")
    assert row_view(row).report == "Claude Code reported an unknown state (warming-up)"


def test_a_report_never_creates_a_row_and_is_counted_as_rejected(world: World) -> None:
    before = encode(world.current)
    assert world.apply("agent_reported", "the-agent-made-this-up", reported_state="connected",
                       report_source=CLAUDE, tool_count=9) == "unknown_server"
    assert world.apply("agent_reported", None, reported_state="failed", report_source=CLAUDE) == "unknown_server"
    assert encode(world.current) == before
    assert world.history.rejected_events == 2


def test_a_report_without_a_state_or_source_is_logged_but_is_no_report(world: World) -> None:
    world.apply("delivered", "github", transport="http")
    assert world.apply("agent_reported", "github", report_source=CLAUDE) == "applied"
    assert world.apply("agent_reported", "github", reported_state="failed") == "applied"
    row = world.row("github")
    assert row.reported is None and (row.status, row.status_source) == ("delivered", "observed")


def test_reporter_names_are_the_agents_as_people_call_them() -> None:
    assert reporter_name(CLAUDE) == "Claude Code" and reporter_name(CODEX) == "Codex"
    assert reporter_name("gemini:mcp-list") == "Gemini CLI" and reporter_name("newagent:thing") == "newagent"


def test_a_superseded_attempt_keeps_the_report_and_the_catalog_hash_but_not_the_catalog(world: World) -> None:
    world.apply("delivered", "kandev", transport="http")
    listed = catalog("a", "b")
    listed.hash = "sha256:mcp-tools-v1:" + "ab" * 32
    world.apply("tools_list_observed", "kandev", tool_count=2, catalog=listed)
    world.apply("agent_reported", "kandev", reported_state="connected", report_source=CLAUDE, tool_count=2)
    old = world.current.attempt_id
    world.begin("reset")
    row = world.row("kandev", reducer.find_attempt(world.history, old))
    assert row.catalog is None and row.tool_count == 2 and row.catalog_hash == listed.hash
    assert row.reported is not None and row.reported.tool_count == 2
    assert decode_history(encode(world.history)) == world.history


def test_a_newer_tools_list_without_a_hash_clears_the_older_hash(world: World) -> None:
    first = catalog("a")
    first.hash = "sha256:mcp-tools-v1:" + "cd" * 32
    world.apply("tools_list_observed", "kandev", at=at(1), tool_count=1, catalog=first)
    world.apply("tools_list_observed", "kandev", at=at(2), tool_count=2, catalog=catalog("a", "b"))
    assert world.row().catalog_hash is None and world.row().tool_count == 2
    world.apply("tools_list_observed", "kandev", at=at(0), tool_count=1, catalog=first)  # older: ignored
    assert world.row().catalog_hash is None
