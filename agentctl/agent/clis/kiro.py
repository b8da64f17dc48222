"""Kiro CLI, everything agentctl knows of it (`AGENT`): an ACP agent with no passthrough strategy, whose own
report of its MCP servers comes as ACP extension notifications.

Kiro CLI's ACP extension notifications about its MCP servers (`kiro:mcp-ext`), read as they arrive.

`kiro-cli acp` sends, besides standard ACP, notifications whose methods start with `_` (ACP's extension
space). Those about MCP servers, as Kiro's ACP clients handle them (Kiro CLI is not on npm; not run here):

- `_kiro.dev/mcp/server_initialized` `{sessionId, serverName}`: the server started (connected);
- `_kiro.dev/mcp/server_init_failure` `{sessionId, serverName, error}`: it failed (the error is kept only as a
  redacted, bounded summary);
- `_kiro.dev/mcp/oauth_request` `{sessionId, serverName, oauthUrl}`: it needs authentication (the URL is
  never kept);
- `_kiro/mcp/status` `{sessionId, servers: [{name, status, failedAuthorization, errorMessage, ...}]}`: each
  server's state as it comes up (`connected`, `failed`; failed with `failedAuthorization` true or an
  `authorizationUrl` is needs-authentication).

Every one is structured: it sets the row of a delivered server. Any other extension method is not one of
these (agentctl/agent/reported/acp_tap.py counts it; nothing of it is kept).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from agentctl.agent.agent_cli import AcpExtension, AgentCli
from agentctl.agent.reported.base import ServerReport, exposed_names
from agentctl.evidence.contract.report import ReportedState
from agentctl.evidence.sanitize import summarize
from agentctl.evidence.secret_registry import SecretRegistry

REASON_FAILED = "agent_reported_failed"
REASON_NEEDS_AUTH = "agent_reported_needs_auth"
SOURCE = "kiro:mcp-ext"
INITIALIZED = "_kiro.dev/mcp/server_initialized"
INIT_FAILURE = "_kiro.dev/mcp/server_init_failure"
OAUTH_REQUEST = "_kiro.dev/mcp/oauth_request"
STATUS = "_kiro/mcp/status"
METHODS = frozenset((INITIALIZED, INIT_FAILURE, OAUTH_REQUEST, STATUS))
MAX_SERVERS = 256
STATUS_STATES: dict[str, ReportedState] = {
    "connected": "connected",
    "failed": "failed",
    "connecting": "pending",
    "pending": "pending",
    "starting": "pending",
    "disabled": "disabled",
}


def parse_ext(
    method: str, params: Any, delivered: Collection[str], secrets: Iterable[str] | SecretRegistry = (),
    builtin: str | None = None,
) -> list[ServerReport] | None:
    """The reports of one extension notification, or None when it is not one of Kiro's MCP methods."""
    if method not in METHODS:
        return None
    if not isinstance(params, dict):
        return []
    if method == STATUS:
        servers = params.get("servers")
        entries = servers[:MAX_SERVERS] if isinstance(servers, list) else []
        return [r for r in (_status(e, delivered, secrets, builtin) for e in entries) if r is not None]
    name = params.get("serverName")
    if not isinstance(name, str) or name not in delivered:
        return []
    if method == INITIALIZED:
        return [ServerReport(name=name, state="connected", raw_state="initialized")]
    if method == OAUTH_REQUEST:
        return [ServerReport(name=name, state="needs_auth", raw_state="oauth_request",
                             reason_code=REASON_NEEDS_AUTH)]
    return [_failed(name, "failed", "init_failure", params.get("error"), secrets)]


def _status(entry: Any, delivered: Collection[str], secrets: Any, builtin: str | None) -> ServerReport | None:
    if not isinstance(entry, dict):
        return None
    name, raw = entry.get("name"), entry.get("status")
    if not isinstance(name, str) or name not in delivered or not isinstance(raw, str):
        return None
    state = STATUS_STATES.get(raw, "unknown")
    if state == "failed":
        auth = entry.get("failedAuthorization") is True or isinstance(entry.get("authorizationUrl"), str)
        return _failed(name, "needs_auth" if auth else "failed", raw, entry.get("errorMessage"), secrets)
    tools = entry.get("tools")
    count = len(tools) if state == "connected" and isinstance(tools, list) else None
    exposed = None
    # agentctl's own tools, as Kiro lists them: the exposure check.
    if name == builtin and isinstance(tools, list) and count is not None:
        exposed = exposed_names(t.get("name") for t in tools if isinstance(t, dict))
    return ServerReport(name=name, state=state, raw_state=raw, tool_count=count, exposed_tools=exposed)


def _failed(name: str, state: ReportedState, raw: str, error: Any, secrets: Any) -> ServerReport:
    reason = REASON_NEEDS_AUTH if state == "needs_auth" else REASON_FAILED
    summary = summarize(reason, error, secrets).summary or None if isinstance(error, str) and error else None
    return ServerReport(name=name, state=state, raw_state=raw, reason_code=reason, summary=summary)


AGENT = AgentCli(
    name="kiro",
    display_name="Kiro CLI",
    reporters={"kiro": "Kiro CLI"},
    acp_extension=AcpExtension(METHODS, SOURCE, parse_ext),
)
