"""Authorization: the bearer token is required on every MCP route and decides the attempt."""

from __future__ import annotations

import json

import pytest

from tests.mcp_endpoint.conftest import MODERN, Harness

INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }
).encode()
POST_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/mcp"), ("GET", "/mcp"), ("DELETE", "/mcp"), ("GET", "/sse"), ("POST", "/messages/?session_id=00")],
)
async def test_every_mcp_route_answers_401_without_a_token_and_counts_the_refusal(
    harness: Harness, method: str, path: str
):
    harness.new_attempt()
    status, headers, _ = await harness.http(method, path, headers=POST_HEADERS, body=INIT if method == "POST" else None)
    assert status == 401
    assert headers.get("WWW-Authenticate", "").startswith("Bearer")
    route = path.split("?")[0]
    await harness.wait_refusal((route, method, 401))


@pytest.mark.parametrize(
    "authorization",
    ["Bearer wrong-token", "Basic dXNlcjpwYXNz", "Bearer", "bearer  ", "Token abc", "Bearer " + "x" * 5000],
)
async def test_a_wrong_or_malformed_token_is_refused_before_the_sdk_sees_the_request(
    harness: Harness, authorization: str
):
    attempt, _ = harness.new_attempt()
    status, _, body = await harness.http("POST", "/mcp", headers={**POST_HEADERS, "Authorization": authorization}, body=INIT)
    assert status == 401 and b"jsonrpc" not in body
    await harness.wait_refusal(("/mcp", "POST", 401))
    assert harness.endpoint.open_connections == 0
    assert harness.events(attempt, "initialize_observed") == []


async def test_the_sdk_client_without_a_token_fails_to_connect_and_leaves_no_evidence(harness: Harness):
    attempt, _ = harness.new_attempt()
    for mode in ("legacy", "auto", MODERN):
        with pytest.raises(Exception):
            async with harness.client(None, mode=mode) as client:
                await client.list_tools()
    with pytest.raises(Exception):
        async with harness.sse("not-a-token", mode="legacy"):
            pass
    assert [e.kind for e in harness.events(attempt)] == ["configured"]
    assert harness.refusals()[("/mcp", "POST", 401)] >= 1


@pytest.mark.parametrize("mode", ["legacy", "auto", MODERN])
async def test_an_older_attempts_token_still_works_but_its_evidence_never_makes_the_current_attempt_green(
    harness: Harness, mode: str
):
    old, old_token = harness.new_attempt()
    current, _ = harness.new_attempt()
    async with harness.client(old_token, mode=mode) as client:
        await client.list_tools()
        result = await client.call_tool("get_task", {})
        assert not result.is_error
    await harness.wait_events(old, "tools_list_observed")
    assert harness.row(old).status == "active"
    assert harness.row(current).status == "configured"
    assert [e.kind for e in harness.events(current)] == ["configured"]
    assert harness.ledger.history.current is not None
    assert harness.ledger.history.current.attempt_id == current


async def test_a_legacy_session_is_bound_to_the_attempt_that_opened_it(harness: Harness):
    _, old_token = harness.new_attempt()
    _, new_token = harness.new_attempt()
    status, headers, _ = await harness.http("POST", "/mcp", token=old_token, headers=POST_HEADERS, body=INIT)
    assert status == 200
    session_id = headers["mcp-session-id"]
    # The same session presented with another attempt's token is, to that token, a session that does not exist.
    status, _, _ = await harness.http(
        "DELETE", "/mcp", token=new_token, headers={"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
    )
    assert status == 404
    await harness.wait_refusal(("/mcp", "DELETE", 404))
    status, _, _ = await harness.http(
        "DELETE", "/mcp", token=old_token, headers={"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
    )
    assert status == 200


async def test_tokens_of_attempts_no_longer_kept_stop_working(harness: Harness):
    _, oldest_token = harness.new_attempt()
    for _ in range(3):  # three newer attempts: the oldest is dropped from history, and its token forgotten
        harness.new_attempt()
    status, _, _ = await harness.http("POST", "/mcp", token=oldest_token, headers=POST_HEADERS, body=INIT)
    assert status == 401
