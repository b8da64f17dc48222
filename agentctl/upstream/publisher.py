"""The daemon's upstream publisher: one connection to the `[upstream] socket`, kept up for the daemon's life.

On every connect: `hello`, then a `snapshot` of the whole history, then each evidence event as it is
recorded. Attempt-level changes that are not evidence (a new attempt, an endpoint test result) send a
fresh snapshot; agent lifecycle changes send an `agent` frame. Counters that anyone reaching the HTTP port
can move (refused requests, rejected events) ride the next snapshot, at most one per `state_interval`
for them alone (coalesced; the last count is always sent): a flood of refused requests costs the upstream
a frame a second, not a frame a request.

Never blocking the MCP request path or the agent: the ledger listener only encodes one frame and appends
it to a bounded queue (frames and bytes). When the queue is full, or while disconnected, nothing is
queued: the queue is dropped, the drop counted, and the next snapshot resynchronises the upstream (the
history is the source of truth, so a snapshot repairs any gap). Reconnects use capped exponential backoff
with jitter. The connection also carries the tool tunnel (agentctl.upstream.tunnel) and answers the
upstream's on-demand requests (`stderr_read`, `terminal_read`, `endpoint_test`); those requests and answers wait in a
second bounded queue, and an upstream that lets it fill (it keeps asking but stops reading) is
disconnected as slow: the reconnect and its snapshot repair the state.

An upstream outage never flips readiness: the `upstream` readiness check stays true, its detail says
"connected", "buffering" or "superseded: CODE". Superseded means the upstream rejects this daemon's frames
(`stale_execution`: a newer execution of the session said hello; `stale_instance`: a newer daemon instance
of this execution did); it is shown as degraded on every surface. When the upstream asks this daemon to
`reconnect` (the instance that superseded it went away), the reconnect's hello and snapshot make it current.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from agentctl import __version__
from agentctl.unix_socket import peer_allowed, peer_cred
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.control import UpstreamStatus
from agentctl.evidence.contract.report import CONTRACT_VERSION, EvidenceEvent
from agentctl.evidence.ledger import utcnow
from agentctl.upstream import protocol as P
from agentctl.upstream.frames_io import STREAM_LIMIT, read_frame_line
from agentctl.upstream.outbox import Outbox
from agentctl.upstream.requests import endpoint_test_answer, stderr_answer, terminal_answer

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.context import DaemonContext
    from agentctl.upstream.tunnel import TunnelBackend

log = logging.getLogger("agentctl.upstream")

HEARTBEAT_SECONDS = 10.0
BACKOFF_INITIAL = 0.1
BACKOFF_MAX = 2.0  # a local socket: retrying is cheap, a quick recovery is worth it
CONNECT_TIMEOUT = 2.0
QUEUE_MAX_FRAMES = 1024
QUEUE_MAX_BYTES = 4 * 1024 * 1024
# Requests and answers waiting to be written; past either bound the upstream is slow. Well above what a
# healthy upstream leaves waiting (the tunnel's 256 pending tool calls, some answers, a few 1 MiB frames).
CONTROL_MAX_FRAMES = 512
CONTROL_MAX_BYTES = 4 * P.MAX_FRAME_BYTES
STATE_INTERVAL = 1.0  # at most one snapshot a second for counter-only changes (refusals, rejected events)
WRITE_HIGH_WATER = 256 * 1024  # transport buffer above which the writer waits (the upstream is slow)
STOP_FLUSH_SECONDS = 2.0
# Error codes with which the upstream says it has stopped following this daemon (a newer one is current).
SUPERSEDED_CODES = ("stale_execution", "stale_instance")


class Publisher:
    """Component: `start()` subscribes to the ledger and runs the connection loop; `stop()` flushes and ends it."""

    def __init__(
        self,
        ctx: DaemonContext,
        socket_path: str | os.PathLike[str],
        *,
        heartbeat: float = HEARTBEAT_SECONDS,
        backoff_initial: float = BACKOFF_INITIAL,
        backoff_max: float = BACKOFF_MAX,
        queue_frames: int = QUEUE_MAX_FRAMES,
        queue_bytes: int = QUEUE_MAX_BYTES,
        control_frames: int = CONTROL_MAX_FRAMES,
        control_bytes: int = CONTROL_MAX_BYTES,
        state_interval: float = STATE_INTERVAL,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.ctx = ctx
        self.ledger = ctx.ledger
        self.socket_path = os.fspath(socket_path)
        self.heartbeat = heartbeat
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.queue_frames = queue_frames
        self.queue_bytes = queue_bytes
        self.state_interval = state_interval
        self._rng = rng
        self.tunnel: TunnelBackend | None = None  # set by TunnelBackend: on_result / on_error / on_disconnect
        # Counters (UpstreamStatus).
        self.connects = 0
        self.dropped_events = 0
        self.resyncs = 0
        self.slow_disconnects = 0  # connections closed because the control queue filled
        self.last_connected_at: datetime | None = None
        self.last_error: str | None = None
        # The upstream's code while it rejects this daemon's frames (a newer execution or instance is current).
        self.superseded_reason: str | None = None
        self.superseded_at: datetime | None = None
        self._fatal_code: str | None = None  # a fatal error frame received on this connection
        # Send state, touched only on the event loop thread.
        self._evidence: deque[bytes] = deque()
        self._evidence_bytes = 0
        self._control = Outbox(control_frames, control_bytes, P.encode_frame(P.frame(P.HeartbeatFrame)))
        self._slow: asyncio.Event | None = None  # set when this connection's control queue overflowed
        self._need_snapshot = True
        self._snapshot_reason = "connect"
        self._state_changed = False
        self._last_agent: bytes | None = None
        self._last_shape: tuple[Any, ...] | None = None
        self._last_counts: tuple[Any, ...] | None = None
        self._last_snapshot_at = float("-inf")
        self._counts_timer: asyncio.TimerHandle | None = None
        self._connected = False
        self._writer: asyncio.StreamWriter | None = None
        self._last_rx = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._wake: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._outage_logged = False
        self._lost_at: float | None = None  # monotonic time the link was lost, until it is regained

    # -- component ---------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for the upstream: the evidence queue, queued requests and answers, the transport buffer."""
        held = self._evidence_bytes + self._control.bytes
        if self._writer is not None and not self._writer.transport.is_closing():
            held += self._writer.transport.get_write_buffer_size()
        return held

    @property
    def queued_evidence(self) -> int:
        """Evidence frames recorded but not yet written to the upstream (the link's lag, in frames)."""
        return len(self._evidence)

    @property
    def state(self) -> Literal["connected", "buffering", "superseded"]:
        if not self._connected:
            return "buffering"
        return "superseded" if self.superseded_reason else "connected"

    def status(self) -> UpstreamStatus:
        return UpstreamStatus(
            state=self.state,
            connects=self.connects,
            dropped_events=self.dropped_events,
            resyncs=self.resyncs,
            buffered_bytes=self.buffered_bytes,
            last_connected_at=self.last_connected_at,
            last_error=self.last_error,
            superseded_reason=self.superseded_reason if self._connected else None,
            superseded_at=self.superseded_at if self._connected else None,
        )

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._set_readiness()
        self.ledger.subscribe(self._on_change)
        self._task = asyncio.create_task(self._run(), name="agentctl-upstream")

    async def stop(self) -> None:
        """Send a final snapshot when connected (bounded by STOP_FLUSH_SECONDS), then close."""
        if self._task is None:
            return
        if self._connected and self._wake is not None and self._idle is not None:
            self._schedule_snapshot("final")
            self._idle.clear()
            self._wake.set()
            try:
                await asyncio.wait_for(self._idle.wait(), STOP_FLUSH_SECONDS)
            except TimeoutError:
                log.info("upstream did not take the final snapshot within %.1f s", STOP_FLUSH_SECONDS)
        self._stopping = True
        self.ledger.unsubscribe(self._on_change)
        if self._counts_timer is not None:
            self._counts_timer.cancel()
            self._counts_timer = None
        task, self._task = self._task, None
        task.cancel()
        for side in list(self._side_tasks):
            side.cancel()
        await asyncio.gather(task, *self._side_tasks, return_exceptions=True)
        self._fail_tunnel("the daemon is stopping; the tool did not run")

    # -- the ledger listener (runs on the MCP request path: no I/O, no waiting) -------------------------

    def _on_change(self, event: EvidenceEvent | None) -> None:
        if threading.get_ident() != self._loop_thread:
            # Recorded from a worker thread: the queue and the wake-up event belong to the loop's thread.
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._on_change, event)
            return
        if self._stopping or self._wake is None:
            return
        if event is None:
            self._state_changed = True
        elif self._connected and not self._need_snapshot:
            # Skipped while a snapshot is pending: the snapshot is taken when it is sent and will hold this event.
            try:
                line = P.encode_frame(P.frame(P.EvidenceFrame, event=event))
            except P.ProtocolError:
                self._overflow(1)
            else:
                if len(self._evidence) >= self.queue_frames or self._evidence_bytes + len(line) > self.queue_bytes:
                    self._overflow(1)
                else:
                    self._evidence.append(line)
                    self._evidence_bytes += len(line)
        self._wake.set()

    def _overflow(self, extra: int) -> None:
        self.dropped_events += len(self._evidence) + extra
        self._clear_evidence()
        if not self._need_snapshot:
            self.resyncs += 1
            log.info("upstream is slow: dropped queued evidence, a snapshot will resynchronise it")
        self._schedule_snapshot("resync")

    def _schedule_snapshot(self, reason: str) -> None:
        if not self._need_snapshot or reason in ("resync", "final"):
            self._snapshot_reason = reason
        self._need_snapshot = True

    def _clear_evidence(self) -> None:
        self._evidence.clear()
        self._evidence_bytes = 0

    # -- what to send next -------------------------------------------------------------------------

    def send_control(self, line: bytes, expires: float | None = None) -> bool:
        """Queue a request or answer ahead of evidence; dropped unsent once `expires` (monotonic) passed."""
        if not self._connected or self._wake is None or self._slow is None or self._slow.is_set():
            return False
        if not self._control.put(line, expires):
            self._slow_upstream()
            return False
        self._wake.set()
        return True

    def _slow_upstream(self) -> None:
        # The upstream keeps asking (or we keep calling tools) but does not read: holding more would grow
        # without bound. Close; the reconnect's snapshot repairs the state, pending tool calls fail clearly.
        assert self._slow is not None
        self.slow_disconnects += 1
        log.warning("upstream stopped reading (%d requests and answers waiting); reconnecting", len(self._control))
        self._control.clear()
        self._slow.set()

    def _next_line(self) -> bytes | None:
        line = self._control.pop()
        if line is not None:
            return line
        if self._state_changed:
            self._state_changed = False
            agent_line = self._agent_line_if_changed()
            if self._shape() != self._last_shape:
                self._schedule_snapshot("state")
            elif not self._need_snapshot and self._counts() != self._last_counts:
                wait = self._last_snapshot_at + self.state_interval - time.monotonic()
                if wait <= 0:
                    self._schedule_snapshot("state")
                elif self._counts_timer is None and self._loop is not None:
                    self._counts_timer = self._loop.call_later(wait, self._counts_due)
            if agent_line is not None and not self._need_snapshot:
                return agent_line
        if self._need_snapshot:
            return self._snapshot_line()
        if self._evidence:
            line = self._evidence.popleft()
            self._evidence_bytes -= len(line)
            return line
        return None

    def _counts_due(self) -> None:
        self._counts_timer = None
        if not self._stopping and self._wake is not None:
            self._state_changed = True  # look again: the interval has passed
            self._wake.set()

    def _shape(self) -> tuple[Any, ...]:
        """What changes without an evidence event and is sent at once: attempts, their notices, the required-server
        gate's reading (its time changes only with it) and endpoint tests."""
        history = self.ledger.history
        attempts = ([history.current] if history.current else []) + list(history.previous)
        return (
            tuple((a.attempt_id, a.superseded_at, a.notice_count, a.required and a.required.judged_at) for a in attempts),
            tuple((a.attempt_id, r.name, r.endpoint_test.tested_at) for a in attempts for r in a.servers if r.endpoint_test),
        )

    def _counts(self) -> tuple[Any, ...]:
        """What changes without an evidence event and is rate limited: refusals and rejected events."""
        history = self.ledger.history
        return sum(r.count for r in history.http_refusals), len(history.http_refusals), history.rejected_events

    def _agent_line_if_changed(self) -> bytes | None:
        agent = self.ledger.history.agent
        if agent is None:
            return None
        data = encode(agent)
        if data == self._last_agent:
            return None
        self._last_agent = data
        return P.encode_frame(P.frame(P.AgentFrame, agent=agent))

    def _snapshot_line(self) -> bytes:
        reason = self._snapshot_reason
        self._need_snapshot = False
        self._snapshot_reason = "state"
        self._state_changed = False
        self._clear_evidence()  # everything queued so far is in the history this snapshot carries
        history = self.ledger.history
        self._last_shape = self._shape()
        self._last_counts = self._counts()
        self._last_snapshot_at = time.monotonic()
        self._last_agent = encode(history.agent) if history.agent is not None else None
        try:
            return P.encode_frame(P.frame(P.SnapshotFrame, history=history, reason=reason))
        except P.ProtocolError:
            return self._reduced_snapshot(reason)

    def _reduced_snapshot(self, reason: str) -> bytes:
        # Only a huge tool catalog can push a bounded history over the frame limit (the reducer keeps one
        # copy per row, none in events): send the rows without their catalogs.
        copy = msgspec.json.decode(encode(self.ledger.history), type=type(self.ledger.history))
        for attempt in ([copy.current] if copy.current else []) + copy.previous:
            for row in attempt.servers:
                row.catalog = None
        log.warning("snapshot over the frame limit: sent without tool catalogs")
        return P.encode_frame(P.frame(P.SnapshotFrame, history=copy, reason=reason))

    # -- connection loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        while not self._stopping:
            started = time.monotonic()
            try:
                await self._connect_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let the loop die: the daemon runs on without upstream
                self.last_error = "internal"
                log.warning("upstream connection failed unexpectedly: %s", type(exc).__name__)
            finally:
                self._disconnected()
            if self._stopping:
                return
            # A connection that lived a while resets the backoff; one refused at once keeps growing it.
            failures = 0 if time.monotonic() - started > self.backoff_max else failures + 1
            delay = min(self.backoff_max, self.backoff_initial * (2 ** min(failures, 30)))
            await asyncio.sleep(delay * (0.5 + 0.5 * self._rng()))

    async def _connect_once(self) -> None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(self.socket_path, limit=STREAM_LIMIT), CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            code = getattr(exc, "errno", None)
            self.last_error = "unreachable"
            if not self._outage_logged:
                self._outage_logged = True
                why = os.strerror(code) if code else "timed out"
                log.info("upstream %s unreachable (%s); buffering and retrying with backoff", self.socket_path, why)
            return
        try:
            cred = peer_cred(writer.get_extra_info("socket"))
            if not peer_allowed(cred[1] if cred is not None else None):
                # The tunnel hands tool arguments to whoever listens: only our own user (or root) may.
                self.last_error = "forbidden_peer"
                log.warning("upstream %s is served by another user; not connecting", self.socket_path)
                return
            await self._session(reader, writer)
        finally:
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), 1.0)
            except (OSError, TimeoutError, asyncio.CancelledError):
                pass

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._wake is not None
        writer.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self._control.clear()
        self._slow = slow = asyncio.Event()
        self._clear_evidence()
        self._need_snapshot, self._snapshot_reason = True, "connect"
        self._state_changed = False
        hello = P.frame(
            P.HelloFrame,
            identity=self.ledger.identity,
            daemon_version=__version__,
            contract_version=CONTRACT_VERSION,
            heartbeat_ms=int(self.heartbeat * 1000),
        )
        writer.write(P.encode_frame(hello))
        self._writer = writer
        # A fresh hello: the upstream says again if this daemon is still superseded.
        self.superseded_reason = self.superseded_at = None
        self._fatal_code = None
        self._connected = True
        self._outage_logged = False
        self._last_rx = time.monotonic()
        self.connects += 1
        self.last_connected_at = utcnow()
        self._set_readiness()
        if self._lost_at is not None:
            log.info("upstream regained after %.0f s (%s)", time.monotonic() - self._lost_at, self.socket_path)
            self._lost_at = None
        else:
            # No [upstream] configured: `run`'s own hub, which "upstream connected" would misname.
            log.info("%s connected (%s)", "embedded hub" if self.ctx.embedded_hub else "upstream", self.socket_path)
        tasks = [
            asyncio.create_task(self._pump(writer), name="agentctl-upstream-send"),
            asyncio.create_task(self._read_loop(reader, writer), name="agentctl-upstream-read"),
            asyncio.create_task(self._heartbeat_loop(), name="agentctl-upstream-heartbeat"),
            asyncio.create_task(slow.wait(), name="agentctl-upstream-slow"),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            exc = task.exception()
            if isinstance(exc, (OSError, EOFError)):
                self.last_error = "connection_lost"
            elif exc is not None:
                raise exc
        if slow.is_set():
            self.last_error = "slow_upstream"
        if self._stopping:
            log.info("upstream disconnected (%s)", self.last_error or "closed")
            return
        # One line for the whole outage: the reconnect attempts that fail until it is regained say nothing more.
        self._lost_at = time.monotonic()
        self._outage_logged = True
        log.warning("upstream lost (%s); buffering evidence and reconnecting", self.last_error or "closed")

    def _disconnected(self) -> None:
        was = self._connected
        self._connected = False
        self._writer = None
        self._slow = None
        self._control.clear()
        self._clear_evidence()
        self._schedule_snapshot("connect")
        if was:
            self._set_readiness()
        self._fail_tunnel("the connection to the orchestrator closed before the tool answered; try again")

    def _superseded(self, code: str) -> None:
        """The upstream rejects this daemon's frames: say so on every surface instead of "connected"."""
        if self.superseded_reason != code:
            why = ("a newer execution of this session" if code == "stale_execution"
                   else "a newer daemon instance of this execution")
            log.warning("upstream rejects this daemon's evidence: %s said hello (%s)", why, code)
        self.superseded_reason = code
        self.superseded_at = utcnow()
        self._set_readiness()

    async def _answer_endpoint_test(self, request: P.EndpointTestFrame) -> None:
        self.send_control(await endpoint_test_answer(self.ctx, request))

    def _fail_tunnel(self, message: str) -> None:
        if self.tunnel is not None:
            self.tunnel.on_disconnect(message)

    def _set_readiness(self) -> None:
        # True in every state on purpose: an upstream outage must not make the daemon unready, and a
        # superseded daemon still serves its agent (the detail and `degraded` say what the upstream does).
        superseded = self.superseded_reason if self._connected else None
        self.ctx.readiness.set("upstream", True, f"superseded: {superseded}" if superseded else self.state)
        self.ctx.readiness.set_degraded("upstream", superseded)

    async def _pump(self, writer: asyncio.StreamWriter) -> None:
        assert self._wake is not None and self._idle is not None
        while True:
            line = self._next_line()
            if line is None:
                self._wake.clear()
                self._idle.set()
                await self._wake.wait()
                continue
            self._idle.clear()
            writer.write(line)
            await writer.drain()  # a stalled upstream parks only this task; the listener keeps dropping

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            if time.monotonic() - self._last_rx > 3 * self.heartbeat:
                self.last_error = "idle_timeout"
                log.info("upstream silent for %.0f s; reconnecting", 3 * self.heartbeat)
                return
            if not self._control.heartbeat_queued:
                self.send_control(self._control.heartbeat)

    async def _read_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                raw = await read_frame_line(reader)
                if raw is None:
                    self.last_error = self._fatal_code or "closed_by_upstream"
                    return
                self._last_rx = time.monotonic()
                received = P.decode_from_upstream(raw)
            except P.ProtocolError as exc:
                self.last_error = exc.code
                log.warning("upstream sent a bad frame (%s); closing the connection", exc.code)
                refusal = P.frame(P.ErrorFrame, code=exc.code, message=str(exc), fatal=True)
                writer.write(P.encode_frame(refusal))
                return
            self._dispatch(received)

    def _dispatch(self, received: P.UpstreamFrame) -> None:
        if isinstance(received, P.ToolResultFrame):
            if self.tunnel is not None:
                self.tunnel.on_result(received)
        elif isinstance(received, P.StderrReadFrame):
            self.send_control(stderr_answer(self.ctx, received))
        elif isinstance(received, P.TerminalReadFrame):
            self.send_control(terminal_answer(self.ctx, received))
        elif isinstance(received, P.EndpointTestFrame):
            task = asyncio.create_task(self._answer_endpoint_test(received))
            self._side_tasks.add(task)
            task.add_done_callback(self._side_tasks.discard)
        elif isinstance(received, P.ErrorFrame):
            if received.id is not None and self.tunnel is not None:
                self.tunnel.on_error(received)
            elif received.code in SUPERSEDED_CODES:
                self._superseded(received.code)
            else:
                if received.fatal:  # the upstream closes next: that is why this connection ended
                    self._fatal_code = P.loggable_code(received.code)
                log.info("upstream reported %s", P.loggable_code(received.code))
        # HeartbeatFrame: receiving it was the point (_last_rx).
