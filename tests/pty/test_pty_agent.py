"""The agent on a pseudo-terminal the daemon owns: controlling terminal, size, resize, keys, Ctrl-C, output window."""

from __future__ import annotations

import asyncio
import signal

import pytest

from agentctl.agent.pty_host import MAX_PENDING_INPUT, REPLAY_BYTES, WindowSize
from agentctl.agent.supervisor import Supervisor
from tests.conftest import eventually
from tests.pty.conftest import TUI_CMD, Collector


async def test_an_agent_on_a_terminal_has_it_as_its_controlling_terminal_sized_resized_and_typed_into():
    sup = Supervisor()
    await sup.start(TUI_CMD, cwd=None, env={}, terminal=WindowSize(30, 100))
    process = sup.process
    assert process is not None and process.terminal is not None and process.stdin is None
    term = process.terminal
    me, other = Collector(), Collector()
    term.attach(me)
    term.attach(other)
    assert term.claim(me)
    assert not term.claim(other), "a second viewer takes the keyboard only when it asks to"
    try:
        await eventually(lambda: "size=30x100" in "".join(process.stderr_snapshot().lines), what="the start line")
        assert "tty=True ctty=True fg=True" in "".join(process.stderr_snapshot().lines)
        assert term.resize(me, WindowSize(40, 120))
        assert not term.resize(other, WindowSize(10, 10)), "only the keyboard's holder resizes"
        await eventually(lambda: "winch 40x120" in me.text(), what="SIGWINCH with the new size")
        assert term.write(me, b"hello\r")
        assert not term.write(other, b"ignored\r"), "a read-only viewer's keys never reach the agent"
        await eventually(lambda: "echo hello" in other.text(), what="the echo, seen by every viewer")
        assert "ignored" not in other.text()
        assert term.write(me, b"\x03")  # Ctrl-C: the terminal's line discipline makes it SIGINT
        await eventually(lambda: "got SIGINT" in me.text(), what="SIGINT from Ctrl-C")
        assert b"echo hello" in term.replay()
        assert term.claim(other, take=True)
        assert me.holders[-1] is other and other.holders[-1] is other, "every viewer is told who holds the keyboard"
        term.detach(other)
        assert term.holder is me and me.holders[-1] is me, "when the holder leaves, the longest attached gets it"
        assert term.write(me, b"quit\r")
        info = await sup.wait_exit()
        assert info.returncode == 7
        await eventually(lambda: me.was_closed, what="the viewer told the terminal closed")
        assert not other.was_closed, "a viewer that left is told nothing more"
        assert not term.open
    finally:
        await sup.stop(grace=0.1)


async def test_a_terminal_keeps_its_bounds_a_huge_output_and_a_writer_nobody_reads():
    flood = ["python3", "-c", "import os,sys\nos.write(1, b'x' * 300000 + b'\\r\\nEND\\r\\n')\nsys.stdin.read()"]
    sup = Supervisor()
    await sup.start(flood, cwd=None, env={}, terminal=WindowSize())
    term = sup.process.terminal
    viewer = Collector()
    term.attach(viewer)
    term.claim(viewer)
    try:
        await eventually(lambda: b"END" in viewer.data, what="the whole flood")
        assert len(term.replay()) <= REPLAY_BYTES
        assert sup.process.stderr_ring.stored_bytes <= 16 * 1024
        # The agent reads nothing in raw bytes beyond its buffer: input past the bound is refused, never queued.
        sent = 0
        while term.write(viewer, b"y" * 4096):
            sent += 4096
            # Our queue is the bound. What the kernel's terminal buffers take before it varies with the kernel and
            # with how soon its worker moves them on (132 KiB in all was seen on a loaded host), so only ours is held
            # to MAX_PENDING_INPUT; a refusal must still come.
            assert term.input_pending(viewer) <= MAX_PENDING_INPUT, "pending input grew past its bound"
            assert sent <= 16 * MAX_PENDING_INPUT, "input past the bound is never refused"
        # `type_keys` takes keys whole (it waits past the bound instead of refusing: tests/pty/test_attach_input.py),
        # and what each byte came to is counted exactly: written to the terminal, or still waiting.
        assert await asyncio.wait_for(term.type_keys(viewer, b"z" * 4096), 30) == 4096
        sent += 4096
        assert term.input_delivered(viewer) + term.input_pending(viewer) == sent
        assert term.input_pending(viewer) <= MAX_PENDING_INPUT + 4096
        # Stopping hangs the terminal up: the agent gets SIGHUP within the grace, no SIGTERM needed.
        info = await sup.stop(grace=30)
        assert info.signal == signal.SIGHUP and info.stopped
    finally:
        await sup.stop(grace=0.1)
    assert not term.open


def test_a_window_size_outside_what_a_terminal_can_be_is_refused():
    for rows, cols in ((0, 80), (24, 0), (24, 100000), (True, 80)):
        with pytest.raises(ValueError):
            WindowSize(rows, cols)
