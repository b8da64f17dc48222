"""The copyable diagnostics report and the tools views, built from the daemon's sanitized evidence only.

Everything here reads the ledger's history (already bounded and redacted by its producers) and adds no
new source of data: no agent output, no spec values, no tokens, no full URLs. As a second line of
defence every free-text summary is passed through `redact` with the spec's secret values once more.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

import msgspec

from agentctl import __version__
from agentctl.evidence.contract.control import UpstreamStatus
from agentctl.evidence.contract.diagnostics import (
    AttemptDiagnostics,
    Diagnostics,
    ServerDiagnostics,
    ToolDetail,
    ToolsView,
)
from agentctl.evidence.contract.report import (
    CONTRACT_VERSION,
    AgentState,
    AttachmentHistory,
    Attempt,
    ErrorSummary,
    ServerRow,
)
from agentctl.evidence.sanitize import redact
from agentctl.present.checklist import checklist
from agentctl.present.rows import row_view

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.context import DaemonContext


def _scrub(text: str | None, secrets: Iterable[str]) -> str | None:
    return redact(text, secrets) if text else text


def server_diagnostics(row: ServerRow, attempt: Attempt, secrets: Iterable[str]) -> ServerDiagnostics:
    steps = checklist(row, attempt)
    for step in steps:
        step.detail = _scrub(step.detail, secrets)
    test = row.endpoint_test
    if test is not None and test.summary:
        test = msgspec.structs.replace(test, summary=_scrub(test.summary, secrets) or "")
    catalog = row.catalog
    return ServerDiagnostics(
        name=row.name,
        source=row.source,
        transport=row.transport,
        target=row.target,
        status=row.status,
        reason_code=row.reason_code,
        summary=_scrub(row.summary, secrets),
        steps=steps,
        tool_count=row.tool_count,
        tool_calls=row.tool_calls,
        tool_errors=row.tool_errors,
        catalog_truncated=bool(catalog and (catalog.truncated or catalog.schemas_truncated)),
        endpoint_test=test,
        view=row_view(row),
    )


def attempt_diagnostics(attempt: Attempt, secrets: Iterable[str]) -> AttemptDiagnostics:
    error = attempt.session_error
    if error is not None and error.summary:
        error = ErrorSummary(reason_code=error.reason_code, summary=_scrub(error.summary, secrets) or "")
    return AttemptDiagnostics(
        attempt_id=attempt.attempt_id,
        origin=attempt.origin,
        acp_session_id=attempt.acp_session_id,
        started_at=attempt.started_at,
        accepted_at=attempt.accepted_at,
        superseded_at=attempt.superseded_at,
        session_error=error,
        dropped_events=attempt.dropped_events,
        servers=[server_diagnostics(row, attempt, secrets) for row in attempt.servers],
        notices=[msgspec.structs.replace(n, title=_scrub(n.title, secrets) or "",
                                         description=_scrub(n.description, secrets)) for n in attempt.notices],
        notice_count=attempt.notice_count,
    )


def upstream_status(ctx: DaemonContext) -> UpstreamStatus | None:
    """The upstream publisher's own status (connected or buffering, counters), when the spec names one."""
    upstream = ctx.upstream
    if upstream is None:
        return None
    status = upstream.status()
    if status.last_error:
        status = msgspec.structs.replace(status, last_error=redact(status.last_error, _secrets(ctx)))
    return status


def _secrets(ctx: DaemonContext) -> Iterable[str]:
    return ctx.ledger.secrets


def build_diagnostics(ctx: DaemonContext) -> Diagnostics:
    history = ctx.ledger.history
    secrets = _secrets(ctx)
    return Diagnostics(
        contract_version=CONTRACT_VERSION,
        daemon_version=__version__,
        generated_at=ctx.ledger.now(),
        identity=history.identity,
        ready=ctx.readiness.ready,
        checks=dict(ctx.readiness.checks),
        current=attempt_diagnostics(history.current, secrets) if history.current else None,
        previous=[attempt_diagnostics(a, secrets) for a in history.previous],
        http_refusals=list(history.http_refusals),
        rejected_events=history.rejected_events,
        agent=_agent(history.agent, secrets),
        upstream=upstream_status(ctx),
        degraded=dict(ctx.readiness.degraded),
    )


def persisted_diagnostics(history: AttachmentHistory, now: datetime) -> Diagnostics:
    """The diagnostics of a persisted report, once its daemon is gone (`diagnostics --state-dir`): the same
    attempts, checklists and agent exit. What only a running daemon knows (its readiness, its upstream link,
    its version) is not in the report, and is left out. The report was redacted when it was written."""
    return Diagnostics(
        contract_version=history.version,
        daemon_version="?",
        generated_at=now,
        identity=history.identity,
        ready=False,
        current=attempt_diagnostics(history.current, ()) if history.current else None,
        previous=[attempt_diagnostics(a, ()) for a in history.previous],
        http_refusals=list(history.http_refusals),
        rejected_events=history.rejected_events,
        agent=history.agent,
    )


def _agent(agent: AgentState | None, secrets: Iterable[str]) -> AgentState | None:
    if agent is None or not agent.exit_reason:
        return agent
    return msgspec.structs.replace(agent, exit_reason=_scrub(agent.exit_reason, secrets))


# ---- tools views ------------------------------------------------------------------------------------------


def _builtin_row(ctx: DaemonContext) -> tuple[Attempt | None, ServerRow | None]:
    attempt = ctx.ledger.history.current
    if attempt is None:
        return None, None
    name = ctx.spec.mcp.builtin_name
    return attempt, next((row for row in attempt.servers if row.name == name), None)


def _third_party(ctx: DaemonContext, attempt: Attempt | None) -> list[str]:
    builtin = ctx.spec.mcp.builtin_name
    if attempt is not None:
        return [row.name for row in attempt.servers if row.name != builtin]
    return [server.name for server in ctx.spec.mcp.servers]


def build_tools_view(ctx: DaemonContext) -> ToolsView:
    attempt, row = _builtin_row(ctx)
    loaded = row is not None and row.tools_list_observed_at is not None
    return ToolsView(
        server=ctx.spec.mcp.builtin_name,
        attempt_id=attempt.attempt_id if attempt else None,
        status=row.status if row else None,
        loaded=loaded,
        tool_count=row.tool_count if loaded and row is not None else None,
        catalog=row.catalog if loaded and row is not None else None,
        third_party=_third_party(ctx, attempt),
    )


class ToolLookupError(Exception):
    """`tools NAME` cannot answer: why, in one line, and its reason code (`third_party_server` for the name of
    a server agentctl has no catalog for)."""

    def __init__(self, reason_code: str, message: str) -> None:
        super().__init__(message)
        self.reason_code = reason_code
        self.message = message

    @property
    def third_party(self) -> bool:
        return self.reason_code == "third_party_server"


THIRD_PARTY_NOTE = (
    "third-party servers connect directly to the agent; agentctl never sees their tools/list, "
    "so it has no catalog for them"
)


def find_tool(ctx: DaemonContext, name: str) -> ToolDetail:
    view = build_tools_view(ctx)
    if name in view.third_party:
        raise ToolLookupError("third_party_server", f"{name!r} is a third-party server: {THIRD_PARTY_NOTE}")
    if view.attempt_id is None:
        raise ToolLookupError("no_attempt", "no attachment attempt yet: open a session first")
    if not view.loaded or view.catalog is None:
        raise ToolLookupError(
            "catalog_not_loaded",
            f"catalog not loaded yet: the agent has not listed the {view.server} tools in this attempt",
        )
    for tool in view.catalog.tools:
        if tool.name == name:
            return ToolDetail(
                server=view.server, attempt_id=view.attempt_id, estimator=view.catalog.estimator, tool=tool
            )
    known = ", ".join(t.name for t in view.catalog.tools) or "none"
    extra = " (the catalog was truncated: a tool past the bound is not kept)" if view.catalog.truncated else ""
    raise ToolLookupError("unknown_tool", f"no tool named {name!r} in the {view.server} catalog{extra}; known: {known}")
