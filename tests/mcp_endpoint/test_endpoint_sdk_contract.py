"""The SDK details the endpoint relies on. These fail loudly when an `mcp` upgrade changes them.

Connection identity for legacy sessions uses one private attribute, `ServerSession._connection`
(observe.legacy_connection); the session pool's bounds (pool.py) read
`StreamableHTTPSessionManager._server_instances` to end a session. If a test here fails after an upgrade,
do not paper over it: find the SDK's new handle (or a public one), update observe.py / pool.py, and pin
again.
"""

from __future__ import annotations

import importlib.metadata
import logging
from contextlib import AsyncExitStack
from typing import Any

import anyio
from mcp.server.connection import Connection
from mcp.server.streamable_http import StreamableHTTPServerTransport

from agentctl.mcp_endpoint.observe import SCOPE_ATTEMPT, legacy_connection
from agentctl.mcp_endpoint.sdk import new_mcp_server
from tests.mcp_endpoint.conftest import MODERN, Harness, eventually, legacy_session_alive, open_legacy_session

PINNED_MCP = "2.3.0"


class Probe:
    """Extra middleware (public `MCPServer.middleware` list) that keeps what it saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, Any, Any]] = []

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        scope = getattr(ctx.request, "scope", None)
        self.seen.append((ctx.method, ctx.protocol_version, legacy_connection(ctx), scope))
        return await call_next(ctx)


def test_mcp_is_pinned_exactly_to_the_version_these_private_details_were_checked_against():
    assert importlib.metadata.version("mcp") == PINNED_MCP, (
        "mcp changed: re-check ServerSession._connection, Connection.state/exit_stack and the era routing, "
        "then update PINNED_MCP and pyproject's pin together"
    )


async def test_a_legacy_session_exposes_one_connection_with_state_and_an_exit_stack_across_requests(harness: Harness):
    probe = Probe()
    harness.endpoint.server.middleware.append(probe)
    attempt, token = harness.new_attempt()
    async with harness.client(token, mode="legacy") as client:
        await client.list_tools()
        await client.call_tool("get_task", {})
    requests = [s for s in probe.seen if s[0] in ("initialize", "tools/list", "tools/call")]
    assert len(requests) >= 3
    connections = {id(c) for _, _, c, _ in requests}
    assert len(connections) == 1, "a legacy session must be one Connection object across its requests"
    connection = requests[0][2]
    assert isinstance(connection, Connection), "ServerSession._connection is gone or changed type (mcp upgrade?)"
    assert isinstance(connection.state, dict), "Connection.state is no longer a dict"
    assert isinstance(connection.exit_stack, AsyncExitStack), "Connection.exit_stack is no longer an AsyncExitStack"
    assert all(scope is not None and scope.get(SCOPE_ATTEMPT) == attempt for *_, scope in requests), (
        "ctx.request.scope no longer carries the ASGI scope of the HTTP request"
    )
    # The close callback on that exit stack is what produced connection_closed on DELETE.
    (closed,) = await harness.wait_events(attempt, "connection_closed")
    assert closed.connection_id == connection.state["agentctl.connection_id"]
    assert harness.endpoint.observer.hook_missing is False


async def test_modern_requests_get_a_fresh_connection_each_so_no_connection_id_is_minted(harness: Harness):
    probe = Probe()
    harness.endpoint.server.middleware.append(probe)
    attempt, token = harness.new_attempt()
    async with harness.client(token, mode=MODERN) as client:
        await client.list_tools()
        await client.list_tools()
    lists = [s for s in probe.seen if s[0] == "tools/list" and s[1] == MODERN]
    assert len(lists) >= 2
    assert len({id(c) for _, _, c, _ in lists}) == len(lists), "modern requests now share a Connection"
    assert all(c is None or "agentctl.connection_id" not in c.state for _, _, c, _ in lists)
    assert all(e.connection_id is None for e in harness.events(attempt))


async def test_sse_messages_carry_the_scope_of_the_post_that_brought_them(harness: Harness):
    probe = Probe()
    harness.endpoint.server.middleware.append(probe)
    attempt, token = harness.new_attempt()
    async with harness.sse(token, mode="legacy") as client:
        await client.list_tools()
    scopes = [scope for method, _, _, scope in probe.seen if method == "tools/list"]
    assert scopes and scopes[0] is not None
    assert scopes[0]["path"] == "/messages/" and scopes[0][SCOPE_ATTEMPT] == attempt


def test_building_the_server_leaves_root_logging_as_it_was():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    new_mcp_server("probe")
    assert root.handlers == handlers and root.level == level


def test_dns_rebinding_protection_is_on_for_every_transport(harness: Harness):
    endpoint = harness.endpoint
    assert endpoint.security.enable_dns_rebinding_protection
    assert endpoint.session_manager.security_settings is endpoint.security
    assert endpoint.security.allowed_hosts == [f"127.0.0.1:{harness.port}", f"localhost:{harness.port}"]


async def test_legacy_sessions_are_a_dict_of_session_id_to_transport_whose_idle_scope_ends_the_session(
    harness: Harness,
):
    attempt, token = harness.new_attempt()
    sid = await open_legacy_session(harness, token)
    instances = harness.endpoint.session_manager._server_instances
    assert isinstance(instances, dict), "StreamableHTTPSessionManager._server_instances is gone (mcp upgrade?)"
    transport = instances[sid]
    assert isinstance(transport, StreamableHTTPServerTransport) and transport.mcp_session_id == sid
    assert isinstance(transport.idle_scope, anyio.CancelScope), "the transport no longer has an idle_scope"
    transport.idle_scope.cancel()  # what the pool does to end a session
    await eventually(lambda: sid not in instances, 5.0, what="the SDK to discard the ended session")
    assert not await legacy_session_alive(harness, token, sid)
    (closed,) = await harness.wait_events(attempt, "connection_closed")
    assert closed.connection_id is not None


def test_the_session_limit_is_the_managers_public_max_sessions_and_its_only_503(harness: Harness):
    import inspect

    from mcp.server import streamable_http, streamable_http_manager

    assert harness.endpoint.session_manager.max_sessions == 2 * harness.endpoint.pool.total
    sources = inspect.getsource(streamable_http_manager) + inspect.getsource(streamable_http)
    only = sources.count("503") == 2 and "SERVICE_UNAVAILABLE" not in sources
    assert only and "Too many open sessions\", 503" in sources, (
        "the SDK answers 503 for something else now: pool.py and server.py read every SDK 503 on /mcp as the "
        "session limit"
    )
