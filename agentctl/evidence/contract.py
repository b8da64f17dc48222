"""The one versioned report contract: every shape the daemon persists, sends upstream or prints with --json.

Nothing else in agentctl defines a second shape for the same data. Adding a field with a default is a
compatible change; removing or renaming one bumps CONTRACT_VERSION.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

CONTRACT_VERSION = 1

Status = Literal["configured", "filtered", "unavailable", "delivered", "connected", "active", "failed"]
STATUSES: tuple[str, ...] = ("configured", "filtered", "unavailable", "delivered", "connected", "active", "failed")

EvidenceKind = Literal[
    "configured",
    "filtered",
    "unavailable",
    "delivered",
    "session_accepted",
    "initialize_observed",
    "tools_list_observed",
    "tool_call_observed",
    "explicit_error",
    "connection_closed",
    "attempt_superseded",
]
EVIDENCE_KINDS: tuple[str, ...] = EvidenceKind.__args__  # type: ignore[attr-defined]

Transport = Literal["http", "sse", "stdio"]
Source = Literal["builtin", "profile"]
Era = Literal["legacy", "modern"]
AttemptOrigin = Literal["session_new", "session_load", "reset", "passthrough_start", "manual"]
ToolOutcome = Literal["ok", "error"]

# Bounds from DESIGN.md "Release-safe report". They live here because they are part of the contract:
# a consumer may rely on them.
MAX_ATTEMPTS = 3
MAX_EVENTS_PER_ATTEMPT = 64
MAX_SUMMARY_BYTES = 256
MAX_CATALOG_TOOLS = 128
MAX_DESCRIPTION_BYTES = 1024
MAX_SCHEMA_BYTES = 64 * 1024
MAX_CATALOG_SCHEMA_BYTES = 512 * 1024
TOKEN_ESTIMATE_METHOD = "o200k_base:mcp-tool-json-v1"


class Base(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Common struct config: keyword-only, compact JSON, unknown fields refused on decode."""


class Identity(Base, kw_only=True):
    """Who this execution generation is. Minted by the executor and the daemon, never by the agent."""

    task_id: str
    session_id: str
    execution_id: str
    instance_id: str
    agent_id: str
    agent_profile_id: str


class ClientInfo(Base, kw_only=True):
    name: str
    version: str | None = None


class ErrorSummary(Base, kw_only=True):
    """A stable reason code plus a redacted summary of at most MAX_SUMMARY_BYTES."""

    reason_code: str
    summary: str = ""


class ToolSummary(Base, kw_only=True):
    """One built-in tool as the agent saw it in tools/list, bounded."""

    name: str
    description: str = ""
    description_truncated: bool = False
    input_schema: dict[str, Any] | None = None
    schema_truncated: bool = False
    token_estimate: int | None = None


class ToolCatalog(Base, kw_only=True):
    """The bounded catalog of the built-in server. `tool_count` on the row stays the full count."""

    tools: list[ToolSummary] = []
    truncated: bool = False
    schemas_truncated: bool = False
    estimator: str | None = None  # TOKEN_ESTIMATE_METHOD, or None when the encoding could not be loaded
    estimator_unavailable_reason: str | None = None


class EndpointTestResult(Base, kw_only=True):
    """Reachability measured by the daemon. Stored beside a row; never changes its status."""

    succeeded: bool
    tested_at: datetime
    reason_code: str | None = None
    summary: str = ""
    tool_count: int | None = None
    latency_ms: float | None = None


class EvidenceEvent(Base, kw_only=True):
    """One timestamped observation. `server` None means attempt level (or a report-level diagnostic)."""

    kind: EvidenceKind
    occurred_at: datetime
    task_id: str
    session_id: str
    execution_id: str
    instance_id: str
    attempt_id: str
    seq: int = 0  # monotonic per instance, assigned by the ledger
    server: str | None = None
    source: Source | None = None
    transport: Transport | None = None
    target: str | None = None
    reason_code: str | None = None
    summary: str | None = None
    acp_session_id: str | None = None
    connection_id: str | None = None
    era: Era | None = None
    protocol_version: str | None = None
    requested_protocol_version: str | None = None
    client: ClientInfo | None = None
    tool_count: int | None = None
    catalog: ToolCatalog | None = None
    tool_name: str | None = None
    outcome: ToolOutcome | None = None


class ServerRow(Base, kw_only=True):
    """What is known about one MCP server in one attempt. `status` is always the strongest evidence."""

    name: str
    source: Source = "profile"
    transport: Transport | None = None
    target: str | None = None
    status: Status  # required so it is always encoded, even when "configured"
    reason_code: str | None = None
    summary: str | None = None
    connection_id: str | None = None
    connection_seen_at: datetime | None = None
    era: Era | None = None
    protocol_version: str | None = None
    requested_protocol_version: str | None = None
    client: ClientInfo | None = None
    tool_count: int | None = None
    tool_calls: int = 0
    tool_errors: int = 0
    last_tool: str | None = None
    configured_at: datetime | None = None
    filtered_at: datetime | None = None
    unavailable_at: datetime | None = None
    delivered_at: datetime | None = None
    initialize_observed_at: datetime | None = None
    tools_list_observed_at: datetime | None = None
    tool_call_observed_at: datetime | None = None
    failed_at: datetime | None = None
    disconnected_at: datetime | None = None
    endpoint_test: EndpointTestResult | None = None
    catalog: ToolCatalog | None = None


class Attempt(Base, kw_only=True):
    """One attachment attempt: created before delivery by session/new, session/load, reset or a CLI start."""

    attempt_id: str
    task_id: str
    session_id: str
    execution_id: str
    instance_id: str
    origin: AttemptOrigin = "manual"
    acp_session_id: str | None = None
    started_at: datetime
    updated_at: datetime
    superseded_at: datetime | None = None
    accepted_at: datetime | None = None
    servers: list[ServerRow] = []
    evidence: list[EvidenceEvent] = []
    dropped_events: int = 0
    session_error: ErrorSummary | None = None


class McpCapabilities(Base, kw_only=True):
    """What the agent advertised in ACP initialize. Capability is not connection evidence."""

    http: bool = False
    sse: bool = False


class AgentState(Base, kw_only=True):
    """The supervised agent as a report-level fact: who it said it is, and how it ended. No output, no argv."""

    protocol: Literal["acp", "passthrough"]
    state: Literal["starting", "running", "exited"]
    name: str | None = None
    version: str | None = None
    protocol_version: int | None = None
    mcp_capabilities: McpCapabilities | None = None
    started_at: datetime | None = None
    exited_at: datetime | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    exit_reason: str | None = None
    stopped_by_daemon: bool = False
    stdout_skipped_lines: int = 0
    permission_requests: int = 0
    permissions_granted: int = 0


class RefusalCount(Base, kw_only=True):
    """HTTP requests refused before the MCP SDK saw them: route, method and status only, never a body."""

    route: str
    method: str
    status: int
    count: int = 0


class AttachmentHistory(Base, kw_only=True):
    """The report: the current attempt and up to MAX_ATTEMPTS - 1 previous ones, newest first."""

    version: int  # always CONTRACT_VERSION when written; required so it is always encoded
    identity: Identity
    updated_at: datetime
    current: Attempt | None = None
    previous: list[Attempt] = []
    last_seq: int = 0  # highest evidence sequence number folded in (per instance)
    rejected_events: int = 0  # evidence naming an attempt no longer kept, or a foreign execution
    http_refusals: list[RefusalCount] = []
    agent: AgentState | None = None


class StatusResponse(msgspec.Struct, kw_only=True):
    """`agentctl status --json` and GET /v1/status. Every field is always encoded (null when unknown)."""

    identity: Identity
    ready: bool
    checks: dict[str, bool]
    current: Attempt | None
    report_path: str | None
    mcp_url: str | None
    rejected_events: int


class HealthResponse(msgspec.Struct, kw_only=True):
    """`agentctl health --json` and GET /v1/health. `live` is true whenever the daemon answers."""

    live: bool
    ready: bool
    stopping: bool
    checks: dict[str, bool]
    details: dict[str, str]


class SessionResult(msgspec.Struct, kw_only=True):
    """`agentctl session new|load|reset --json`: the attempt it created and the agent's answer."""

    attempt_id: str
    accepted: bool
    with_agent: bool
    acp_session_id: str | None = None
    reason_code: str | None = None
    summary: str | None = None
    failed_servers: list[str] = []


class McpConfig(msgspec.Struct, kw_only=True):
    """`agentctl mcp-config --json`: how to reach the built-in server as the current attempt. SECRET-BEARING."""

    name: str
    attempt_id: str
    url: str
    sse_url: str
    headers: dict[str, str]
    secret: bool = True


class StderrView(msgspec.Struct, kw_only=True):
    """`agentctl stderr --json`: the on-demand window of agent output. May contain sensitive data; never stored."""

    warning: str
    agent_state: str | None
    lines: list[str]
    truncated: bool
    total_bytes_seen: int
    empty: bool


def history_schema() -> dict[str, Any]:
    """JSON Schema of the report contract (what `agentctl schema` prints and docs/ commits)."""
    return msgspec.json.schema(AttachmentHistory)


_encoder = msgspec.json.Encoder()


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


def decode_history(data: bytes | str) -> AttachmentHistory:
    return msgspec.json.decode(data, type=AttachmentHistory)
