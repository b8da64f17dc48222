"""What the stdio witness reads of what it relays (agentctl/agent/witness_scan.py): answers to the agent's own
initialize, tools/list and tools/call, nothing else; lines over the bound are never parsed."""

from __future__ import annotations

import json

from agentctl.agent.witness_scan import Envelopes, Lines


def _line(message: dict) -> bytes:
    return json.dumps(message).encode()


def test_lines_split_across_chunks_come_out_whole_and_an_oversized_line_is_skipped_whole():
    lines = Lines(max_line=10)
    assert lines.feed(b"{a\n{c") == [b"{a"]
    assert lines.feed(b"e\n{" + b"x" * 8) == [b"{ce"]
    assert lines.feed(b"yyyy") == []  # over the bound: dropped, not cut
    assert lines.feed(b"zz\n{k\n") == [b"{k"]
    assert lines.skipped == 1
    assert lines.feed(b"not json\n[1]\n {x}\n") == [b" {x}"], "only what may be an object is ever copied"


def test_answers_are_paired_with_the_agents_requests_and_only_names_counts_and_outcomes_are_kept():
    env = Envelopes()
    env.from_agent(_line({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"secret": "CANARY"}}))
    seen = env.from_server(_line({"jsonrpc": "2.0", "id": 1, "result": {
        "protocolVersion": "2025-11-25", "serverInfo": {"name": "fs", "version": "1.0"}, "instructions": "CANARY"}}))
    assert (seen.kind, seen.fields) == ("initialize_observed", {
        "protocol_version": "2025-11-25", "server_name": "fs", "server_version": "1.0"})
    env.from_agent(_line({"jsonrpc": "2.0", "id": "L", "method": "tools/list"}))
    seen = env.from_server(_line({"jsonrpc": "2.0", "id": "L", "result": {"tools": [
        {"name": "read", "description": "CANARY", "inputSchema": {"type": "object"}}, {"name": "bad name!"}]}}))
    assert seen.kind == "tools_list_observed"
    assert (seen.fields["tool_count"], seen.fields["tool_names"]) == (2, ["read"])
    assert seen.fields["catalog_hash"].startswith("sha256:")
    env.from_agent(_line({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                          "params": {"name": "read", "arguments": {"path": "CANARY"}}}))
    env.from_agent(_line({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "read"}}))
    assert env.from_server(_line({"jsonrpc": "2.0", "id": 3, "result": {"isError": True, "content": []}})).fields == {
        "tool_name": "read", "outcome": "error"}
    assert env.from_server(_line({"jsonrpc": "2.0", "id": 2, "result": {"content": [{"text": "CANARY"}]}})).fields == {
        "tool_name": "read", "outcome": "ok"}
    assert "CANARY" not in repr(env.__dict__)


def test_non_json_notifications_unknown_ids_and_server_requests_are_never_observations():
    env = Envelopes()
    env.from_agent(_line({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
    for line in (b"not json at all", b"[1, 2]", _line({"jsonrpc": "2.0", "id": 1, "result": {}}),
                 _line({"jsonrpc": "2.0", "id": 9, "result": {}}),
                 _line({"jsonrpc": "2.0", "id": 5, "method": "sampling/createMessage"}),
                 _line({"jsonrpc": "2.0", "method": "notifications/message"})):
        assert env.from_server(line) is None


def test_paged_tool_lists_are_counted_whole():
    env = Envelopes()
    env.from_agent(_line({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
    env.from_server(_line({"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "a"}], "nextCursor": "c"}}))
    env.from_agent(_line({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": "c"}}))
    seen = env.from_server(_line({"jsonrpc": "2.0", "id": 2, "result": {"tools": [{"name": "b"}]}}))
    assert (seen.fields["tool_count"], seen.fields["tool_names"]) == (2, ["a", "b"])


def test_after_bytes_relayed_unseen_the_next_line_is_found_from_the_last_byte_read():
    lines = Lines()
    lines.feed(b'{"part')
    lines.resync(b"\n")  # the unseen bytes ended a line: the next byte starts one
    assert lines.feed(b'{"a":1}\n') == [b'{"a":1}']
    lines.resync(b"x")  # mid-line: that line began unseen and is skipped to its end, never half-read
    assert lines.feed(b'"b":2}\n{"c":3}\n') == [b'{"c":3}']
    assert not lines.collecting


def test_a_call_answer_is_read_for_its_outcome_only_whatever_its_result_holds():
    env = Envelopes()
    env.from_agent(_line({"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "big"}}))
    env.from_agent(_line({"jsonrpc": "2.0", "id": "b", "method": "tools/call", "params": ["not", "an", "object"]}))
    env.from_agent(_line({"jsonrpc": "2.0", "id": "c", "method": "tools/call", "params": {"name": "x"}}))
    huge = {"content": [{"type": "text", "text": "CANARY" * 100_000}], "n": 10**30, "isError": False}
    assert env.from_server(_line({"jsonrpc": "2.0", "id": "a", "result": huge})).fields == {
        "tool_name": "big", "outcome": "ok"}
    assert env.from_server(_line({"jsonrpc": "2.0", "id": "b", "result": [1]})).fields == {
        "tool_name": "?", "outcome": "ok"}
    assert env.from_server(_line({"jsonrpc": "2.0", "id": "c", "error": {"code": -1, "message": "CANARY"}})).fields == {
        "tool_name": "x", "outcome": "error"}
    assert not env.waiting



def test_lines_say_where_each_ended_in_the_stream_across_chunks():
    lines = Lines()
    assert lines.feed_ends(b'{"a":1}\n{"b"') == [(b'{"a":1}', 7)]
    assert lines.feed_ends(b':2}\nnot json\n{"c":3}\n') == [(b'{"b":2}', 15), (b'{"c":3}', 32)]
    assert lines.offset == 33


def test_an_answer_read_before_its_request_could_reach_the_server_is_not_its_answer():
    env = Envelopes()
    env.from_agent(_line({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}), end=100)
    fake = _line({"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "FAKE"}]}})
    assert env.from_server(fake, horizon=99) is None, "written before the request had reached the server"
    assert env.waiting, "the request still awaits its answer"
    seen = env.from_server(_line({"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "real"}]}}), horizon=100)
    assert seen is not None and seen.fields["tool_names"] == ["real"]


def test_an_answer_given_before_its_request_was_whole_is_read_once_the_request_is_but_not_one_written_ahead():
    env = Envelopes()
    answer = _line({"jsonrpc": "2.0", "id": 4, "result": {"isError": False, "content": []}})
    assert env.from_server(answer, horizon=50) is None  # no request 4 yet: held
    seen = env.from_agent(_line({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "t"}}), end=50)
    assert seen is not None and seen.fields == {"tool_name": "t", "outcome": "ok"}
    assert not env.waiting
    assert env.from_server(answer, horizon=10) is None  # written when the agent's stream was at 10
    assert env.from_agent(_line({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "t"}}),
                          end=90) is None, "an answer written before the request began is not its answer"
    assert env.waiting
