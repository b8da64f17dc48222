"""The endpoint's witness route (agentctl/mcp_endpoint/witness_route.py): what a witness's report may say, and of
which row. A report is checked whole before anything is recorded; only a third-party stdio row the attempt
delivered can be spoken of; free text is redacted and bounded."""

from __future__ import annotations

import json

import pytest

from agentctl.evidence.ledger import Ledger, ServerSeed
from agentctl.mcp_endpoint.witness_route import BadReport, record
from agentctl.present.rows import row_view
from tests.evidence.fixed import IDENT


def _ledger() -> tuple[Ledger, str]:
    ledger = Ledger(IDENT, secrets=["srvSECRETw"])
    seeds = [ServerSeed(name="files", source="profile", transport="stdio", target="npx"),
             ServerSeed(name="web", source="profile", transport="http", target="http://127.0.0.1:1"),
             ServerSeed(name="kandev", source="builtin", transport="http", target="http://127.0.0.1:2")]
    attempt, _ = ledger.begin_attempt("session_new", seeds)
    for seed in seeds:
        ledger.record("delivered", attempt, seed.name, transport=seed.transport)
    return ledger, attempt


def _report(server: str, *events: dict) -> bytes:
    return json.dumps({"server": server, "events": list(events)}).encode()


def test_a_witness_report_makes_the_row_active_observed_by_the_witness_with_its_tools_and_calls():
    ledger, attempt = _ledger()
    record(ledger, attempt, _report(
        "files",
        {"kind": "initialize_observed", "age": 0.5, "protocol_version": "2025-11-25",
         "server_name": "fs srvSECRETw", "server_version": "1.0"},
        {"kind": "tools_list_observed", "age": 0.2, "tool_count": 3, "tool_names": ["read", "write"],
         "catalog_hash": "sha256:mcp-tools-v1:" + "a" * 64},
        {"kind": "tool_call_observed", "age": 0.1, "tool_name": "read", "outcome": "error"},
    ))
    row = next(r for r in ledger.history.current.servers if r.name == "files")
    assert (row.status, row.observed_by, row.tool_count, row.tool_calls, row.tool_errors) == (
        "active", "witness", 3, 1, 1)
    assert row.catalog is not None and row.catalog.truncated and [t.name for t in row.catalog.tools] == [
        "read", "write"]
    assert "srvSECRETw" not in row.server_info.name, "the server's self-description is redacted"
    assert row_view(row).label == "active · observed by agentctl's witness"
    record(ledger, attempt, _report("files", {"kind": "server_exited", "age": 0, "exit_code": 2}))
    row = next(r for r in ledger.history.current.servers if r.name == "files")
    assert row_view(row).label == "exited with code 2 · observed by agentctl's witness"


@pytest.mark.parametrize("server, events, why", [
    ("kandev", [{"kind": "tools_list_observed", "tool_count": 1, "tool_names": []}], "no stdio server"),
    ("web", [{"kind": "server_exited", "exit_code": 0}], "no stdio server"),
    ("unknown", [{"kind": "server_exited", "exit_code": 0}], "no stdio server"),
    ("files", [{"kind": "agent_reported"}], "unknown kind"),
    ("files", [{"kind": "explicit_error", "reason": "anything_at_all"}], "unknown reason"),
    ("files", [{"kind": "tools_list_observed", "tool_count": 1, "tool_names": ["a", "b"]}], "invalid tool names"),
    ("files", [{"kind": "tool_call_observed", "tool_name": "x", "outcome": "maybe"}], "valid outcome"),
    ("files", [{"kind": "server_exited", "exit_code": 999}], "valid exit code"),
    ("files", [{"kind": "server_exited", "exit_code": 0, "age": -5}], "valid age"),
])
def test_a_report_about_another_row_or_out_of_shape_is_refused_whole(server, events, why):
    ledger, attempt = _ledger()
    before = len(ledger.history.current.evidence)
    good = {"kind": "server_exited", "exit_code": 1}
    with pytest.raises(BadReport, match=why):
        record(ledger, attempt, _report(server, good, *events) if server == "files" else _report(server, *events))
    assert len(ledger.history.current.evidence) == before, "nothing of a refused report is recorded"


def test_a_report_that_is_not_json_is_refused():
    ledger, attempt = _ledger()
    with pytest.raises(BadReport, match="not JSON"):
        record(ledger, attempt, b"\xff not json")
