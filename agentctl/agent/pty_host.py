"""The agent's pseudo-terminal as the daemon holds it: the master side, its window size, what it prints, who types.

agentctl owns the PTY master; the agent gets the slave as stdin, stdout, stderr and controlling terminal (its
shim makes it so). Everything the agent prints is read here once and handed on, each chunk to: the bounded
recent-output window (the same StderrRing the headless stderr feeds: memory only), the output taps (parsers of
agent-reported evidence), a bounded replay tail for a viewer that attaches later, and every attached viewer.
Nothing read here is logged or persisted.

One viewer at a time holds the keyboard (`claim`/`release`; when the holder leaves, the viewer attached longest
gets it); only its keys reach the agent, and every viewer is told when the holder changes. A slow viewer never slows the agent: `pause`/`resume` are for the one viewer
that should apply back-pressure (the person's own terminal under `agentctl run`).

Keys are never cut: `type_keys` queues them whole and in order, and while MAX_PENDING_INPUT wait for an agent that
reads slowly it waits (its caller stops reading the writer: back-pressure). What each viewer's keys came to is
counted (`input_delivered`: bytes written to the agent's terminal), so a writer can be told exactly what did not
arrive when the keyboard changes hands, the agent exits, or it leaves before the agent read its keys. An agent
that takes none of its waiting keys for KEYS_STALL is stalled: further keys are refused, and counted, rather than
holding the writer (and its detach, its hang-up) behind them for ever.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import struct
import termios
from collections import deque
from collections.abc import Callable
from typing import Any
from dataclasses import dataclass

from agentctl.agent.stderr_ring import StderrRing

log = logging.getLogger(__name__)

DEFAULT_ROWS = 24
DEFAULT_COLS = 80
MAX_DIMENSION = 1000  # rows or columns: beyond this a size is a mistake, not a terminal
# What a viewer that attaches later is replayed: the tail of the stream, memory only.
REPLAY_BYTES = 32 * 1024
READ_BYTES = 65536
DRAIN_BYTES = 256 * 1024  # at most this much is read per wake-up, so one flood cannot starve the loop
# Keys waiting for the agent to read them; beyond this a writer waits (`type_keys`) or is refused (`write`).
MAX_PENDING_INPUT = 64 * 1024
# An agent that takes none of its waiting keys for this long is stalled: further keys are refused (and counted).
KEYS_STALL = 15.0


@dataclass(frozen=True)
class WindowSize:
    rows: int = DEFAULT_ROWS
    cols: int = DEFAULT_COLS

    def __post_init__(self) -> None:
        for name in ("rows", "cols"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_DIMENSION:
                raise ValueError(f"terminal {name} must be 1-{MAX_DIMENSION}")


def set_window_size(fd: int, size: WindowSize) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", size.rows, size.cols, 0, 0))


def get_window_size(fd: int) -> WindowSize | None:
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
        return WindowSize(rows, cols)
    except (OSError, ValueError):
        return None


def open_pty(size: WindowSize) -> tuple[int, int]:
    """A new PTY pair (master, slave), neither inherited by accident, the window size set."""
    master, slave = os.openpty()
    try:
        set_window_size(master, size)
        os.set_blocking(master, False)
    except BaseException:
        os.close(master)
        os.close(slave)
        raise
    return master, slave


class Viewer:
    """One attached viewer: `output` gets every chunk, `role_changed` who holds the keyboard (it may be itself)."""

    def output(self, data: bytes) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def role_changed(self, holder: Viewer | None) -> None:
        pass

    def closed(self) -> None:
        """The agent's terminal is gone (the agent exited, or its attempt ended)."""


class PtyHost:
    def __init__(self, master: int, ring: StderrRing, size: WindowSize) -> None:
        self._master: int | None = master
        self._ring = ring
        self._size = size
        self._taps: list[Callable[[bytes], None]] = []
        self._viewers: list[Viewer] = []
        self._holder: Viewer | None = None
        self._replay: deque[bytes] = deque()
        self._replay_bytes = 0
        self._seen = 0
        self._pending_input = bytearray()
        # Whose keys `_pending_input` holds, in order: [viewer, bytes of it still pending].
        self._input_owners: deque[list[Any]] = deque()
        self._delivered: dict[Viewer, int] = {}
        self._input_waiters: list[asyncio.Future[None]] = []
        self._input_moved = 0.0  # when the agent last took keys (or keys came to wait for it)
        self._paused = 0
        self._reading = False
        self._loop = asyncio.get_running_loop()
        self._eof = asyncio.Event()
        self._start_reading()

    # -- state --------------------------------------------------------------------------------------

    @property
    def size(self) -> WindowSize:
        return self._size

    @property
    def open(self) -> bool:
        return self._master is not None and not self._eof.is_set()

    @property
    def holder(self) -> Viewer | None:
        return self._holder

    @property
    def viewers(self) -> int:
        return len(self._viewers)

    async def wait_eof(self) -> None:
        await self._eof.wait()

    def replay(self) -> bytes:
        """The tail of what the agent printed (at most REPLAY_BYTES), for a viewer that attaches now."""
        return b"".join(self._replay)

    @property
    def bytes_seen(self) -> int:
        """Everything the agent has printed on this terminal, in bytes (the replay keeps only its tail)."""
        return self._seen

    # -- output ---------------------------------------------------------------------------------------

    def add_tap(self, tap: Callable[[bytes], None]) -> None:
        """`tap` sees every chunk the agent prints (a parser of agent-reported evidence); it must not block."""
        self._taps.append(tap)

    def _start_reading(self) -> None:
        if self._master is not None and not self._reading and not self._paused and not self._eof.is_set():
            self._loop.add_reader(self._master, self._on_readable)
            self._reading = True

    def _stop_reading(self) -> None:
        if self._reading and self._master is not None:
            self._loop.remove_reader(self._master)
        self._reading = False

    def pause(self) -> None:
        """Stop reading the agent's output until `resume` (the agent then blocks writing, as on a slow terminal)."""
        self._paused += 1
        self._stop_reading()

    def resume(self) -> None:
        self._paused = max(0, self._paused - 1)
        self._start_reading()

    def _on_readable(self) -> None:
        assert self._master is not None
        # A PTY hands out a few KiB per read: what is there now is taken in one wake-up (up to DRAIN_BYTES), so a
        # flood costs the loop, the ring and each viewer one pass per batch rather than per read.
        parts: list[bytes] = []
        size = 0
        ended = False
        while size < DRAIN_BYTES:
            try:
                chunk = os.read(self._master, READ_BYTES)
            except BlockingIOError:
                break
            except OSError as exc:
                # EIO: every holder of the slave has closed it (the agent and its tree are gone).
                if exc.errno not in (errno.EIO, errno.EBADF):
                    log.warning("agent terminal read failed: %s", exc.strerror)
                chunk = b""
            if not chunk:
                ended = True
                break
            parts.append(chunk)
            size += len(chunk)
        if parts:
            self._deliver(parts[0] if len(parts) == 1 else b"".join(parts))
        if ended:
            self._finish()

    def _deliver(self, data: bytes) -> None:
        self._seen += len(data)
        self._ring.feed(data)
        for tap in list(self._taps):
            try:
                tap(data)
            except Exception as exc:  # a parser's bug must not cut the person off the agent
                log.warning("agent terminal tap failed: %s", type(exc).__name__)
        self._keep_for_replay(data)
        for viewer in list(self._viewers):
            viewer.output(data)

    def _keep_for_replay(self, data: bytes) -> None:
        if len(data) >= REPLAY_BYTES:
            self._replay.clear()
            self._replay.append(data[-REPLAY_BYTES:])
            self._replay_bytes = REPLAY_BYTES
            return
        self._replay.append(data)
        self._replay_bytes += len(data)
        while self._replay_bytes > REPLAY_BYTES:
            head = self._replay.popleft()
            excess = self._replay_bytes - REPLAY_BYTES
            if excess < len(head):
                self._replay.appendleft(head[excess:])
                self._replay_bytes -= excess
            else:
                self._replay_bytes -= len(head)

    def _finish(self) -> None:
        if self._eof.is_set():
            return
        self._stop_reading()
        self._ring.feed_eof()
        self._eof.set()
        self._wake_input()
        for viewer in list(self._viewers):
            viewer.closed()
        self._viewers.clear()
        self._holder = None

    def close(self) -> None:
        """Let go of the master (the agent's session gets SIGHUP if it still holds the terminal)."""
        self._finish()
        if self._master is not None:
            self._loop.remove_writer(self._master)
            os.close(self._master)
            self._master = None
        self._pending_input.clear()
        self._input_owners.clear()

    # -- viewers and the keyboard ---------------------------------------------------------------------

    def attach(self, viewer: Viewer) -> None:
        if not self.open:
            viewer.closed()
            return
        self._viewers.append(viewer)

    def detach(self, viewer: Viewer) -> None:
        self._delivered.pop(viewer, None)  # keys of its still pending reach the agent all the same
        if viewer in self._viewers:
            self._viewers.remove(viewer)
        if self._holder is viewer:
            # First come: the keyboard passes to the viewer attached longest.
            self._set_holder(self._viewers[0] if self._viewers else None)

    def claim(self, viewer: Viewer, *, take: bool = False) -> bool:
        """Give `viewer` the keyboard when nobody holds it (or, with `take`, from whoever does)."""
        if viewer not in self._viewers:
            return False
        if self._holder is None or take or self._holder is viewer:
            if self._holder is not viewer:
                self._set_holder(viewer)
            return True
        return False

    def release(self, viewer: Viewer) -> None:
        """Give the keyboard up, to the viewer attached longest (nobody, when `viewer` is alone)."""
        if self._holder is viewer:
            others = [v for v in self._viewers if v is not viewer]
            self._set_holder(others[0] if others else None)

    def _set_holder(self, holder: Viewer | None) -> None:
        self._holder = holder
        self._wake_input()
        for viewer in list(self._viewers):
            viewer.role_changed(holder)

    def write(self, viewer: Viewer, data: bytes) -> bool:
        """Keys from `viewer` to the agent; False (nothing sent) unless it holds the keyboard and the agent keeps up."""
        if viewer is not self._holder or self._master is None or not self.open:
            return False
        if len(self._pending_input) + len(data) > MAX_PENDING_INPUT:
            return False
        self._queue_input(viewer, data)
        return True

    async def type_keys(self, viewer: Viewer, data: bytes) -> int:
        """Keys from `viewer`, queued whole and in order once fewer than MAX_PENDING_INPUT bytes wait for the
        agent (until then this waits: the caller reads nothing more from the writer). Answers how many bytes
        were taken: all of them, or 0 when `viewer` does not hold the keyboard, the terminal closed, or the
        agent has read none of its keys for KEYS_STALL (`input_stalled`: a hung agent must not hold the writer,
        and what it sends after, for ever)."""
        while viewer is self._holder and self.open and len(self._pending_input) >= MAX_PENDING_INPUT:
            if self.input_stalled():
                return 0
            await self._input_change(self._input_moved + KEYS_STALL - self._loop.time())
        if viewer is not self._holder or self._master is None or not self.open:
            return 0
        self._queue_input(viewer, data)
        return len(data)

    def input_stalled(self) -> bool:
        """Whether keys wait and the agent has taken none of them for KEYS_STALL seconds."""
        return bool(self._pending_input) and self._loop.time() - self._input_moved >= KEYS_STALL

    def input_delivered(self, viewer: Viewer) -> int:
        """How many bytes of `viewer`'s keys were written to the agent's terminal so far."""
        return self._delivered.get(viewer, 0)

    def input_pending(self, viewer: Viewer) -> int:
        """How many bytes of `viewer`'s keys still wait for the agent to read them."""
        return sum(n for owner, n in self._input_owners if owner is viewer)

    async def wait_input_sent(self, viewer: Viewer, timeout: float) -> None:
        """Until none of `viewer`'s keys wait (or the terminal closed, or the agent stalled), at most `timeout`
        seconds; what still waits then is dropped, so `input_delivered` is final for it."""
        deadline = self._loop.time() + timeout
        while self.open and self.input_pending(viewer) and not self.input_stalled():
            left = deadline - self._loop.time()
            if left <= 0:
                break
            await self._input_change(left)
        self._drop_input(viewer)

    async def _input_change(self, timeout: float) -> None:
        """Until the keys move (some written, the holder changed, the terminal closed) or `timeout` passes."""
        waiter = self._loop.create_future()
        self._input_waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, max(timeout, 0.01))
        except TimeoutError:
            pass
        finally:
            if waiter in self._input_waiters:
                self._input_waiters.remove(waiter)

    def _queue_input(self, viewer: Viewer, data: bytes) -> None:
        self._delivered.setdefault(viewer, 0)
        self._input_owners.append([viewer, len(data)])
        if not self._pending_input:
            self._input_moved = self._loop.time()
        self._pending_input += data
        if len(self._pending_input) == len(data):  # nothing was waiting: try at once, then when writable
            self._flush_input()
            if self._pending_input and self._master is not None:
                self._loop.add_writer(self._master, self._flush_input)

    def _flush_input(self) -> None:
        if self._master is None:
            return
        try:
            written = os.write(self._master, self._pending_input)
        except BlockingIOError:
            return
        except OSError:
            # The terminal is going (EIO): nothing more reaches the agent; its keys stay counted as undelivered.
            self._loop.remove_writer(self._master)
            return
        del self._pending_input[:written]
        if written:
            self._input_moved = self._loop.time()
        self._count_written(written)
        if not self._pending_input:
            self._loop.remove_writer(self._master)
        self._wake_input()

    def _count_written(self, written: int) -> None:
        while written and self._input_owners:
            owner = self._input_owners[0]
            taken = min(written, owner[1])
            owner[1] -= taken
            written -= taken
            if owner[0] in self._delivered:
                self._delivered[owner[0]] += taken
            if not owner[1]:
                self._input_owners.popleft()

    def _drop_input(self, viewer: Viewer) -> None:
        """Take `viewer`'s keys that still wait out of the queue (the others' stay, in order)."""
        if not any(owner is viewer for owner, _ in self._input_owners):
            return
        kept = bytearray()
        owners: deque[list[Any]] = deque()
        offset = 0
        for owner, n in self._input_owners:
            if owner is not viewer:
                kept += self._pending_input[offset:offset + n]
                owners.append([owner, n])
            offset += n
        self._pending_input, self._input_owners = kept, owners
        if not kept and self._master is not None:
            self._loop.remove_writer(self._master)
        self._wake_input()

    def _wake_input(self) -> None:
        for waiter in self._input_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._input_waiters.clear()

    def resize(self, viewer: Viewer | None, size: WindowSize) -> bool:
        """Set the window size (the kernel then sends SIGWINCH to the agent's foreground process group).
        Only the keyboard's holder resizes (None: the daemon itself)."""
        if viewer is not None and viewer is not self._holder:
            return False
        if self._master is None:
            return False
        if size != self._size:
            try:
                set_window_size(self._master, size)
            except OSError:
                return False
            self._size = size
        return True
