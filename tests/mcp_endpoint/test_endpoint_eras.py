"""Both MCP eras on the same routes, each observed as the right evidence in the right attempt."""

from __future__ import annotations

import json
import re

import threading

import pytest

from agentctl.evidence.estimates import CatalogEstimates, EstimateCache, run_helper
from agentctl.evidence.contract.report import TOKEN_ESTIMATE_METHOD
from tests.mcp_endpoint.conftest import MODERN, Harness, eventually

TASK_TOOL_COUNT = 10
ACCEPT = "application/json, text/event-stream"


async def test_discovery_in_auto_mode_is_a_modern_client_seen_listing_and_calling_without_a_connection(
    harness: Harness,
):
    attempt, token = harness.new_attempt()
    async with harness.client(token, mode="auto") as client:
        assert client.protocol_version == MODERN
        listed = await client.list_tools()
        result = await client.call_tool("get_task", {})
        assert not result.is_error
    assert len(listed.tools) == TASK_TOOL_COUNT

    (init,) = await harness.wait_events(attempt, "initialize_observed")
    (lists,) = await harness.wait_events(attempt, "tools_list_observed")
    (call,) = await harness.wait_events(attempt, "tool_call_observed")
    assert init.era == "modern" and init.protocol_version == MODERN and init.requested_protocol_version == MODERN
    assert init.client is not None and init.client.name
    assert lists.tool_count == TASK_TOOL_COUNT and lists.era == "modern"
    assert call.tool_name == "get_task" and call.outcome == "ok"
    assert all(e.connection_id is None for e in harness.events(attempt))
    row = harness.row(attempt)
    assert row.status == "active" and row.era == "modern" and row.source == "builtin"
    await eventually(lambda: harness.endpoint.bridge.open_exchanges == 0, 5.0, what="all exchanges to end")
    await harness.settle()
    assert harness.events(attempt, "connection_closed") == []  # nothing is invented after the client leaves


async def test_direct_modern_mode_is_observed_from_its_first_request_without_discover(harness: Harness):
    attempt, token = harness.new_attempt()
    async with harness.client(token, mode=MODERN) as client:
        await client.call_tool("list_tasks", {})
        await client.call_tool("get_task", {})
    (init,) = await harness.wait_events(attempt, "initialize_observed")
    calls = await harness.wait_events(attempt, "tool_call_observed", 2)
    assert init.era == "modern" and init.connection_id is None
    assert [c.tool_name for c in calls] == ["list_tasks", "get_task"]
    kinds = [e.kind for e in harness.events(attempt) if e.kind != "configured"]
    assert kinds[0] == "initialize_observed", "the first modern request is the client's first contact"


async def test_legacy_initialize_gets_a_connection_id_that_closes_when_the_client_deletes_its_session(
    harness: Harness,
):
    attempt, token = harness.new_attempt()
    async with harness.client(token, mode="legacy") as client:
        negotiated = client.protocol_version
        await client.list_tools()
        await client.call_tool("get_task", {})
        (init,) = await harness.wait_events(attempt, "initialize_observed")
        assert harness.endpoint.open_connections == 1
    assert init.era == "legacy"
    assert init.connection_id and init.connection_id.startswith("conn_")
    assert init.protocol_version == negotiated and init.requested_protocol_version == negotiated
    assert init.client is not None and init.client.name == "mcp"
    (closed,) = await harness.wait_events(attempt, "connection_closed")
    assert closed.connection_id == init.connection_id
    same = {e.connection_id for e in harness.events(attempt) if e.kind != "configured"}
    assert same == {init.connection_id}
    row = harness.row(attempt)
    assert row.status == "active" and row.disconnected_at is not None and row.connection_id == init.connection_id
    assert harness.endpoint.open_connections == 0


async def test_legacy_sse_is_one_connection_from_initialize_until_the_stream_ends(harness: Harness):
    attempt, token = harness.new_attempt()
    async with harness.sse(token, mode="legacy") as client:
        await client.list_tools()
        await client.call_tool("get_task", {})
        (init,) = await harness.wait_events(attempt, "initialize_observed")
    assert init.era == "legacy" and init.connection_id
    (closed,) = await harness.wait_events(attempt, "connection_closed")
    assert closed.connection_id == init.connection_id
    (call,) = harness.events(attempt, "tool_call_observed")
    assert call.connection_id == init.connection_id and call.era == "legacy"
    assert harness.row(attempt).status == "active"


async def test_sse_in_auto_mode_is_attributed_as_modern_requests_with_no_connection_and_no_invented_close(
    harness: Harness,
):
    attempt, token = harness.new_attempt()
    async with harness.sse(token, mode="auto") as client:
        assert client.protocol_version == MODERN
        await client.list_tools()
        await client.call_tool("get_task", {})
    init = (await harness.wait_events(attempt, "initialize_observed"))[0]
    await harness.wait_events(attempt, "tool_call_observed")
    assert init.era == "modern"
    await eventually(lambda: harness.endpoint.bridge.open_exchanges == 0, 5.0, what="the SSE stream to end")
    await harness.settle()
    assert all(e.connection_id is None for e in harness.events(attempt))
    assert harness.events(attempt, "connection_closed") == []


async def test_the_built_in_catalog_is_counted_at_start_so_the_first_tools_list_of_either_era_has_estimates(
    make_harness, estimates
):
    harness: Harness = await make_harness(estimator_loader=estimates)
    assert estimates.wait(60), "the helper did not answer"
    for mode in ("legacy", MODERN):
        attempt, token = harness.new_attempt()
        async with harness.client(token, mode=mode) as client:
            await client.list_tools()
        (listed,) = await harness.wait_events(attempt, "tools_list_observed")
        # The catalog is kept once, on the row; the logged event carries the count only.
        assert listed.catalog is None and listed.tool_count == TASK_TOOL_COUNT
        catalog = harness.row(attempt).catalog
        assert catalog is not None and catalog.estimator == TOKEN_ESTIMATE_METHOD, mode
        assert len(catalog.tools) == TASK_TOOL_COUNT
        assert all(t.token_estimate and t.token_estimate > 0 for t in catalog.tools)
        assert [t.name for t in catalog.tools] == sorted(t.name for t in catalog.tools)
        assert len(harness.events(attempt, "tools_list_observed")) == 1, "never recorded without estimates"


async def test_a_list_listed_before_its_counts_arrive_is_recorded_again_with_estimates(
    make_harness, tmp_path, monkeypatch
):
    monkeypatch.delenv("AGENTCTL_O200K_PATH", raising=False)
    gate = threading.Event()

    def gated_helper(texts):  # the real helper process, held back until the first list is recorded
        assert gate.wait(30), "the first tools/list was never recorded"
        return run_helper(texts)

    estimates = CatalogEstimates(EstimateCache(tmp_path / "cold-cache"), helper=gated_helper)
    harness: Harness = await make_harness(estimator_loader=estimates)
    assert not estimates.ready, "a started endpoint has its catalog counted in the background"
    attempt, token = harness.new_attempt()
    async with harness.client(token, mode=MODERN) as client:
        await client.list_tools()
    await harness.wait_events(attempt, "tools_list_observed")
    first = harness.row(attempt).catalog
    assert first is not None and first.estimator_unavailable_reason == "estimator_loading"
    gate.set()
    await harness.wait_events(attempt, "tools_list_observed", count=2, timeout=60)
    catalog = harness.row(attempt).catalog
    assert catalog is not None and catalog.estimator == TOKEN_ESTIMATE_METHOD
    assert all(t.token_estimate and t.token_estimate > 0 for t in catalog.tools)
    assert len(harness.events(attempt, "tools_list_observed")) == 2, "recorded again once, not per poll"


async def test_without_an_encoding_the_catalog_says_the_estimator_is_unavailable_and_has_no_estimates(
    harness: Harness,
):
    attempt, token = harness.new_attempt()
    async with harness.client(token, mode="legacy") as client:
        await client.list_tools()
    await harness.wait_events(attempt, "tools_list_observed")
    catalog = harness.row(attempt).catalog
    assert catalog is not None
    assert catalog.estimator is None and catalog.estimator_unavailable_reason
    assert all(t.token_estimate is None for t in catalog.tools)


async def test_a_failing_tool_is_detail_on_an_active_row_not_a_failure(harness: Harness):
    attempt, token = harness.new_attempt()
    harness.backend_box["backend"] = None  # the backend goes away: every tool answers a tool error
    async with harness.client(token, mode="legacy") as client:
        await client.list_tools()
        result = await client.call_tool("get_task", {})
        assert result.is_error
        missing = await client.call_tool("no_such_tool", {})
        assert missing.is_error
    calls = await harness.wait_events(attempt, "tool_call_observed", 2)
    assert [(c.tool_name, c.outcome) for c in calls] == [("get_task", "error"), ("no_such_tool", "error")]
    row = harness.row(attempt)
    assert row.status == "active" and row.tool_calls == 2 and row.tool_errors == 2
    assert harness.events(attempt, "explicit_error") == []


async def test_tool_arguments_and_results_never_reach_the_evidence(harness: Harness):
    attempt, token = harness.new_attempt()
    secret = "sentinel-argument-7f3a"
    async with harness.client(token, mode=MODERN) as client:
        result = await client.call_tool("post_task_message", {"text": secret})
        assert not result.is_error
        await client.call_tool("get_task", {})  # the result now contains the message text
    await harness.wait_events(attempt, "tool_call_observed", 2)
    from agentctl.evidence.contract.base import encode

    assert secret.encode() not in encode(harness.ledger.history)


@pytest.mark.parametrize("mode", ["legacy", "auto", MODERN])
async def test_every_mode_lands_its_evidence_in_the_attempt_of_its_token_only(harness: Harness, mode: str):
    first, first_token = harness.new_attempt()
    second, second_token = harness.new_attempt()
    async with harness.client(second_token, mode=mode) as client:
        await client.list_tools()
    await harness.wait_events(second, "tools_list_observed")
    assert harness.row(second).status == "active"
    assert harness.events(first, "tools_list_observed") == []
    assert harness.row(first).status == "configured"


async def test_a_failed_legacy_initialize_is_an_explicit_attachment_error(harness: Harness):
    attempt, token = harness.new_attempt()
    bad = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 7}}).encode()
    status, _, body = await harness.http(
        "POST", "/mcp", token=token, headers={"Content-Type": "application/json", "Accept": ACCEPT}, body=bad
    )
    assert status == 200 and b'"error"' in body
    (error,) = await harness.wait_events(attempt, "explicit_error")
    assert error.reason_code == "initialize_failed" and error.server == "kandev"
    # A stable phrase and the error code or type, never text the client sent.
    assert re.fullmatch(r"the initialize request failed \((MCP error -?\d+|\w+)\)", error.summary or "")
    assert harness.row(attempt).status == "failed"
    assert harness.events(attempt, "initialize_observed") == []


async def test_a_failed_tools_list_is_an_explicit_attachment_error(harness: Harness):
    from mcp.shared.exceptions import MCPError

    async def broken_list(ctx, call_next):
        if ctx.method == "tools/list":
            raise MCPError(code=-32603, message="listing broke")
        return await call_next(ctx)

    harness.endpoint.server.middleware.append(broken_list)  # inside agentctl's observer
    attempt, token = harness.new_attempt()
    async with harness.client(token, mode=MODERN) as client:
        with pytest.raises(Exception):
            await client.list_tools()
    (error,) = await harness.wait_events(attempt, "explicit_error")
    assert error.reason_code == "tools_list_failed" and error.era == "modern"
    assert "listing broke" not in (error.summary or "")
    assert harness.row(attempt).status == "failed"


# ---- the same server in every era ---------------------------------------------------------------

SAME_CAPABILITIES = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": False},
    "resources": {"subscribe": False, "listChanged": False},
}


async def _what_each_era_sees(harness: Harness, token: str) -> dict[str, tuple]:
    """Per era and transport, through the SDK's own client: advertised capabilities, tools, prompts,
    resources, and whether a tool call works."""
    openers = {
        "legacy initialize on /mcp": lambda: harness.client(token, mode="legacy"),
        "modern discover on /mcp": lambda: harness.client(token, mode="auto"),
        "legacy initialize on /sse": lambda: harness.sse(token, mode="legacy"),
        "modern discover on /sse": lambda: harness.sse(token, mode="auto"),
    }
    seen = {}
    for name, opener in openers.items():
        async with opener() as client:
            assert (client.protocol_version == MODERN) == ("modern" in name), name
            capabilities = client.server_capabilities.model_dump(by_alias=True, exclude_none=True, mode="json")
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            prompts = [p.name for p in (await client.list_prompts()).prompts]
            resources = [r.uri for r in (await client.list_resources()).resources]
            called = (await client.call_tool("get_task", {})).is_error
            seen[name] = (capabilities, tools, prompts, resources, called)
    return seen


async def test_discover_and_initialize_advertise_the_same_capabilities_and_serve_the_same_tools_in_every_era(
    harness: Harness,
):
    _, token = harness.new_attempt()
    seen = await _what_each_era_sees(harness, token)
    first = next(iter(seen.values()))
    assert all(view == first for view in seen.values()), seen
    capabilities, tools, _, _, call_failed = first
    # What the endpoint does: it announces tool-list changes in both eras and never prompt or resource ones.
    assert capabilities == SAME_CAPABILITIES and len(tools) == TASK_TOOL_COUNT and call_failed is False
    # A profile switch changes the tool set for every era alike, and they still advertise the same.
    harness.endpoint.set_profile("task-title")
    switched = await _what_each_era_sees(harness, token)
    assert all(view == next(iter(switched.values())) for view in switched.values())
    assert len(next(iter(switched.values()))[1]) == TASK_TOOL_COUNT + 1


@pytest.mark.parametrize(
    ("route", "method", "headers", "body"),
    [
        ("/mcp", "POST", {"Content-Type": "application/json", "Accept": ACCEPT},
         b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
         b'"capabilities":{},"clientInfo":{"name":"x","version":"1"}}}'),
        ("/mcp", "POST", {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": MODERN,
                          "Mcp-Method": "server/discover"},
         b'{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}'),
        ("/sse", "GET", {"Accept": "text/event-stream"}, None),
    ],
    ids=["legacy initialize", "modern discover", "sse stream"],
)
@pytest.mark.parametrize("credential", ["none", "wrong"])
async def test_every_era_asks_for_the_same_credential_before_anything_is_advertised(
    harness: Harness, route: str, method: str, headers: dict, body: bytes | None, credential: str
):
    harness.new_attempt()
    token = "not-a-token-of-this-execution" if credential == "wrong" else None
    status, answer_headers, answer = await harness.http(method, route, token=token, headers=headers, body=body)
    assert status == 401 and answer_headers["WWW-Authenticate"] == 'Bearer realm="agentctl"'
    assert b"capabilities" not in answer
