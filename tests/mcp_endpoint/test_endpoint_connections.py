"""Legacy connection identity and attribution across attempts."""

from __future__ import annotations

import asyncio
import json

from tests.mcp_endpoint.conftest import MODERN, Harness

LEGACY = "2025-11-25"
POST_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def _init(name: str = "raw") -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": name, "version": "1"}},
        }
    ).encode()


async def test_two_concurrent_connections_get_distinct_opaque_connection_ids(harness: Harness):
    attempt, token = harness.new_attempt()
    async with harness.client(token, mode="legacy") as a, harness.sse(token, mode="legacy") as b:
        await asyncio.gather(a.list_tools(), b.list_tools())
        inits = await harness.wait_events(attempt, "initialize_observed", 2)
        assert harness.endpoint.open_connections == 2
    ids = {e.connection_id for e in inits}
    assert len(ids) == 2 and all(i and i.startswith("conn_") for i in ids)
    closed = await harness.wait_events(attempt, "connection_closed", 2)
    assert {e.connection_id for e in closed} == ids


async def test_the_connection_id_is_minted_by_the_daemon_not_derived_from_the_sdk_session_id(harness: Harness):
    attempt, token = harness.new_attempt()
    status, headers, _ = await harness.http("POST", "/mcp", token=token, headers=POST_HEADERS, body=_init())
    assert status == 200
    session_id = headers["mcp-session-id"]
    (init,) = await harness.wait_events(attempt, "initialize_observed")
    assert init.connection_id and session_id not in init.connection_id and init.connection_id[5:] not in session_id


async def test_evidence_lands_in_the_right_attempt_across_a_rollover(harness: Harness):
    first, first_token = harness.new_attempt()
    async with harness.client(first_token, mode="legacy") as old_client:
        await old_client.list_tools()
        (old_init,) = await harness.wait_events(first, "initialize_observed")

        second, second_token = harness.new_attempt()  # a reset: the new attempt is current at once
        await old_client.call_tool("get_task", {})  # the old connection keeps working, for the old attempt
        async with harness.client(second_token, mode=MODERN) as new_client:
            await new_client.list_tools()
    await harness.wait_events(first, "tool_call_observed")
    await harness.wait_events(second, "tools_list_observed")
    (closed,) = await harness.wait_events(first, "connection_closed")
    assert closed.connection_id == old_init.connection_id
    assert harness.events(second, "tool_call_observed") == []
    assert harness.events(second, "connection_closed") == []
    assert harness.row(second).era == "modern" and harness.row(second).connection_id is None
    assert harness.attempt(first).superseded_at is not None


async def test_a_later_connection_in_the_same_attempt_gets_a_new_connection_id(harness: Harness):
    attempt, token = harness.new_attempt()
    for _ in range(2):
        async with harness.client(token, mode="legacy") as client:
            await client.list_tools()
    closed = await harness.wait_events(attempt, "connection_closed", 2)
    assert closed[0].connection_id != closed[1].connection_id
    row = harness.row(attempt)
    assert row.connection_id == closed[1].connection_id and row.disconnected_at is not None


async def test_an_idle_legacy_session_times_out_with_connection_closed(make_harness):
    harness: Harness = await make_harness(session_idle_timeout=0.3)
    attempt, token = harness.new_attempt()
    status, headers, _ = await harness.http("POST", "/mcp", token=token, headers=POST_HEADERS, body=_init())
    assert status == 200
    (init,) = await harness.wait_events(attempt, "initialize_observed")
    (closed,) = await harness.wait_events(attempt, "connection_closed", timeout=5)
    assert closed.connection_id == init.connection_id
    status, _, _ = await harness.http(
        "POST",
        "/mcp",
        token=token,
        headers={**POST_HEADERS, "Mcp-Session-Id": headers["mcp-session-id"], "MCP-Protocol-Version": LEGACY},
        body=json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode(),
    )
    assert status == 404  # the expired session is gone: counted as a refusal, no evidence
    await harness.wait_refusal(("/mcp", "POST", 404))


async def test_a_second_connection_with_the_same_token_that_closes_never_makes_the_open_one_read_disconnected(
    harness: Harness,
):
    attempt, token = harness.new_attempt()
    async with harness.client(token, mode="legacy") as agent:  # the agent's own connection stays open
        await agent.list_tools()
        (own,) = await harness.wait_events(attempt, "initialize_observed")
        async with harness.client(token, mode="legacy") as other:  # e.g. `mcp list` run with the same config
            await other.list_tools()
        (closed,) = await harness.wait_events(attempt, "connection_closed")
        assert closed.connection_id != own.connection_id
        row = harness.row(attempt)
        assert (row.connection_id, row.disconnected_at) == (own.connection_id, None)
        assert {c.connection_id: c.closed_at is None for c in row.connections} == {
            own.connection_id: True, closed.connection_id: False}
    (*_, last) = await harness.wait_events(attempt, "connection_closed", 2)
    row = harness.row(attempt)
    assert (row.connection_id, row.disconnected_at) == (own.connection_id, last.occurred_at), "now both are closed"
