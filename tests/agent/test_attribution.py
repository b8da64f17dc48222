"""Attribution of an agent's error to MCP servers is exact: structured data first, then only a name the text
names as a server; never a name inside a URL, host, path or longer word; ambiguity names no server.

Two tables: adversarial cases written here, and every real message collected from claude-code-acp,
codex-acp, fast-agent, gemini-cli and the ACP SDK (tests/agent/data/agent_errors, with provenance)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentctl.agent.attribution import attribute, error_text, names_as_server, structured_reasons

DATA = Path(__file__).parent / "data" / "agent_errors"
# Every server delivered in the runs the real messages come from (and Claude Code's own `acp`).
RUN_SERVERS = ("research", "closed", "closedport1", "err500", "unauth", "nocmd", "docs", "sseclosed", "acp")

# (text, delivered, the servers it names)
TEXT_CASES = [
    # named as a server: the phrasings agents use
    ("MCP server 'docs' unreachable: ConnectError", ["docs", "github"], ("docs",)),
    ('[ERROR] MCP server "docs" Connection failed: fetch failed', ["docs"], ("docs",)),
    ("MCP Server: 'docs': Failed to initialize - see details.", ["docs"], ("docs",)),
    ("Error during discovery for MCP server 'docs': fetch failed", ["docs"], ("docs",)),
    ('McpStartupUpdateEvent { server: "docs", status: Failed { error: "x" } }', ["docs"], ("docs",)),
    ("MCP client for `docs` failed to start", ["docs"], ("docs",)),
    ('the "docs" MCP server refused the connection', ["docs"], ("docs",)),
    ("mcp SERVER 'docs' failed", ["docs"], ("docs",)),  # the phrase in any case
    ("MCP server docs-api failed", ["docs-api"], ("docs-api",)),  # unquoted, but not a word
    ("The err500 MCP server is not logged in.", ["err500"], ("err500",)),
    ("MCP server my_docs.", ["my_docs"], ("my_docs",)),  # a full stop ends the sentence, not the name
    ("MCP server 'docs' at https://docs.example.com/mcp failed", ["docs"], ("docs",)),
    # inside a URL, a host, a path or a longer identifier: never
    ("fetch https://docs.example.com/mcp failed", ["docs"], ()),
    ("getaddrinfo ENOTFOUND docs.localhost", ["docs"], ()),
    ("open /srv/docs/x: no such file", ["docs"], ()),
    ("MCP server docsearch failed", ["docs"], ()),
    ("MCP server 'my-docs' failed", ["docs"], ()),
    ("MCP server 'docs-v2' failed", ["docs", "docs-v2"], ("docs-v2",)),
    ("MCP server docs.example.com failed", ["docs.example"], ()),
    ("MCP server api-v2:8080 refused", ["api-v2"], ()),
    ('endpoint_host="docs.localhost" endpoint_path="/docs/mcp"', ["docs"], ()),
    ('AuthRequired(www_authenticate_header: "Bearer realm=\\"research\\"")', ["research"], ()),
    # a name that could be a word, unquoted: ambiguous
    ("MCP server docs failed", ["docs"], ()),
    ("cannot reach docs: refused", ["docs"], ()),
    ("MCP server closed the connection", ["closed"], ()),
    ("Transport channel closed", ["closed"], ()),
    ("The server failed", ["server"], ()),
    ("MCP server unavailable: docs: connect refused", ["docs"], ()),
    # two servers named: ambiguous, report-level
    ("MCP server 'docs' failed because MCP server 'github' was not ready", ["docs", "github"], ()),
    ("MCP server 'docs' and MCP server 'docs' failed", ["docs", "github"], ("docs",)),  # one server, twice
    # names compare exactly; regex metacharacters are literal; unicode works
    ("MCP server 'Docs' failed", ["docs"], ()),
    ("MCP server 'a.b' failed", ["a.b", "aXb"], ("a.b",)),
    ("MCP server 'aXb' failed", ["a.b"], ()),
    ("MCP server 'a+b' failed", ["a+b", "aab"], ("a+b",)),
    ("MCP server '(x)|y' failed", ["y", "(x)|y"], ("(x)|y",)),
    ("MCP server 'dökü' failed", ["dökü"], ("dökü",)),
    ("MCP server dökü failed", ["dökü"], ()),  # letters only, unquoted: a word
    ("MCP server '名前-2' failed", ["名前-2"], ("名前-2",)),
    # not delivered, or no text
    ("MCP server 'other' failed", ["docs"], ()),
    ("", ["docs"], ()),
]


@pytest.mark.parametrize(("text", "delivered", "named"), TEXT_CASES, ids=[c[0][:60] or "empty" for c in TEXT_CASES])
def test_free_text_names_a_server_only_where_it_names_it_as_a_server(
    text: str, delivered: list[str], named: tuple[str, ...]
) -> None:
    found = attribute(text, None, delivered)
    assert found.servers == named
    assert found.by == ("text" if named or found.ambiguous else "none")


STRUCTURED_CASES = [
    ({"server": "docs"}, ("docs",), {"docs": ""}),
    ({"mcpServer": "docs", "reason": "connect refused"}, ("docs",), {"docs": "connect refused"}),
    ({"mcpServer": "docs", "details": "connect refused"}, ("docs",), {"docs": "connect refused"}),
    ({"servers": [{"name": "docs", "reason": "refused"}, {"name": "github", "message": "401"}]},
     ("docs", "github"), {"docs": "refused", "github": "401"}),
    ({"servers": ["github"]}, ("github",), {"github": ""}),
    ({"server": "not-delivered"}, (), {}),  # structured data decides, even when it names nobody we sent
]


@pytest.mark.parametrize(("data", "named", "reasons"), STRUCTURED_CASES)
def test_structured_data_decides_over_the_text_and_gives_each_server_its_reason(
    data: dict[str, Any], named: tuple[str, ...], reasons: dict[str, str]
) -> None:
    # The text names another server: structured data wins.
    found = attribute("MCP server 'files' failed", data, ["docs", "github", "files"])
    assert (found.servers, found.reasons, found.by) == (named, reasons, "structured")


def test_only_the_datas_own_text_is_read_never_an_echo_of_the_request() -> None:
    echo = {"errors": [{"loc": ["cwd"], "input": {"mcpServers": [{"name": "docs", "url": "http://docs/mcp"}]},
                        "msg": "MCP server 'docs' is listed"}]}
    assert attribute("Invalid params", echo, ["docs"]).servers == ()
    assert structured_reasons(echo) == {}
    details = {"details": "MCP server 'docs' unreachable: ConnectError"}
    assert error_text("Internal error", details) == "Internal error: MCP server 'docs' unreachable: ConnectError"
    assert attribute("Internal error", details, ["docs"]).servers == ("docs",)
    assert error_text("same", {"message": "same"}) == "same"
    huge = "x" * 100_000 + " MCP server 'docs' failed"
    assert names_as_server(huge, "docs") and attribute(huge, None, ["docs"]).servers == (), "only the start is read"


def _messages() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(DATA.glob("*.json")):
        doc = json.loads(path.read_text())
        assert doc["agent"] and doc["version"] and doc["how"], f"{path.name}: provenance missing"
        out += [(f"{path.stem}:{i}", m) for i, m in enumerate(doc["messages"])]
    return out


MESSAGES = _messages()


@pytest.mark.parametrize(("where", "message"), MESSAGES, ids=[w for w, _ in MESSAGES])
def test_every_real_agent_message_is_attributed_to_the_server_it_names_and_no_other(
    where: str, message: dict[str, Any]
) -> None:
    error = message.get("structured")
    if isinstance(error, dict) and {"code", "message"} <= set(error):
        found = attribute(error["message"], error.get("data"), RUN_SERVERS)  # an ACP error response
    else:
        found = attribute(message["text"], None, RUN_SERVERS)  # a stderr line, a log line, a notice
    expected = message.get("names_server")
    expected = () if expected is None else (expected,) if isinstance(expected, str) else tuple(expected)
    if len(expected) > 1:
        # One line naming several failed servers (Codex's McpStartupComplete): ambiguous as free text, so by
        # rule no row turns red from it (each server's own McpStartupUpdate line names it alone).
        assert found.servers == () and found.ambiguous
    else:
        assert found.servers == expected, message["text"][:200]
    for name in message.get("server_names_in_text_not_named_as_server") or []:
        if name not in expected:
            assert name not in found.servers, f"{name!r} occurs in the text without naming a server"


def test_the_real_messages_cover_every_agent_and_both_outcomes() -> None:
    agents = {where.split(":")[0] for where, _ in MESSAGES}
    assert {"acp-python-sdk", "claude-code-acp", "codex-acp", "fast-agent", "gemini-cli"} <= agents
    named = [m for _, m in MESSAGES if m.get("names_server")]
    decoys = [m for _, m in MESSAGES if m.get("server_names_in_text_not_named_as_server")]
    assert len(MESSAGES) >= 100 and len(named) >= 50 and len(decoys) >= 8
