"""The legacy session pool of a real `agentctl serve` under attack by token holders of earlier attempts:
hundreds of abandoned sessions keep the daemon's memory at what the pool's bounds hold, the current
attempt's client always connects and is never refused, and an attempt whose token left history can open
nothing more."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx2
import psutil

from agentctl.mcp_endpoint.pool import PER_ATTEMPT
from tests.conftest import REPO, agentctl_cmd, eventually, write_spec
from tests.reliability.faults_support import POST_HEADERS, attempt_of, initialize, open_attempt, refusals, rpc, \
    sdk_client
from tests.upstream.procs import control, start_daemon

ABANDONED = 600  # per attempt; unbounded, two attempts' worth is ~55 MB of daemon memory (~46 KB each)
MAX_GROWTH_MB = 16  # the bounds hold 128 sessions (~8 MB) plus the garbage of the ended ones


async def abandon(config: dict[str, Any], n: int, concurrency: int = 8) -> list[int]:
    """Open `n` legacy sessions with the attempt's token and leave them open; the initialize statuses."""
    headers = {**POST_HEADERS, **config["headers"]}
    statuses: list[int] = []
    work = iter(range(n))

    async def worker(http: httpx2.AsyncClient) -> None:
        for _ in work:
            response = await http.post(config["url"], content=initialize(), headers=headers)
            statuses.append(response.status_code)
            if response.status_code == 200:
                session = {"Mcp-Session-Id": response.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
                done = await http.post(config["url"], content=rpc("notifications/initialized"),
                                       headers={**headers, **session})
                assert done.status_code in (200, 202), done.status_code

    async with httpx2.AsyncClient(timeout=60) as http:
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
    return statuses


async def test_abandoned_legacy_sessions_of_earlier_attempts_keep_the_daemon_small_and_the_current_client_in(
    short_tmp,
):
    daemon = start_daemon(short_tmp, write_spec(short_tmp))
    sock = short_tmp / "daemon.sock"
    try:
        first = await asyncio.to_thread(open_attempt, sock)
        rss = psutil.Process(daemon.pid).memory_info().rss
        assert set(await abandon(first, ABANDONED)) == {200}, "an attempt's own idle sessions make room"
        second = await asyncio.to_thread(open_attempt, sock)
        assert set(await abandon(second, ABANDONED)) == {200}
        growth_mb = (psutil.Process(daemon.pid).memory_info().rss - rss) / 2**20
        assert growth_mb < MAX_GROWTH_MB, f"{2 * ABANDONED} abandoned sessions grew the daemon by {growth_mb:.0f} MB"

        current = await asyncio.to_thread(open_attempt, sock)  # the pool is full of superseded sessions
        async with sdk_client(current) as client:
            assert (await client.list_tools()).tools
            assert not (await client.call_tool("get_task", {})).is_error
            # A superseded attempt's token still opens sessions, by ending its own idle ones, never the current's.
            assert set(await abandon(first, 50)) == {200}
            assert not (await client.call_tool("get_task", {})).is_error

        _, report = await asyncio.to_thread(control(daemon).get, "/v1/report")
        row = attempt_of(report, current["attempt_id"])["servers"][0]
        assert row["status"] == "active" and row.get("reason_code") is None
        assert not [key for key in refusals(report) if key[2] == 503]

        for _ in range(3):  # the first two attempts leave history: their tokens open nothing any more
            await asyncio.to_thread(open_attempt, sock)
        assert set(await abandon(first, 3, concurrency=1)) == {401}
        assert await asyncio.to_thread(daemon.stop) == 0
    finally:
        daemon.kill()


async def test_the_current_attempt_refused_a_session_is_an_explicit_session_pool_full_error_in_status(short_tmp):
    daemon = start_daemon(short_tmp, write_spec(short_tmp))
    sock = short_tmp / "daemon.sock"
    try:
        config = await asyncio.to_thread(open_attempt, sock)
        headers = {**POST_HEADERS, **config["headers"]}
        async with httpx2.AsyncClient(timeout=60) as http, contextlib.AsyncExitStack() as streams:
            for _ in range(PER_ATTEMPT):  # every session busy: each holds its GET stream open
                opened = await http.post(config["url"], content=initialize(), headers=headers)
                assert opened.status_code == 200
                session = {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
                await http.post(config["url"], content=rpc("notifications/initialized"), headers={**headers, **session})
                stream = await streams.enter_async_context(
                    http.stream("GET", config["url"], headers={**headers, **session, "Accept": "text/event-stream"}))
                assert stream.status_code == 200
            refused = await http.post(config["url"], content=initialize(), headers=headers)
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"

            shown = await asyncio.to_thread(cli, sock, "status")
            assert "session_pool_full" in shown and "failed" in shown
            row = json.loads(await asyncio.to_thread(cli, sock, "status", "--json"))["current"]["servers"][0]
            assert (row["status"], row["reason_code"]) == ("failed", "session_pool_full")
        # The streams are gone: once the daemon has seen them end, the same attempt's next client is served.
        async def admitted() -> bool:
            async with httpx2.AsyncClient(timeout=30) as http:
                return (await http.post(config["url"], content=initialize(), headers=headers)).status_code == 200

        await eventually(admitted, 10, "a session to be admitted again")
        async with sdk_client(config) as client:
            assert (await client.list_tools()).tools
        assert await asyncio.to_thread(daemon.stop) == 0
    finally:
        daemon.kill()


def cli(sock: Path, *args: str) -> str:
    done = subprocess.run(agentctl_cmd(*args, "--socket", str(sock)), capture_output=True, text=True, timeout=30,
                          cwd=REPO, env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr
    return done.stdout
