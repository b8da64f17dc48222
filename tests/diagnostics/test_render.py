"""Human output of diagnostics, endpoint tests and the tools views: every state says what it means, in 80
columns, colour only when asked. Snapshots pin the text; the assertions next to them pin the meaning."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import msgspec
import pytest

from agentctl.control.render import AMBER, GREEN, GREY, RED, RESET
from agentctl.diagnostics.diagnostics import ToolLookupError, build_tools_view, find_tool
from agentctl.diagnostics.render import render_diagnostics, render_endpoint_test, render_tool, render_tools
from agentctl.evidence.catalog import build_catalog, load_estimator
from agentctl.evidence.contract.control import EndpointTestResponse
from agentctl.evidence.contract.report import EndpointTestResult
from tests.diagnostics.render_support import every_state_ctx, every_state_diagnostics

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ATT = re.compile(r"att_[0-9a-f]{16}")
T = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _norm(text: str) -> str:
    return ATT.sub("att_X", text)


def _width(text: str) -> int:
    return max(len(ANSI.sub("", line)) for line in text.splitlines())


def _block(text: str, head: str) -> str:
    """The lines of one server block (from its head line to the next server or attempt)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"^  \S|^\S", lines[i])), len(lines))
    return "\n".join(lines[start:end])


# ---- diagnostics ------------------------------------------------------------------------------------------

HEADER = """\
agentctl diagnostics: safe to paste into a bug report
(no agent output, prompts, arguments, header or env values, tokens or full URLs)
daemon 0.1.0 · contract 3 · generated 2026-01-02 03:04:36 UTC
execution  exec_0123456789abcdef
instance   inst_0123456789abcdef
task       task-1 · session sess-1
agent id   agent-1 · profile profile-1
Daemon: not ready (the agent has exited, exit code 3)
Agent: reference-agent 0.1.0 (ACP protocol 1); exited (exited with code 3) at
2026-01-02 03:04:35
Upstream: not configured (the embedded backend answers tool calls)

Checklist: [x] observed  [ ] not observed  [-] not observable by agentctl
Current attempt att_X (reset) · ACP session acp-new
  started 2026-01-02 03:04:15 · session accepted 2026-01-02 03:04:27
"""

ACTIVE = """\
  kandev  active
    builtin · http · http://127.0.0.1:40123
    7 tools loaded, used
    the agent has exited, exit code 3; no more evidence will come from it
    [x] configured        2026-01-02 03:04:16
    [x] delivered         2026-01-02 03:04:22
    [x] session accepted  2026-01-02 03:04:27
    [x] initialize        2026-01-02 03:04:28  legacy era
    [x] tools loaded      2026-01-02 03:04:29  7 tools
    [x] used              2026-01-02 03:04:31  2 calls, 1 returned an error
    [ ] disconnected      not observed
    [ ] failed            no attachment error"""

THIRD_PARTY_DELIVERED = """\
  github  delivered · connection unverified
    http · https://api.github.example
    sent to the agent; third-party servers connect directly to the agent, so
    this is expected
    the agent has exited, exit code 3; no more evidence will come from it
    [x] configured        2026-01-02 03:04:17
    [x] delivered         2026-01-02 03:04:23
    [x] session accepted  2026-01-02 03:04:27
    [ ] failed            no attachment error
    [-] initialize, tools loaded, used, disconnected: not observable: the agent
    connects to this server directly
    endpoint test (reachability, not attachment): reachable from the daemon, 12
    tools listed in 48.2 ms (tested 2026-01-02 03:04:33)"""

FAILED = """\
  broken  failed
    http · https://broken.example
    the agent refused the session
    the agent has exited, exit code 3; no more evidence will come from it
    session_rejected: the agent could not reach it
    [x] configured        2026-01-02 03:04:18
    [x] delivered         2026-01-02 03:04:24
    [x] session accepted  2026-01-02 03:04:27
    [x] failed            2026-01-02 03:04:32  session_rejected
    [-] initialize, tools loaded, used, disconnected: not observable: the agent
    connects to this server directly
    endpoint test (reachability, not attachment): test failed: could not connect
    to the server (tested 2026-01-02 03:04:34) · connect_failed: could not
    connect"""

FILTERED = """\
  local-fs  filtered
    stdio · fs-server
    not sent: the agent does not advertise MCP over HTTP
    the agent has exited, exit code 3; no more evidence will come from it
    http_unsupported
    [x] configured        2026-01-02 03:04:19
    [x] filtered          2026-01-02 03:04:25  http_unsupported
    [ ] delivered         not observed
    [ ] session accepted  not observed
    [ ] failed            no attachment error"""

CONNECTED_PREVIOUS = """\
  kandev  connected
    builtin · http · http://127.0.0.1:40123
    initialized, tools not listed yet
    [x] configured        2026-01-02 03:04:08
    [x] delivered         2026-01-02 03:04:10
    [x] session accepted  2026-01-02 03:04:12
    [x] initialize        2026-01-02 03:04:13  legacy era
    [ ] tools loaded      not observed
    [ ] used              not observed
    [x] disconnected      2026-01-02 03:04:14
    [ ] failed            no attachment error"""


@pytest.fixture
def diagnostics_text() -> str:
    d = every_state_diagnostics()
    d.generated_at = d.generated_at.replace(microsecond=0)
    return _norm(render_diagnostics(d, color=False))


def test_diagnostics_header_names_versions_identity_agent_and_upstream(diagnostics_text: str) -> None:
    # The agent exited: the status line says so (it used to say "waiting for agent", for an agent that will
    # not come back), and every row of the current attempt says its evidence is the last.
    assert diagnostics_text.startswith(HEADER)


@pytest.mark.parametrize(
    ("head", "snapshot", "meaning"),
    [
        ("  kandev  active", ACTIVE, "every step of the built-in server observed, with its time and tool use"),
        ("  github  delivered", THIRD_PARTY_DELIVERED, "third party: expected, not a failure; reachability labelled"),
        ("  broken  failed", FAILED, "failed with its reason; the endpoint test labelled a test failure"),
        ("  local-fs  filtered", FILTERED, "filtered with its reason, never delivered"),
    ],
)
def test_each_current_row_is_a_checklist(diagnostics_text: str, head: str, snapshot: str, meaning: str) -> None:
    assert _block(diagnostics_text, head) == snapshot, meaning


def test_the_checklist_says_what_each_state_means(diagnostics_text: str) -> None:
    unavailable = _block(diagnostics_text, "  cli-only  unavailable")
    assert "[x] unavailable       2026-01-02 03:04:26  no_passthrough_strategy" in unavailable
    configured = _block(diagnostics_text, "  later  configured")
    assert "not sent to the agent yet" in configured and "[ ] delivered         not observed" in configured
    # A third-party server that was never delivered has nothing the agent could have done: no [-] line.
    assert "[-]" not in configured and "[-]" not in unavailable
    # Previous attempts are kept, with the disconnect shown as detail on the row that stays "connected".
    previous = diagnostics_text.split("Previous attempt att_X (session_new) · ACP session acp-old", 1)[1]
    assert "superseded 2026-01-02 03:04:15" in previous
    assert _block(previous, "  kandev  connected") == CONNECTED_PREVIOUS
    assert diagnostics_text.endswith(
        "HTTP requests refused before MCP (route, method, status: count):\n  /mcp POST 401: 2\n"
    )


def test_diagnostics_fit_80_columns_and_colour_only_when_asked(diagnostics_text: str) -> None:
    assert "\x1b" not in diagnostics_text
    assert _width(diagnostics_text) <= 80
    d = every_state_diagnostics()
    coloured = render_diagnostics(d, color=True)
    assert f"{GREEN}active{RESET}" in coloured and f"{RED}failed{RESET}" in coloured
    assert f"{AMBER}delivered · connection unverified{RESET}" in coloured
    assert f"{AMBER}connected{RESET}" in coloured
    assert f"{GREY}filtered{RESET}" in coloured and f"{GREY}unavailable{RESET}" in coloured
    assert _width(coloured) <= 80


def test_diagnostics_json_is_the_contract_shape() -> None:
    d = every_state_diagnostics()
    data = msgspec.json.decode(msgspec.json.encode(d))
    assert data["contract_version"] == 3 and data["ready"] is False
    steps = {s["step"]: s for s in data["current"]["servers"][0]["steps"]}
    assert steps["tools_loaded"] == {"step": "tools_loaded", "done": True, "at": "2026-01-02T03:04:29Z", "detail": "7 tools"}
    assert steps["disconnected"] == {"step": "disconnected", "done": False}
    assert data["agent"]["exit_code"] == 3 and "upstream" not in data


# ---- endpoint test ----------------------------------------------------------------------------------------


def test_an_endpoint_test_reads_as_reachability_and_a_failure_as_a_test_failure() -> None:
    ok = EndpointTestResponse(
        name="github", attempt_id="att_1", stored=True,
        result=EndpointTestResult(succeeded=True, tested_at=T, tool_count=12, latency_ms=48.25),
    )
    assert render_endpoint_test(ok, color=False) == (
        "github: reachable\n"
        "  reachable from the daemon, 12 tools listed in 48.2 ms (tested 2026-01-02\n"
        "  03:04:05)\n"
        "  reachability from the daemon, not attachment: the row's status is unchanged\n"
        "  stored beside the row of attempt att_1\n"
    )
    bad = EndpointTestResponse(
        name="web", attempt_id=None, stored=False,
        result=EndpointTestResult(
            succeeded=False, tested_at=T, reason_code="timeout", summary="no complete answer within 10 s"
        ),
    )
    text = render_endpoint_test(bad, color=True)
    assert text.startswith(f"web: {RED}test failed{RESET}\n")
    plain = ANSI.sub("", text)
    assert ("test failed: the server did not answer in time (tested 2026-01-02 03:04:05) · timeout: no complete "
            "answer within 10 s") in " ".join(line.strip() for line in plain.splitlines())
    assert "a failed test is a test failure, not proof of what happened inside the agent" in plain
    assert "not stored: there is no attachment attempt yet" in plain


# ---- tools -------------------------------------------------------------------------------------------------

TOOLS = [
    {
        "name": "get_task",
        "description": "Get the task you are working on: its title, description and status.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "update_task",
        "description": "Update the task.\nSecond paragraph.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "description": "The new title, at most 200 characters of plain text"},
                "priority": {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": "1 (highest) to 5"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["title"],
        },
    },
]


def _with_catalog(tools: list[dict], estimator=None):
    ctx = every_state_ctx()
    count, catalog = build_catalog(tools, estimator)
    ctx.ledger.record("tools_list_observed", ctx.ledger.current_attempt_id, "kandev", tool_count=count, catalog=catalog)
    return ctx


def test_tools_lists_the_catalog_with_token_estimates_and_says_they_are_estimates() -> None:
    ctx = _with_catalog(TOOLS, load_estimator())
    text = _norm(render_tools(build_tools_view(ctx), color=False))
    assert text == (
        "kandev tools in attempt att_X: 2 tools, ~126 tokens in all\n"
        "  get_task         ~35 tokens  Get the task you are working on: its title, desc…\n"
        "  update_task      ~91 tokens  Update the task. Second paragraph.\n"
        "~N tokens: o200k_base over each tool's JSON definition; the agent may tokenize\n"
        "differently\n"
        "one tool in detail: agentctl tools NAME\n"
        "\n"
        "github, broken, local-fs, cli-only, later: no catalog: third-party servers\n"
        "connect directly to the agent, so agentctl never sees their tools/list\n"
    )


def test_one_tool_shows_its_description_and_arguments_plus_the_plain_json() -> None:
    ctx = _with_catalog(TOOLS)
    text = _norm(render_tool(find_tool(ctx, "update_task"), color=False))
    head = text.split("Input schema (JSON):\n", 1)[0]
    assert head == (
        "update_task (kandev, attempt att_X)\n"
        "\n"
        "Description:\n"
        "  Update the task.\n"
        "  Second paragraph.\n"
        "\n"
        "Arguments:\n"
        "  name      type             required  description\n"
        "  title     string           yes       The new title, at most 200 characters of\n"
        "                                       plain text\n"
        "  priority  integer | null   no        1 (highest) to 5\n"
        "  tags      array of string  no\n"
        "\n"
    )
    schema = text.split("Input schema (JSON):\n", 1)[1]
    assert msgspec.json.decode(schema) == TOOLS[1]["inputSchema"], "the plain JSON is copyable as is"
    no_args = render_tool(find_tool(ctx, "get_task"), color=False)
    assert "  (no arguments)" in no_args


def test_before_tools_list_the_catalog_is_not_loaded_yet() -> None:
    ctx = every_state_ctx()
    attempt = ctx.ledger.current_attempt_id
    ctx.ledger.begin_attempt("reset", [])  # a fresh attempt: nothing listed yet
    ctx.ledger.record("configured", ctx.ledger.current_attempt_id, "kandev", source="builtin", transport="http")
    ctx.ledger.record("delivered", ctx.ledger.current_attempt_id, "kandev")
    text = _norm(render_tools(build_tools_view(ctx), color=False))
    assert text == (
        "kandev: catalog not loaded yet: the agent has not listed the tools in attempt\n"
        "att_X (status: delivered · connection unverified)\n"
    )
    with pytest.raises(ToolLookupError, match="catalog not loaded yet"):
        find_tool(ctx, "get_task")
    assert attempt != ctx.ledger.current_attempt_id


def test_truncation_is_announced_and_third_party_names_explain_the_missing_catalog() -> None:
    big = [
        {"name": f"t{i:03d}", "description": "x" * 2000,
         "inputSchema": {"type": "object", "properties": {"a": {"type": "string", "description": "y" * 70_000}}}}
        for i in range(200)
    ]
    ctx = _with_catalog(big)
    text = render_tools(build_tools_view(ctx), color=False)
    assert "kandev tools in attempt" in text and ": 200 tools" in text
    assert "catalog truncated: 128 of 200 tools kept (the bound is 128, sorted by name)" in text
    assert "description cut at 1,024 bytes: 128 tools (t000, t001, t002, t003, t004, …)" in text
    assert "input schema dropped (over 64 KiB, or past 512 KiB in all): 128 tools" in text
    assert "no token estimates: the o200k_base encoding is not available" in text
    assert _width(text) <= 80
    detail = render_tool(find_tool(ctx, "t000"), color=False)
    assert "(description cut at 1,024 bytes)" in detail and "(input schema not kept" in detail
    with pytest.raises(ToolLookupError, match="third-party server") as err:
        find_tool(ctx, "github")
    assert err.value.third_party and "connect directly to the agent" in err.value.message
    with pytest.raises(ToolLookupError, match="truncated"):
        find_tool(ctx, "t199")


def test_the_upstream_line_says_connected_or_buffering_with_its_counters() -> None:
    from agentctl.evidence.contract.control import UpstreamStatus

    d = every_state_diagnostics()
    d.upstream = UpstreamStatus(state="buffering", connects=2, dropped_events=5, resyncs=1, last_error="connect_refused")
    text = render_diagnostics(d, color=False)
    assert (
        "Upstream: buffering (evidence is kept and sent with the next snapshot); 2\n"
        "connects; 5 events dropped, 1 resync snapshot; last error connect_refused\n"
    ) in text
    data = msgspec.json.decode(msgspec.json.encode(d))
    assert data["upstream"]["state"] == "buffering"
    d.upstream = UpstreamStatus(state="connected", connects=1, last_connected_at=T)
    assert "Upstream: connected; 1 connect; last connected 2026-01-02 03:04:05\n" in render_diagnostics(d, False)


def test_the_troubleshooting_docs_failed_test_example_is_what_the_renderer_prints() -> None:
    from tests.conftest import REPO

    doc = (REPO / "docs" / "troubleshooting.md").read_text()
    example = re.search(r"```text\n(search: test failed\n.*?)```", doc, re.S)
    assert example, "the example block is gone from docs/troubleshooting.md"
    failed = EndpointTestResponse(
        name="search", attempt_id="att_4f1c2a9e0b7d6e53", stored=True,
        result=EndpointTestResult(succeeded=False, tested_at=T, reason_code="connect_failed",
                                  summary="could not connect to the server (refused or unreachable)"),
    )
    assert render_endpoint_test(failed, color=False) == example.group(1)
