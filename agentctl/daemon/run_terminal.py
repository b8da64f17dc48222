"""`agentctl run` attached: the person's own terminal connected to the agent's PTY until the agent exits.

While attached the person's terminal is in raw mode (every key, Ctrl-C included, goes to the agent, whose own
terminal turns it into a signal) and its window size follows theirs (SIGWINCH). The terminal's settings are
restored on every way out: the agent's exit or crash, a SIGTERM/SIGINT of agentctl (the job is cancelled), an
exception. Output is written by a worker thread, so a slow terminal slows the agent (back-pressure, as on any
terminal) and never the daemon's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque
from collections.abc import Awaitable, Callable, Iterator

from agentctl.agent.pty_host import KEYS_STALL, PtyHost, Viewer, get_window_size
from agentctl.agent.pty_local import ScreenModes, raw_mode, write_all
from agentctl.agent.spawn import ExitInfo

# Output waiting for the person's terminal: past HIGH the agent's output is not read until it is below LOW.
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024
# After the agent's exit: how long its last output may take to arrive and be written.
DRAIN_SECONDS = 2.0


class LocalTerminal(Viewer):
    """The person's terminal as a viewer of the agent's: it holds the keyboard, and it slows the agent down
    rather than falling behind."""

    def __init__(self, host: PtyHost, out_fd: int) -> None:
        self._host = host
        self._out = out_fd
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._pending = 0
        self._paused = False
        self.modes = ScreenModes()
        self.announce = False  # keyboard changes are told once the terminal is connected
        self.gone = asyncio.Event()
        self._writer = asyncio.get_running_loop().create_task(self._write_loop(), name="run-terminal-output")

    def output(self, data: bytes) -> None:
        self.modes.see(data)
        self._queue.put_nowait(data)
        self._pending += len(data)
        if self._pending > HIGH_WATER and not self._paused:
            self._paused = True
            self._host.pause()

    def closed(self) -> None:
        self.gone.set()

    def role_changed(self, holder: Viewer | None) -> None:
        # Someone ran `agentctl attach --take`: this terminal's keys stop reaching the agent, and it says so.
        if not self.announce:
            return
        note = "your keys reach the agent again" if holder is self else "another viewer took the keyboard"
        self.output(f"\r\n[agentctl: {note}]\r\n".encode())

    async def _write_loop(self) -> None:
        done = False
        while not done:
            parts = [await self._queue.get()]
            while not self._queue.empty():
                parts.append(self._queue.get_nowait())
            if None in parts:
                done = True
                parts = parts[: parts.index(None)]
            data = b"".join(p for p in parts if p is not None)
            if not data:
                continue
            try:
                await asyncio.to_thread(write_all, self._out, data)
            except OSError:
                return  # the terminal is gone (hung up): the agent goes on, unwatched
            self._pending -= len(data)
            if self._paused and self._pending < LOW_WATER:
                self._paused = False
                self._host.resume()

    async def finish(self) -> None:
        """Write what is queued (bounded by DRAIN_SECONDS), then leave the screen as a shell expects it."""
        self._queue.put_nowait(None)
        try:
            await asyncio.wait_for(asyncio.shield(self._writer), DRAIN_SECONDS)
        except TimeoutError:
            self._writer.cancel()
        if self._paused:
            self._paused = False
            self._host.resume()
        with contextlib.suppress(OSError):
            await asyncio.to_thread(write_all, self._out, self.modes.reset())


async def attach_local(host: PtyHost, wait_exit: asyncio.Future[object],
                       *, in_fd: int = 0, out_fd: int = 1) -> None:
    """Connect the terminal on `in_fd`/`out_fd` to the agent's until `wait_exit` (the agent's exit) is done
    and its last output is shown. Returns at once when `in_fd` is not a terminal."""
    if not os.isatty(in_fd):
        return
    loop = asyncio.get_running_loop()
    local = LocalTerminal(host, out_fd)
    typing: list[asyncio.Task[None]] = []  # the keys being queued for the agent, when any

    def follow_size() -> None:
        size = get_window_size(out_fd) or get_window_size(in_fd)
        if size is not None:
            host.resize(local, size)

    def on_input() -> None:
        try:
            data = os.read(in_fd, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the person's terminal hung up: the agent goes on, unwatched, until it exits
            loop.remove_reader(in_fd)
            return
        # Keys whole and in order: while the agent has not read the ones before, this terminal is not read
        # (its own buffer, then the person's typing, waits: back-pressure, as on any terminal).
        loop.remove_reader(in_fd)
        typing.append(loop.create_task(type_then_read(data), name="run-terminal-keys"))

    async def type_then_read(data: bytes) -> None:
        if not await host.type_keys(local, data) and host.holder is local and host.input_stalled():
            local.output(f"\r\n[agentctl: the agent has read none of its input for {KEYS_STALL:g} s: "
                         f"{len(data)} bytes of your keys were not delivered]\r\n".encode())
        typing.clear()
        if host.open and not local.gone.is_set():
            loop.add_reader(in_fd, on_input)

    host.attach(local)
    host.claim(local, take=True)
    local.announce = True
    follow_size()
    local.output(host.replay())  # what it printed before the terminal was connected
    try:
        with raw_mode(in_fd):
            loop.add_reader(in_fd, on_input)
            loop.add_signal_handler(signal.SIGWINCH, follow_size)
            try:
                await asyncio.shield(wait_exit)
                # The exit may be reported before the last bytes are read: the terminal's end says they were.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(local.gone.wait(), DRAIN_SECONDS)
            finally:
                loop.remove_signal_handler(signal.SIGWINCH)
                loop.remove_reader(in_fd)
                for task in typing:
                    task.cancel()
                host.detach(local)
                await local.finish()
    finally:
        local.gone.set()


# Progress lines held while the person's terminal is the agent's: beyond this many, older ones are dropped.
MAX_HELD_LINES = 1000


class HeldLines:
    """`agentctl run`'s progress lines: shown at once, or, while the person's terminal is the agent's (they would
    tear its screen), held and shown once the agent has exited."""

    def __init__(self, show: Callable[[str], object]) -> None:
        self._show = show
        self._held: deque[str] | None = None
        self.dropped = 0

    def __call__(self, line: str) -> None:
        if self._held is None:
            self._show(line)
            return
        if len(self._held) == MAX_HELD_LINES:
            self.dropped += 1
        self._held.append(line)

    def now(self, line: str) -> None:
        """Shown at once, ahead of what is held (the header the held lines come after)."""
        self._show(line)

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        self._held = deque(maxlen=MAX_HELD_LINES)
        try:
            yield
        finally:
            held, self._held = self._held, None
            if self.dropped:
                self._show(f"  ({self.dropped} earlier progress lines not shown)")
            for line in held:
                self._show(line)


async def run_attached(host: PtyHost, wait_exit: Awaitable[object], show: Callable[[str], object]) -> None:
    """The agent on the person's terminal until it exits, `show`'s lines held meanwhile (when it is a HeldLines)."""
    exit_future = asyncio.ensure_future(wait_exit)
    holding = show.holding() if isinstance(show, HeldLines) else contextlib.nullcontext()
    with holding:
        await attach_local(host, exit_future)
    await exit_future


def attached_exit_status(info: ExitInfo) -> int:
    """The agent's own exit status as a shell reports it: its code, or 128 + the signal that killed it."""
    if info.signal is not None:
        return 128 + info.signal
    return info.returncode if info.returncode is not None else 1
