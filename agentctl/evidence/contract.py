"""The one versioned report contract: every shape the daemon persists, sends upstream or prints with --json.

Nothing else in agentctl defines a second shape for the same data. Adding a field with a default is a
compatible change for this release's readers; removing or renaming one, or adding a value to a Literal
(older decoders refuse unknown fields and values), bumps CONTRACT_VERSION.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

# 2 added agent-reported evidence (kind `agent_reported`, ServerRow.reported and status_source), the
# built-in catalog's hash (ToolCatalog.hash, ServerRow.catalog_hash) and the agent's session notices
# (Attempt.notices and notice_count, AttemptDiagnostics likewise), each legacy connection's own state
# (ServerRow.connections), ACP authentication (AgentState.auth_method, auth_result, auth_note) and dropped
# session notices (AgentState.notices_dropped).
CONTRACT_VERSION = 2
# Every version this release reads. A version-1 report is a subset of version 2 (nothing was removed or
# renamed), so it decodes with these types as it is; a newer version is refused by name, never guessed at.
READABLE_CONTRACT_VERSIONS: tuple[int, ...] = (1, 2)

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
ToolOutcome = Literal["ok", "error"]
# Who observed a third-party server's contact: agentctl's stdio witness (agentctl/agent/mcp_witness.py), the
# process the agent spawns in the server's place. Contact on the built-in row is always the endpoint's own.
ObservedBy = Literal["witness"]

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

# The report's bounds (docs/design.md, "Release-safe report"). They live here because they are part of the
# contract: a consumer may rely on them.
MAX_ATTEMPTS = 3
MAX_EVENTS_PER_ATTEMPT = 64
MAX_SUMMARY_BYTES = 256
MAX_CATALOG_TOOLS = 128
MAX_CONNECTIONS_PER_ROW = 8  # legacy connections tracked per row: every open one first, then the newest closed
MAX_NOTICES_PER_ATTEMPT = 8  # the first ones are kept (a flood cannot push them out); Attempt.notice_count counts all
MAX_DESCRIPTION_BYTES = 1024
MAX_SCHEMA_BYTES = 64 * 1024
MAX_CATALOG_SCHEMA_BYTES = 512 * 1024
TOKEN_ESTIMATE_METHOD = "o200k_base:mcp-tool-json-v1"
# sha256 over the canonical JSON of the whole tool list (before any bound above): equal hashes mean the
# same names, descriptions and input schemas. agentctl.evidence.catalog.catalog_hash says exactly how.
CATALOG_HASH_METHOD = "sha256:mcp-tools-v1"


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
    # `CATALOG_HASH_METHOD:<hex>` of the whole list, computed before the bounds: truncation never changes it.
    hash: CatalogHash | None = None


class EndpointTestResult(Base, kw_only=True):
    """Reachability measured by the daemon. Stored beside a row; never changes its status."""

    succeeded: bool
    tested_at: datetime
    reason_code: str | None = None
    summary: str = ""
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
    summary: str | None = None
    exposed_tools: list[ToolName] | None = None  # built-in row only: the tool names the agent exposes


class AgentNotice(Base, kw_only=True):
    """A free-text notice the agent sent about its session (ACP session notices: `session/update` of kind
    `notice`, e.g. "MCP server unavailable"). The agent's words, redacted and bounded like a summary: a weak,
    report-level line that never sets or changes a row's status, even when it names a server."""

    severity: NoticeSeverity
    title: str
    description: str | None = None
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


class McpCapabilities(Base, kw_only=True):
    """What the agent advertised in ACP initialize (agentCapabilities.mcpCapabilities); delivery is planned from
    it. stdio is mandatory for every ACP agent, so it has no flag. Capability is not connection evidence."""

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
    # The reason code when the agent never got through its start (spawn, ACP initialize, passthrough
    # configuration): e.g. `agent_exited_before_initialize`. It then declared nothing about MCP transports.
    start_failure: str | None = None
    # A passthrough CLI's own report of its MCP servers: the provider contract its output is read for
    # (`claude:stream-json-init`), or, when none is available, `report_note` says so plainly.
    report_source: ReportSource | None = None
    report_note: str | None = None
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
    auth_note: str | None = None
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


class StatusResponse(msgspec.Struct, kw_only=True):
    """`agentctl status --json` and GET /v1/status. Every field is always encoded (null when unknown)."""

    identity: Identity
    ready: bool
    checks: dict[str, bool]
    current: Attempt | None
    report_path: str | None
    mcp_url: str | None
    rejected_events: int
    upstream: UpstreamStatus | None = None  # null when the spec has no [upstream]
    agent: AgentState | None = None  # null without an [agent]; says when the agent has exited and how
    # Components that work but not fully, by check name, with a reason code (e.g. persistence:
    # `report_write_failed`). Degraded is visible, not unready: the daemon keeps serving MCP.
    degraded: dict[str, str] = {}
    # The required-server gate (as GET /v1/attached answers it), when the spec marks a server required.
    required: AttachedGate | None = None


class CheckState(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One readiness check: whether it holds, and a short value-free detail (`exited: killed by SIGKILL`)."""

    ok: bool
    detail: str | None = None


class AgentReadiness(msgspec.Struct, kw_only=True, omit_defaults=True):
    """How the agent stands, as codes and numbers only: nothing it said (its name, version and the summary of a
    start failure stay on the control socket), since the loopback probe answers without a credential."""

    state: Literal["starting", "running", "exited"]
    start_failure: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    stopped_by_daemon: bool | None = None  # set once the agent has exited


RequiredState = Literal["attached", "waiting", "failed", "not_attached"]
GateState = Literal["open", "waiting", "blocked"]


class RequiredServer(Base, kw_only=True):
    """One required server as the gate judged it: a policy result beside the evidence, never evidence itself.
    `evidence` is what the row rests on in words (`delivered · connection unverified for 30 s`, `failed ·
    reported by codex-acp: ...`); `policy` the gate's reading of it (`required, not attached after 30 s`)."""

    name: str
    source: Source = "profile"
    state: RequiredState
    evidence: str
    policy: str


class AttachedGate(Base, kw_only=True):
    """Whether every required server is attached (agentctl/evidence/required.py decides): `open` (the prompt
    may go), `waiting` (within `timeout` seconds of the attempt's start), `blocked` (a required server failed,
    or was not attached in time: no prompt is sent). The same answer for `run --prompt`, `wait --attached`,
    GET /v1/attached and `/readyz?verbose`."""

    state: GateState
    timeout: float
    waited: float | None = None  # seconds since the current attempt started (None: no attempt yet)
    attempt_id: str | None = None
    servers: list[RequiredServer] = []


class HealthResponse(msgspec.Struct, kw_only=True):
    """Readiness, one shape wherever it is asked: GET /v1/health (`agentctl health --json`) and `/readyz?verbose`.

    `live` is true whenever the daemon answers. `ready` holds while every check is ok and no stop was requested;
    a failing check's detail says why (the agent's end once it has exited, the upstream's state). Degraded
    components (check name -> reason code) are visible and never make the daemon unready.
    """

    live: bool
    ready: bool
    stopping: bool
    checks: dict[str, CheckState]
    degraded: dict[str, str] = {}  # as in StatusResponse
    agent: AgentReadiness | None = None  # null without an [agent]
    # The required-server gate, when the spec marks a server required: its state and times only (no server
    # names, no evidence words: the loopback probe answers without a credential; `wait --attached` and
    # GET /v1/attached name them). Never part of `ready`: a server that is not attached is a policy result for
    # the executor to act on, not the daemon's health.
    required: AttachedGate | None = None


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


class TerminalView(msgspec.Struct, kw_only=True):
    """The on-demand recent screen of the agent's terminal (an upstream's `terminal_read`). May contain
    sensitive data (it is what the agent's screen showed); never stored, logged or cached.

    `screen` is the tail of what the agent printed, bytes as the terminal got them (escape sequences
    included; base64 in JSON), at most MAX_TERMINAL_BYTES; replaying it on a `rows` x `cols` terminal shows
    the recent screen. `terminal` says whether the agent runs on a terminal at all, `open` whether that
    terminal is still open (a closed one's last screen is still shown). `truncated`: older output was cut.
    """

    warning: str
    agent_state: str | None
    terminal: bool
    open: bool
    rows: int
    cols: int
    screen: bytes
    truncated: bool
    total_bytes_seen: int


class EndpointTestResponse(msgspec.Struct, kw_only=True):
    """`agentctl test-endpoint NAME --json` and POST /v1/test-endpoint: one reachability test by stored name.

    `stored` says whether the result was kept beside the row of `attempt_id` (false when there is no
    current attempt yet). Reachability from the daemon is not attachment: the row's status is unchanged.
    """

    name: str
    attempt_id: str | None
    stored: bool
    result: EndpointTestResult


class ControlError(msgspec.Struct, kw_only=True):
    """Every refusal of the control API and of the hub page's API (HTTP status >= 400), and what the CLI reports
    for one: one line for a person (never a value the caller sent), a stable reason code
    (agentctl.evidence.reasons) and the HTTP status it came with."""

    error: str
    reason_code: str
    status: int


class PromptStreamItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One NDJSON line of POST /v1/prompt, as `agentctl prompt --json` prints it: the agent's updates as they
    arrive (`type` is ACP's session_update kind: agent_message_chunk, tool_call, ...), then one final `done`
    (with the stop reason) or `error` (reason code and redacted summary). It carries the agent's own words: it
    goes to the caller only, never to a log, a file or upstream."""

    type: str
    text: str | None = None  # agent_message_chunk, agent_thought_chunk
    title: str | None = None  # tool_call, tool_call_update
    status: str | None = None  # tool_call, tool_call_update
    stop_reason: str | None = None  # done
    reason_code: str | None = None  # error
    summary: str | None = None  # error
    dropped_updates: int = 0  # done, error: updates dropped because the reader was too slow


class StopResult(msgspec.Struct, kw_only=True):
    """`agentctl stop --json` and POST /v1/stop (202): the daemon drains, then exits."""

    stopping: bool


DaemonState = Literal["ready", "not_ready", "starting", "dead", "not_yours", "unresponsive"]


class DaemonEntry(msgspec.Struct, kw_only=True):
    """One daemon of `agentctl ls`: its socket and what it answered. Only a daemon that answered (`ready`,
    `not_ready`) has an identity; `dead` (nobody listens), `starting` (bound a moment ago, not listening yet),
    `not_yours` (another user's: not asked) and `unresponsive` (no sensible answer in time) have none."""

    socket: str
    state: DaemonState
    pid: int | None = None  # the process serving the socket (SO_PEERCRED), when it was reached
    execution_id: str | None = None
    task_id: str | None = None
    session_id: str | None = None
    acp_session_id: str | None = None  # the current attempt's agent session, once accepted
    agent_id: str | None = None
    agent: str | None = None  # the name the agent gave itself (ACP initialize), when it did
    agent_state: str | None = None  # starting, running or exited; null without an agent


class DaemonListing(msgspec.Struct, kw_only=True):
    """`agentctl ls --json` (alias `ps`): the daemons under the runtime dir, plus $AGENTCTL_SOCKET's."""

    runtime_dir: str
    daemons: list[DaemonEntry] = []


class CancelResult(msgspec.Struct, kw_only=True):
    """`agentctl cancel --json` and POST /v1/cancel: session/cancel was sent to the agent."""

    cancelled: bool


class ProfileResult(msgspec.Struct, kw_only=True):
    """`agentctl mcp profile NAME --json` and POST /v1/mcp/profile: the built-in server's tool profile now."""

    profile: str
    tool_count: int


class DaemonReady(msgspec.Struct, kw_only=True, tag_field="event", tag="ready"):
    """The one JSON line `agentctl serve` prints on stdout once the daemon is ready (`"event": "ready"`)."""

    control_socket: str
    mcp_url: str | None
    instance_id: str
    execution_id: str
    pid: int


class HubReady(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="event", tag="ready"):
    """The one JSON line `agentctl hub serve` prints on stdout once the hub is ready (`"event": "ready"`)."""

    socket: str
    db: str
    tasks_db: str
    pid: int
    http: str | None = None  # with --http: the status page's address
    # That address with a new token in its fragment (`#token=...`; a browser never sends a fragment): SECRET.
    page: str | None = None
    token_file: str | None = None  # with --token-file: where the page's token is kept


ChecklistStepName = Literal[
    "configured",
    "filtered",
    "unavailable",
    "delivered",
    "session_accepted",
    "initialize",
    "tools_loaded",
    "used",
    "disconnected",
    "failed",
]


class RowView(Base, kw_only=True):
    """How one server row reads on every surface (agentctl.evidence.display.row_view): the display state,
    its label, and whose evidence it rests on. Never stored: derived from the row each time.

    `observed` is agentctl's own evidence alone; `sources` lists every source that said something about
    the row, the one the state rests on first (`agentctl`, or a report source such as
    `claude:stream-json-init`). `report` is the agent's report in words; `disagreement` says when the
    agent's report and agentctl's observation contradict each other (both are shown, neither is hidden).
    """

    state: Status
    label: str
    observed: Status
    status_source: StatusSource = "observed"
    sources: list[str] = []
    reporter: str | None = None  # the agent that reported, by name ("Claude Code")
    reported: ReportedState | None = None
    reported_tool_count: int | None = None  # the server's tools in the agent's own list, when it gave one
    report: str | None = None
    disagreement: str | None = None
    # The built-in server's tools the agent does not expose to its model although the endpoint served them
    # ("the agent exposes 3 of 10 kandev tools; 7 missing: ..."), with its reason code; None when equal.
    exposure_gap: str | None = None
    exposure_reason: str | None = None


class ChecklistStep(Base, kw_only=True):
    """One step of a server's attachment checklist: observed or not, when, and a short value-free detail."""

    step: ChecklistStepName
    done: bool
    at: datetime | None = None
    detail: str | None = None


class ServerDiagnostics(Base, kw_only=True):
    """One server row of one attempt as a checklist. `endpoint_test` is reachability, never attachment."""

    name: str
    source: Source = "profile"
    transport: Transport | None = None
    target: str | None = None
    status: Status
    reason_code: str | None = None
    summary: str | None = None
    steps: list[ChecklistStep] = []
    tool_count: int | None = None
    tool_calls: int = 0
    tool_errors: int = 0
    catalog_truncated: bool = False
    endpoint_test: EndpointTestResult | None = None
    # How the row reads (its label, whose evidence, the agent's report beside agentctl's observation).
    view: RowView | None = None


class AttemptDiagnostics(Base, kw_only=True):
    attempt_id: str
    origin: AttemptOrigin = "manual"
    acp_session_id: str | None = None
    started_at: datetime
    accepted_at: datetime | None = None
    superseded_at: datetime | None = None
    session_error: ErrorSummary | None = None
    dropped_events: int = 0
    servers: list[ServerDiagnostics] = []
    notices: list[AgentNotice] = []  # the agent's session notices (its words, redacted; never a row status)
    notice_count: int = 0


class Diagnostics(Base, kw_only=True):
    """`agentctl diagnostics --json` and GET /v1/diagnostics: a report a person can paste into a bug.

    Built only from sanitized evidence: no agent output, prompt, argument, header or env value, token or
    full URL. Previous attempts are newest first.
    """

    contract_version: int
    daemon_version: str
    generated_at: datetime
    identity: Identity
    ready: bool  # required so it is always encoded, even when false
    checks: dict[str, bool] = {}
    current: AttemptDiagnostics | None = None
    previous: list[AttemptDiagnostics] = []
    http_refusals: list[RefusalCount] = []
    rejected_events: int = 0
    agent: AgentState | None = None
    upstream: UpstreamStatus | None = None  # absent when the spec has no [upstream]
    degraded: dict[str, str] = {}  # as in StatusResponse: check name -> reason code


class ToolsView(Base, kw_only=True):
    """`agentctl tools --json` and GET /v1/tools: the built-in server's catalog in the current attempt.

    `loaded` is false until the agent's tools/list was observed. `third_party` names the servers agentctl
    has no catalog for (they connect directly to the agent).
    """

    server: str
    attempt_id: str | None = None
    loaded: bool  # required so it is always encoded, even when false
    status: Status | None = None
    tool_count: int | None = None
    catalog: ToolCatalog | None = None
    third_party: list[str] = []


class ToolDetail(Base, kw_only=True):
    """`agentctl tools NAME --json` and GET /v1/tools/{name}: one built-in tool as the agent saw it."""

    server: str
    attempt_id: str
    estimator: str | None = None
    tool: ToolSummary


def history_schema() -> dict[str, Any]:
    """JSON Schema of the report contract (what `agentctl schema` prints and docs/ commits)."""
    return msgspec.json.schema(AttachmentHistory)


_encoder = msgspec.json.Encoder()


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


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


# ---- the developer probe (`agentctl probe mcp`) -----------------------------------------------------

ProbeContactKind = Literal["contact", "initialize", "tools_list", "tool_call", "closed"]


class ProbeContact(Base, kw_only=True):
    """One thing the probe's sentinel MCP server saw. Never arguments, results, headers or env values.

    `contact` is the first HTTP request of a connection (any route, refused or not) or a stdio sentinel
    process starting; `closed` is a legacy connection ending. `credential_seen` says whether the header
    (http/sse) or env value (stdio) delivered with the sentinel reached it on this request.
    """

    kind: ProbeContactKind
    at: datetime
    elapsed_s: float  # seconds since the probe started
    transport: Transport
    era: Era | None = None
    connection_id: str | None = None  # opaque, minted by the probe
    protocol_version: str | None = None
    requested_protocol_version: str | None = None
    client: ClientInfo | None = None
    tool_count: int | None = None
    tool_name: str | None = None
    outcome: ToolOutcome | None = None
    credential_seen: bool | None = None
    http_route: str | None = None
    http_status: int | None = None


class ProbeSession(Base, kw_only=True):
    """The sentinel's delivery in ACP session/new and the agent's answer (accepted None: no answer)."""

    server_name: str
    transport: Transport
    target: str
    delivered_at: datetime
    delivered_elapsed_s: float
    accepted: bool | None = None
    answered_at: datetime | None = None
    answered_elapsed_s: float | None = None
    acp_session_id: str | None = None
    error: ErrorSummary | None = None


class ProbePrompt(Base, kw_only=True):
    """The probe's prompt: whether it was sent and how it ended. Never its text or the agent's answer."""

    sent_at: datetime
    sent_elapsed_s: float
    default_text: bool
    finished_at: datetime | None = None
    finished_elapsed_s: float | None = None
    stop_reason: str | None = None
    error: ErrorSummary | None = None


class ProbeFindings(Base, kw_only=True):
    """What every probe reports: its window, whether it ran, the agent, and what its sentinel observed."""

    version: int
    started_at: datetime
    finished_at: datetime
    timeout_s: float
    ran: bool
    error: ErrorSummary | None = None
    agent: AgentState | None = None
    first_contact: ProbeContact | None = None
    initialize: ProbeContact | None = None
    tools_list: ProbeContact | None = None
    tool_call: ProbeContact | None = None
    contacts: list[ProbeContact] = []
    contacts_dropped: int = 0


class ProbeReport(ProbeFindings, kw_only=True):
    """`agentctl probe mcp --json`: the probe's findings, kept separate, each with its time.

    No finding is a failure of the agent: `unobserved` says the sentinel was not contacted within the
    window. `ran` false (with `error`) means the probe itself could not run.
    """

    advertised_at: datetime | None = None
    advertised_elapsed_s: float | None = None
    session: ProbeSession | None = None
    prompt: ProbePrompt | None = None
    unobserved: str | None = None
    raw_frames_recorded: bool = False


class ProbeConfiguration(Base, kw_only=True):
    """What `probe passthrough`'s strategy wrote for the sentinel: never a value, only what and where.

    `delivered` false (with `filtered`) says the strategy left the sentinel out, and why. `workspace_files`
    are the merged workspace files, relative to the workdir; `restored` says each is back byte for byte (or
    gone again, when the probe created it) after the CLI ended.
    """

    strategy: str
    server_name: str
    written_at: datetime | None = None
    written_elapsed_s: float | None = None
    delivered: bool = False
    transport: Transport | None = None
    filtered: ErrorSummary | None = None
    temporary_files: int = 0
    workspace_files: list[str] = []
    restored: bool | None = None


class ProbeAgentReport(Base, kw_only=True):
    """What the CLI itself reported about the sentinel (`state` None: nothing), or why no report exists."""

    source: ReportSource | None = None
    note: str | None = None
    state: ReportedState | None = None
    raw_state: RawState | None = None
    tool_count: int | None = None
    at: datetime | None = None
    elapsed_s: float | None = None


class ProbePassthroughReport(ProbeFindings, kw_only=True):
    """`agentctl probe passthrough --json`: configuration written, initialize, tools/list, tool use and the
    agent's own report, kept separate, each with its time. `ran` false (with `error`): the probe could not run."""

    configuration: ProbeConfiguration | None = None
    agent_report: ProbeAgentReport | None = None
    timed_out: bool = False  # the CLI was still running at the end of the window and was stopped


class ProbeJsonlLine(Base, kw_only=True):
    """One line of the probe's --jsonl file: a raw ACP frame, a sentinel contact, or a probe step.

    The only shape in agentctl that carries raw frames; written only when the developer asks for it.
    """

    type: Literal["acp", "sentinel", "probe"]
    at: datetime
    elapsed_s: float
    direction: Literal["to_agent", "from_agent"] | None = None
    frame: dict[str, Any] | None = None
    contact: ProbeContact | None = None
    step: str | None = None
    detail: dict[str, Any] | None = None


# ---- upstream and the reference hub (`agentctl hub`) -------------------------------------------------


class UpstreamStatus(msgspec.Struct, kw_only=True):
    """The daemon's upstream publisher as `agentctl status --json` shows it. Counters since the daemon started.

    `connected` from the moment hello is written (a snapshot follows at once), else `buffering`: evidence
    stays in the live report and the next connection's snapshot carries it. `superseded` while the upstream
    rejects this daemon's frames because a newer execution of the session, or a newer instance of this
    execution, said hello (`superseded_reason` is the upstream's code: `stale_execution` or
    `stale_instance`): the connection is up but nothing this daemon sends is taken. An outage never flips
    readiness.
    """

    state: Literal["connected", "buffering", "superseded"]
    connects: int = 0
    dropped_events: int = 0  # evidence frames dropped on overflow; the resync snapshot repaired the gap
    resyncs: int = 0  # snapshots sent because frames were dropped
    buffered_bytes: int = 0  # held for the upstream now: queued frames plus the socket's send buffer
    last_connected_at: datetime | None = None
    last_error: str | None = None  # reason code of the last failed connect or disconnect
    superseded_reason: str | None = None  # with state `superseded`: stale_execution | stale_instance
    superseded_at: datetime | None = None


class HubExecution(Base, kw_only=True):
    """One execution of a session as the hub knows it (`agentctl hub report --json`)."""

    execution_id: str
    instance_id: str
    agent_id: str
    agent_profile_id: str
    daemon_version: str
    current: bool  # the newest execution of the session that said hello
    connected: bool  # as last recorded by the hub
    first_hello_at: datetime
    last_contact_at: datetime
    rejected_frames: int = 0  # frames refused because a newer execution of the session said hello


class HubSession(Base, kw_only=True):
    """One session in `agentctl hub status --json`: its current execution and that execution's current attempt.

    `current_attempt` is listed without its evidence log and catalog (`agentctl hub report` has them).
    """

    task_id: str
    session_id: str
    current_execution_id: str
    connected: bool
    last_contact_at: datetime
    executions: int = 1
    stale_rejected: int = 0  # frames from older executions of this session, rejected
    current_attempt: Attempt | None = None
    agent: AgentState | None = None


class HubDatabase(Base, kw_only=True):
    """The hub database's footprint: what retention keeps (sizing: docs/design.md)."""

    size_bytes: int  # SQLite: the file and its write-ahead log; PostgreSQL: the hub's tables with their indexes
    oldest_contact_at: datetime | None = None  # the oldest last contact of a session kept; null: no session


class HubStatus(Base, kw_only=True):
    """`agentctl hub status --json`: every session the hub has heard of, most recent contact first."""

    version: int
    # Required, so an empty hub still prints `"sessions": []` (a default would be omitted).
    sessions: list[HubSession]
    database: HubDatabase | None = None  # `hub status` reads it from the database; null where not measured


class HubSessionReport(Base, kw_only=True):
    """`agentctl hub report SESSION_ID --json`: the session, its executions (newest first) and one history."""

    version: int
    session: HubSession
    executions: list[HubExecution] = []
    history: AttachmentHistory | None = None  # the current execution's, unless another was asked for


class MigrationStep(Base, kw_only=True):
    version: int
    description: str


class HubMigration(Base, kw_only=True):
    """`agentctl hub migrate --json`: the schema version found, the one left, and the steps applied between.

    `database` is the location as displayed: a path, or a connection string with its secrets as `***`.
    `adopted`: the database was written before versioned migrations and recorded as `schema_to` as it was.
    """

    version: int
    database: str
    engine: Literal["sqlite", "postgresql"]
    schema_from: int
    schema_to: int
    schema_latest: int
    # Required, so `--json` always has them (a default would be omitted): `"applied": []` when up to date.
    adopted: bool
    applied: list[MigrationStep]
