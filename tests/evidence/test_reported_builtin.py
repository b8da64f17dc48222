"""The built-in server is agentctl's own: an agent's claim about it is checked against what agentctl saw.

A claimed connection without a request to the endpoint is a disagreement, never a status; the tools the agent
says it exposes to its model are compared with what the endpoint served, and a gap is its own finding (reason
`agent_exposure_gap`); equal inventories give none."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest

from agentctl.present.rows import report_details
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import ServerRow
from agentctl.present.rows import row_view
from tests.evidence.fixed import T0
from tests.evidence.test_reducer import World, catalog

CLAUDE = "claude:stream-json-init"
TOOLS = [f"tool_{c}" for c in "abcdefghij"]


def _fold(*events: tuple[str, dict[str, Any]]):
    w = World()
    w.begin()
    w.apply("configured", "kandev", at=T0, source="builtin", transport="http", target="http://127.0.0.1:7000")
    for minute, (kind, fields) in enumerate(events, 1):
        assert w.apply(kind, "kandev", at=T0 + timedelta(minutes=minute), **fields) == "applied"
    return w.row("kandev")


DELIVERED = ("delivered", {"transport": "http"})
SERVED = ("tools_list_observed", {"era": "modern", "tool_count": 10, "catalog": catalog(*TOOLS)})


def claim(**fields: Any) -> tuple[str, dict[str, Any]]:
    return "agent_reported", {"reported_state": "connected", "report_source": CLAUDE, **fields}


def test_a_claimed_connection_with_999_tools_and_no_request_seen_stays_delivered_and_shows_the_disagreement() -> None:
    row = _fold(DELIVERED, claim(tool_count=999))
    assert (row.status, row.status_source) == ("delivered", "observed")
    view = row_view(row)
    assert view.disagreement == "Claude Code says connected; agentctl saw no request to its endpoint"
    assert "disagreement: Claude Code says connected; agentctl saw no request to its endpoint" in report_details(view)


def test_a_reported_failure_of_the_built_in_server_still_fails_it_as_reported() -> None:
    row = _fold(DELIVERED, ("agent_reported", {"reported_state": "failed", "report_source": CLAUDE}))
    assert (row.status, row.status_source) == ("failed", "reported")


def test_the_agent_exposing_3_of_10_served_tools_is_a_finding_naming_the_7_missing() -> None:
    row = _fold(DELIVERED, SERVED, claim(tool_count=3, exposed_tools=["tool_a", "tool_c", "tool_j"]))
    assert row.status == "active"
    view = row_view(row)
    assert view.exposure_reason == "agent_exposure_gap"
    assert view.exposure_gap == ("Claude Code exposes 3 of 10 kandev tools; 7 missing: tool_b, tool_d, tool_e, "
                                 "tool_f, tool_g, tool_h, tool_i")
    assert view.disagreement is None
    assert f"exposure: {view.exposure_gap} [agent_exposure_gap]" in report_details(view)
    # The finding survives the report's JSON (what `report --json` and the hub read).
    assert row_view(msgspec.json.decode(encode(row))) == view


def test_equal_inventories_give_no_finding_and_a_list_cut_short_is_not_compared() -> None:
    assert row_view(_fold(DELIVERED, SERVED, claim(tool_count=10, exposed_tools=TOOLS))).exposure_gap is None
    truncated = ("tools_list_observed", {"era": "modern", "tool_count": 200,
                                         "catalog": msgspec.structs.replace(catalog(*TOOLS), truncated=True)})
    assert row_view(_fold(DELIVERED, truncated, claim(exposed_tools=["tool_a"]))).exposure_gap is None
    assert row_view(_fold(DELIVERED, SERVED, claim(tool_count=10))).exposure_gap is None, "no list: nothing to compare"


def test_more_than_eight_missing_tools_are_counted_and_the_first_eight_named() -> None:
    view = row_view(_fold(DELIVERED, SERVED, claim(exposed_tools=[])))
    assert view.exposure_gap == ("Claude Code exposes 0 of 10 kandev tools; 10 missing: tool_a, tool_b, tool_c, "
                                 "tool_d, tool_e, tool_f, tool_g, tool_h, ...")


def test_exposed_tool_names_outside_the_contracts_token_are_refused_by_the_decoder() -> None:
    row = msgspec.json.decode(encode(_fold(DELIVERED, SERVED, claim(exposed_tools=["tool_a"]))))
    row["reported"]["exposed_tools"] = ["a name with spaces"]
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(row, ServerRow)
