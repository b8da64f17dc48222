"""Owns driving `codex app-server` just far enough that it starts its MCP servers: the probe as its client.

App-server is a JSON-lines JSON-RPC server on stdio (no `"jsonrpc"` member). It starts the configured MCP
servers only once a thread exists, so the client sends `initialize`, the `initialized` notification, then
`thread/start {cwd}`; its `mcpServer/startupStatus/updated` notifications follow (measured with Codex
0.171.0). Requests the server sends (approvals) are refused. The lines are never kept: `on_line` sees each
complete line once, for the report parser, and each one is decoded here only for the id of our answers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import msgspec

from agentctl.agent.clis.codex import is_app_server

__all__ = ["is_app_server", "drive"]

METHOD_INITIALIZE, METHOD_THREAD = 1, 2
MAX_LINE = 1024 * 1024


class _Message(msgspec.Struct):
    id: int | str | None = None
    method: str | None = None


_decode = msgspec.json.Decoder(_Message).decode


async def drive(stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader, cwd: str,
                on_line: Callable[[bytes], None]) -> None:
    """Speak to app-server until its stdout ends (the caller bounds the time and stops the process)."""

    def send(message: dict[str, Any]) -> None:
        stdin.write(json.dumps(message).encode() + b"\n")

    send({"id": METHOD_INITIALIZE, "method": "initialize",
          "params": {"clientInfo": {"name": "agentctl-probe", "version": "1"}}})
    await stdin.drain()
    buffer = bytearray()
    while chunk := await stdout.read(65536):
        buffer += chunk
        while (end := buffer.find(b"\n")) >= 0:
            line, buffer = bytes(buffer[:end]), buffer[end + 1:]
            on_line(line + b"\n")
            _answer(line, send, cwd)
        if len(buffer) > MAX_LINE:
            buffer = bytearray()  # a line past the bound is dropped whole
        await stdin.drain()
    on_line(bytes(buffer))


def _answer(line: bytes, send: Callable[[dict[str, Any]], None], cwd: str) -> None:
    try:
        message = _decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return
    if message.method is None and message.id == METHOD_INITIALIZE:
        send({"method": "initialized"})
        send({"id": METHOD_THREAD, "method": "thread/start", "params": {"cwd": cwd}})
    elif message.method is not None and message.id is not None:
        send({"id": message.id, "error": {"code": -32601, "message": "agentctl probe answers no requests"}})
