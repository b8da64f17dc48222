"""The person's own terminal, for whoever connects it to an agent's (`agentctl run`, `agentctl attach`): raw mode
restored however the block ends, its window size, and the screen left as a shell expects it afterwards."""

from __future__ import annotations

import contextlib
import os
import select
import termios
import tty
from collections.abc import Iterator

# Modes a full-screen program turns on and a crashed one leaves on: mouse reporting, bracketed paste, a hidden
# cursor, odd colours. Turning each off is harmless when it is already off.
RESET_MODES = b"\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l\x1b[?25h\x1b[0m"
_ALT_SCREEN_ON = (b"\x1b[?1049h", b"\x1b[?1047h", b"\x1b[?47h")
_ALT_SCREEN_OFF = (b"\x1b[?1049l", b"\x1b[?1047l", b"\x1b[?47l")


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """`fd`'s terminal in raw mode for the block; its settings exactly as they were afterwards, however it ends."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd` (blocking; a non-blocking fd is waited on)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            select.select([], [fd], [], 1.0)


class ScreenModes:
    """Follows whether the program's output left the terminal on its alternate screen, to undo it after."""

    def __init__(self) -> None:
        self.alternate_screen = False

    def see(self, data: bytes) -> None:
        on = max(data.rfind(seq) for seq in _ALT_SCREEN_ON)
        off = max(data.rfind(seq) for seq in _ALT_SCREEN_OFF)
        if on != off:
            self.alternate_screen = on > off

    def reset(self) -> bytes:
        """What puts the person's terminal back after the program is gone, whatever state it left."""
        return RESET_MODES + (b"\x1b[?1049l" if self.alternate_screen else b"") + b"\r\n"
