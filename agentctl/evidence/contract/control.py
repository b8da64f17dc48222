"""The control API's answers: what the daemon's control socket returns and its commands print with --json."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from agentctl.evidence.contract.base import Base, surface_schema
from agentctl.evidence.contract.report import (
    AgentState,
    Attempt,
    EndpointTestResult,
    GateState,
    Identity,
    RequiredState,
    Source,
)


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


def schema() -> dict[str, Any]:
    """JSON Schema of this surface's types (`agentctl schema control`; `make schema` writes docs/control.schema.json)."""
    title = "agentctl control API answers (the control socket, and --json of the daemon's commands)"
    return surface_schema(title, globals(), __name__)
