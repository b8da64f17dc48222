"""Codex's app-server startup notifications and status list as agentctl reads them: real captured frames first."""

from __future__ import annotations

import json

from agentctl.agent.reported import record
from agentctl.agent.clis.codex import SOURCE, CodexAppServerReader, parse_message
from agentctl.present.rows import row_view
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from agentctl.evidence.secret_registry import SecretRegistry
from tests.agent.reported_support import codex_stdout
from tests.evidence.fixed import IDENT

DELIVERED = ["research", "closed", "nocmd", "unauth", "oauth"]


def _read(data: bytes, delivered=DELIVERED, chunk: int | None = None, secrets=()) -> tuple[list, CodexAppServerReader]:
    reader = CodexAppServerReader(delivered, secrets)
    reports = []
    step = chunk or len(data) or 1
    for i in range(0, len(data), step):
        reports += reader.feed(data[i : i + step])
    return reports + reader.close(), reader


def _last(reports) -> dict[str, tuple]:
    """Each server's newest report, as the reducer would keep it (newest occurrence wins)."""
    return {r.name: (r.state, r.raw_state, r.tool_count, r.reason_code) for r in reports}


def test_the_real_startup_notifications_go_from_starting_to_ready_or_failed_with_codexs_error_redacted() -> None:
    data = codex_stdout()
    startup = b"".join(line + b"\n" for line in data.splitlines() if b"startupStatus" in line)
    reports, reader = _read(startup)
    assert reader.events_seen == 10
    assert [r.state for r in reports[:5]] == ["pending"] * 5 and {r.raw_state for r in reports[:5]} == {"starting"}
    assert _last(reports) == {
        "research": ("connected", "ready", None, None),
        **{name: ("failed", "failed", None, "agent_reported_failed") for name in ("closed", "nocmd", "unauth", "oauth")},
    }
    closed = next(r for r in reversed(reports) if r.name == "closed")
    assert "http://127.0.0.1:18809" in closed.summary and "/mcp" not in closed.summary, "a URL keeps only its origin"
    assert "codex_rmcp_client" not in closed.summary, "Rust type paths are not a reason"
    assert next(r for r in reversed(reports) if r.name == "unauth").summary == (
        "The unauth MCP server is not logged in. Run `codex mcp login unauth`.")


def test_the_real_status_list_gives_tool_counts_and_authentication_required() -> None:
    reports, reader = _read(codex_stdout())
    assert reader.events_seen == 11  # ten notifications and one answer; thread, config and account frames are not
    listed = reports[-5:]
    assert _last(listed) == {
        "closed": ("failed", "failed", None, "agent_reported_failed"),
        "nocmd": ("failed", "failed", None, "agent_reported_failed"),
        "oauth": ("needs_auth", "authenticationRequired", None, "agent_reported_needs_auth"),
        "research": ("connected", "connected", 2, None),
        "unauth": ("needs_auth", "authenticationRequired", None, "agent_reported_needs_auth"),
    }
    assert all(len(r.summary.encode()) <= 256 for r in listed if r.summary)


def test_any_chunking_of_the_real_stream_gives_the_same_reports() -> None:
    whole, _ = _read(codex_stdout())
    for chunk in (1, 13, 4096):
        assert _read(codex_stdout(), chunk=chunk)[0] == whole


def test_servers_agentctl_did_not_deliver_get_no_report_from_notifications_or_the_list() -> None:
    reports, reader = _read(codex_stdout(), ["research", "Closed"])
    assert {r.name for r in reports} == {"research"}
    assert reader.events_seen == 11
    assert _read(codex_stdout(), [])[0] == []


def _startup(name, status, error=None, failure=None) -> bytes:
    params = {"threadId": "t", "name": name, "status": status, "error": error, "failureReason": failure}
    return json.dumps({"method": "mcpServer/startupStatus/updated", "params": params}).encode()


def test_a_secret_or_credential_in_codexs_error_text_never_reaches_the_report() -> None:
    secrets = SecretRegistry()
    secrets.add("fake-token-CANARY-401")
    error = ("MCP client for `a` failed: http://user:pw-CANARY@example.com/mcp?key=CANARY-Q error "
             "Bearer FAKE-TOKEN-canary-401 and fake-token-CANARY-401")
    (report,) = parse_message(_startup("a", "failed", error), ["a"], secrets)
    assert report.state == "failed" and report.summary
    for canary in ("CANARY", "canary", "pw-", "/mcp", "key="):
        assert canary not in report.summary, report.summary


def test_reauthentication_required_is_needs_auth_and_an_unknown_status_keeps_its_raw_word() -> None:
    (auth,) = parse_message(_startup("a", "failed", "login again", "reauthenticationRequired"), ["a"])
    assert (auth.state, auth.reason_code) == ("needs_auth", "agent_reported_needs_auth")
    (odd,) = parse_message(_startup("a", "warming"), ["a"])
    assert (odd.state, odd.raw_state, odd.summary) == ("unknown", "warming", None)


def test_malformed_frames_are_skipped_and_the_next_valid_one_still_reads() -> None:
    junk = [
        b'{"method":"mcpServer/startupStatus/updated","params":',
        b'{"method":"mcpServer/startupStatus/updated","params":[1]}',
        b'{"method":"mcpServer/startupStatus/updated","params":{"name":7,"status":"ready"}}',
        b'{"method":"mcpServer/startupStatus/updated","params":{"name":"a","status":null}}',
        b'{"result":{"data":[{"name":"a","runtimeStatus":5}, "x", {"name":"a"}]}}',
        b'{"id":9,"result":{"data":"runtimeStatus"}}',
        b"runtimeStatus not json",
        "{\"method\":\"mcpServer/startupStatus/updated\",\"params\":{\"name\":\"a\",\"status\":\"ready\"}}\udc00"
        .encode("utf-8", "surrogatepass"),
    ]
    good = b'{"id":3,"result":{"data":[{"name":"a","runtimeStatus":"connected","tools":{"x":{},"y":{}}}]}}'
    reports, _ = _read(b"\n".join(junk + [good]) + b"\n", ["a"])
    assert _last(reports) == {"a": ("connected", "connected", 2, None)}


def test_a_result_that_is_not_a_status_list_is_not_an_event() -> None:
    assert parse_message(b'{"id":5,"result":{"data":[{"id":"thread-1"}]}}', ["a"]) is None
    assert parse_message(b'{"id":5,"result":{"data":[]}}', ["a"]) == []  # an empty status list is one


def test_the_real_reports_become_evidence_labelled_as_codexs() -> None:
    ledger = Ledger(IDENT)
    seeds = [ServerSeed(name=n, source="profile", transport="http", target="http://127.0.0.1:18801")
             for n in (*DELIVERED, "undelivered")]
    attempt, _ = ledger.begin_attempt("passthrough_start", seeds)
    for name in DELIVERED:
        ledger.record("delivered", attempt, name, transport="http")
    reports, _ = _read(codex_stdout())
    assert record(ledger, attempt, SOURCE, reports) == len(reports)
    rows = {r.name: r for r in ledger.history.current.servers}
    assert row_view(rows["research"]).label == "active · reported by Codex"
    assert rows["research"].reported.tool_count == 2
    assert row_view(rows["closed"]).label == "failed · reported by Codex"
    assert rows["oauth"].reported.state == "needs_auth"
    assert rows["undelivered"].status == "configured" and rows["undelivered"].reported is None
