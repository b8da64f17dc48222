"""The table of known refusal causes: what real agents print when they refuse, and the hint each gets."""

from __future__ import annotations

import pytest

from agentctl.agent.clis import refusal_table
from agentctl.agent.refusal_hints import RefusalHint, match_hint


# (the agent's error as evidence records it, its last lines of output, the expected cause). The texts are
# the ones real agents printed (claude-code-acp, codex-acp, gemini-cli, fast-agent, the ACP SDK).
CASES = [
    ("session_rejected: Internal error: Query closed before response received",
     ["--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons",
      "  data: { details: 'Query closed before response received' }"], "root_refused"),
    ("session_rejected: Internal error: Query closed before response received", [], "closed_before_answer"),
    ("session_rejected: Authentication required", [], "authentication_required"),
    ("prompt_rejected: Authentication required",
     ["} { code: -32000, message: 'Authentication required', data: undefined }"], "authentication_required"),
    ("session_rejected: Gemini API key is missing or not configured.", [], "api_key_missing"),
    ("session_rejected: Authentication required", ["Error: ANTHROPIC_API_KEY is not set"], "api_key_missing"),
    ("session_rejected: Internal error: MCP Server: 'closed': Failed to initialize - see details.",
     ["ERROR:root:Unhandled error while handling request method=session/new"], "mcp_server_failed"),
    ("agent_exited_before_initialize: the agent exited with code 127", ["sh: 1: node: not found",
                                                                     "env: 'node': No such file or directory"],
     "program_not_found"),
    ("prompt_rejected: Internal error: stream disconnected before completion: error sending request", [],
     "provider_unreachable"),
    ("prompt_rejected: Internal error: 429 Too Many Requests", [], "rate_limited"),
    ("session_rejected: Internal error", ["Skipping project agents due to untrusted folder."], "untrusted_folder"),
]


@pytest.mark.parametrize("error, lines, cause", CASES)
def test_a_known_refusal_gets_the_hint_for_its_cause(error, lines, cause):
    hint = match_hint(error, lines, refusal_table())
    assert hint is not None and hint.cause == cause


def test_an_unknown_refusal_gets_no_hint():
    assert match_hint("session_rejected: Internal error", ["starting up", "listening"], refusal_table()) is None
    assert match_hint(None, [], refusal_table()) is None


def test_words_of_an_mcp_failure_in_the_output_alone_do_not_blame_a_server():
    # Agents log MCP chatter freely; only the agent's own error may say a server made it refuse.
    assert match_hint("session_rejected: Internal error", ["MCP server 'docs' connected"], refusal_table()) is None


def test_matching_ignores_case_and_the_first_entry_that_matches_wins():
    table = (RefusalHint("first", ("alpha",), "one"), RefusalHint("second", ("beta",), "two"))
    assert match_hint("BETA then ALPHA", [], table).cause == "first"
    assert match_hint("x", ["Beta"], table).cause == "second"


def test_every_hint_is_one_line_with_a_unique_cause_and_lower_case_patterns():
    table = refusal_table()
    assert len({h.cause for h in table}) == len(table)
    for hint in table:
        assert hint.text and "\n" not in hint.text
        assert hint.patterns and all(p == p.lower() for p in hint.patterns)
