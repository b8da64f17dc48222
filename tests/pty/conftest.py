"""Shared pieces of the terminal tests: a TUI stand-in, a viewer that collects what it is shown, a screen reader."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import termios
import threading
from collections.abc import Callable, Iterator

import pyte
import pytest

from agentctl.agent.pty_host import Viewer, WindowSize, set_window_size
from tests.conftest import poll

# A TUI stand-in: reports whether it has a terminal and a controlling one, its size on start and on every
# SIGWINCH, echoes each line typed (`flood` prints 4 MiB), and says so when Ctrl-C reaches it as SIGINT.
TUI = r"""
import os, signal, sys, fcntl, termios, struct
def size():
    rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8))
    return f"{rows}x{cols}"
def say(text):
    os.write(1, (text + "\r\n").encode())
signal.signal(signal.SIGWINCH, lambda *a: say("winch " + size()))
signal.signal(signal.SIGINT, lambda *a: say("got SIGINT"))
os.close(os.open("/dev/tty", os.O_RDWR))  # fails without a controlling terminal, as tcgetpgrp does
say(f"tty={os.isatty(0)} ctty=True fg={os.tcgetpgrp(0) == os.getpgrp()} size={size()}")
for line in sys.stdin:
    if line.strip() == "flood":
        for i in range(2048):
            os.write(1, b"x" * 2047 + b"\n")
        say("flood done")
        continue
    say("echo " + line.strip())
    if line.strip() == "quit":
        sys.exit(7)
"""
TUI_CMD = [sys.executable, "-c", TUI]


class Collector(Viewer):
    """A viewer that keeps everything it is shown and every holder change."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.holders: list[object] = []
        self.was_closed = False

    def output(self, data: bytes) -> None:
        self.data += data

    def role_changed(self, holder: Viewer | None) -> None:
        self.holders.append(holder)

    def closed(self) -> None:
        self.was_closed = True

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def screen_text(data: bytes, rows: int = 24, cols: int = 80) -> str:
    """What a person would see after `data` on a rows x cols terminal (a real VT emulator renders it)."""
    screen = pyte.Screen(cols, rows)
    stream = pyte.ByteStream(screen)
    stream.feed(data)
    return "\n".join(line.rstrip() for line in screen.display).rstrip()


class PtyProcess:
    """A real program on a real PTY this test owns (the slave is its controlling terminal): keys in, screen out.

    The slave stays open here too, so `stty -g` can read the terminal's settings before, during and after."""

    def __init__(self, argv: list[str], *, rows: int = 24, cols: int = 80, env: dict[str, str] | None = None,
                 cwd: str | None = None) -> None:
        self.master, self.slave = os.openpty()
        set_window_size(self.master, WindowSize(rows, cols))
        self.rows, self.cols = rows, cols
        self.data = bytearray()
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            argv, stdin=self.slave, stdout=self.slave, stderr=self.slave, start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0), env={**os.environ, **(env or {})}, cwd=cwd,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self.data += chunk

    def stty(self) -> str:
        return subprocess.run(["stty", "-g"], stdin=self.slave, capture_output=True, text=True, check=True).stdout.strip()

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def resize(self, rows: int, cols: int) -> None:
        self.rows, self.cols = rows, cols
        set_window_size(self.master, WindowSize(rows, cols))
        # The kernel signals the terminal's foreground group only; agentctl is that group's leader.
        os.killpg(os.tcgetpgrp(self.master), signal.SIGWINCH)

    def output(self) -> bytes:
        with self._lock:
            return bytes(self.data)

    def screen(self) -> str:
        return screen_text(self.output(), self.rows, self.cols)

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        poll(lambda: text in self.output().decode("utf-8", "replace") or text in self.screen(), timeout,
             what=f"{text!r} on the terminal; it shows:\n{self.screen()}")

    def wait(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self.slave)
        self._reader.join(5)
        os.close(self.master)


@pytest.fixture
def on_pty() -> Iterator[Callable[..., PtyProcess]]:
    started: list[PtyProcess] = []

    def start(argv: list[str], **kwargs: object) -> PtyProcess:
        started.append(PtyProcess(argv, **kwargs))  # type: ignore[arg-type]
        return started[-1]

    yield start
    for p in started:
        p.close()
