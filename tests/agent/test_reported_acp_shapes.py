"""The readers of each agent's own MCP status shape, frame by frame: what each keeps, and what it never does
(a free-text notice sets no row, a name agentctl did not deliver is ignored, an error's URL and secrets are
redacted). The end-to-end replay through the daemon is tests/agent/test_reported_acp_replay.py."""

from __future__ import annotations

import pytest

from agentctl.agent.clis import claude, codex, kiro, opencode
from agentctl.agent.clis import plan_report

DELIVERED = ["docs", "kandev"]


def _one(found):
    source, reports = found
    assert len(reports) == 1
    r = reports[0]
    return source, r.name, r.state, r.raw_state, r.reason_code


@pytest.mark.parametrize(("title", "state"), [('MCP server "docs" failed to start', "failed"),
                                             ('MCP server "docs" needs authentication', "needs_auth")])
def test_claude_agent_acp_notice_titles_set_the_row_only_in_the_adapters_exact_words(title, state) -> None:
    update = {"sessionUpdate": "notice", "severity": "warning", "title": title, "description": "x"}
    assert _one(claude.parse_acp_update(update, DELIVERED))[:3] == ("claude-agent-acp:notice", "docs", state)
    for free in (f"The {title}", f"{title}, retrying", title.replace('"', "'")):
        assert claude.parse_acp_update({**update, "title": free}, DELIVERED) is None, free
    assert claude.parse_acp_update(update, ["other"]) == ("claude-agent-acp:notice", [])


def test_claude_agent_acp_meta_relay_is_read_from_the_structure_not_the_text() -> None:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "anything"},
              "_meta": {"claudeCode": {"kind": "mcpServerStatus", "server": "docs", "status": "needs-auth"}}}
    assert _one(claude.parse_acp_update(update, DELIVERED)) == (
        "claude-agent-acp:meta", "docs", "needs_auth", "needs-auth", "agent_reported_needs_auth")
    assert claude.parse_acp_update({**update, "_meta": {"claudeCode": {"kind": "other"}}}, DELIVERED) is None
    assert claude.parse_acp_update({**update, "sessionUpdate": "tool_call"}, DELIVERED) is None


def test_codex_acp_mcp_startup_reads_the_server_from_the_call_id_and_redacts_the_error() -> None:
    text = ("[codex-acp forwarded startup error] MCP server `my docs` failed to start: error sending request for "
            "url (http://10.0.0.5:81/pathCANARY41/mcp?key=queryCANARY41) token=secretCANARY41")
    update = {"sessionUpdate": "tool_call", "toolCallId": "mcp_startup.my%20docs.4f1c", "status": "failed",
              "title": "mcp__my docs__startup", "content": [{"type": "content", "content": {"type": "text", "text": text}}]}
    source, [report] = codex.parse_acp_update(update, ["my docs"], ["secretCANARY41"])
    assert (source, report.name, report.state, report.reason_code) == (
        "codex-acp:mcp-startup", "my docs", "failed", "agent_reported_failed")
    assert report.summary.startswith("MCP server `my docs` failed to start") and "CANARY" not in report.summary
    assert "http://10.0.0.5:81" in report.summary
    assert codex.parse_acp_update({**update, "toolCallId": "call_1"}, ["my docs"]) is None
    assert codex.parse_acp_update({**update, "status": "in_progress"}, ["my docs"]) == ("codex-acp:mcp-startup", [])


def test_kiro_extension_methods_each_set_the_row_and_never_keep_an_oauth_url() -> None:
    sid = {"sessionId": "s"}
    assert [r.state for r in kiro.parse_ext(kiro.INITIALIZED, {**sid, "serverName": "docs"}, DELIVERED)] == ["connected"]
    [auth] = kiro.parse_ext(kiro.OAUTH_REQUEST, {**sid, "serverName": "docs", "oauthUrl": "https://a/CANARY42"}, DELIVERED)
    assert auth.state == "needs_auth" and "CANARY" not in repr(auth)
    [failed] = kiro.parse_ext(kiro.INIT_FAILURE, {**sid, "serverName": "docs", "error": "spawn ENOENT"}, DELIVERED)
    assert (failed.state, failed.summary) == ("failed", "spawn ENOENT")
    status = kiro.parse_ext(kiro.STATUS, {**sid, "servers": [
        {"name": "docs", "status": "failed", "failedAuthorization": True},
        {"name": "kandev", "status": "connected", "tools": [{"name": "a"}]},
        {"name": "ghost", "status": "failed"}]}, DELIVERED)
    assert [(r.name, r.state, r.tool_count) for r in status] == [("docs", "needs_auth", None), ("kandev", "connected", 1)]
    assert kiro.parse_ext("_kiro.dev/metadata", {}, DELIVERED) is None


def test_opencode_serve_status_maps_every_state_and_keeps_only_delivered_servers() -> None:
    body = (b'{"docs":{"status":"failed","error":"SSE error: Unable to connect. http://h:1/pathCANARY43"},'
            b'"kandev":{"status":"connected"},"mine":{"status":"needs_auth"}}')
    reports = opencode.parse_status(body, DELIVERED)
    assert [(r.name, r.state) for r in reports] == [("docs", "failed"), ("kandev", "connected")]
    assert "CANARY" not in reports[0].summary and reports[0].summary.startswith("SSE error")
    assert opencode.parse_status(b"[]", DELIVERED) is None and opencode.parse_status(b"nope", DELIVERED) is None
    reports = opencode.parse_status(b'{"docs":{"status":"needs_client_registration","error":"x"}}', DELIVERED)
    assert [(r.state, r.raw_state) for r in reports] == [("needs_auth", "needs_client_registration")]


def test_a_codex_app_server_run_is_read_for_its_startup_notifications_and_exec_says_why_not() -> None:
    plan = plan_report("codex", ["codex", "-c", "x=1", "app-server"])
    assert (plan.source, plan.note) == ("codex:app-server", None)
    note = plan_report("codex", ["codex", "exec", "hi"]).note
    assert "does not drive" not in note and "app-server" in note


def test_opencode_serve_is_asked_only_at_a_loopback_address_it_printed() -> None:
    assert opencode.is_serve(["opencode", "serve", "--port", "0"]) and not opencode.is_serve(["opencode", "run", "x"])
    assert plan_report("opencode", ["opencode", "serve"]).source == "opencode:serve"
    assert opencode.loopback_base("http://127.0.0.1:4096") == "http://127.0.0.1:4096"
    assert opencode.loopback_base("http://[::1]:4096/") == "http://[::1]:4096"
    for elsewhere in ("http://10.0.0.5:4096", "http://example.com:80", "https://127.0.0.1:1", "http://127.0.0.1"):
        assert opencode.loopback_base(elsewhere) is None, elsewhere


def test_the_built_in_servers_tools_are_kept_as_codex_and_kiro_list_them_and_no_other_servers() -> None:
    from tests.agent.reported_support import codex_stdout

    reader = codex.CodexAppServerReader(["research", "closed"], builtin="research")
    reports = reader.feed(codex_stdout()) + reader.close()
    listed = [r for r in reports if r.name == "research" and r.raw_state == "connected"]
    assert listed and listed[-1].exposed_tools == ["add", "echo"], "real Codex 0.171.0's status list"
    assert all(r.exposed_tools is None for r in reports if r.name != "research")
    status = {"sessionId": "s", "servers": [{"name": "kandev", "status": "connected",
                                             "tools": [{"name": "get_task"}, {"name": "bad name"}, {}]},
                                            {"name": "docs", "status": "connected", "tools": [{"name": "x"}]}]}
    kandev, docs = kiro.parse_ext(kiro.STATUS, status, DELIVERED, builtin="kandev")
    assert (kandev.exposed_tools, kandev.tool_count, docs.exposed_tools) == (["get_task"], 3, None)
