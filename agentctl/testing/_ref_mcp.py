"""MCP client side of the reference agent: server entries, live connections, tool choice.

Each connection runs in its own asyncio task that enters `mcp.client.Client` and stays
inside it until closed: the MCP SDK's anyio cancel scopes must be entered and exited in
the same task, and ACP handlers each run in a task of their own. Tool calls are made
from other tasks through the open client, which the SDK's streams allow.

Nothing here logs a header value, an env value or a URL query string.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("agentctl.reference_agent")

AGENT_NAME = "agentctl-reference-agent"
MODERN_MODE = "2026-07-28"
TEXT_LIMIT = 400
_TASK_TOOL = re.compile(r"(^|_)(get_task|task_get)($|_)")


@dataclass
class ServerEntry:
    """One MCP server as delivered (ACP `mcpServers` item or a passthrough config entry)."""

    name: str
    transport: str  # "http" | "sse" | "stdio" | anything else is unsupported
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def where(self) -> str:
        """A log-safe location: scheme://host:port/path for URLs, the command for stdio."""
        if self.transport == "stdio":
            return self.command
        return safe_url(self.url)


class ConnectFailed(Exception):
    """A server could not be connected; `reason` is sanitized and short."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"MCP server '{name}' unreachable: {reason}")
        self.name = name
        self.reason = reason


def safe_url(url: str) -> str:
    """Drop userinfo, query and fragment from a URL (they can carry credentials)."""
    url = url.split("#", 1)[0].split("?", 1)[0]
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


def reason_of(exc: BaseException) -> str:
    """A short, sanitized reason: the innermost exception's type and message, URLs trimmed."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    text = re.sub(r"https?://\S+", lambda m: safe_url(m.group(0)), text)
    text = re.sub(r"(?i)(bearer|token|authorization)\s*[:=]?\s*\S+", r"\1 <redacted>", text)
    reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return reason[:300]


def entry_from_acp(server: Any) -> ServerEntry:
    """Normalize an ACP SDK `mcpServers` item (HttpMcpServer, SseMcpServer, McpServerStdio, AcpMcpServer)."""
    kind = getattr(server, "type", None)
    name = server.name
    if kind in ("http", "sse"):
        headers = {h.name: h.value for h in (server.headers or [])}
        return ServerEntry(name=name, transport=kind, url=server.url, headers=headers)
    if kind is None and hasattr(server, "command"):
        env = {e.name: e.value for e in (server.env or [])}
        return ServerEntry(name=name, transport="stdio", command=server.command, args=list(server.args or []), env=env)
    return ServerEntry(name=name, transport=str(kind or "unknown"))


def result_text(result: Any) -> str:
    """The text of a CallToolResult (text blocks joined, else the structured content as JSON)."""
    parts = [getattr(block, "text", "") for block in (result.content or []) if getattr(block, "type", "") == "text"]
    text = "\n".join(p for p in parts if p)
    if not text and getattr(result, "structured_content", None) is not None:
        text = json.dumps(result.structured_content, separators=(",", ":"), default=str)
    return text


def truncate(text: str, limit: int = TEXT_LIMIT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers=headers or None) as http_client:
        async with streamable_http_client(url, http_client=http_client) as streams:
            yield streams


class McpConnection:
    """One open MCP client session, kept alive by a dedicated task."""

    def __init__(
        self, entry: ServerEntry, *, modern: bool, client_name: str, client_version: str, call_timeout: float
    ) -> None:
        self.entry = entry
        self.modern = modern
        self.tools: list[Any] = []
        self._client_name = client_name
        self._client_version = client_version
        self._call_timeout = call_timeout
        self._client: Any = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.entry.name

    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    def _transport(self) -> Any:
        from mcp.client.sse import sse_client
        from mcp.client.stdio import StdioServerParameters

        e = self.entry
        if e.transport == "http":
            return _http_transport(e.url, e.headers)
        if e.transport == "sse":
            return sse_client(e.url, headers=e.headers or None)
        if e.transport == "stdio":
            return StdioServerParameters(command=e.command, args=e.args, env=e.env or None)
        raise ConnectFailed(e.name, f"unsupported transport {e.transport!r}")

    async def _run(self, ready: asyncio.Future[None]) -> None:
        import mcp_types
        from mcp.client import Client

        try:
            client = Client(
                self._transport(),
                mode=MODERN_MODE if self.modern else "legacy",
                client_info=mcp_types.Implementation(name=self._client_name, version=self._client_version),
                read_timeout_seconds=self._call_timeout,
            )
            async with client:
                tools: list[Any] = []
                cursor = None
                for _ in range(20):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self.tools = tools
                self._client = client
                ready.set_result(None)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:  # noqa: BLE001 - reported through `ready` or logged
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.warning("connection to MCP server '%s' ended: %s", self.name, reason_of(exc))
        finally:
            self._client = None

    async def open(self, timeout: float) -> None:
        """Connect, initialize (legacy) or adopt (modern), and list tools; raise ConnectFailed."""
        if self.entry.transport not in ("http", "sse", "stdio"):
            raise ConnectFailed(self.name, f"unsupported transport {self.entry.transport!r}")
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even if we were cancelled
        self._task = asyncio.create_task(self._run(ready), name=f"mcp:{self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except asyncio.TimeoutError:
            await self.close()
            raise ConnectFailed(self.name, f"no answer within {timeout:g}s") from None
        except ConnectFailed:
            raise
        except Exception as exc:
            raise ConnectFailed(self.name, reason_of(exc)) from None

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        client = self._client
        if client is None:
            raise RuntimeError(f"MCP server '{self.name}' is not connected")
        return await asyncio.wait_for(client.call_tool(tool, arguments), self._call_timeout)

    async def close(self, timeout: float = 3.0) -> None:
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except (asyncio.TimeoutError, Exception):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


async def connect_all(
    entries: Iterable[ServerEntry],
    *,
    modern: bool,
    client_name: str,
    client_version: str,
    connect_timeout: float,
    call_timeout: float,
) -> tuple[dict[str, McpConnection], list[ConnectFailed]]:
    """Connect to every entry concurrently; return the open connections and the failures (in order)."""
    entries = list(entries)
    if entries:
        _import_client()
    conns = [
        McpConnection(e, modern=modern, client_name=client_name, client_version=client_version, call_timeout=call_timeout)
        for e in entries
    ]
    for c in conns:
        log.info("connecting to MCP server '%s' (%s %s)", c.name, c.entry.transport, c.entry.where())
    results = await asyncio.gather(*(c.open(connect_timeout) for c in conns), return_exceptions=True)
    opened: dict[str, McpConnection] = {}
    failures: list[ConnectFailed] = []
    for conn, res in zip(conns, results):
        if isinstance(res, ConnectFailed):
            log.warning("MCP server '%s' unreachable: %s", conn.name, res.reason)
            failures.append(res)
        elif isinstance(res, BaseException):
            log.warning("MCP server '%s' unreachable: %s", conn.name, reason_of(res))
            failures.append(ConnectFailed(conn.name, reason_of(res)))
        else:
            log.info("MCP server '%s' connected, %d tools", conn.name, len(conn.tools))
            opened[conn.name] = conn
    return opened, failures


def _import_client() -> None:
    """The SDK's client modules, imported before any connect timeout starts: the timeout bounds the server's
    answer, and a first import on a loaded machine can take seconds."""
    for module in _CLIENT_MODULES:
        importlib.import_module(module)


_CLIENT_MODULES = ("mcp_types", "mcp.client", "mcp.client.sse", "mcp.client.stdio", "mcp.client.streamable_http",
                   "mcp.shared._httpx_utils")


async def close_all(conns: Iterable[McpConnection]) -> None:
    await asyncio.gather(*(c.close() for c in list(conns)), return_exceptions=True)


def _required(tool: Any) -> list[str]:
    schema = getattr(tool, "input_schema", None) or {}
    req = schema.get("required") if isinstance(schema, dict) else None
    return list(req or [])


def pick_builtin(conns: dict[str, McpConnection], builtin_name: str) -> McpConnection | None:
    """The built-in server: by name, else the one exposing a get_task-like tool, else the first."""
    if builtin_name in conns:
        return conns[builtin_name]
    for conn in conns.values():
        if any(_TASK_TOOL.search(t.name) for t in conn.tools):
            return conn
    return next(iter(conns.values()), None)


def pick_tool(tools: list[Any]) -> Any | None:
    """A harmless read tool: get_task/task_get-like without required args, else the first tool without any."""
    free = [t for t in tools if not _required(t)]
    for t in free:
        if t.name in ("get_task", "task_get"):
            return t
    for t in free:
        if _TASK_TOOL.search(t.name):
            return t
    return free[0] if free else None


def resolve_call(
    conns: dict[str, McpConnection], builtin: McpConnection | None, tool: str
) -> tuple[McpConnection, str] | None:
    """Find the server for an explicit `CALL <tool>`: `server__tool` qualified, builtin first, then others."""
    if "__" in tool:
        server, _, bare = tool.partition("__")
        if server in conns and bare in conns[server].tool_names():
            return conns[server], bare
    ordered = ([builtin] if builtin else []) + [c for c in conns.values() if c is not builtin]
    for conn in ordered:
        if tool in conn.tool_names():
            return conn, tool
    return (builtin, tool) if builtin else None


def parse_call(text: str) -> tuple[str, dict[str, Any]] | None:
    """`CALL <tool> [<json-object>]` -> (tool, args); None when the text is not a CALL."""
    stripped = text.strip()
    if not stripped.startswith("CALL "):
        return None
    rest = stripped[5:].strip()
    tool, _, raw = rest.partition(" ")
    raw = raw.strip()
    if not tool:
        raise ValueError("CALL needs a tool name")
    args = json.loads(raw) if raw else {}
    if not isinstance(args, dict):
        raise ValueError("CALL arguments must be a JSON object")
    return tool, args


async def perform_turn(conns: dict[str, McpConnection], builtin_name: str, text: str) -> dict[str, Any]:
    """Call the requested (`CALL ...`) or the default tool; return {server, tool, ok, text}."""
    builtin = pick_builtin(conns, builtin_name)
    try:
        explicit = parse_call(text)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        return {"server": None, "tool": None, "ok": False, "text": f"bad CALL: {exc}"}
    if explicit:
        found = resolve_call(conns, builtin, explicit[0])
        if found is None:
            return {"server": None, "tool": explicit[0], "ok": False, "text": "no connected MCP server"}
        conn, tool_name = found
        args = explicit[1]
    else:
        if builtin is None:
            return {"server": None, "tool": None, "ok": False, "text": "no connected MCP server"}
        tool = pick_tool(builtin.tools)
        if tool is None:
            return {"server": builtin.name, "tool": None, "ok": False, "text": "no tool callable without arguments"}
        conn, tool_name, args = builtin, tool.name, {}
    log.info("calling tool '%s' on MCP server '%s'", tool_name, conn.name)
    try:
        result = await conn.call(tool_name, args)
    except Exception as exc:  # noqa: BLE001 - reported in the answer
        return {"server": conn.name, "tool": tool_name, "ok": False, "text": reason_of(exc)}
    return {"server": conn.name, "tool": tool_name, "ok": not result.is_error, "text": truncate(result_text(result))}


def describe_turn(outcome: dict[str, Any]) -> str:
    if outcome["server"] and outcome["tool"]:
        verb = "Called" if outcome["ok"] else "Tool call failed:"
        return f"{verb} {outcome['server']}/{outcome['tool']}: {outcome['text']}"
    return f"No tool called: {outcome['text']}"
