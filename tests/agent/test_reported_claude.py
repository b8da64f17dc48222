"""Claude Code's stream-json init event as agentctl reads it: real captured output first, then adversarial lines."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from agentctl.agent.reported import record
from agentctl.agent.clis.claude import MAX_LINE, SOURCE, ClaudeInitReader, normalized_name, parse_init
from agentctl.present.rows import row_view
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from tests.agent.reported_support import stdout_of
from tests.evidence.fixed import IDENT

ALL = ["research", "researchsse", "closed", "err500", "unauth", "nocmd", "docs", "blackhole", "stdiook"]


def _read(data: bytes, delivered, chunk: int | None = None) -> tuple[list, ClaudeInitReader]:
    reader = ClaudeInitReader(delivered)
    reports = []
    step = chunk or len(data) or 1
    for i in range(0, len(data), step):
        reports += reader.feed(data[i : i + step])
    reports += reader.close()
    return reports, reader


def _states(reports) -> dict[str, tuple]:
    return {r.name: (r.state, r.raw_state, r.tool_count) for r in reports}


def test_the_real_init_event_reports_the_reachable_server_connected_with_its_tools_and_the_refused_one_failed() -> None:
    reports, reader = _read(stdout_of("claude-two-servers.stdout"), ["research", "closed"])
    assert _states(reports) == {"research": ("connected", "connected", 2), "closed": ("failed", "failed", None)}
    assert reader.events_seen == 1 and reader.oversized_lines == 0
    assert all(r.summary is None and r.reason_code is None for r in reports), "the init event carries no error text"


def test_every_status_claude_code_reported_in_the_captured_runs_is_normalized() -> None:
    reports, _ = _read(stdout_of("claude-all.stdout"), ALL)
    assert _states(reports) == {
        "research": ("connected", "connected", 2), "researchsse": ("connected", "connected", 2),
        "stdiook": ("connected", "connected", 2), "blackhole": ("pending", "pending", None),
        **{name: ("failed", "failed", None) for name in ("closed", "err500", "unauth", "nocmd", "docs")},
    }
    oauth, _ = _read(stdout_of("claude-oauth.stamped"), ["oauth"])
    assert _states(oauth) == {"oauth": ("needs_auth", "needs-auth", None)}
    short, _ = _read(stdout_of("claude-unauth-timeout3s.stamped"), ["unauth", "blackhole"])
    assert _states(short) == {"unauth": ("failed", "failed", None), "blackhole": ("failed", "failed", None)}


def test_the_lines_after_the_init_event_are_not_reports_and_any_chunking_gives_the_same_result() -> None:
    data = stdout_of("claude-fakekey.stamped")
    assert data.count(b"\n") == 11 and b'"subtype":"api_retry"' in data
    whole, reader = _read(data, ["research", "closed"])
    assert reader.events_seen == 1
    for chunk in (1, 7, 4096):
        assert _read(data, ["research", "closed"], chunk)[0] == whole


def test_a_name_agentctl_did_not_deliver_is_never_reported_however_close_to_a_delivered_one() -> None:
    reports, _ = _read(stdout_of("claude-all.stdout"), ["Research", "research ", "closed"])
    assert [r.name for r in reports] == ["closed"]
    assert _read(stdout_of("claude-all.stdout"), [])[0] == []


def _init(servers: list, tools: list | None = None, **extra) -> bytes:
    event = {"type": "system", "subtype": "init", "tools": ["Bash"] + (tools or []), "mcp_servers": servers, **extra}
    return json.dumps(event).encode() + b"\n"


def test_malformed_lines_and_entries_are_skipped_and_the_next_valid_event_still_reads() -> None:
    junk = [b'{"type":"system","subtype":"init","mcp_servers":', b"not json \"init\"", b'["init"]',
            b'{"type":"system","subtype":"init","mcp_servers":7,"tools":"x"}',
            b'{"type":"assistant","subtype":"init","mcp_servers":[{"name":"a","status":"failed"}]}']
    entries = [{"name": "a"}, {"status": "connected"}, {"name": 3, "status": "failed"}, "a", {"name": "a", "status": 1},
               {"name": "a", "status": "connected"}]
    data = b"\n".join(junk) + b"\n" + _init(entries, ["mcp__a__x", 5, None])
    reports, reader = _read(data, ["a"])
    assert _states(reports) == {"a": ("connected", "connected", 1)}
    assert reader.events_seen == 2  # the init with a non-list mcp_servers is an init event reporting nothing


def test_a_server_listed_twice_with_different_statuses_gets_no_report() -> None:
    twice = _init([{"name": "a", "status": "connected"}, {"name": "a", "status": "failed"}, {"name": "b", "status": "failed"}])
    assert _states(parse_init(twice, ["a", "b"])) == {"b": ("failed", "failed", None)}


def test_an_unknown_status_is_reported_as_unknown_with_its_raw_word() -> None:
    reports = parse_init(_init([{"name": "a", "status": "warming-up"}]), ["a"])
    assert _states(reports) == {"a": ("unknown", "warming-up", None)}


def test_tool_counts_use_claude_codes_name_normalization() -> None:
    assert normalized_name("my.server v2") == "my_server_v2" and normalized_name("a-b_c") == "a-b_c"
    assert normalized_name("claude.ai Google Drive") == "claude_ai_Google_Drive"
    reports = parse_init(_init([{"name": "my.server", "status": "connected"}],
                               ["mcp__my_server__x", "mcp__my_server__y", "mcp__my.server__z", "mcp__my_server__"]),
                         ["my.server"])
    assert _states(reports) == {"my.server": ("connected", "connected", 2)}


@pytest.mark.parametrize(("servers", "tools", "expected"), [
    pytest.param(["a", "a__b"], ["mcp__a__x", "mcp__a__b__y"], {"a": 1, "a__b": 1},
                 id="a_tool_that_fits_two_servers_prefixes_counts_for_the_longer_name"),
    pytest.param(["a", "a__b"], ["mcp__a__x"], {"a": 1, "a__b": 0}, id="no_tool_fits_both_so_both_count"),
    pytest.param(["a.b", "a_b"], ["mcp__a_b__x"], {"a.b": None, "a_b": None},
                 id="two_names_that_normalize_alike_have_no_count"),
])
def test_an_ambiguous_tool_count_is_unknown_never_a_guess(servers, tools, expected) -> None:
    init = _init([{"name": s, "status": "connected"} for s in servers], tools)
    assert {r.name: r.tool_count for r in parse_init(init, servers)} == expected


def test_a_server_of_the_users_own_config_keeps_its_tools_off_a_delivered_servers_count() -> None:
    init = _init([{"name": "a", "status": "connected"}, {"name": "a__b", "status": "connected"}],
                 ["mcp__a__b__y", "mcp__a__z"])
    assert {r.name: r.tool_count for r in parse_init(init, ["a"])} == {"a": 1}


def test_an_oversized_line_is_skipped_whole_without_buffering_past_the_bound_and_the_next_one_reads() -> None:
    reader = ClaudeInitReader(["a"], max_line=64 * 1024)
    huge = b'{"type":"system","subtype":"init","tools":["' + b"x" * (200 * 1024) + b'"]}\n'
    assert reader.feed(huge[:1000]) == [] and reader.feed(huge[1000:]) == []
    assert reader.oversized_lines == 1
    assert _states(reader.feed(_init([{"name": "a", "status": "failed"}]))) == {"a": ("failed", "failed", None)}


def test_reading_a_long_noisy_stream_keeps_memory_bounded_by_one_line() -> None:
    reader = ClaudeInitReader(["a"])
    noise = json.dumps({"type": "user", "message": {"content": "tool result " * 5000}}).encode() + b"\n"
    giant = b'{"type":"assistant","text":"' + b"y" * (3 * MAX_LINE) + b'"}\n'
    tracemalloc.start()
    try:
        for _ in range(300):  # ~18 MB of ordinary lines
            reader.feed(noise)
        for i in range(0, len(giant), 65536):
            reader.feed(giant[i : i + 65536])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_LINE + 256 * 1024, peak
    assert reader.events_seen == 0 and reader.oversized_lines == 1


def test_the_real_reports_become_evidence_labelled_as_claude_codes() -> None:
    ledger = Ledger(IDENT)
    seeds = [ServerSeed(name=n, source="profile", transport="http", target="http://127.0.0.1:18801")
             for n in ("research", "closed", "undelivered")]
    attempt, _ = ledger.begin_attempt("passthrough_start", seeds)
    for name in ("research", "closed"):
        ledger.record("delivered", attempt, name, transport="http")
    reports, _ = _read(stdout_of("claude-two-servers.stdout"), ["research", "closed"])
    assert record(ledger, attempt, SOURCE, reports) == 2
    rows = {r.name: r for r in ledger.history.current.servers}
    assert row_view(rows["research"]).label == "active · reported by Claude Code"
    assert row_view(rows["closed"]).label == "failed · reported by Claude Code"
    assert rows["closed"].reason_code == "agent_reported_failed"
    assert rows["undelivered"].status == "configured" and rows["undelivered"].reported is None
    assert [e.report_source for e in ledger.history.current.evidence if e.kind == "agent_reported"] == [SOURCE, SOURCE]
