"""The stdio sentinel: `python -m agentctl.probe.stdio_sentinel --report SOCKET [--expect DIGEST]`.

The probe delivers this command as a stdio MCP server when the agent advertises neither http nor sse.
The agent spawns it; it serves the sentinel tool over stdin/stdout and reports what it sees to the
probe's Unix socket (one JSON line per observation, each acknowledged before the agent is answered, so
the probe has the observation before the agent can act on it). If the socket cannot be reached the
sentinel still answers the agent: a probe that went away must not break the agent.

`--expect` is the sha256 of the credential the probe put in the server's env; the sentinel reports
whether that env value arrived, never the value. stdout carries only MCP frames; nothing is logged
below WARNING, and nothing it logs carries a request's content.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from agentctl.logs import SafeFormatter
from agentctl.probe.sentinel import CREDENTIAL_ENV, SentinelObserver, build_server, credential_digest

if TYPE_CHECKING:  # pragma: no cover
    from mcp.server.context import ServerRequestContext

ACK_TIMEOUT = 2.0
log = logging.getLogger("agentctl.probe.stdio_sentinel")


class Reporter:
    """One connection to the probe's report socket, opened on the first report; failures go quiet."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._broken = False

    async def send(self, kind: str, fields: dict[str, Any]) -> None:
        if self._broken:
            return
        line = json.dumps({"kind": kind, **{k: v for k, v in fields.items() if k != "transport"}},
                          separators=(",", ":")).encode() + b"\n"
        async with self._lock:
            try:
                if self._writer is None:
                    self._reader, self._writer = await asyncio.wait_for(
                        asyncio.open_unix_connection(self._path), ACK_TIMEOUT
                    )
                assert self._reader is not None and self._writer is not None
                self._writer.write(line)
                await self._writer.drain()
                await asyncio.wait_for(self._reader.readline(), ACK_TIMEOUT)
            except (OSError, asyncio.TimeoutError) as exc:
                self._broken = True
                log.warning("agentctl probe sentinel: cannot report to the probe (%s)", type(exc).__name__)


async def _main(report_path: str, expect: str | None) -> int:
    reporter = Reporter(report_path)
    presented = os.environ.get(CREDENTIAL_ENV)
    credential_seen = None
    if expect is not None:
        credential_seen = presented is not None and hmac.compare_digest(credential_digest(presented), expect)

    def base(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        return {"transport": "stdio", "credential_seen": credential_seen}

    observer = SentinelObserver(reporter.send, base, track_connections=False)
    server = build_server(observer)
    await reporter.send("contact", {"credential_seen": credential_seen})
    await server.run_stdio_async()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentctl-probe-stdio-sentinel", allow_abbrev=False)
    parser.add_argument("--report", required=True, metavar="SOCKET", help="the probe's report socket")
    parser.add_argument("--expect", metavar="SHA256", help="digest of the credential expected in the env")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter("%(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    try:
        return asyncio.run(_main(args.report, args.expect))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
