"""Codex's app-server protocol: `mcpServer/startupStatus/updated` notifications and `mcpServerStatus/list` answers.

`codex app-server` speaks JSON lines on stdio (JSON-RPC without the `"jsonrpc"` member). After
`initialize`, `initialized` and `thread/start` it notifies each configured server's startup:
`{"method":"mcpServer/startupStatus/updated","params":{"name","status","error","failureReason",...}}` with
status `starting`, `ready`, `failed` or `cancelled` (failureReason `reauthenticationRequired` or null). The
request `mcpServerStatus/list` is answered with `{"result":{"data":[{"name","runtimeStatus","tools",
"toolsError",...}]}}`, runtimeStatus `notStarted`, `starting`, `connected`, `authenticationRequired`,
`failed`, `cancelled` or `disabled`, and `tools` a map by tool name. Measured with Codex 0.171.0 (its own
`codex app-server generate-json-schema`). `codex exec --json` emits none of this.

Error texts name the server and embed URLs and Rust type paths: only a redacted, bounded summary is kept (the
URL reduced to its origin), and only for delivered servers.

The ACP adapter `@agentclientprotocol/codex-acp` (2.6.0, dist/index.js, `McpStartupReporter`) relays Codex's
startup outcome for the servers its client gave it as a synthetic ACP `tool_call` update, once the startup
settled: `toolCallId` `mcp_startup.<encodeURIComponent(name)>.<uuid>`, title `mcp__<name>__startup`, status
`failed` and one text content, `[codex-acp forwarded startup error] MCP server `NAME` failed to start: ERROR`,
`... startup was cancelled.`, or `[codex-acp] MCP server `NAME` was not started, because the Codex config
already defines ...`. 2.6.0 relays failures only; a `completed` status (a later version's success) reads as
connected. Read as `codex-acp:mcp-startup` (the contract's source names allow no underscore).
"""

from __future__ import annotations

import re
from dataclasses import replace
from collections.abc import Collection, Iterable, Sequence
from typing import Any
from urllib.parse import unquote

import msgspec

from agentctl.agent.reported.base import ReportReader, ServerReport, exposed_names
from agentctl.evidence.contract.report import ReportedState
from agentctl.evidence.sanitize import summarize
from agentctl.evidence.secret_registry import SecretRegistry

SOURCE = "codex:app-server"
STARTUP_METHOD = "mcpServer/startupStatus/updated"
MAX_LINE = 1024 * 1024  # a status list carries every tool's schema: far more than a notification
STARTUP_STATES: dict[str, ReportedState] = {
    "starting": "pending",
    "ready": "connected",
    "failed": "failed",
    "cancelled": "cancelled",
}
RUNTIME_STATES: dict[str, ReportedState] = {
    "notStarted": "pending",
    "starting": "pending",
    "connected": "connected",
    "authenticationRequired": "needs_auth",
    "failed": "failed",
    "cancelled": "cancelled",
    "disabled": "disabled",
}
REASON_FAILED = "agent_reported_failed"
REASON_NEEDS_AUTH = "agent_reported_needs_auth"
ACP_SOURCE = "codex-acp:mcp-startup"
ACP_TOOL_CALL_PREFIX = "mcp_startup."
ACP_STATES: dict[str, ReportedState] = {"failed": "failed", "completed": "connected"}
_ACP_CANCELLED = "startup was cancelled."
_ACP_PREFIX = re.compile(r"^\[codex-acp[^\]]{0,48}\]\s*")
# `Transport [codex_rmcp_client::tool_list_changes::ToolListChanges<...>]`: a type path, not a reason.
_RUST_TYPE = re.compile(r"\s*\[[A-Za-z_]\w*(?:::\w+)+(?:<[^\[\]]*>)?\]")


class _Message(msgspec.Struct):
    # Any, not the expected types: an unexpected shape is skipped, never a decode failure.
    method: Any = None
    params: Any = None
    result: Any = None


_decoder = msgspec.json.Decoder(_Message)


def is_app_server(argv: Sequence[str]) -> bool:
    """Whether a Codex command line runs `codex app-server` (its first positional argument)."""
    args, i = list(argv[1:]), 0
    while i < len(args):
        if args[i] in ("-c", "--config"):  # the options Codex takes a value with, as the strategy writes them
            i += 2
        elif args[i].startswith("-"):
            i += 1
        else:
            return args[i] == "app-server"
    return False


def parse_message(
    line: bytes, delivered: Collection[str], secrets: Iterable[str] | SecretRegistry = (), builtin: str | None = None
) -> list[ServerReport] | None:
    """The reports of one app-server line, or None when it is neither a startup notification nor a
    status list answer."""
    try:
        message = _decoder.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if message.method == STARTUP_METHOD and isinstance(message.params, dict):
        report = _startup(message.params, delivered, secrets)
        return [report] if report is not None else []
    result = message.result
    if message.method is None and isinstance(result, dict) and isinstance(result.get("data"), list):
        entries = [e for e in result["data"] if isinstance(e, dict) and "runtimeStatus" in e]
        if entries or not result["data"]:
            return [r for r in (_runtime(e, delivered, secrets, builtin) for e in entries) if r is not None]
    return None


def _startup(params: dict[str, Any], delivered: Collection[str], secrets: Any) -> ServerReport | None:
    name, raw = params.get("name"), params.get("status")
    if not isinstance(name, str) or name not in delivered or not isinstance(raw, str):
        return None
    state = STARTUP_STATES.get(raw, "unknown")
    if state == "failed" and params.get("failureReason") == "reauthenticationRequired":
        state = "needs_auth"
    return _report(name, state, raw, None, params.get("error"), secrets)


def _runtime(
    entry: dict[str, Any], delivered: Collection[str], secrets: Any, builtin: str | None
) -> ServerReport | None:
    name, raw = entry.get("name"), entry.get("runtimeStatus")
    if not isinstance(name, str) or name not in delivered or not isinstance(raw, str):
        return None
    state = RUNTIME_STATES.get(raw, "unknown")
    tools = entry.get("tools")
    count = len(tools) if state == "connected" and isinstance(tools, dict) else None
    report = _report(name, state, raw, count, entry.get("toolsError"), secrets)
    if name == builtin and count is not None:  # agentctl's own tools, as Codex lists them: the exposure check
        report = replace(report, exposed_tools=exposed_names(tools))
    return report


def _report(name: str, state: ReportedState, raw: str, count: int | None, error: Any, secrets: Any) -> ServerReport:
    reason = summary = None
    if state in ("failed", "needs_auth"):
        reason = REASON_NEEDS_AUTH if state == "needs_auth" else REASON_FAILED
        if isinstance(error, str) and error:
            summary = summarize(reason, _RUST_TYPE.sub("", error), secrets).summary or None
    return ServerReport(name=name, state=state, raw_state=raw, tool_count=count, reason_code=reason, summary=summary)


def parse_acp_update(
    update: Any, delivered: Collection[str], secrets: Iterable[str] | SecretRegistry = ()
) -> tuple[str, list[ServerReport]] | None:
    """(source, reports) of one ACP `session/update` payload when it is codex-acp's `mcp_startup` tool call,
    else None. The server is the tool call id's (URL-decoded); the row is set from the status alone."""
    if not isinstance(update, dict) or update.get("sessionUpdate") not in ("tool_call", "tool_call_update"):
        return None
    call_id = update.get("toolCallId")
    if not isinstance(call_id, str) or not call_id.startswith(ACP_TOOL_CALL_PREFIX):
        return None
    encoded, dot, _uuid = call_id[len(ACP_TOOL_CALL_PREFIX):].rpartition(".")
    name = unquote(encoded) if dot else None
    raw = update.get("status")
    if name is None or name not in delivered or not isinstance(raw, str) or raw not in ACP_STATES:
        return ACP_SOURCE, []  # its shape, about no delivered server (or a status that says nothing yet)
    text = _first_text(update.get("content"))
    state: ReportedState = ACP_STATES[raw]
    if state == "failed" and text is not None and text.rstrip().endswith(_ACP_CANCELLED):
        state = "cancelled"
    if text is not None:
        text = _ACP_PREFIX.sub("", text[:4096])
    return ACP_SOURCE, [_report(name, state, raw, None, text, secrets)]


def _first_text(content: Any) -> str | None:
    """The text of the first `{"type":"content","content":{"type":"text","text"}}` item."""
    if not isinstance(content, list):
        return None
    for item in content[:4]:
        inner = item.get("content") if isinstance(item, dict) else None
        if isinstance(inner, dict) and isinstance(inner.get("text"), str):
            return inner["text"]
    return None


class CodexAppServerReader(ReportReader):
    """Reads `codex app-server` stdout incrementally; returns the reports of each status line it completes."""

    markers = (b"mcpServer/startupStatus", b"runtimeStatus")

    def __init__(
        self, delivered: Collection[str], secrets: Iterable[str] | SecretRegistry = (), max_line: int = MAX_LINE,
        builtin: str | None = None,
    ) -> None:
        super().__init__(delivered, max_line)
        self._secrets = secrets
        self.builtin = builtin

    def parse_line(self, line: bytes) -> list[ServerReport] | None:
        return parse_message(line, self.delivered, self._secrets, self.builtin)
