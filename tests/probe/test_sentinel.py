"""The sentinel itself, driven by the real MCP SDK client and a real HTTP client on loopback, and the
probe's ACP permission policy with the SDK's own schema objects."""

from __future__ import annotations

from typing import Any

import aiohttp
import mcp_types
from acp.schema import PermissionOption, ToolCallUpdate
from mcp.client import Client

from agentctl.probe.run import _ProbeClient
from agentctl.probe.sentinel import SERVER_NAME, TOOL_NAME, TOOL_REPLY, HttpSentinel, clean_stdio_report


async def test_the_sentinel_answers_a_client_without_the_delivered_header_and_says_so() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    sentinel = HttpSentinel(lambda kind, fields: seen.append((kind, fields)), "probe-credential-1234")
    await sentinel.start()
    try:
        info = mcp_types.Implementation(name="sdk-test-client", version="9.9")
        async with Client(sentinel.url, mode="legacy", client_info=info) as client:
            listed = await client.list_tools()
            result = await client.call_tool(TOOL_NAME, {})
    finally:
        await sentinel.stop()
    assert [t.name for t in listed.tools] == [TOOL_NAME]
    assert result.content[0].text == TOOL_REPLY
    kinds = [kind for kind, _ in seen]
    assert kinds[0] == "contact" and {"initialize", "tools_list", "tool_call", "closed"} <= set(kinds)
    init = next(fields for kind, fields in seen if kind == "initialize")
    assert init["client"] == {"name": "sdk-test-client", "version": "9.9"} and init["credential_seen"] is False
    call = next(fields for kind, fields in seen if kind == "tool_call")
    assert call["tool_name"] == TOOL_NAME and call["outcome"] == "ok"
    closed = next(fields for kind, fields in seen if kind == "closed")
    assert closed["connection_id"] == init["connection_id"]


async def test_a_request_refused_before_the_sdk_is_a_contact_with_its_status() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    sentinel = HttpSentinel(lambda kind, fields: seen.append((kind, fields)), "probe-credential-1234")
    await sentinel.start()
    try:
        async with aiohttp.ClientSession() as http:
            # DNS-rebinding protection stays on: a foreign Host is refused (421) before any MCP handler.
            async with http.post(sentinel.url, json={}, headers={"Host": "evil.example"}) as resp:
                assert resp.status == 421
    finally:
        await sentinel.stop()
    statuses = [fields.get("http_status") for kind, fields in seen if kind == "contact"]
    assert statuses == [None, 421]  # first contact on arrival, then the refusal
    assert all(kind == "contact" for kind, _ in seen)


def test_stdio_reports_are_validated_field_by_field() -> None:
    kind, fields = clean_stdio_report(
        b'{"kind":"initialize","client":{"name":"a","version":"1"},"protocol_version":"2025-11-25",'
        b'"arguments":{"secret":"x"},"tool_name":"bad name with spaces","credential_seen":true}\n'
    )
    assert kind == "initialize"
    assert fields == {"transport": "stdio", "client": {"name": "a", "version": "1"},
                      "protocol_version": "2025-11-25", "tool_name": None, "credential_seen": True}
    assert clean_stdio_report(b'{"kind":"closed"}') is None
    assert clean_stdio_report(b"not json") is None


async def test_permission_is_granted_only_for_the_sentinel_tool() -> None:
    client = _ProbeClient()
    options = [
        PermissionOption(option_id="yes", name="Allow once", kind="allow_once"),
        PermissionOption(option_id="no", name="Reject", kind="reject_once"),
    ]
    sentinel_call = ToolCallUpdate(tool_call_id="1", title=f"{SERVER_NAME}/{TOOL_NAME}")
    other_call = ToolCallUpdate(tool_call_id="2", title="Edit /etc/hosts")
    granted = await client.request_permission("s", sentinel_call, options)
    denied = await client.request_permission("s", other_call, options)
    assert granted.outcome.outcome == "selected" and granted.outcome.option_id == "yes"
    assert denied.outcome.outcome == "cancelled"
    assert (client.permission_requests, client.permissions_granted) == (2, 1)
