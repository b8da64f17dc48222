"""The publisher's limits against a misbehaving world, over real sockets: a flood of refused HTTP requests
costs the upstream a snapshot a second (not one per request), an upstream that keeps asking but stops
reading is disconnected as slow instead of growing a queue, and a peer's error code is never logged as
it came. The peers are real Unix servers; the HTTP requests are real requests to a real daemon."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from agentctl.backend.base import BackendError
from agentctl.control.server import build_status
from agentctl.daemon.app import Daemon
from agentctl.spec import parse_spec
from agentctl.upstream import protocol as P
from agentctl.upstream.frames_io import STREAM_LIMIT, read_frame_line
from agentctl.upstream.publisher import CONTROL_MAX_FRAMES, STATE_INTERVAL, Publisher
from agentctl.upstream.tunnel import TunnelBackend
from tests.conftest import spec_toml
from tests.upstream.support import eventually, identity, make_ctx

CANARY = "CANARY-peer-code-7f3e"


class Recorder:
    """A real upstream that reads every frame (answering heartbeats) and keeps what it received."""

    def __init__(self) -> None:
        self.frames: list[object] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (raw := await read_frame_line(reader)) is not None:
            received = P.decode_from_daemon(raw)
            self.frames.append(received)
            if isinstance(received, P.HeartbeatFrame):
                writer.write(P.encode_frame(P.frame(P.HeartbeatFrame)))

    def snapshots(self) -> list[P.SnapshotFrame]:
        return [f for f in self.frames if isinstance(f, P.SnapshotFrame)]


def refused(snapshot: P.SnapshotFrame) -> int:
    return sum(r.count for r in snapshot.history.http_refusals)


async def _serve(path: Path, handler) -> asyncio.AbstractServer:
    path.parent.mkdir(mode=0o700, exist_ok=True)
    return await asyncio.start_unix_server(handler, str(path), limit=STREAM_LIMIT)


def _spec(d: Path, upstream: Path):
    return parse_spec(spec_toml(execution_id="exec-1", state_dir=f"{d}/state", upstream=upstream).encode())


async def flood_refusals(daemon: Daemon, count: int) -> float:
    """`count` unauthenticated POSTs to the daemon's MCP endpoint; returns how long they took."""
    started = time.monotonic()
    async with aiohttp.ClientSession() as http:
        for _ in range(count):
            async with http.post(daemon.ctx.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}) as resp:
                assert resp.status == 401
    return time.monotonic() - started


@pytest.fixture
async def recorded(short_dir, in_process_daemon) -> AsyncIterator[tuple[Recorder, Daemon]]:
    """A real daemon publishing to a recording upstream, past its connect snapshot."""
    recorder = Recorder()
    server = await _serve(short_dir / "up" / "up.sock", recorder.handle)
    try:
        daemon = await in_process_daemon(_spec(short_dir, short_dir / "up" / "up.sock"))
        await eventually(lambda: recorder.snapshots(), what="the connect snapshot")
        yield recorder, daemon
        await daemon.stop()  # while the upstream still listens: the trailing snapshot has somewhere to go
    finally:
        server.close()


async def test_a_flood_of_refused_requests_sends_a_snapshot_a_second_and_the_last_count_always_arrives(recorded):
    recorder, daemon = recorded
    before = len(recorder.snapshots())

    elapsed = await flood_refusals(daemon, 500)

    await eventually(lambda: recorder.snapshots() and refused(recorder.snapshots()[-1]) == 500,
                     what="the last refusal count reached the upstream", timeout=5)
    sent = len(recorder.snapshots()) - before
    # One per request before the limit (500 here); now one per interval plus the trailing one.
    assert 1 <= sent <= elapsed / STATE_INTERVAL + 2, f"{sent} snapshots for 500 refusals in {elapsed:.2f} s"
    assert daemon.ctx.ledger.history.http_refusals[0].count == 500


async def test_an_attempt_still_reaches_the_upstream_at_once_after_a_refusal_flood(recorded):
    """The rate limit is for counters only: a new attempt is not held back behind it."""
    recorder, daemon = recorded
    await flood_refusals(daemon, 20)
    started = time.monotonic()
    attempt, _ = daemon.open_attempt("manual")
    await eventually(lambda: any(s.history.current and s.history.current.attempt_id == attempt
                                 for s in recorder.snapshots()), what="the attempt's snapshot")
    assert time.monotonic() - started < STATE_INTERVAL


async def test_an_upstream_that_keeps_asking_but_stops_reading_is_disconnected_as_slow(short_dir, tmp_path, caplog):
    """The first connection keeps sending stderr_read requests and never reads an answer (the kernel
    buffers and the transport fill for real); later connections are served normally."""
    connections: list[int] = []
    recorder = Recorder()
    flood, release = asyncio.Event(), asyncio.Event()

    async def upstream(reader, writer):
        connections.append(1)
        if len(connections) == 1:
            await flood.wait()
            batch = P.encode_frame(P.frame(P.StderrReadFrame, id="rq")) * 500
            try:
                while not release.is_set():  # ask until the daemon hangs up; never read an answer
                    writer.write(batch)
                    await writer.drain()
                    await asyncio.sleep(0)  # a yield, not a wait: let the daemon's side run
            except (ConnectionError, OSError):
                pass
            writer.close()
            return
        await recorder.handle(reader, writer)

    server = await _serve(short_dir / "up" / "up.sock", upstream)
    ctx = make_ctx(tmp_path, identity())
    publisher = Publisher(ctx, short_dir / "up" / "up.sock", backoff_initial=0.01, backoff_max=0.05)
    ctx.upstream = publisher
    tunnel = TunnelBackend(publisher)
    caplog.set_level(logging.INFO, logger="agentctl.upstream")
    publisher.start()
    try:
        await eventually(lambda: publisher.connected, what="connected")
        waiting = asyncio.create_task(tunnel.call("task.get", ctx.ledger.identity, {}, deadline=30))
        await eventually(lambda: tunnel.pending == 1 and publisher.buffered_bytes == 0, what="the tool call written")
        flood.set()
        await eventually(lambda: publisher.slow_disconnects == 1, what="the slow upstream was left", timeout=10)
        with pytest.raises(BackendError, match="closed before the tool answered"):
            await asyncio.wait_for(waiting, 5)
        await eventually(lambda: publisher.connected and recorder.snapshots(), what="reconnected with a snapshot")
        assert isinstance(recorder.frames[0], P.HelloFrame) and recorder.snapshots()[0].reason == "connect"
        assert publisher.buffered_bytes < 1024 * 1024
        assert build_status(ctx).upstream.last_error == "slow_upstream"
        assert any("stopped reading" in r.getMessage() and str(CONTROL_MAX_FRAMES) in r.getMessage()
                   for r in caplog.records)
    finally:
        flood.set()
        release.set()
        await publisher.stop()
        server.close()


async def test_a_peer_error_code_is_logged_only_when_it_is_a_known_code(short_dir, tmp_path, caplog):
    async def upstream(reader, writer):
        writer.write(P.encode_frame(P.frame(P.ErrorFrame, code=CANARY + " injected", message="m")))
        writer.write(P.encode_frame(P.frame(P.ErrorFrame, code="unavailable", message="m")))
        while await read_frame_line(reader) is not None:
            pass

    server = await _serve(short_dir / "up" / "up.sock", upstream)
    ctx = make_ctx(tmp_path, identity())
    publisher = Publisher(ctx, short_dir / "up" / "up.sock")
    caplog.set_level(logging.INFO, logger="agentctl.upstream")
    publisher.start()
    try:
        await eventually(lambda: any("reported unavailable" in r.getMessage() for r in caplog.records),
                         what="the known code logged")
        assert any(r.getMessage() == "upstream reported unknown" for r in caplog.records)
        assert CANARY not in caplog.text
    finally:
        await publisher.stop()
        server.close()
