"""The listener guard on a real aiohttp runner and real loopback sockets: the cap, who is displaced at it, the
deadline for a complete request head, busy connections left alone, and failed accepts logged once per
interval (a real EMFILE in a child process with a low descriptor limit)."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import socket
import struct
import subprocess
import sys
import termios
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from aiohttp import web

from agentctl.listener_guard import (
    HTTP_REFUSAL,
    MIN_CAP,
    PIPELINE_DEPTH,
    GuardedSite,
    ListenerGuard,
    RateLimitedLog,
    answered,
    connection_caps,
    track_requests,
    trust,
)
from tests.conftest import REPO, eventually, poll

REQUEST = b"GET /quick HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
BIG = b"x" * (16 << 20)  # more than loopback's socket buffers hold: its writer waits for the reader


async def non_reader(port: int, request: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection with a small receive buffer that sends `request` and then reads nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(request)
    return reader, writer


@dataclass
class Served:
    guard: ListenerGuard
    port: int
    release: asyncio.Event  # ends every /stream response
    lingering: asyncio.Queue[tuple[asyncio.BaseTransport, asyncio.Event]]  # /lingers handlers: set to end one

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def get(self, path: str = "/quick", timeout: float = 5.0) -> bytes:
        """One request on a new connection; the whole response (the server closes after it)."""
        reader, writer = await self.connect()
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
            return await asyncio.wait_for(reader.read(), timeout)
        finally:
            writer.close()


@asynccontextmanager
async def served(limit: int, head_timeout: float = 5.0, write_timeout: float = 5.0,
                 grace: float = 0.0) -> AsyncIterator[Served]:
    """An aiohttp app behind a guard: /quick answers at once, /stream streams until released, /trusted
    marks its connection trusted (as the MCP endpoint does after a valid token), /big answers 16 MiB, /lingers
    writes its whole answer and says so, then runs on until released (as the MCP endpoint's ASGI apps unwind)."""
    release = asyncio.Event()
    lingering: asyncio.Queue[tuple[asyncio.BaseTransport, asyncio.Event]] = asyncio.Queue()

    async def quick(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def trusted(request: web.Request) -> web.Response:
        trust(request.transport)
        return web.Response(text="trusted")

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"started\n")
        await release.wait()
        await response.write_eof(b"done\n")
        return response

    async def big(request: web.Request) -> web.Response:
        return web.Response(body=BIG)

    async def lingers(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write_eof(b"ok")
        answered(request.transport)
        done = asyncio.Event()
        lingering.put_nowait((request.transport, done))
        await done.wait()
        return response

    app = web.Application(middlewares=[track_requests])
    app.router.add_get("/big", big)
    app.router.add_get("/quick", quick)
    app.router.add_get("/trusted", trusted)
    app.router.add_get("/stream", stream)
    app.router.add_get("/lingers", lingers)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    guard = ListenerGuard("test", limit, head_timeout=head_timeout, write_timeout=write_timeout, grace=grace,
                          refusal=HTTP_REFUSAL)
    site = GuardedSite(runner, guard, host="127.0.0.1", port=0)
    await site.start()
    try:
        yield Served(guard, site.sockets[0].getsockname()[1], release, lingering)
    finally:
        release.set()
        await runner.cleanup()


async def closed_by_server(reader: asyncio.StreamReader, timeout: float) -> bool:
    """True when the server ends the connection (EOF or reset) within `timeout`."""
    try:
        return await asyncio.wait_for(reader.read(), timeout) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize(
    ("nofile", "wanted", "expected"),
    [
        (1024, {"mcp": 512, "control": 64}, {"mcp": 512, "control": 64}),
        (65536, {"hub": 4096, "page": 128}, {"hub": 4096, "page": 128}),
        (512, {"mcp": 512, "control": 64}, {"mcp": 227, "control": 28}),
        (300, {"mcp": 512, "control": 64}, {"mcp": 39, "control": MIN_CAP}),
        (64, {"mcp": 512, "control": 64}, {"mcp": MIN_CAP, "control": MIN_CAP}),
    ],
)
def test_connection_caps_fit_under_the_descriptor_limit_less_the_reserve(nofile, wanted, expected):
    assert connection_caps(nofile, wanted) == expected


async def test_at_the_cap_a_newcomer_displaces_the_oldest_idle_connection_and_is_served():
    async with served(limit=4) as s:
        held = [await s.connect() for _ in range(4)]
        await eventually(lambda: s.guard.open_connections == 4, what="four connections admitted")
        assert b"200 OK" in await s.get()  # a fifth: the oldest idle one makes room
        assert await closed_by_server(held[0][0], 5), "the oldest idle connection was not the one displaced"
        for reader, _ in held[1:]:
            assert not await closed_by_server(reader, 0.05)
        assert s.guard.counts["displaced"] == 1 and s.guard.counts["refused"] == 0
        for _, writer in held:
            writer.close()


async def test_a_fresh_connection_whose_request_is_arriving_is_displaced_after_those_that_sent_nothing():
    async with served(limit=3, grace=30) as s:
        probe_reader, probe_writer = await s.connect()  # a probe's connection, its request still arriving
        probe_writer.write(REQUEST[:10])
        await eventually(lambda: s.guard.open_connections == 1, what="the probe admitted")
        burst = []
        for _ in range(5):  # a burst of newcomers that send nothing
            burst.append(await s.connect())
            await eventually(lambda: s.guard.counts["accepted"] == len(burst) + 1, what="the newcomer accepted")
        assert s.guard.counts["displaced"] == 3 and s.guard.counts["refused"] == 0
        probe_writer.write(REQUEST[10:])
        assert b"ok" in await asyncio.wait_for(probe_reader.readuntil(b"ok"), 5), "the probe was displaced"
        for _, writer in [*burst, (probe_reader, probe_writer)]:
            writer.close()


async def test_a_trusted_idle_connection_is_displaced_only_after_every_untrusted_one():
    async with served(limit=3) as s:
        trusted_reader, trusted_writer = await s.connect()
        trusted_writer.write(b"GET /trusted HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert b"trusted" in await trusted_reader.readuntil(b"trusted")  # answered; kept alive and idle
        flood = [await s.connect() for _ in range(2)]
        for _ in range(6):  # newcomers keep arriving: each displaces an untrusted one
            flood.append(await s.connect())
            await eventually(lambda: s.guard.counts["displaced"] >= len(flood) - 2, what="a displacement")
        assert not await closed_by_server(trusted_reader, 0.05), "the trusted connection was displaced first"
        trusted_writer.write(REQUEST)
        assert b"200 OK" in await trusted_reader.readuntil(b"ok")
        for _, writer in [*flood, (trusted_reader, trusted_writer)]:
            writer.close()


async def test_when_every_connection_is_busy_a_newcomer_is_refused_with_503_and_the_streams_go_on():
    async with served(limit=2) as s:
        streams = []
        for _ in range(2):
            reader, writer = await s.connect()
            writer.write(b"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            await reader.readuntil(b"started\n")
            streams.append((reader, writer))
        refused = await s.get()
        assert refused.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in refused
        assert s.guard.counts["refused"] == 1
        s.release.set()
        for reader, writer in streams:
            assert b"done" in await reader.readuntil(b"done\n")
            writer.close()


async def test_an_answer_nobody_reads_is_closed_at_the_write_deadline():
    async with served(limit=8, write_timeout=0.6) as s:
        began = time.monotonic()  # before the request: the deadline's clock starts later, never earlier
        reader, writer = await non_reader(s.port, b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await eventually(lambda: s.guard.stalled_connections == 1, what="the answer to wait for its reader")
        await eventually(lambda: s.guard.counts["stalled_out"] == 1, 5, what="the unread answer to be cut")
        assert 0.6 <= time.monotonic() - began < 3.5
        assert s.guard.open_connections == 0 and s.guard.stalled_connections == 0
        assert b"200 OK" in await s.get()
        writer.close()


async def test_without_a_write_deadline_an_unread_answer_waits_but_stays_displaceable_at_the_cap():
    # The control socket's guard: its own user may pause a terminal on purpose.
    async with served(limit=1, write_timeout=None) as s:
        reader, writer = await non_reader(s.port, b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await eventually(lambda: s.guard.stalled_connections == 1, what="the answer to wait for its reader")
        with pytest.raises(pytest.fail.Exception):  # not cut within a second (a 0.6 s deadline would have)
            await eventually(lambda: s.guard.stalled_connections == 0, 1.0, "the unread answer to be cut")
        assert s.guard.counts["stalled_out"] == 0
        assert b"200 OK" in await s.get()  # at the cap the unread one made room
        assert s.guard.counts["displaced"] == 1
        writer.close()


async def test_at_the_cap_a_newcomer_displaces_a_connection_whose_answer_waits_for_a_reader():
    async with served(limit=2, write_timeout=60) as s:
        held = [await non_reader(s.port, b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") for _ in range(2)]
        await eventually(lambda: s.guard.stalled_connections == 2, what="both answers to wait for their readers")
        answer = await s.get()
        assert b"200 OK" in answer, answer  # before: both were busy, so the newcomer was refused with 503
        assert (s.guard.counts["displaced"], s.guard.counts["refused"]) == (1, 0)
        await asyncio.gather(*(closed_by_server(reader, 0.05) for reader, _ in held))
        for _, writer in held:
            writer.close()


async def test_requests_pipelined_past_the_depth_close_the_connection_after_the_depth_is_answered():
    async with served(limit=8) as s:
        reader, writer = await s.connect()
        writer.write(REQUEST * (PIPELINE_DEPTH + 3))
        answers = (await asyncio.wait_for(reader.read(), 5)).count(b"200 OK")
        # The first request and PIPELINE_DEPTH pipelined behind it are answered; one more ends the connection.
        assert answers == PIPELINE_DEPTH + 1
        assert s.guard.counts["pipelining"] == 1 and s.guard.open_connections == 0
        writer.close()


async def test_a_pipeline_within_the_depth_is_answered_whole_and_its_connection_kept():
    async with served(limit=8) as s:
        reader, writer = await s.connect()
        writer.write(REQUEST * (PIPELINE_DEPTH + 1))
        for _ in range(PIPELINE_DEPTH + 1):
            assert b"ok" in await asyncio.wait_for(reader.readuntil(b"ok"), 5)
        assert not await closed_by_server(reader, 0.2)
        writer.write(REQUEST)  # read, then asked again: a new pipeline may begin
        assert b"ok" in await asyncio.wait_for(reader.readuntil(b"ok"), 5)
        assert s.guard.counts["pipelining"] == 0
        writer.close()


async def test_requests_sent_each_after_the_previous_answer_are_never_counted_as_pipelined():
    async with served(limit=8) as s:
        reader, writer = await s.connect()
        for _ in range(PIPELINE_DEPTH * 3):
            writer.write(REQUEST)
            assert b"ok" in await reader.readuntil(b"ok")
        assert s.guard.counts["pipelining"] == 0
        writer.close()


async def test_requests_sent_after_reading_an_answer_whose_handler_still_runs_are_never_counted_as_pipelined():
    async with served(limit=8) as s:
        reader, writer = await s.connect()
        writer.write(b"GET /lingers HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        for _ in range(PIPELINE_DEPTH * 3):
            transport, done = await asyncio.wait_for(s.lingering.get(), 5)
            assert b"ok" in await asyncio.wait_for(reader.readuntil(b"ok"), 5)
            # Read, then asked again while the answered request's handler still runs.
            writer.write(b"GET /lingers HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            await eventually(lambda: not unread(transport), what="the next request to reach the server")
            done.set()
        transport, done = await asyncio.wait_for(s.lingering.get(), 5)
        done.set()
        assert s.guard.counts["pipelining"] == 0 and s.guard.open_connections == 1
        writer.close()


def unread(transport: asyncio.BaseTransport) -> int:
    """Bytes in the server socket's receive queue that its loop has not read yet."""
    sock = transport.get_extra_info("socket")
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]


async def test_a_head_dribbled_a_byte_at_a_time_is_closed_at_the_deadline_while_a_stream_outlives_it():
    async with served(limit=8, head_timeout=0.6) as s:
        stream_reader, stream_writer = await s.connect()
        stream_writer.write(b"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await stream_reader.readuntil(b"started\n")
        slow_reader, slow_writer = await s.connect()
        began = time.monotonic()
        head = b"GET /quick HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"z" * 100
        sent = 0
        while not slow_reader.at_eof() and sent < len(head) and time.monotonic() - began < 5:
            slow_writer.write(head[sent:sent + 1])
            sent += 1
            if await closed_by_server(slow_reader, 0.05):  # also the pace: one byte per 50 ms
                break
        elapsed = time.monotonic() - began
        assert 0.5 <= elapsed < 3.0, f"the dribbled head was closed after {elapsed:.2f} s"
        assert sent > 5 and s.guard.counts["timed_out"] == 1
        # The stream started before and kept going past the deadline: busy connections are never timed.
        assert not await closed_by_server(stream_reader, 0.3)
        s.release.set()
        assert b"done" in await stream_reader.readuntil(b"done\n")
        stream_writer.close()
        slow_writer.close()


async def test_a_keep_alive_connection_is_timed_again_only_after_its_response_is_written():
    async with served(limit=8, head_timeout=1.0) as s:
        reader, writer = await s.connect()
        for _ in range(4):  # four requests over 1.2 s: each one restarts the idle deadline
            writer.write(REQUEST)
            assert b"ok" in await reader.readuntil(b"ok")
            assert not await closed_by_server(reader, 0.3)
        began = time.monotonic()
        assert await closed_by_server(reader, 3)
        assert time.monotonic() - began >= 0.2
        writer.close()


async def test_a_pressure_line_is_logged_once_per_interval_with_a_count(caplog: pytest.LogCaptureFixture):
    limiter = RateLimitedLog(logging.getLogger("agentctl.test.limit"), interval=0.3)
    shown: list[int] = []

    def render() -> str:
        shown.append(len(shown))
        return f"full, render {len(shown)}"

    with caplog.at_level(logging.WARNING, logger="agentctl.test.limit"):
        for _ in range(500):
            limiter.note("k", render)
        await eventually(lambda: len(caplog.records) == 2, what="the window's summary line")
    first, summary = (r.getMessage() for r in caplog.records)
    assert first == "full, render 1"
    assert summary == "full, render 2 (499 more times in the last 0.3 s)"


_EMFILE_SERVER = textwrap.dedent("""
    import asyncio, logging, resource, sys
    from agentctl.listener_guard import install_accept_error_log, name_listener
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")

    async def main():
        loop = asyncio.get_running_loop()
        uninstall = install_accept_error_log()
        server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0, backlog=512)
        name_listener(server, "flooded")
        commands = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))
        print(server.sockets[0].getsockname()[1], flush=True)
        while await commands.readline():  # each line asks how many accepts failed so far; EOF ends it
            print(loop.get_exception_handler().failures, flush=True)
        uninstall()

    asyncio.run(main())
""")


def test_failed_accepts_out_of_descriptors_are_one_line_per_interval_not_a_traceback_each():
    # A real EMFILE: a child process whose descriptor limit is 48 holds every connection it accepts.
    proc = subprocess.Popen([sys.executable, "-c", _EMFILE_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    port = int(proc.stdout.readline())
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]

    def failures() -> int:
        proc.stdin.write("?\n")
        proc.stdin.flush()
        return int(proc.stdout.readline())

    try:
        # asyncio retries the accept every second, failing once per waiting connection each time.
        assert poll(lambda: failures() >= 400, timeout=30, interval=0.2, what="repeated failed accepts")
    finally:
        _, err = proc.communicate(timeout=30)
        for client in clients:
            client.close()
    lines = err.strip().splitlines()
    assert "Traceback" not in err and "Too many open files" not in err
    assert 1 <= len(lines) <= 2, lines
    assert lines[0].startswith("ERROR agentctl.listener: flooded listener cannot accept connections (EMFILE)")


async def test_connection_lost_is_counted_once_however_the_connection_ended():
    async with served(limit=4, head_timeout=0.3) as s:
        reader, writer = await s.connect()
        await eventually(lambda: s.guard.open_connections == 1, what="one admitted")
        writer.close()
        await eventually(lambda: s.guard.open_connections == 0, what="the client's close to be seen")
        reader, writer = await s.connect()
        assert await closed_by_server(reader, 3)
        await eventually(lambda: s.guard.open_connections == 0 and s.guard.idle_connections == 0,
                         what="the timed-out one released")
        writer.close()

