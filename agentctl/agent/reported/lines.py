"""Owns reading a CLI's output stream incrementally as bounded lines, handing on only candidate lines.

The stream passes through untouched (the caller forwards its bytes wherever they go); this sees the same
bytes and keeps at most `max_line` of the current line. A line that lacks every marker is dropped at its
newline without being decoded; one longer than the bound is skipped whole (counted, never buffered past the
bound), so a CLI printing a huge tool result costs a bounded buffer and a substring search, nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable


class LineScanner:
    def __init__(self, markers: Iterable[bytes], max_line: int) -> None:
        if max_line <= 0:
            raise ValueError("max_line must be positive")
        self._markers = tuple(markers)
        self._max = max_line
        self._buf = bytearray()
        self._skipping = False  # inside a line that has already exceeded the bound
        self.oversized_lines = 0

    def feed(self, data: bytes) -> list[bytes]:
        """The complete candidate lines `data` ends (without their newline)."""
        found: list[bytes] = []
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            piece = data[start:] if end < 0 else data[start:end]
            self._take(piece)
            if end < 0:
                break
            self._finish(found)
            start = end + 1
        return found

    def close(self) -> list[bytes]:
        """A last line without a newline, when the stream ends."""
        found: list[bytes] = []
        if self._buf or self._skipping:
            self._finish(found)
        return found

    def _take(self, piece: bytes) -> None:
        if self._skipping:
            return
        if len(self._buf) + len(piece) > self._max:
            self._buf = bytearray()  # a new buffer: the memory of the long line is given back
            self._skipping = True
            self.oversized_lines += 1
            return
        self._buf += piece

    def _finish(self, found: list[bytes]) -> None:
        if not self._skipping and any(marker in self._buf for marker in self._markers):
            found.append(bytes(self._buf))
        self._buf = bytearray()
        self._skipping = False
