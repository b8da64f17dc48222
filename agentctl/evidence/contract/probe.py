"""The developer probe's findings (`agentctl probe mcp|passthrough --json`, and its --jsonl file)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from agentctl.evidence.contract.base import Base, surface_schema
from agentctl.evidence.contract.report import (
    AgentState,
    ClientInfo,
    Era,
    ErrorSummary,
    RawState,
    ReportedState,
    ReportSource,
    ToolOutcome,
    Transport,
)


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


def schema() -> dict[str, Any]:
    """JSON Schema of this surface's types (`agentctl schema probe`; `make schema` writes docs/probe.schema.json)."""
    title = "agentctl probe findings (probe mcp|passthrough --json, and the --jsonl file)"
    return surface_schema(title, globals(), __name__)
