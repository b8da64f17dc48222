"""A hardened ACP stdio transport: newline-delimited JSON objects with a line cap; anything else is skipped.

The SDK's own NdjsonTransport accumulates over-long lines without limit, logs every non-JSON line with a
traceback (the line may be sensitive), and dies on a JSON value that is not an object. An agent's stdout
is untrusted input, so this transport bounds and counts instead.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

MAX_FRAME_BYTES = 8 * 1024 * 1024


class AgentStdioTransport:
    """acp's message-level Transport protocol over the agent's stdin/stdout pipes."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, max_frame: int = MAX_FRAME_BYTES
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._max = max_frame
        self._write_lock = asyncio.Lock()
        self.skipped_lines = 0  # non-JSON, non-object or oversized lines: counted, never logged
        self.closed = False

    async def send(self, message: dict[str, Any]) -> None:
        if self.closed:
            raise ConnectionError("agent stdin is closed")
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        async with self._write_lock:
            self._writer.write(data)
            await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._read_line()
            if line is None:
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except ValueError:
                self.skipped_lines += 1
                continue
            if not isinstance(message, dict):
                self.skipped_lines += 1
                continue
            return message

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
                if not exc.partial and not parts:
                    return None
                chunk, done = exc.partial, True
                if not exc.partial:
                    break
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
