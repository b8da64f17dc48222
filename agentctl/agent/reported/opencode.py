"""OpenCode's server mode (`opencode serve`): `GET /mcp` answers each configured MCP server's status.

The answer is one JSON object keyed by server name, `{"NAME": {"status": S, "error"?: TEXT}}`, S one of
`connected`, `failed`, `needs_auth`, `needs_client_registration`, `disabled`. Measured with opencode-ai
1.18.33 (`opencode serve`, a remote server on a closed port: `{"status":"failed","error":"SSE error: Unable to
connect. ..."}`, `enabled: false`: `{"status":"disabled"}`). The answer carries no tools. Only delivered
servers are reported; an error text only as a redacted, bounded summary (`opencode:serve`).

`ServeFeed` is the report feed of a passthrough `opencode serve` run: it reads the CLI's stdout for the one
line `opencode server listening on http://HOST:PORT` (the port is random unless `--port` names one), then asks
`GET /mcp` there, every POLL_FAST seconds until every delivered server has settled, every POLL_SLOW seconds
after, and records each change (agentctl/agent/reported/acp_tap.py's ReportSink). Only a loopback address is
asked. It stops when the server stops answering (MAX_MISSES in a row) or the run's output ends. A server with
`OPENCODE_SERVER_PASSWORD` set answers 401: nothing is read from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import msgspec

from agentctl.agent.reported.base import ServerReport
from agentctl.evidence.contract.report import ReportedState
from agentctl.evidence.sanitize import summarize
from agentctl.evidence.secret_registry import SecretRegistry

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.agent.reported.acp_tap import ReportSink

log = logging.getLogger(__name__)

REASON_FAILED = "agent_reported_failed"
REASON_NEEDS_AUTH = "agent_reported_needs_auth"
SOURCE = "opencode:serve"
PATH = "/mcp"
MAX_ANSWER = 1024 * 1024
POLL_FAST, POLL_SLOW, MAX_MISSES, REQUEST_TIMEOUT = 0.5, 5.0, 3, 5.0
LISTENING = re.compile(rb"opencode server listening on (http://[^\s]{1,200})")
# OpenCode's words, `needs_client_registration` (OAuth without a registered client) being an authentication need.
STATES: dict[str, ReportedState] = {"connected": "connected", "failed": "failed", "needs_auth": "needs_auth",
                                    "needs_client_registration": "needs_auth", "disabled": "disabled"}


def parse_status(
    body: bytes, delivered: Collection[str], secrets: Iterable[str] | SecretRegistry = ()
) -> list[ServerReport] | None:
    """The reports of one `GET /mcp` answer, or None when it is not that answer (or over MAX_ANSWER)."""
    if len(body) > MAX_ANSWER:
        return None
    try:
        answer = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(answer, dict):
        return None
    reports = []
    for name in delivered:
        entry = answer.get(name)
        raw = entry.get("status") if isinstance(entry, dict) else None
        if not isinstance(raw, str):
            continue
        state = STATES.get(raw, "unknown")
        reason = summary = None
        if state in ("failed", "needs_auth"):
            reason = REASON_NEEDS_AUTH if state == "needs_auth" else REASON_FAILED
            error = entry.get("error")
            summary = summarize(reason, error, secrets).summary or None if isinstance(error, str) and error else None
        reports.append(ServerReport(name=name, state=state, raw_state=raw, reason_code=reason, summary=summary))
    return reports


def is_serve(argv: Collection[str]) -> bool:
    """Whether an OpenCode command line runs `opencode serve` (its first positional argument)."""
    positional = [a for a in list(argv)[1:] if not a.startswith("-")]
    return bool(positional) and positional[0] == "serve"


def loopback_base(url: str) -> str | None:
    """`http://HOST:PORT` of a listening line when HOST is a loopback address, else None."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if parts.scheme != "http" or host is None or port is None:
        return None
    if host != "localhost":
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return None
        except ValueError:
            return None
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


class ServeFeed:
    """The ReportFeed of a passthrough `opencode serve` run (see the module's docstring)."""

    def __init__(self, sink: ReportSink, attempt_id: str, delivered: Collection[str], secrets: Any = ()) -> None:
        self._sink, self._attempt_id = sink, attempt_id
        self._delivered, self._secrets = list(delivered), secrets
        self._line = bytearray()
        self._poll: asyncio.Task[None] | None = None
        self.polls = 0

    def feed(self, chunk: bytes) -> None:
        if self._poll is not None:
            return
        self._line = (self._line + chunk)[-1024:]  # the listening line is short: only a tail is kept
        found = LISTENING.search(self._line)
        base = loopback_base(found.group(1).decode("ascii", "replace")) if found else None
        if base is not None:
            self._line = bytearray()
            self._poll = asyncio.get_running_loop().create_task(self._run(base + PATH), name="opencode-serve-status")

    def close(self) -> None:
        if self._poll is not None:
            self._poll.cancel()

    async def _run(self, url: str) -> None:
        import aiohttp

        misses = 0
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while misses < MAX_MISSES:
                reports = None
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(url, allow_redirects=False) as answer:
                        if answer.status == 200:
                            reports = parse_status(await answer.content.read(MAX_ANSWER + 1), self._delivered,
                                                   self._secrets)
                self.polls += 1
                misses = 0 if reports is not None else misses + 1
                if reports:
                    self._sink.add(self._attempt_id, SOURCE, reports)
                settled = reports is not None and len(reports) == len(self._delivered)
                await asyncio.sleep(POLL_SLOW if settled else POLL_FAST)
        log.debug("OpenCode's server stopped answering its MCP status; no more is read from it")
