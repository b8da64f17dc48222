"""HTTP edges of the endpoint and its ASGI bridge: refusals, GET/DELETE, streams, clients that vanish, shutdown."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from contextlib import asynccontextmanager
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.mcp_endpoint.conftest import MODERN, Harness, eventually

LEGACY = "2025-11-25"
ACCEPT_BOTH = "application/json, text/event-stream"
POST_HEADERS = {"Content-Type": "application/json", "Accept": ACCEPT_BOTH}


def _rpc(method: str, id_: int = 1, params: dict | None = None) -> bytes:
    body: dict = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode()


def _init(name: str = "raw") -> bytes:
    return _rpc(
        "initialize",
        params={"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": name, "version": "1"}},
    )


def _modern_params(version: str = MODERN) -> dict:
    return {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        }
    }


def _modern_headers(method: str = "tools/list", version: str = MODERN) -> dict[str, str]:
    return {**POST_HEADERS, "MCP-Protocol-Version": version, "Mcp-Method": method}


class RawSse:
    """A legacy SSE stream held open by hand (aiohttp client), to drive the edges the SDK client hides."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.messages_path: str | None = None

    async def next_event(self, timeout: float = 5.0) -> tuple[str, str]:
        event, data = "message", []
        async with asyncio.timeout(timeout):
            while True:
                line = (await self.response.content.readline()).decode().rstrip("\r\n")
                if line == "" and data:
                    return event, "\n".join(data)
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
                if self.response.content.at_eof():
                    raise EOFError("stream ended")


@asynccontextmanager
async def raw_sse(harness: Harness, token: str) -> AsyncIterator[tuple[aiohttp.ClientSession, RawSse]]:
    async with aiohttp.ClientSession() as session:
        async with session.get(harness.sse_url, headers={"Authorization": f"Bearer {token}"}) as resp:
            assert resp.status == 200
            stream = RawSse(resp)
            event, data = await stream.next_event()
            assert event == "endpoint"
            stream.messages_path = data
            yield session, stream


async def _post_message(session: aiohttp.ClientSession, harness: Harness, stream: RawSse, token: str, body: bytes) -> int:
    assert stream.messages_path
    async with session.post(
        harness.base + stream.messages_path,
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    ) as resp:
        return resp.status


# ---- refusals before the SDK's middleware ----------------------------------------------------


async def test_a_foreign_host_header_is_refused_with_421_and_counted(harness: Harness):
    attempt, token = harness.new_attempt()
    for host in ("evil.example", f"evil.example:{harness.port}", "127.0.0.1", f"localhost:{harness.port + 1}"):
        status, _, _ = await harness.http("POST", "/mcp", token=token, headers={**POST_HEADERS, "Host": host}, body=_init())
        assert status == 421, host
    status, _, _ = await harness.http("GET", "/sse", token=token, headers={"Host": "evil.example"})
    assert status == 421
    await harness.wait_refusal(("/mcp", "POST", 421), count=4)
    await harness.wait_refusal(("/sse", "GET", 421))
    assert [e.kind for e in harness.events(attempt)] == ["configured"]


async def test_the_bound_host_names_are_accepted_after_set_listen(harness: Harness):
    _, token = harness.new_attempt()
    for host in (f"127.0.0.1:{harness.port}", f"localhost:{harness.port}"):
        status, _, _ = await harness.http("POST", "/mcp", token=token, headers={**POST_HEADERS, "Host": host}, body=_init())
        assert status == 200, host


async def test_refusals_are_counted_by_route_method_and_status_never_with_bodies(harness: Harness):
    _, token = harness.new_attempt()
    # 406: a modern POST that accepts neither JSON nor SSE.
    status, _, _ = await harness.http(
        "POST", "/mcp", token=token, headers={**_modern_headers(), "Accept": "text/plain"}, body=_rpc("tools/list", params=_modern_params())
    )
    assert status == 406
    # 413: a declared body over the SDK's 4 MiB limit.
    status, _, _ = await harness.http(
        "POST", "/mcp", token=token, headers={**POST_HEADERS}, body=b"{" + b" " * (4 * 1024 * 1024 + 10) + b"}"
    )
    assert status == 413
    # Unsupported protocol version on the modern path.
    status, _, body = await harness.http(
        "POST", "/mcp", token=token, headers=_modern_headers(version="2099-01-01"),
        body=_rpc("tools/list", params=_modern_params("2099-01-01")),
    )
    assert status == 400 and b"-32022" in body
    # Unknown legacy session.
    status, _, _ = await harness.http(
        "POST", "/mcp", token=token, headers={**POST_HEADERS, "Mcp-Session-Id": "f" * 32}, body=_rpc("tools/list")
    )
    assert status == 404
    # Unknown SSE session.
    status, _, _ = await harness.http(
        "POST", f"/messages/?session_id={'a' * 32}", token=token, headers={"Content-Type": "application/json"}, body=_rpc("ping")
    )
    assert status == 404
    await harness.wait_refusal(("/mcp", "POST", 406))
    await harness.wait_refusal(("/mcp", "POST", 413))
    await harness.wait_refusal(("/mcp", "POST", 400))
    await harness.wait_refusal(("/mcp", "POST", 404))
    await harness.wait_refusal(("/messages/", "POST", 404))
    from agentctl.evidence.contract.base import encode

    report = encode(harness.ledger.history)
    assert b"f" * 32 not in report and b"a" * 32 not in report


async def test_a_modern_error_answered_by_the_sdk_after_middleware_is_not_a_refusal(harness: Harness):
    attempt, token = harness.new_attempt()
    # initialize on the modern path: -32601 with HTTP 404, but the request reached the SDK's middleware.
    status, _, _ = await harness.http(
        "POST", "/mcp", token=token, headers=_modern_headers("initialize"), body=_rpc("initialize", params=_modern_params())
    )
    assert status == 404
    status, _, _ = await harness.http(
        "POST", "/mcp", token=token, headers=_modern_headers("tools/list"), body=_rpc("tools/list", params=_modern_params())
    )
    assert status == 200
    await harness.wait_events(attempt, "tools_list_observed")
    assert ("/mcp", "POST", 404) not in harness.refusals()
    assert harness.events(attempt, "explicit_error") == []


# ---- GET and DELETE on /mcp ------------------------------------------------------------------


async def test_get_opens_the_sessions_stream_and_delete_ends_the_session_with_connection_closed(harness: Harness):
    attempt, token = harness.new_attempt()
    status, headers, _ = await harness.http("POST", "/mcp", token=token, headers=POST_HEADERS, body=_init())
    assert status == 200
    sid = headers["mcp-session-id"]
    session_headers = {"Authorization": f"Bearer {token}", "Mcp-Session-Id": sid, "MCP-Protocol-Version": LEGACY}
    async with aiohttp.ClientSession() as http:
        async with http.post(
            harness.url, data=json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            headers={**session_headers, **POST_HEADERS},
        ) as resp:
            assert resp.status == 202
        async with http.get(harness.url, headers={**session_headers, "Accept": "text/event-stream"}) as stream:
            assert stream.status == 200 and stream.headers["Content-Type"].startswith("text/event-stream")
            await eventually(lambda: harness.endpoint.bridge.open_exchanges == 1, 5.0, what="the GET stream to be open")
            async with http.delete(harness.url, headers=session_headers) as resp:
                assert resp.status == 200
            async with asyncio.timeout(2):
                await stream.read()  # the stream ends with the session, at once
    (init,) = harness.events(attempt, "initialize_observed")
    (closed,) = await harness.wait_events(attempt, "connection_closed")
    assert closed.connection_id == init.connection_id
    await eventually(lambda: harness.endpoint.bridge.open_exchanges == 0, 5.0, what="all exchanges to end")


async def test_get_and_delete_without_a_session_are_refused_and_counted(harness: Harness):
    _, token = harness.new_attempt()
    status, _, _ = await harness.http("GET", "/mcp", token=token, headers={"Accept": "text/event-stream"})
    assert status == 400
    status, _, _ = await harness.http("DELETE", "/mcp", token=token)
    assert status == 400
    status, _, _ = await harness.http("GET", "/mcp", token=token, headers={"MCP-Protocol-Version": MODERN})
    assert status == 405
    await harness.wait_refusal(("/mcp", "GET", 400))
    await harness.wait_refusal(("/mcp", "DELETE", 400))
    await harness.wait_refusal(("/mcp", "GET", 405))


# ---- clients that vanish ---------------------------------------------------------------------


async def test_an_sse_client_gone_mid_stream_ends_its_connection_and_does_not_wedge_the_server(harness: Harness):
    attempt, token = harness.new_attempt()
    sock = socket.create_connection((harness.host, harness.port))
    sock.sendall(
        f"GET /sse HTTP/1.1\r\nHost: 127.0.0.1:{harness.port}\r\nAuthorization: Bearer {token}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    buf = b""
    deadline = time.monotonic() + 5
    while b"session_id=" not in buf or b"\r\n\r\n" not in buf.split(b"session_id=", 1)[1]:
        assert time.monotonic() < deadline, "no endpoint event"
        buf += await asyncio.to_thread(sock.recv, 4096)
    path = buf.split(b"data: ", 1)[1].split(b"\r\n", 1)[0].decode()
    async with aiohttp.ClientSession() as http:
        async with http.post(
            harness.base + path, data=_init("vanishing"), headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        ) as resp:
            assert resp.status == 202
    (init,) = await harness.wait_events(attempt, "initialize_observed")
    sock.close()  # gone, mid-stream, without a word

    (closed,) = await harness.wait_events(attempt, "connection_closed", timeout=5)
    assert closed.connection_id == init.connection_id
    await eventually(lambda: harness.endpoint.bridge.open_exchanges == 0, 5.0, what="the stream's exchange to end")
    async with harness.client(token, mode="legacy") as client:  # business as usual
        assert len((await client.list_tools()).tools) > 0


async def test_a_client_gone_during_a_slow_tool_call_does_not_wedge_the_server(harness: Harness):
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow_tool() -> str:
        """A tool that waits."""
        started.set()
        await release.wait()
        return "done"

    harness.endpoint.server.add_tool(slow_tool, name="slow_tool")
    attempt, token = harness.new_attempt()

    async def call_and_vanish() -> None:
        async with harness.client(token, mode=MODERN) as client:
            await client.call_tool("slow_tool", {})

    task = asyncio.create_task(call_and_vanish())
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()  # the client leaves with its request in flight
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: harness.endpoint.bridge.open_exchanges == 0, 5.0, what="the abandoned exchange to end")
    release.set()
    async with harness.client(token, mode=MODERN) as client:
        assert not (await client.call_tool("get_task", {})).is_error


# ---- shutdown ----------------------------------------------------------------------------------


async def test_shutdown_with_open_sse_streams_completes_within_its_bound_and_closes_the_connections(make_harness):
    harness: Harness = await make_harness(stop_timeout=3.0)
    attempt, token = harness.new_attempt()
    async with raw_sse(harness, token) as (http, stream):
        assert await _post_message(http, harness, stream, token, _init("held-open")) == 202
        event, data = await stream.next_event()
        assert event == "message" and json.loads(data)["id"] == 1
        # A legacy streamable-HTTP client with its GET stream open as well.
        async with harness.client(token, mode="legacy") as client:
            await client.list_tools()
            await harness.wait_events(attempt, "initialize_observed", 2)
            assert harness.endpoint.open_connections == 2

            started = time.monotonic()
            await harness.endpoint.stop()
            elapsed = time.monotonic() - started
            assert elapsed < 3.0, f"stop took {elapsed:.2f}s"
            with pytest.raises((EOFError, aiohttp.ClientPayloadError, TimeoutError)):
                await stream.next_event(timeout=3)
            closed = await harness.wait_events(attempt, "connection_closed", 2)
            assert len({c.connection_id for c in closed}) == 2
            assert harness.endpoint.bridge.open_exchanges == 0
            status, _, _ = await harness.http("POST", "/mcp", token=token, headers=POST_HEADERS, body=_init())
            assert status == 503
            await harness.wait_refusal(("/mcp", "POST", 503))


async def test_mcp_routes_are_not_served_on_the_control_socket(harness: Harness, short_tmp):
    from aiohttp import web

    path = short_tmp / "ctl.sock"
    site = web.UnixSite(harness.runner, str(path))
    await site.start()
    _, token = harness.new_attempt()
    connector = aiohttp.UnixConnector(path=str(path))
    async with aiohttp.ClientSession(connector=connector) as http:
        async with http.post(
            "http://localhost/mcp", data=_init(), headers={**POST_HEADERS, "Authorization": f"Bearer {token}"}
        ) as resp:
            assert resp.status == 404
    await harness.wait_refusal(("/mcp", "POST", 404))
    await site.stop()
