"""Helpers for the upstream tests: identities, a raw frame client over a real Unix socket, and a
daemon-side context (real Ledger, real Readiness) for running real Publishers without a whole daemon."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any


from agentctl.context import DaemonContext
from agentctl.evidence.contract.report import Identity
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from agentctl.spec import parse_spec
from agentctl.upstream import protocol as P
from agentctl.upstream.frames_io import STREAM_LIMIT, read_frame_line
from tests.conftest import eventually, identity, spec_toml  # noqa: F401 - re-exported to the upstream and hub tests


SEEDS = [
    ServerSeed(name="kandev", source="builtin", transport="http", target="http://127.0.0.1:1"),
    ServerSeed(name="docs", source="profile", transport="http", target="https://docs.example"),
]


def make_ctx(tmp: Path, ident: Identity, upstream: str | None = None) -> DaemonContext:
    spec = parse_spec(spec_toml(
        execution_id=ident.execution_id,
        identity={"task_id": ident.task_id, "session_id": ident.session_id, "agent_id": ident.agent_id,
                  "agent_profile_id": ident.agent_profile_id},
        servers=[{"name": "docs", "type": "http", "url": "https://docs.example/mcp"}],
    ).encode())
    return DaemonContext(spec=spec, ledger=Ledger(ident), state_dir=tmp, control_socket=tmp / "unused.sock")


class RawClient:
    """A hand-driven daemon side: writes any bytes, reads the hub's frames. For frames a real daemon never sends."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, path: str | Path) -> RawClient:
        reader, writer = await asyncio.open_unix_connection(str(path), limit=STREAM_LIMIT)
        return cls(reader, writer)

    async def send(self, frame_or_bytes: Any) -> None:
        data = frame_or_bytes if isinstance(frame_or_bytes, bytes) else P.encode_frame(frame_or_bytes)
        self.writer.write(data)
        await self.writer.drain()

    async def hello(self, ident: Identity) -> None:
        await self.send(P.frame(P.HelloFrame, identity=ident, daemon_version="test", contract_version=1, heartbeat_ms=10_000))

    async def recv(self, timeout: float = 5.0) -> Any:
        """The next frame from the hub, or None at end of stream."""
        raw = await asyncio.wait_for(read_frame_line(self.reader), timeout)
        return None if raw is None else P.decode_from_upstream(raw)

    async def recv_until_closed(self, timeout: float = 5.0) -> list[Any]:
        frames = []
        while (item := await self.recv(timeout)) is not None:
            frames.append(item)
        return frames

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (OSError, ConnectionError):
            pass


class Relay:
    """Forwards daemon <-> hub byte for byte and keeps every frame line by direction."""

    def __init__(self, listen: Path, target: Path) -> None:
        self.listen, self.target = listen, target
        self.lines: list[tuple[str, bytes]] = []
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self._relay, str(self.listen), limit=STREAM_LIMIT)

    async def _relay(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(str(self.target), limit=STREAM_LIMIT)

        async def pump(src, dst, direction) -> None:
            while (line := await read_frame_line(src)) is not None:
                self.lines.append((direction, line))
                dst.write(line + b"\n")
                await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer, "up"), pump(up_reader, writer, "down"), return_exceptions=True)

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()
