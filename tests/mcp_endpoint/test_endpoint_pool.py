"""The legacy session pool: bounded per attempt and in all, the least recently used idle session ends to make
room (a superseded attempt's first, never the current one's for a superseded attempt), a refusal is 503 and
an explicit `session_pool_full` error of the attempt whose token was refused, and an attempt whose token leaves
history loses its sessions and streams. Real endpoint, real HTTP, the SDK's own session manager."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from tests.mcp_endpoint.conftest import (
    BUILTIN,
    INIT,
    POST_HEADERS,
    Harness,
    eventually,
    session_headers,
)
from tests.mcp_endpoint.conftest import legacy_session_alive as alive
from tests.mcp_endpoint.conftest import open_legacy_session as open_session

def sdk_sessions(h: Harness) -> int:
    return len(h.endpoint.session_manager._server_instances)


@asynccontextmanager
async def get_stream(h: Harness, token: str, sid: str) -> AsyncIterator[aiohttp.ClientResponse]:
    """The session's GET stream, held open: a session with a request in flight is busy, never ended for room."""
    async with aiohttp.ClientSession() as http:
        headers = {**session_headers(token, sid), "Accept": "text/event-stream"}
        async with http.get(h.url, headers=headers) as stream:
            assert stream.status == 200
            yield stream


async def ended(stream: aiohttp.ClientResponse, timeout: float = 5.0) -> bool:
    async with asyncio.timeout(timeout):
        await stream.read()
    return True


async def test_an_attempts_abandoned_sessions_stay_within_its_bound_the_least_recently_used_ending_first(
    make_harness,
):
    h = await make_harness(session_bounds=(4, 8))
    attempt, token = h.new_attempt()
    sids = [await open_session(h, token) for _ in range(4)]
    assert await alive(h, token, sids[0])  # used now: sids[1] is the least recently used
    newer = [await open_session(h, token) for _ in range(2)]
    await eventually(lambda: sdk_sessions(h) == 4, 5.0, what="the SDK to discard the ended sessions")
    assert [await alive(h, token, sid) for sid in [*sids, *newer]] == [True, False, False, True, True, True]
    closed = await h.wait_events(attempt, "connection_closed", 2)
    assert len(closed) == 2 and h.endpoint.pool.ended == 2
    assert h.row(attempt).status == "connected" and h.row(attempt).reason_code is None


async def test_a_superseded_attempts_idle_sessions_make_room_for_the_current_attempt(make_harness):
    h = await make_harness(session_bounds=(4, 6))
    old, old_token = h.new_attempt()
    old_sids = [await open_session(h, old_token) for _ in range(4)]
    current, token = h.new_attempt()
    mine = [await open_session(h, token) for _ in range(3)]  # 7 > 6: the old attempt's oldest idle one ends
    await eventually(lambda: sdk_sessions(h) == 6, 5.0, what="the pool at its bound")
    assert not await alive(h, old_token, old_sids[0])
    assert all([await alive(h, token, sid) for sid in mine])
    assert h.endpoint.pool.sessions_of(old) == 3 and h.endpoint.pool.sessions_of(current) == 3
    # The superseded attempt opening more ends its own idle sessions, never the current attempt's.
    for _ in range(3):
        await open_session(h, old_token)
    assert all([await alive(h, token, sid) for sid in mine])
    assert h.events(current, "explicit_error") == [] and h.events(old, "explicit_error") == []


async def test_the_current_attempt_refused_a_session_gets_503_and_an_explicit_session_pool_full_error(make_harness):
    h = await make_harness(session_bounds=(2, 4))
    old, old_token = h.new_attempt()
    attempt, token = h.new_attempt()
    busy = [await open_session(h, token) for _ in range(2)]
    async with get_stream(h, token, busy[0]), get_stream(h, token, busy[1]):
        await eventually(lambda: h.endpoint.bridge.open_exchanges == 2, 5.0, what="both GET streams open")
        status, headers, body = await h.http("POST", "/mcp", token=token, headers=POST_HEADERS, body=INIT)
        assert status == 503 and headers["Retry-After"] == "1"
        assert json.loads(body)["error"]["message"] == "Too many open sessions"
        (error,) = await h.wait_events(attempt, "explicit_error")
        assert error.server == BUILTIN and error.reason_code == "session_pool_full" and error.era == "legacy"
        assert "2 of this attempt's sessions are open, none idle" in (error.summary or "")
        row = h.row(attempt)
        assert row.status == "failed" and row.reason_code == "session_pool_full"
        assert h.events(old, "explicit_error") == [], "attributed by the token, never to another attempt"
        await h.wait_refusal(("/mcp", "POST", 503))
    # Once a stream ends (the server notices the client leaving) its session is idle, so the next client gets in.
    await eventually(lambda: h.endpoint.bridge.open_exchanges == 0, 5.0, what="the server to see the streams end")
    assert await open_session(h, token)
    assert len(await h.wait_events(attempt, "initialize_observed", 3)) == 3


async def test_the_sdks_own_session_limit_answering_503_is_the_same_explicit_error(harness: Harness):
    attempt, token = harness.new_attempt()
    harness.endpoint.session_manager.max_sessions = 1  # the SDK's public limit, below the pool's bounds
    await open_session(harness, token)
    status, _, body = await harness.http("POST", "/mcp", token=token, headers=POST_HEADERS, body=INIT)
    assert status == 503 and b"Too many open sessions" in body
    (error,) = await harness.wait_events(attempt, "explicit_error")
    assert error.reason_code == "session_pool_full" and harness.row(attempt).status == "failed"


async def test_sessions_and_streams_of_an_attempt_whose_token_left_history_are_ended(harness: Harness):
    gone, gone_token = harness.new_attempt()
    sid = await open_session(harness, gone_token)
    idle_sid = await open_session(harness, gone_token)
    async with get_stream(harness, gone_token, sid) as stream, aiohttp.ClientSession() as http:
        async with http.get(harness.sse_url, headers={"Authorization": f"Bearer {gone_token}"}) as sse:
            assert sse.status == 200
            await eventually(lambda: harness.endpoint.bridge.open_exchanges == 2, 5.0, what="both streams open")
            kept = [harness.new_attempt() for _ in range(3)]  # three newer attempts: the first one's token goes
            assert harness.ledger.tokens.token_of(gone) is None
            assert await ended(stream) and await ended(sse)
    await eventually(lambda: sdk_sessions(harness) == 0, 5.0, what="the gone attempt's sessions to be discarded")
    assert harness.endpoint.pool.sessions_of(gone) == 0 and harness.endpoint.pool.ended == 2
    # The kept attempts are untouched: the newest opens a session and lists tools.
    _, token = kept[-1]
    async with harness.client(token, mode="legacy") as client:
        assert (await client.list_tools()).tools
    assert idle_sid not in harness.endpoint.session_manager._server_instances


async def test_a_session_whose_client_left_before_the_answer_is_still_counted_and_bounded(make_harness):
    # The SDK keeps a session whose opening answer it sent, whether or not anyone received it; the pool
    # learns the session id from the answer the SDK sends, so such sessions are bounded like any other.
    h = await make_harness(session_bounds=(2, 4))
    attempt, token = h.new_attempt()
    gate = asyncio.Event()

    async def answer_after_the_client_left(ctx, call_next):
        if ctx.method == "initialize":
            await gate.wait()
        return await call_next(ctx)

    h.endpoint.server.middleware.insert(0, answer_after_the_client_left)
    request = (f"POST /mcp HTTP/1.1\r\nHost: {h.host}:{h.port}\r\nAuthorization: Bearer {token}\r\n"
               f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
               f"Content-Length: {len(INIT)}\r\n\r\n").encode() + INIT
    for n in range(3):
        gate.clear()
        _, writer = await asyncio.open_connection(h.host, h.port)
        writer.write(request)
        await eventually(lambda: h.endpoint.bridge.open_exchanges == 1, 5.0, what="the initialize to be in flight")
        writer.close()
        await eventually(lambda: all(e.gone for e in h.endpoint.bridge._open), 5.0, what="the server to see it leave")
        gate.set()  # the SDK answers now, to nobody: the session is established all the same
        await eventually(lambda: h.endpoint.bridge.open_exchanges == 0, 5.0, what="the exchange to end")
        await eventually(lambda: sdk_sessions(h) == min(n + 1, 2), 5.0, what="the SDK's sessions")
        assert h.endpoint.pool.sessions_of(attempt) == sdk_sessions(h)
