"""The diagnostics surface: `agentctl diagnostics`, `tools` and how a row reads (views derived, never stored)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from agentctl.evidence.contract.base import Base, surface_schema
from agentctl.evidence.contract.control import UpstreamStatus
from agentctl.evidence.contract.report import (
    AgentNotice,
    AgentState,
    AttemptOrigin,
    EndpointTestResult,
    ErrorSummary,
    Identity,
    RefusalCount,
    ReportedState,
    Source,
    Status,
    StatusSource,
    ToolCatalog,
    ToolSummary,
    Transport,
)


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


def schema() -> dict[str, Any]:
    """JSON Schema of this surface's types (`agentctl schema diagnostics`; `make schema` writes docs/diagnostics.schema.json)."""
    return surface_schema("agentctl diagnostics, tools and row views", globals(), __name__)
