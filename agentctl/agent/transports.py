"""A hardened ACP stdio transport: newline-delimited JSON objects with a line cap; anything else is skipped.

The SDK's own NdjsonTransport accumulates over-long lines without limit, logs every non-JSON line with a
traceback (the line may be sensitive), and dies on a JSON value that is not an object. An agent's stdout
is untrusted input, so this transport bounds and counts instead. It also tells its owner when a frame
was really written (delivery evidence means "sent", not "about to be sent") and when stdout ended, and lets
its owner amend an outgoing frame (`outgoing`) and take an incoming one before the SDK sees it (`intercept`):
agentctl/agent/acp_notices.py does both for the session notices the SDK does not know.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

MAX_FRAME_BYTES = 8 * 1024 * 1024


class AgentStdioTransport:
    """acp's message-level Transport protocol over the agent's stdin/stdout pipes."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_frame: int = MAX_FRAME_BYTES,
        on_sent: Callable[[dict[str, Any]], None] | None = None,
        on_eof: Callable[[], None] | None = None,
        outgoing: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        intercept: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._max = max_frame
        self._write_lock = asyncio.Lock()
        self._on_sent = on_sent
        self._on_eof = on_eof
        self._outgoing = outgoing
        self._intercept = intercept  # True: the frame was consumed, the SDK never sees it
        self.skipped_lines = 0  # non-JSON, non-object or oversized lines: counted, never logged
        self.closed = False
        self.eof = False  # the agent's stdout ended: nothing more will ever arrive

    async def send(self, message: dict[str, Any]) -> None:
        if self.closed or self._writer.is_closing():
            raise ConnectionError("agent stdin is closed")
        if self._outgoing is not None:
            message = self._outgoing(message)
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        async with self._write_lock:
            self._writer.write(data)
            await self._writer.drain()
        if self._on_sent is not None:
            self._on_sent(message)

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._read_line()
            if line is None:
                self._mark_eof()
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested deeper than the parser goes
                self.skipped_lines += 1
                continue
            if not isinstance(message, dict) or not _valid_envelope(message):
                self.skipped_lines += 1
                continue
            if self._intercept is not None and self._intercept(message):
                continue
            return message

    def _mark_eof(self) -> None:
        if self.eof:
            return
        self.eof = True
        if self._on_eof is not None:
            self._on_eof()

    async def _read_line(self) -> bytes | None:
        """One line, or None at EOF. An over-long line is consumed and dropped, never accumulated."""
        size = 0
        parts: list[bytes] = []
        oversized = False
        while True:
            try:
                chunk = await self._reader.readuntil(b"\n")
                done = True
            except asyncio.LimitOverrunError as exc:
                chunk = await self._reader.readexactly(exc.consumed)
                done = False
            except asyncio.IncompleteReadError as exc:
                # EOF: whatever came after the last newline is the final (unterminated) line.
                if not exc.partial and not parts and not oversized:
                    return None
                chunk, done = exc.partial, True
            except (ConnectionError, OSError):
                return None
            size += len(chunk)
            if size > self._max:
                oversized = True
                parts.clear()
            elif not oversized:
                parts.append(chunk)
            if done:
                break
        if oversized:
            self.skipped_lines += 1
            return b""
        return b"".join(parts)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._writer.close()
        except (ConnectionError, OSError, RuntimeError):
            pass


def _valid_envelope(message: dict[str, Any]) -> bool:
    """JSON-RPC's own rules for `id` (string, number or null) and `method` (string).

    The SDK indexes its pending requests by id: an unhashable id (a list) raises inside its receive loop,
    which then drops the whole connection. Such a frame is junk, not a reason to lose the agent.
    """
    if "id" in message:
        mid = message["id"]
        if isinstance(mid, bool) or not isinstance(mid, (int, float, str, type(None))):
            return False
    return "method" not in message or isinstance(message["method"], str)
