"""OpenCode, everything agentctl knows of it: its passthrough strategy, its `opencode serve` status feed, its
display name and hints (`AGENT`).

The `opencode` strategy: opencode reads an extra config file named by the `OPENCODE_CONFIG` env var.

Format (opencode docs, https://opencode.ai/docs/mcp-servers/ and https://opencode.ai/docs/config/ —
`OPENCODE_CONFIG` is the "custom config" layer, loaded after the global one and merged with it):

    {"$schema": "https://opencode.ai/config.json",
     "mcp": {"<name>": {"type": "remote", "url": "...", "headers": {...}, "enabled": true},
             "<name>": {"type": "local", "command": ["cmd", "arg", ...], "environment": {...},
                        "enabled": true}}}

The servers sit directly under `mcp` (the V1 layout): opencode 2 still reads it
(https://opencode.ai/docs/migrate-v1/), while 2's own `mcp.servers` layout would not reach opencode 1.
So a server literally named `servers` is filtered (`name_unsupported_by_strategy`).

A `remote` server is tried as streamable HTTP, then as legacy SSE at the same URL (opencode's
packages/opencode/src/mcp/index.ts), so http and sse servers are both expressed as `remote`. The
built-in server sets `"oauth": false`: it authenticates with the attempt's bearer token and must not
start opencode's OAuth discovery. The file is written 0600 into the attempt's private temporary
directory and removed at stop. A user's own OPENCODE_CONFIG is replaced for this agent (opencode reads
one custom file); their global and project configs still apply.

Report: OpenCode's server mode (`opencode serve`): `GET /mcp` answers each configured MCP server's status.

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
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import msgspec

from agentctl.agent.agent_cli import AgentCli
from agentctl.agent.passthrough.base import CliReceiver, Materialization, MaterializeRequest, dump_json, plan_materialization
from agentctl.agent.passthrough.workspace import write_private
from agentctl.agent.refusal_hints import RefusalHint
from agentctl.agent.reported.acp_tap import ReportSink
from agentctl.agent.reported.base import ServerReport
from agentctl.agent.reported.feed import ReportFeed, ReportPlan
from agentctl.evidence.contract.report import ReportedState
from agentctl.evidence.sanitize import summarize
from agentctl.evidence.secret_registry import SecretRegistry

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.evidence.ledger import Ledger

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
        if not isinstance(entry, dict):
            continue
        raw = entry.get("status")
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

# ---- the passthrough strategy ----------------------------------------------------------------------

FILE_NAME = "opencode.json"
ENV_NAME = "OPENCODE_CONFIG"
SCHEMA = "https://opencode.ai/config.json"


def _refused_name(name: str) -> str | None:
    return "opencode 2 reads mcp.servers as its own server table" if name == "servers" else None


# Why `opencode run` fails, as OpenCode 1.18 says it: its default model's provider out of reach ("Error: Cannot
# connect to API: Unable to connect. ...", exit 1, after about 80 s of retries); a provider with no key.
FAILURE_HINTS = (
    RefusalHint(
        "provider_unreachable",
        ("cannot connect to api", "unable to connect"),
        "OpenCode cannot reach its model's provider: check the network and proxy variables of the agent's "
        "process, or pick a model (--model) whose provider is reachable and set its key in [agent] env.",
    ),
    RefusalHint(
        "api_key_missing",
        ("api key is missing", "apikey", "no api key", "invalid x-api-key", "authentication"),
        "OpenCode's provider wants a key: set it in [agent] env (ANTHROPIC_API_KEY, OPENAI_API_KEY, ...), or "
        "run `opencode auth login` as the user agentctl runs as.",
    ),
)


class OpencodeStrategy:
    name = "opencode"
    receiver = CliReceiver(frozenset({"http", "sse", "stdio"}), refuse_name=_refused_name)

    def materialize(self, req: MaterializeRequest) -> Materialization:
        plan = plan_materialization(req, self.receiver)
        servers: dict[str, dict[str, Any]] = {}
        for entry in plan.delivered:
            if entry.transport == "stdio":
                servers[entry.name] = {
                    "type": "local",
                    "command": [entry.command, *entry.args],
                    "environment": entry.env,
                    "enabled": True,
                }
                continue
            cfg: dict[str, Any] = {"type": "remote", "url": entry.url, "headers": entry.headers, "enabled": True}
            if entry.source == "builtin":
                cfg["oauth"] = False
            servers[entry.name] = cfg
        path = write_private(req.tmpdir, FILE_NAME, dump_json({"$schema": SCHEMA, "mcp": servers}))
        plan.files.append(path)
        plan.env[ENV_NAME] = str(path)
        return plan


STRATEGY = OpencodeStrategy()


# ---- which report a run gives ----------------------------------------------------------------------------

def plan_report(argv: Sequence[str]) -> ReportPlan | None:
    return ReportPlan(source=SOURCE) if is_serve(argv) else None


def _open_feed(ledger: Ledger, attempt_id: str, source: str, delivered: Collection[str]) -> ReportFeed | None:
    return ServeFeed(ReportSink(ledger), attempt_id, delivered, ledger.secrets) if source == SOURCE else None


AGENT = AgentCli(
    name="opencode",
    display_name="OpenCode",
    strategy=STRATEGY,
    reporters={"opencode": "OpenCode"},
    failure_hints=FAILURE_HINTS,
    plan_report=plan_report,
    no_report="OpenCode prints no MCP server status in its run output (only `opencode serve` answers it, at "
              "GET /mcp, which agentctl then asks): no agent report is available for this run",
    open_feed=_open_feed,
)
