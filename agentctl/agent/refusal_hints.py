"""Owns the table of known reasons a real agent refuses a session or a prompt, and the matcher that picks a
hint for `agentctl run` from the agent's error and its last lines of output. Pure: no I/O.

The patterns are the texts real agents print (Claude Code, Codex, Gemini CLI, fast-agent, the ACP SDK),
matched case-insensitively as plain substrings. The first entry of the table that matches wins, so the
specific causes come before the generic ones: an agent's own causes (Claude Code's root refusal, Gemini CLI's
untrusted folder) live in its module (agentctl/agent/clis/, `refusal_hints`) and the registry puts them
before this generic table (`refusal_table`).
A hint is advice for a person at a terminal: it quotes nothing of what it matched.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

__all__ = ["HINTS", "RefusalHint", "match_hint"]


class RefusalHint(NamedTuple):
    cause: str  # a stable short name (tests and docs use it)
    patterns: tuple[str, ...]  # lower-case substrings of the error or of a line of output
    text: str  # what to tell the person, one line
    error_only: bool = False  # match the agent's error alone, not its output (which logs such words freely)


HINTS: tuple[RefusalHint, ...] = (
    RefusalHint(
        "mcp_server_failed",
        ("mcp server", "mcp client for", "mcpserver"),
        "The agent refused because an MCP server it was given failed: the rows above say which; "
        "`agentctl test-endpoint NAME` checks one from the daemon.",
        error_only=True,
    ),
    RefusalHint(
        "api_key_missing",
        ("api key is missing", "api key not", "api_key is not set", "api_key not set", "missing api key",
         "no api key", "invalid api key", "invalid x-api-key", "incorrect api key"),
        "The agent has no usable API key: set its key variable in [agent] env (ANTHROPIC_API_KEY, "
        "OPENAI_API_KEY, GEMINI_API_KEY, ...), or log the CLI in once as the user agentctl runs as.",
    ),
    RefusalHint(
        "authentication_required",
        ("authentication required", "auth_required", "not logged in", "please log in", "please login",
         "unauthorized", "unauthenticated", "/login"),
        "The agent wants to be authenticated first: set its API key variable in [agent] env (agentctl then "
        "sends ACP authenticate with the matching advertised method), name the method in [agent] auth_method, "
        "or log its CLI in as the user agentctl runs as.",
    ),
    RefusalHint(
        "program_not_found",
        ("command not found", "no such file or directory", "enoent", "executable file not found"),
        "A program the agent needs was not found: check that its CLI (and node, for npm agents) is "
        "installed and on the PATH given in [agent] env.",
    ),
    RefusalHint(
        "provider_unreachable",
        ("enotfound", "getaddrinfo", "name or service not known", "failed to lookup address",
         "econnrefused", "network is unreachable", "stream disconnected before completion"),
        "The agent cannot reach its model provider: check the network, proxy variables and DNS for "
        "the agent's process.",
    ),
    RefusalHint(
        "rate_limited",
        ("rate limit", "rate_limit", "quota", "too many requests", "resource_exhausted"),
        "The model provider refused for rate limits or quota: wait, or use another key or plan.",
    ),
    RefusalHint(
        "closed_before_answer",
        ("query closed before response received",),
        "The agent's inner process ended before answering: its recent output above usually says why "
        "(as root, Claude Code needs IS_SANDBOX=1).",
    ),
)


def match_hint(error: str | None, lines: Iterable[str] = (), table: tuple[RefusalHint, ...] = HINTS) -> RefusalHint | None:
    """The first entry of `table` whose pattern occurs in the error or (unless `error_only`) in an output line."""
    said = (error or "").lower()
    everything = "\n".join([said, *lines]).lower()
    for hint in table:
        haystack = said if hint.error_only else everything
        if any(pattern in haystack for pattern in hint.patterns):
            return hint
    return None
