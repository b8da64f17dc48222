"""The publisher's queue of requests and answers (tool calls, stderr and endpoint-test answers, heartbeats):
sent ahead of evidence, each optionally with an expiry, and bounded in frames and bytes.

Unlike evidence, nothing here can be rebuilt from the history, so it is never silently dropped: `put`
refuses when full and the publisher treats that as a slow upstream (it closes the connection).
"""

from __future__ import annotations

import time
from collections import deque


class Outbox:
    def __init__(self, max_frames: int, max_bytes: int, heartbeat: bytes) -> None:
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self.heartbeat = heartbeat  # the one heartbeat line: at most one waits at a time
        self.bytes = 0
        self.heartbeat_queued = False
        self._lines: deque[tuple[float | None, bytes]] = deque()

    def __len__(self) -> int:
        return len(self._lines)

    def put(self, line: bytes, expires: float | None = None) -> bool:
        """Queue `line` (dropped unsent once `expires`, a monotonic time, passed); False when full."""
        if len(self._lines) >= self.max_frames or self.bytes + len(line) > self.max_bytes:
            return False
        self._lines.append((expires, line))
        self.bytes += len(line)
        if line is self.heartbeat:
            self.heartbeat_queued = True
        return True

    def pop(self) -> bytes | None:
        """The next line still wanted, or None."""
        now = time.monotonic()
        while self._lines:
            expires, line = self._lines.popleft()
            self.bytes -= len(line)
            if line is self.heartbeat:
                self.heartbeat_queued = False
            if expires is None or expires > now:
                return line
        return None

    def clear(self) -> None:
        self._lines.clear()
        self.bytes = 0
        self.heartbeat_queued = False
