"""One daemon's connection to the hub: who it said it is, whether it is stale, and bounded sending."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from typing import Any

from agentctl.upstream.hub_store import ExecutionState, SessionState

log = logging.getLogger("agentctl.hub")

TOOL_CONCURRENCY = 16  # tool calls running at once per connection
MAX_WRITE_BUFFER = 8 * 1024 * 1024  # a daemon that stops reading its answers is disconnected past this
DEFAULT_HEARTBEAT_SECONDS = 10.0


class Refused(Exception):
    """This connection was refused with a fatal error frame."""


class HubConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.identity = None
        self.session: SessionState | None = None
        self.execution: ExecutionState | None = None
        self.snapshot_seen = False
        self.refused = False
        self.idle_limit = 3 * DEFAULT_HEARTBEAT_SECONDS
        self.last_rx = time.monotonic()
        self.pending: dict[str, asyncio.Future[Any]] = {}
        self.tool_slots = asyncio.Semaphore(TOOL_CONCURRENCY)
        self.tasks: set[asyncio.Task[Any]] = set()
        sock = writer.get_extra_info("socket")
        self.peer_pid = _peer_pid(sock)

    @property
    def label(self) -> str:
        if self.identity is not None:
            return f"session {self.identity.session_id} execution {self.identity.execution_id}"
        return f"unidentified peer (pid {self.peer_pid})" if self.peer_pid else "unidentified peer"

    @property
    def stale(self) -> bool:
        ident, session, execution = self.identity, self.session, self.execution
        if ident is None or session is None or execution is None:
            return False
        return (
            session.current_execution_id != ident.execution_id
            or execution.identity.instance_id != ident.instance_id
        )

    def send(self, line: bytes) -> None:
        transport = self.writer.transport
        if transport.is_closing():
            return
        if transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
            log.warning("closed connection from %s: it stopped reading its answers", self.label)
            transport.abort()
            return
        self.writer.write(line)


def _peer_pid(sock: Any) -> int | None:
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", raw)[0]
    except (OSError, AttributeError):
        return None
