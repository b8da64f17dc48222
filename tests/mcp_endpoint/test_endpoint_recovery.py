"""One malformed request is failure evidence only until a later success of the same attempt: the endpoint
records the failure and then the success, and the row shows the success with the failure kept as detail."""

from __future__ import annotations

import json
from typing import Any

from tests.mcp_endpoint.conftest import MODERN, Harness

LEGACY = "2025-11-25"
POST = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def _rpc(method: str, params: dict[str, Any], id_: int = 1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}).encode()


def _modern_meta(name: str) -> dict[str, Any]:
    return {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                      "io.modelcontextprotocol/clientCapabilities": {},
                      "io.modelcontextprotocol/clientInfo": {"name": name, "version": "1"}}}


async def _initialize_without_client_info(harness: Harness, token: str) -> None:
    status, _, body = await harness.http(
        "POST", "/mcp", token=token, headers=POST,
        body=_rpc("initialize", {"protocolVersion": LEGACY, "capabilities": {}}))
    assert status == 200 and b'"error"' in body


async def test_an_initialize_without_client_info_is_failure_evidence_until_a_valid_client_lists_tools(
    harness: Harness,
):
    attempt, token = harness.new_attempt()
    await _initialize_without_client_info(harness, token)
    (failure,) = await harness.wait_events(attempt, "explicit_error")
    assert failure.reason_code == "initialize_failed"
    assert harness.row(attempt).status == "failed"

    async with harness.client(token, mode="legacy") as client:
        await client.list_tools()
        assert not (await client.call_tool("get_task", {})).is_error
    await harness.wait_events(attempt, "tool_call_observed")
    row = harness.row(attempt)
    assert row.status == "active" and row.reason_code is None
    assert row.failed_at == failure.occurred_at < row.tools_list_observed_at
    assert row.last_failure is not None and row.last_failure.reason_code == "initialize_failed"
    assert row.last_failure.summary == failure.summary


async def test_a_non_string_cursor_in_a_legacy_session_fails_the_row_until_the_same_session_lists_again(
    harness: Harness,
):
    attempt, token = harness.new_attempt()
    status, headers, _ = await harness.http(
        "POST", "/mcp", token=token, headers=POST,
        body=_rpc("initialize", {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}))
    assert status == 200
    session = {**POST, "Mcp-Session-Id": headers["mcp-session-id"], "MCP-Protocol-Version": LEGACY}
    status, _, body = await harness.http("POST", "/mcp", token=token, headers=session,
                                         body=_rpc("tools/list", {"cursor": 5}, 2))
    assert status == 200 and b"-32602" in body
    (failure,) = await harness.wait_events(attempt, "explicit_error")
    assert failure.reason_code == "tools_list_failed" and failure.connection_id is not None
    assert harness.row(attempt).status == "failed"

    status, _, body = await harness.http("POST", "/mcp", token=token, headers=session,
                                         body=_rpc("tools/list", {}, 3))
    assert status == 200 and b'"tools"' in body
    (listed,) = await harness.wait_events(attempt, "tools_list_observed")
    assert listed.connection_id == failure.connection_id
    row = harness.row(attempt)
    assert row.status == "active" and row.last_failure is not None
    assert row.last_failure.reason_code == "tools_list_failed"


async def test_a_modern_tools_list_with_a_bad_cursor_then_a_valid_one_leaves_the_row_active(harness: Harness):
    attempt, token = harness.new_attempt()
    modern = {**POST, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
    status, _, _ = await harness.http("POST", "/mcp", token=token, headers=modern,
                                      body=_rpc("tools/list", {"cursor": 5, **_modern_meta("raw-modern")}))
    assert status == 400
    await harness.wait_events(attempt, "explicit_error")
    assert harness.row(attempt).status == "failed"

    async with harness.client(token, mode=MODERN) as client:
        assert (await client.list_tools()).tools
    await harness.wait_events(attempt, "tools_list_observed")
    row = harness.row(attempt)
    assert (row.status, row.era, row.connection_id) == ("active", "modern", None)
    assert row.last_failure is not None and row.last_failure.reason_code == "tools_list_failed"


async def test_a_failure_after_the_recovery_makes_the_row_failed_again(harness: Harness):
    attempt, token = harness.new_attempt()
    await _initialize_without_client_info(harness, token)
    async with harness.client(token, mode=MODERN) as client:
        await client.list_tools()
    await harness.wait_events(attempt, "tools_list_observed")
    assert harness.row(attempt).status == "active"
    await _initialize_without_client_info(harness, token)
    await harness.wait_events(attempt, "explicit_error", 2)
    row = harness.row(attempt)
    assert (row.status, row.reason_code) == ("failed", "initialize_failed")
