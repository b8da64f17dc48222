"""The versioned report contract: every shape the daemon persists and sends upstream as evidence.

Nothing else in agentctl defines a second shape for the same data. Every change bumps CONTRACT_VERSION, an
added field with a default too (an older reader refuses unknown fields and values): the new release reads
every older version, an older one refuses the new version by its number (docs/contract.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from agentctl.evidence.contract.base import Base

# 2 added agent-reported evidence (kind `agent_reported`, ServerRow.reported and status_source) and the
# built-in catalog's hash (ToolCatalog.hash, ServerRow.catalog_hash).
# 3 names what was added to 2 after its bump, when 2 was unreleased and taken to be still open: the agent's
# session notices (Attempt.notices and notice_count, AgentNotice), each legacy connection's own state
# (ServerRow.connections), the agent's report of its servers (AgentState.report_source and report_note) and
# of the built-in server's tools (exposed_tools on AgentReport and agent-reported evidence), the agent's
# terminal (AgentState.terminal), ACP authentication (AgentState.auth_method, auth_result, auth_note), counted
# notices and extension notifications (AgentState.notices_dropped, unknown_ext_notifications); and bounds in
# the types of every free-text field (Summary, ShortText, Description, ExitReason). A hub built before one
# of these refused a report with it by an "unknown field" instead of by its version.
# Also in 3: the required-server gate's reading of an attempt (Attempt.required, RequiredGate).
# docs/contract.md says when a version is bumped (every added field or value) and what each reader accepts.
CONTRACT_VERSION = 3
# Every version this release reads. Every older version is a subset of this one (nothing was removed or
# renamed), so it decodes with these types as it is; a newer version is refused by name, never guessed at.
READABLE_CONTRACT_VERSIONS: tuple[int, ...] = (1, 2, 3)

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
    "agent_reported",
    "server_exited",
]
EVIDENCE_KINDS: tuple[str, ...] = EvidenceKind.__args__  # type: ignore[attr-defined]

Transport = Literal["http", "sse", "stdio"]
Source = Literal["builtin", "profile"]
Era = Literal["legacy", "modern"]
AttemptOrigin = Literal["session_new", "session_load", "reset", "passthrough_start", "manual"]
# Who observed a third-party server's contact: agentctl's stdio witness (agentctl/agent/mcp_witness.py), the
# process the agent spawns in the server's place. Contact on the built-in row is always the endpoint's own.
ObservedBy = Literal["witness"]
ToolOutcome = Literal["ok", "error"]

# A server's state as the agent itself reported it, normalized across providers. `unknown`: a state this
# version does not know (its raw token is kept as `raw_state`).
ReportedState = Literal["connected", "failed", "needs_auth", "pending", "disabled", "cancelled", "unknown"]
REPORTED_STATES: tuple[str, ...] = ReportedState.__args__  # type: ignore[attr-defined]
# Whose evidence a row's status rests on: agentctl's own observation, or the agent's report.
StatusSource = Literal["observed", "reported"]
# The provider contract a report came from, `<agent>:<contract>` (e.g. `claude:stream-json-init`). A
# pattern, not a list: a new provider is a compatible addition.
ReportSource = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9-]{0,23}:[a-z][a-z0-9-]{0,47}$")]
# An MCP tool's name as an agent lists it (the built-in server's exposure): a bounded token, never free text.
ToolName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,128}$")]
MAX_EXPOSED_TOOLS = 256
# The provider's own word for the state (`needs-auth`, `ready`, `authenticationRequired`): a bounded token.
RawState = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")]
# An ACP session notice's severity (the RFD's info, warning, error); `unknown`: one this version does not know.
NoticeSeverity = Literal["info", "warning", "error", "unknown"]
NOTICE_SEVERITIES: tuple[str, ...] = NoticeSeverity.__args__  # type: ignore[attr-defined]
# `<method>:<hex digest>`; CATALOG_HASH_METHOD names the one this version computes.
CatalogHash = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9]+:[a-z0-9-]+:[0-9a-f]{16,128}$")]

# The required-server gate (agentctl/evidence/required.py): each required server's reading, and the whole gate's.
RequiredState = Literal["attached", "waiting", "failed", "not_attached"]
GateState = Literal["open", "waiting", "blocked"]

# The report's bounds (docs/design.md, "Release-safe report"). They live here because they are part of the
# contract: a consumer may rely on them.
MAX_ATTEMPTS = 3
MAX_EVENTS_PER_ATTEMPT = 64
MAX_SUMMARY_BYTES = 256
MAX_CATALOG_TOOLS = 128
MAX_CONNECTIONS_PER_ROW = 8  # legacy connections tracked per row: every open one first, then the newest closed
MAX_NOTICES_PER_ATTEMPT = 8  # the first ones are kept (a flood cannot push them out); Attempt.notice_count counts all
MAX_DESCRIPTION_BYTES = 1024
MAX_REQUIRED_SERVERS = 32  # required servers whose reading an attempt keeps (a spec rarely requires more than 2)
MAX_SCHEMA_BYTES = 64 * 1024
MAX_CATALOG_SCHEMA_BYTES = 512 * 1024
MAX_SHORT_TEXT_BYTES = 128  # an agent's or client's own name or version (sanitize.bounded_text's default)
MAX_EXIT_REASON_CHARS = 1024  # a reason code and how the process ended, or a start failure's summary
TOKEN_ESTIMATE_METHOD = "o200k_base:mcp-tool-json-v1"
# sha256 over the canonical JSON of the whole tool list (before any bound above): equal hashes mean the
# same names, descriptions and input schemas. agentctl.evidence.catalog.catalog_hash says exactly how.
CATALOG_HASH_METHOD = "sha256:mcp-tools-v1"

# Free text someone else wrote, as a report carries it: bounded in the type too, so a reader refuses an
# over-long field of a foreign report by its path (a decode error) instead of keeping whatever was sent.
# The sources bound it in UTF-8 bytes (agentctl.evidence.sanitize); a character is at least one byte, so
# the same number as a character bound never refuses what a source wrote.
Summary = Annotated[str, msgspec.Meta(max_length=MAX_SUMMARY_BYTES)]
ShortText = Annotated[str, msgspec.Meta(max_length=MAX_SHORT_TEXT_BYTES)]
Description = Annotated[str, msgspec.Meta(max_length=MAX_DESCRIPTION_BYTES)]
ExitReason = Annotated[str, msgspec.Meta(max_length=MAX_EXIT_REASON_CHARS)]


class Identity(Base, kw_only=True):
    """Who this execution generation is. Minted by the executor and the daemon, never by the agent."""

    task_id: str
    session_id: str
    execution_id: str
    instance_id: str
    agent_id: str
    agent_profile_id: str


class ClientInfo(Base, kw_only=True):
    name: ShortText
    version: ShortText | None = None


class ErrorSummary(Base, kw_only=True):
    """A stable reason code plus a redacted summary of at most MAX_SUMMARY_BYTES."""

    reason_code: str
    summary: Summary = ""


class ToolSummary(Base, kw_only=True):
    """One built-in tool as the agent saw it in tools/list, bounded."""

    name: str
    description: Description = ""
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
    # `CATALOG_HASH_METHOD:<hex>` of the whole list, computed before the bounds: truncation never changes it.
    hash: CatalogHash | None = None


class EndpointTestResult(Base, kw_only=True):
    """Reachability measured by the daemon. Stored beside a row; never changes its status."""

    succeeded: bool
    tested_at: datetime
    reason_code: str | None = None
    summary: Summary = ""
    tool_count: int | None = None
    latency_ms: float | None = None


class EvidenceEvent(Base, kw_only=True):
    """One timestamped observation. `server` None means attempt level (or a report-level diagnostic).

    `agent_reported` is what the agent said about one delivered server (`reported_state`, `raw_state`,
    `report_source`, the server's `tool_count` when the agent listed its tools, a reason and a redacted
    summary): never agentctl's own observation, and nothing else of the agent's output.
    """

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
    summary: Summary | None = None
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
    reported_state: ReportedState | None = None
    raw_state: RawState | None = None
    report_source: ReportSource | None = None
    # The built-in server's tools as the agent lists them for its model (MCP tool names; only that row).
    exposed_tools: list[ToolName] | None = None
    # The witness's observations (a third-party stdio server): who saw it, the server's own name and version
    # from its initialize answer, and for `server_exited` the server's exit code (128+N for signal N).
    observed_by: ObservedBy | None = None
    server_info: ClientInfo | None = None
    exit_code: int | None = None


class AgentReport(Base, kw_only=True):
    """The newest status the agent itself reported for a row (by occurrence time; at one instant a failure
    wins). The agent's claim, normalized and sanitized: kept beside agentctl's evidence, never merged into it."""

    state: ReportedState
    source: ReportSource
    reported_at: datetime
    raw_state: RawState | None = None
    tool_count: int | None = None  # the server's tools in the agent's own list, when it gives one
    reason_code: str | None = None
    summary: Summary | None = None
    exposed_tools: list[ToolName] | None = None  # built-in row only: the tool names the agent exposes


class AgentNotice(Base, kw_only=True):
    """A free-text notice the agent sent about its session (ACP session notices: `session/update` of kind
    `notice`, e.g. "MCP server unavailable"). The agent's words, redacted and bounded like a summary: a weak,
    report-level line that never sets or changes a row's status, even when it names a server."""

    severity: NoticeSeverity
    title: Summary
    description: Summary | None = None
    occurred_at: datetime
    source: ReportSource = "acp:session-notice"
    # The one delivered server the text names as a server (agentctl.agent.attribution's rule), if any.
    server: str | None = None


class ConnectionState(Base, kw_only=True):
    """One legacy connection of a row: its newest contact and its close (None while open, or once a contact
    after the close reopened it). A close seen before any contact has `seen_at` None."""

    connection_id: str
    seen_at: datetime | None = None
    closed_at: datetime | None = None


class ServerRow(Base, kw_only=True):
    """What is known about one MCP server in one attempt. `status` is always the strongest current evidence.

    `connections` tracks each legacy connection on its own. `connection_id` is the newest open one (else the
    newest seen; `connection_seen_at` its newest contact) and `disconnected_at` is set only when every
    connection has closed: a second connection with the same token that opened and closed never makes a row
    read "disconnected" while the agent's own connection is still open. A modern-era contact carries no
    connection; it shows in the contact times and `era`, not here.

    `status_source` says whose evidence `status` rests on: `observed` (agentctl's own) or `reported` (the
    agent's report in `reported`, for a delivered row with no observation of contact or failure). Host
    observation always outranks a report; agentctl.evidence.display shows both when they disagree.
    """

    name: str
    source: Source = "profile"
    transport: Transport | None = None
    target: str | None = None
    status: Status  # required so it is always encoded, even when "configured"
    reason_code: str | None = None
    summary: Summary | None = None
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
    failed_at: datetime | None = None  # the newest attachment failure, current or not (see last_failure)
    disconnected_at: datetime | None = None  # when connection_id closed, once no legacy connection is open
    connections: list[ConnectionState] = []
    endpoint_test: EndpointTestResult | None = None
    catalog: ToolCatalog | None = None
    # The newest attachment failure (reason and redacted summary; its time is failed_at). It is kept as
    # detail after a later contact made it no longer current; `reason_code`/`summary` carry it only while
    # the row is `failed`.
    last_failure: ErrorSummary | None = None
    status_source: StatusSource = "observed"
    reported: AgentReport | None = None
    # The newest tools/list's ToolCatalog.hash, kept when a superseded attempt drops the catalog.
    catalog_hash: CatalogHash | None = None
    # A third-party stdio server agentctl's witness observed: `observed_by`, the server's self-description,
    # and once it exited (mid-session too) when and with which code (128+N for signal N).
    observed_by: ObservedBy | None = None
    server_info: ClientInfo | None = None
    exited_at: datetime | None = None
    exit_code: int | None = None


class RequiredReading(Base, kw_only=True):
    """One required server as the gate read it: a policy result kept beside the row's evidence (`policy`:
    `required, not attached after 30 s`), never evidence and never a row status of its own."""

    name: str
    state: RequiredState
    policy: Summary


class RequiredGate(Base, kw_only=True):
    """The required-server gate's reading of its attempt (the time counts from the attempt's start, so it
    belongs to the attempt, and a superseded attempt keeps the reading it ended with): `open` (the prompt may
    go), `waiting`, `blocked` (a required server failed or was not attached in time: no prompt is sent).
    `judged_at` is when it last changed. Never a red row by itself: absence is still not failure."""

    state: GateState
    timeout: float
    judged_at: datetime
    servers: Annotated[list[RequiredReading], msgspec.Meta(max_length=MAX_REQUIRED_SERVERS)] = []


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
    # When the shown session_error occurred: its event may have left the bounded log, its time must not.
    session_error_at: datetime | None = None
    # The agent's session notices: the first MAX_NOTICES_PER_ATTEMPT, and how many arrived in all.
    notices: list[AgentNotice] = []
    notice_count: int = 0
    # The required-server gate's reading of this attempt, when the spec marks a server required.
    required: RequiredGate | None = None


class McpCapabilities(Base, kw_only=True):
    """What the agent advertised in ACP initialize (agentCapabilities.mcpCapabilities); delivery is planned from
    it. stdio is mandatory for every ACP agent, so it has no flag. Capability is not connection evidence."""

    http: bool = False
    sse: bool = False


class AgentState(Base, kw_only=True):
    """The supervised agent as a report-level fact: who it said it is, and how it ended. No output, no argv."""

    protocol: Literal["acp", "passthrough"]
    state: Literal["starting", "running", "exited"]
    name: ShortText | None = None
    version: ShortText | None = None
    protocol_version: int | None = None
    mcp_capabilities: McpCapabilities | None = None
    started_at: datetime | None = None
    exited_at: datetime | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    exit_reason: ExitReason | None = None
    stopped_by_daemon: bool = False
    stdout_skipped_lines: int = 0
    permission_requests: int = 0
    permissions_granted: int = 0
    # The reason code when the agent never got through its start (spawn, ACP initialize, passthrough
    # configuration): e.g. `agent_exited_before_initialize`. It then declared nothing about MCP transports.
    start_failure: str | None = None
    # A passthrough CLI's own report of its MCP servers: the provider contract its output is read for
    # (`claude:stream-json-init`), or, when none is available, `report_note` says so plainly.
    report_source: ReportSource | None = None
    report_note: Summary | None = None
    # ACP extension notifications (methods starting with `_`) of no shape agentctl reads: counted, never kept.
    unknown_ext_notifications: int = 0
    # A passthrough CLI on a pseudo-terminal the daemon owns (`[agent] terminal = true`): its screen can be
    # attached to, and an upstream may ask for its recent screen (`terminal_read`).
    terminal: bool = False
    # ACP `authenticate` (`[agent] auth_method`, or the advertised method whose credential variable is set in
    # the agent's environment): the method id sent (never a credential), and how the agent answered it:
    # `accepted`, `rejected` (`auth_note` says why), or `not_advertised` (the spec named a method the agent
    # did not advertise; nothing was sent).
    auth_method: str | None = None
    auth_result: Literal["accepted", "rejected", "not_advertised"] | None = None
    auth_note: Summary | None = None
    # ACP session notices that named no session agentctl opened or was opening (no id, an unknown one, or one
    # a refused session/new never confirmed): counted, never kept (agentctl/agent/acp.py says the rule).
    notices_dropped: int = 0


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


def history_schema() -> dict[str, Any]:
    """JSON Schema of the report contract (what `agentctl schema` prints and docs/ commits)."""
    return msgspec.json.schema(AttachmentHistory)


class _Versioned(msgspec.Struct):
    version: Any = None


class UnreadableVersion(msgspec.ValidationError):
    """A report of a contract version this release does not read (a newer agentctl wrote it)."""


def decode_history(data: bytes | str) -> AttachmentHistory:
    """A report of any READABLE_CONTRACT_VERSIONS. A newer one is refused by its version first: its new
    fields would otherwise read as a confusing "unknown field" error."""
    try:
        version = msgspec.json.decode(data, type=_Versioned).version
    except (msgspec.DecodeError, msgspec.ValidationError):
        version = None  # not a JSON object: the typed decode below says what is wrong
    if isinstance(version, int) and not isinstance(version, bool) and version not in READABLE_CONTRACT_VERSIONS:
        shown = version if abs(version) < 2**31 else "unknown"
        raise UnreadableVersion(
            f"contract version {shown}; this agentctl reads versions "
            f"{', '.join(map(str, READABLE_CONTRACT_VERSIONS))}"
        )
    return msgspec.json.decode(data, type=AttachmentHistory)
