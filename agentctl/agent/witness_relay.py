"""Owns the stdio witness's byte relay: both directions copied as they arrive, and the lines of them it hands on.

Two relays move the same bytes. The compiled one (agentctl/agent/witness_copy.c, built with the package where a C compiler
is there) copies each direction with the interpreter lock released and writes the chunks also to a tap pipe; one
thread reads the two taps at its own pace, so a round trip never waits on Python (measured: bench/RESULTS.md). The
Python one, where nothing was compiled (or `AGENTCTL_WITNESS_RELAY=python`), copies on two Python threads and reads
the lines on the way.

Either way the same order lets the server's bytes go by unread (spliced pipe to pipe) while no answer is awaited:
a request is noted, or in the tap, before the server can have read it, so before any answer to it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import struct
import termios
import threading
import time
from collections.abc import Callable

from agentctl.agent.witness_scan import Lines

try:
    from agentctl.agent import witness_copy
except ImportError:  # built without a C compiler: the Python relay below
    witness_copy = None  # type: ignore[assignment]

CHUNK = 1024 * 1024
# The tap reader sleeps this long after a round that read little, so a run of small messages (calls one after
# another) wakes it once per pause rather than once per message: the reports lose nothing but these milliseconds.
PACE = 0.002
QUIET = 16 * 1024  # a round that read less than this was messages, not a stream (which is never paced)
_AGENT_SIDE, _SERVER_SIDE = 0, 1  # agentctl/agent/witness_copy.c's names
_END_DESTINATION = 2  # its copy ended because `dst` refused a write
_COUNT_MASK = (1 << 63) - 1  # the gate counts the agent's bytes mod 2**63
_F_SETPIPE_SZ = 1031

# A line and a position in the agent's stream: for the agent's lines where each ended, for the server's the
# horizon of what it can answer.
Marked = Callable[[bytes, int], None]
_FRAME = struct.Struct("=QII")  # the server's tap frames (agentctl/agent/witness_copy.c): horizon, length, flags
_RESUMED = 1


def compiled() -> bool:
    """Whether the compiled relay is there (else the witness relays in Python)."""
    return witness_copy is not None


class Relay:
    """The two directions of one server's link: agent -> server, and server -> agent.

    `from_agent` gets each complete line of the agent's that may be a JSON object, in order, with the offset in
    the agent's stream where it ended; `from_server` each such line of the server's with its horizon: the most of
    the agent's stream the server could have read before it wrote the line. `waiting()` says whether an answer is
    awaited (else the server's lines are not read at all); `agent_done()` is called once the agent closed its side
    (not when the server stopped taking it)."""

    def __init__(self, from_agent: Marked, from_server: Marked, waiting: Callable[[], bool],
                 agent_done: Callable[[], None], *, use_compiled: bool | None = None) -> None:
        self._from_agent, self._from_server = from_agent, from_server
        self._waiting, self._agent_done = waiting, agent_done
        self._compiled = compiled() if use_compiled is None else use_compiled and compiled()
        self._threads: list[threading.Thread] = []
        self._agent_lines = Lines()  # the Python relay's: what of the agent's stream is noted (its offset)

    def start(self, agent_out: int, server_in: int, server_out: int, agent_in: int) -> None:
        """Relay `agent_out` -> `server_in` and `server_out` -> `agent_in` on threads of their own."""
        for fd in (agent_out, server_in, server_out, agent_in):  # every hop moves large chunks
            widen(fd)
        if self._compiled:
            up_tap, up_mouth = os.pipe()
            down_tap, down_mouth = os.pipe()
            gate = witness_copy.gate()
            self._spawn(self._copy, agent_out, server_in, up_mouth, True, gate)
            self._spawn(self._copy, server_out, agent_in, down_mouth, False, gate)
            self._spawn(self._read_taps, up_tap, down_tap, gate)
        else:
            self._spawn(self._upstream, agent_out, server_in)
            self._spawn(self._downstream, server_out, agent_in)

    def join(self, timeout: float) -> None:
        """Wait (bounded) until the server's last bytes went to the agent and its last lines were read."""
        deadline = time.monotonic() + timeout
        for thread in self._threads[1:]:  # the server's side and the taps; the agent's may never end
            thread.join(max(0.0, deadline - time.monotonic()))

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _copy(self, src: int, dst: int, mouth: int, upstream: bool, gate: witness_copy.Gate) -> None:
        end, _tap_ok = witness_copy.copy(src, dst, mouth, _AGENT_SIDE if upstream else _SERVER_SIDE, CHUNK, gate)
        if upstream and end != _END_DESTINATION:
            self._agent_done()  # the agent closed its side (a server that stopped taking it is not the agent's end)
        with contextlib.suppress(OSError):
            os.close(dst if upstream else src)  # the server sees its stdin end / its next write fail, as directly
        os.close(mouth)  # the tap reader sees this direction end

    def _read_taps(self, up: int, down: int, gate: witness_copy.Gate) -> None:
        """Read what the two copies wrote to their taps until the server's side ends.

        The server's side comes in frames, each with its horizon: how far the agent's stream had been tapped when
        the frame's bytes were read from the server. Before a frame is read all the agent's bytes there are now
        are noted (every request the frame can answer was tapped before it), and a line of the frame is taken
        for the answer to a request only if that request ended within the horizon. When nothing is awaited the
        frame is passed over unread, and the gate is opened for exactly the agent's bytes read so far (unless a
        line of the agent's is under way): the server's side then goes untapped until the agent sends more."""
        for fd in (up, down):
            os.set_blocking(fd, False)
        agent, server = _Tap(up, self._from_agent), Lines()
        buf = bytearray(CHUNK)
        frames = bytearray()
        poller = select.poll()
        poller.register(up, select.POLLIN)
        poller.register(down, select.POLLIN)
        try:
            while True:
                poller.poll()
                size = _read(down, buf)
                if size:
                    frames += memoryview(buf)[:size]
                drained = agent.drain()
                if not agent.open:
                    with contextlib.suppress(KeyError):
                        poller.unregister(up)
                while len(frames) >= _FRAME.size:
                    horizon, length, flags = _FRAME.unpack_from(frames)
                    end = _FRAME.size + length
                    if len(frames) < end:
                        break
                    self._server_frame(server, horizon, flags, frames, _FRAME.size, end, agent.collecting)
                    del frames[:end]
                if size == 0:
                    return
                if not self._waiting() and not agent.collecting:
                    witness_copy.open_gate(gate, agent.offset & _COUNT_MASK)
                if (size or 0) + drained < QUIET:
                    time.sleep(PACE)
        finally:
            os.close(up)
            os.close(down)

    def _server_frame(self, lines: Lines, horizon: int, flags: int, frames: bytearray, start: int, end: int,
                      agent_collecting: bool) -> None:
        if flags & _RESUMED:
            lines.resync(b"\n")  # the frame starts a line; what was held of an earlier one is no line
        if start == end:
            return
        if not self._waiting() and not agent_collecting:
            lines.resync(bytes(frames[end - 1:end]))
            return
        for line, _ in lines.feed_ends(frames[start:end]):
            self._from_server(line, horizon)

    def _awaiting(self) -> bool:
        """An answer may be coming: a watched request awaits one, or a line of the agent's is under way (a server
        may answer an object before its newline arrives)."""
        return self._waiting() or self._agent_lines.collecting

    def _answer(self, line: bytes, horizon: int) -> None:
        if self._awaiting():
            self._from_server(line, horizon)

    def _upstream(self, src: int, dst: int) -> None:
        """Agent -> server: every byte as it comes; the agent's requests noted by id before they go on."""
        if _pump(src, dst, self._agent_lines, self._from_agent, note_first=True):
            self._agent_done()  # the agent closed its side (a server that stopped taking it is not the agent's end)
        with contextlib.suppress(OSError):
            os.close(dst)

    def _downstream(self, src: int, dst: int) -> None:
        """Server -> agent: every byte as it comes; the lines read while an answer is awaited. When the agent stops
        reading, the server's next write fails as it would directly."""
        _pump(src, dst, Lines(), self._answer, horizon=lambda: self._agent_lines.offset,
              spliceable=lambda: not self._awaiting())
        with contextlib.suppress(OSError):
            os.close(src)


class _Tap:
    """The agent's tap: drained whole at each look, its lines handed on with where they end."""

    def __init__(self, fd: int, on_line: Marked) -> None:
        self.fd, self.open = fd, True
        self._on_line = on_line
        self._lines = Lines()
        self._buf = bytearray(CHUNK)

    @property
    def offset(self) -> int:
        return self._lines.offset

    @property
    def collecting(self) -> bool:
        return self._lines.collecting

    def drain(self) -> int:
        """Read all there is now; the byte count."""
        total = 0
        while self.open:
            size = _read(self.fd, self._buf)
            if size is None:
                break
            if size == 0:
                self.open = False
                break
            total += size
            for line, end in self._lines.feed_ends(self._buf, size):
                self._on_line(line, end)
        return total


def _read(fd: int, buf: bytearray) -> int | None:
    """Bytes read into `buf` (0 at the end), or None when there are none yet."""
    try:
        return os.readv(fd, [buf])
    except BlockingIOError:
        return None
    except OSError:
        return 0


def _pump(src: int, dst: int, lines: Lines, on_line: Marked, note_first: bool = False,
          spliceable: Callable[[], bool] | None = None, horizon: Callable[[], int] | None = None) -> bool:
    """Copy `src` to `dst` chunk by chunk as it arrives, until either end closes: True when `src` ended, False
    when `dst` refused a write.

    One buffer, reused: a read of up to CHUNK bytes lands in it and goes on at once (or, `note_first`, once its
    lines are noted), and is searched for the lines that may be envelopes (bulk data is passed over in one
    C-level search per chunk). While `spliceable()` says no answer is awaited, the bytes move pipe to pipe in
    the kernel (splice), never read at all (see _splice_unread). `note_first`: each line goes with where it
    ended; else with `horizon()` as it was when the chunk was read, before the agent could see it."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    while True:
        if spliceable is not None and not lines.collecting and spliceable():
            moved = _splice_unread(src, dst, lines, spliceable)
            if moved is None:
                spliceable = None  # `dst` takes no splice (a terminal, say): read and write from now on
            elif moved < 0:
                return False
            elif moved:
                continue
        try:
            size = os.readv(src, [buf])
        except OSError:
            return True
        if not size:
            return True
        if note_first:
            for line, end in lines.feed_ends(buf, size):
                on_line(line, end)
        seen = horizon() if horizon is not None else 0
        if not _write_all(dst, view[:size]):
            return False
        if not note_first:
            for line, _ in lines.feed_ends(buf, size):
                on_line(line, seen)


def _splice_unread(src: int, dst: int, lines: Lines, spliceable: Callable[[], bool]) -> int | None:
    """Move what `src` holds to `dst` unread, if it cannot hold an awaited answer: 0 to read instead, -1 at
    an end, None when `dst` takes no splice.

    The bytes counted in the pipe before `spliceable()` said no answer is awaited cannot be one (a request is
    noted before it reaches the server). All but the last of them are spliced; that last byte is read, so
    the line state is known again: after a newline the next line is a new one, else a line that began
    before (not an answer) is skipped to its end."""
    waiter = select.poll()  # poll, not select: no FD_SETSIZE bound on `src`
    waiter.register(src, select.POLLIN)
    waiter.poll()
    try:
        held = struct.unpack("i", fcntl.ioctl(src, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0
    if held < 2 or not spliceable():
        return 0
    try:
        moved = os.splice(src, dst, held - 1)
    except OSError as exc:
        return None if exc.errno == errno.EINVAL else -1
    if not moved:
        return -1
    last = os.read(src, 1)  # one of the counted bytes: there is one left
    if not last or not _write_all(dst, memoryview(last)):
        return -1
    lines.resync(last)
    return moved + 1


def widen(fd: int) -> None:
    """A 1 MiB pipe: a server streaming large results is relayed in fewer, larger chunks (a no-op where `fd`
    is not a pipe, or the system's limit is lower)."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, 1 << 20)


def _write_all(fd: int, view: memoryview) -> bool:
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except OSError:
            return False
        view = view[n:]
    return True
