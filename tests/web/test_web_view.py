"""What the page is told for every display state: the terminal's colour as a name, the CLI's label and
plain-language line, and the checklist lines `agentctl diagnostics` prints (pure functions, contract data)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentctl.present.rows import display_label, row_explanation
from agentctl.evidence.contract.control import TerminalView
from agentctl.evidence.contract.report import Attempt, EndpointTestResult, ServerRow
from agentctl.hub.web_view import attempt_view, server_view, terminal_notes

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _attempt(*rows: ServerRow) -> Attempt:
    return Attempt(attempt_id="att_1", task_id="t", session_id="s", execution_id="e", instance_id="i",
                   started_at=T0, updated_at=T0, accepted_at=T0 + timedelta(seconds=1), servers=list(rows))


ROWS = [  # row, tone, the line a person reads
    (ServerRow(name="kandev", source="builtin", status="active", tool_count=10, tool_calls=2, configured_at=T0,
               delivered_at=T0, initialize_observed_at=T0, tools_list_observed_at=T0, tool_call_observed_at=T0),
     "green", "10 tools loaded, used"),
    (ServerRow(name="kandev", source="builtin", status="connected", configured_at=T0, delivered_at=T0,
               initialize_observed_at=T0), "amber", "initialized, tools not listed yet"),
    (ServerRow(name="kandev", source="builtin", status="delivered", configured_at=T0, delivered_at=T0),
     "amber", "sent to the agent; the agent has not contacted this endpoint yet"),
    (ServerRow(name="docs", status="delivered", configured_at=T0, delivered_at=T0), "amber",
     "sent to the agent; third-party servers connect directly to the agent, so this is expected"),
    (ServerRow(name="docs", status="failed", reason_code="session_rejected", summary="refused", configured_at=T0,
               delivered_at=T0, failed_at=T0), "red", "the agent refused the session"),
    (ServerRow(name="old", transport="sse", status="filtered", reason_code="sse_unsupported", configured_at=T0,
               filtered_at=T0), "grey", "not sent: the agent does not advertise MCP over SSE"),
    (ServerRow(name="cli", status="unavailable", reason_code="no_passthrough_strategy", configured_at=T0,
               unavailable_at=T0), "grey", "unavailable: agentctl has no way to give MCP servers to this CLI"),
    (ServerRow(name="new", status="configured", configured_at=T0), "plain", "not sent to the agent yet"),
]


@pytest.mark.parametrize(("row", "tone", "line"), ROWS, ids=lambda v: getattr(v, "status", None))
def test_every_display_state_has_the_clis_label_line_and_colour(row, tone, line):
    view = server_view(row, _attempt(row))
    assert (view["tone"], view["explanation"]) == (tone, line)
    assert view["label"] == display_label(row) and view["explanation"] == row_explanation(row)
    if row.status == "delivered":
        assert view["label"] == "delivered · connection unverified"
    steps = {s["step"]: s for s in view["steps"]}
    assert steps["configured"] == {"step": "configured", "label": "configured", "done": True, "mark": "[x]",
                                   "at": T0, "text": "2026-01-02 03:04:05 UTC", "detail": None}
    if row.source == "builtin":
        assert view["no_catalog_note"] is None and view["hidden_note"] is None
    else:
        assert view["no_catalog_note"].startswith("no catalog: third-party servers connect directly")
        assert "initialize" not in steps  # not observable for a third-party server: one [-] line instead
        if row.delivered_at:
            assert view["hidden_note"].startswith("[-] initialize, tools loaded, used, disconnected: not observable")


def test_an_endpoint_test_is_reachability_beside_the_row_and_never_its_status():
    row = ServerRow(name="docs", status="delivered", configured_at=T0, delivered_at=T0,
                    endpoint_test=EndpointTestResult(succeeded=True, tested_at=T0, tool_count=3, latency_ms=12.5))
    view = attempt_view(_attempt(row))["servers"][0]
    assert view["label"] == "delivered · connection unverified"
    assert view["endpoint_test"] == {
        "succeeded": True,
        "headline": "reachable",
        "tone": "green",
        "line": "reachable from the daemon, 3 tools listed in 12.5 ms (tested 2026-01-02 03:04:05)",
        "note": "reachability from the daemon, not attachment: the row's status is unchanged",
    }
    assert "endpoint test: reachable from the daemon, 3 tools (reachability, not attachment)" in view["details"]


def test_the_terminal_view_says_its_size_and_when_it_is_a_closed_terminals_cut_last_screen():
    def view(**fields):
        return TerminalView(**{"warning": "w", "agent_state": "running", "terminal": True, "open": True, "rows": 30,
                               "cols": 100, "screen": b"x", "truncated": False, "total_bytes_seen": 1, **fields})

    assert terminal_notes(view()) == ["30 rows x 100 columns, read-only"]
    assert terminal_notes(view(open=False, truncated=True, agent_state="exited")) == [
        "30 rows x 100 columns, read-only",
        "(the agent's terminal is closed: the agent is not running; this is its last screen)",
        "(older output dropped: the last 32 KiB the agent printed are kept)",
    ]
