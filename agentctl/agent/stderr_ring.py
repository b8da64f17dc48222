"""The agent's stderr window: a strictly bounded in-memory tail of raw stderr bytes, handed out on demand as at most 50 lines / 16 KiB of text; never logged, never persisted."""

from __future__ import annotations

from collections import deque

import msgspec

DEFAULT_MAX_LINES = 50
DEFAULT_MAX_BYTES = 16 * 1024


class StderrWindow(msgspec.Struct, frozen=True):
    """What `agentctl stderr` shows. May contain sensitive data: whoever displays it must say so."""

    lines: list[str]
    # True when anything the agent wrote is not in `lines` (older lines, or the head of a long line).
    truncated: bool
    total_bytes_seen: int
    # True when the agent never wrote a byte to stderr.
    empty: bool


def _skip_continuation(data: bytes) -> bytes:
    # After cutting a line's head we may land inside a multi-byte character; starting at the next
    # character avoids a spurious U+FFFD at the start of the window.
    i = 0
    while i < 3 and i < len(data) and 0x80 <= data[i] <= 0xBF:
        i += 1
    return data[i:] if i else data


def _incomplete_utf8_tail(data: bytes | bytearray) -> int:
    """Length of a trailing UTF-8 sequence that is valid so far but unfinished (0 if none)."""
    for i in range(1, min(4, len(data)) + 1):
        c = data[-i]
        if 0x80 <= c <= 0xBF:
            continue
        if 0xC2 <= c <= 0xDF:
            need = 2
        elif 0xE0 <= c <= 0xEF:
            need = 3
        elif 0xF0 <= c <= 0xF4:
            need = 4
        else:
            return 0
        return i if i < need else 0
    return 0


def _tail_utf8(text: str, budget: int) -> str:
    encoded = text.encode("utf-8")
    if len(encoded) <= budget:
        return text
    return _skip_continuation(encoded[len(encoded) - budget :]).decode("utf-8", "replace")


class StderrRing:
    """Fed raw chunks of any size; keeps at most `max_lines` lines and `max_bytes` raw bytes.

    There is no line-length limit on input: a line longer than the bound keeps only its tail, so a
    10 MB line without a newline costs no more memory than a short one. Bytes are kept raw and only
    decoded at snapshot time, so a character split across two chunks decodes intact.
    """

    def __init__(self, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_lines < 1 or max_bytes < 1:
            raise ValueError("max_lines and max_bytes must be positive")
        self._max_lines = max_lines
        self._max_bytes = max_bytes
        self._lines: deque[bytes] = deque()
        self._line_bytes = 0
        self._partial = bytearray()
        self._dropped = False
        self._total = 0
        self._eof = False

    @property
    def total_bytes_seen(self) -> int:
        return self._total

    @property
    def stored_bytes(self) -> int:
        """Raw bytes currently held (bounded by max_bytes); exposed for tests and diagnostics."""
        return self._line_bytes + len(self._partial)

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        if not chunk:
            return
        data = chunk if isinstance(chunk, (bytes, bytearray)) else bytes(chunk)
        view = memoryview(data)
        self._total += len(data)
        nl = data.rfind(b"\n")
        if nl < 0:
            self._append_partial(view)
            self._trim()
            return
        # Newlines do not count against the byte bound, so the window can reach back at most
        # max_bytes of content plus max_lines newlines before the final newline; never copy more.
        # If that region holds fewer than max_lines newlines, its content alone exceeds max_bytes,
        # so everything stored before it is out of the window.
        start = max(0, nl - self._max_bytes - self._max_lines)
        pieces = bytes(view[start:nl]).rsplit(b"\n", self._max_lines)
        if len(pieces) > self._max_lines:
            # rsplit left every older line joined in pieces[0]: all of it is outside the window.
            del pieces[0]
            self._forget_stored()
            # The chunk alone fills the window (a flood's usual case): take its lines at once rather
            # than line by line. None is over max_bytes: with max_lines newlines in a region of at
            # most max_bytes + max_lines bytes, their content adds up to at most max_bytes.
            self._lines.extend(pieces)
            self._line_bytes = sum(map(len, pieces))
            pieces = []
        elif start > 0:
            # pieces[0] starts somewhere inside a line whose head (and everything before) is gone.
            pieces[0] = _skip_continuation(pieces[0])
            self._forget_stored()
            if not pieces[0] and len(pieces) > 1:
                # A cut fragment with nothing left is not a line.
                del pieces[0]
        else:
            pieces[0] = bytes(self._partial) + pieces[0]
            self._partial.clear()
        for piece in pieces:
            self._push_line(piece)
        if nl + 1 < len(data):
            self._append_partial(view[nl + 1 :])
        self._trim()

    def feed_eof(self) -> None:
        """The pipe closed: an unfinished UTF-8 sequence at the end is now final (shown as U+FFFD)."""
        self._eof = True

    def snapshot(self) -> StderrWindow:
        raw = list(self._lines)
        partial = bytes(self._partial)
        if partial and not self._eof:
            # A character still arriving is held back rather than shown as a replacement character.
            partial = partial[: len(partial) - _incomplete_utf8_tail(partial)]
        if partial:
            raw.append(partial)
        truncated = self._dropped
        if len(raw) > self._max_lines:
            raw = raw[-self._max_lines :]
            truncated = True
        # The bound applies to the text handed out: U+FFFD is 3 bytes where the invalid input was 1.
        budget = self._max_bytes
        out: list[str] = []
        for data in reversed(raw):
            text = data.decode("utf-8", "replace")
            size = len(text.encode("utf-8"))
            if size <= budget:
                out.append(text)
                budget -= size
                continue
            truncated = True
            if budget > 0:
                out.append(_tail_utf8(text, budget))
            break
        out.reverse()
        return StderrWindow(lines=out, truncated=truncated, total_bytes_seen=self._total, empty=self._total == 0)

    def _forget_stored(self) -> None:
        self._lines.clear()
        self._line_bytes = 0
        self._partial.clear()
        self._dropped = True

    def _push_line(self, line: bytes) -> None:
        if len(line) > self._max_bytes:
            # The window is a contiguous tail of the stream: once a line lost its head, nothing
            # older may be shown.
            line = _skip_continuation(line[-self._max_bytes :])
            self._forget_stored()
        self._lines.append(line)
        self._line_bytes += len(line)

    def _append_partial(self, data: memoryview) -> None:
        if len(data) >= self._max_bytes:
            # Replace rather than extend, so a huge chunk is never concatenated in full.
            if self._partial or len(data) > self._max_bytes:
                self._forget_stored()
            self._partial = bytearray(_skip_continuation(bytes(data[len(data) - self._max_bytes :])))
            return
        self._partial += data
        excess = len(self._partial) - self._max_bytes
        if excess > 0:
            kept = _skip_continuation(bytes(self._partial[excess:]))
            self._forget_stored()
            self._partial = bytearray(kept)

    def _trim(self) -> None:
        while self._lines and (
            len(self._lines) + (1 if self._partial else 0) > self._max_lines
            or self._line_bytes + len(self._partial) > self._max_bytes
        ):
            excess = self._line_bytes + len(self._partial) - self._max_bytes
            oldest = self._lines[0]
            self._dropped = True
            if len(self._lines) + (1 if self._partial else 0) <= self._max_lines and 0 < excess < len(oldest):
                # Over the byte bound only: keep the tail of the oldest line instead of dropping it whole.
                kept = _skip_continuation(oldest[excess:])
                if kept:
                    self._lines[0] = kept
                    self._line_bytes -= len(oldest) - len(kept)
                    continue
            self._lines.popleft()
            self._line_bytes -= len(oldest)

