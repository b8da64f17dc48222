"""OpenCode's server mode (`opencode serve`): `GET /mcp` answers each configured MCP server's status.

The answer is one JSON object keyed by server name, `{"NAME": {"status": S, "error"?: TEXT}}`, S one of
`connected`, `failed`, `needs_auth`, `needs_client_registration`, `disabled`. Measured with opencode-ai
1.18.33 (`opencode serve`, a remote server on a closed port: `{"status":"failed","error":"SSE error: Unable to
connect. ..."}`, `enabled: false`: `{"status":"disabled"}`). The answer carries no tools. Only delivered
servers are reported; an error text only as a redacted, bounded summary (`opencode:serve`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import msgspec

from agentctl.agent.reported.base import ServerReport
from agentctl.evidence.contract import ReportedState
from agentctl.evidence.sanitize import summarize
from agentctl.evidence.secret_registry import SecretRegistry

REASON_FAILED = "agent_reported_failed"
REASON_NEEDS_AUTH = "agent_reported_needs_auth"
SOURCE = "opencode:serve"
PATH = "/mcp"
MAX_ANSWER = 1024 * 1024
# OpenCode's words, `needs_client_registration` (OAuth without a registered client) being an authentication need.
STATES: dict[str, ReportedState] = {"connected": "connected", "failed": "failed", "needs_auth": "needs_auth",
                                    "needs_client_registration": "needs_auth", "disabled": "disabled"}


def parse_status(
    body: bytes, delivered: Collection[str], secrets: Iterable[str] | SecretRegistry = ()
) -> list[ServerReport] | None:
    """The reports of one `GET /mcp` answer, or None when it is not that answer (or over MAX_ANSWER)."""
    if len(body) > MAX_ANSWER:
        return None
    try:
        answer = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(answer, dict):
        return None
    reports = []
    for name in delivered:
        entry = answer.get(name)
        raw = entry.get("status") if isinstance(entry, dict) else None
        if not isinstance(raw, str):
            continue
        state = STATES.get(raw, "unknown")
        reason = summary = None
        if state in ("failed", "needs_auth"):
            reason = REASON_NEEDS_AUTH if state == "needs_auth" else REASON_FAILED
            error = entry.get("error")
            summary = summarize(reason, error, secrets).summary or None if isinstance(error, str) and error else None
        reports.append(ServerReport(name=name, state=state, raw_state=raw, reason_code=reason, summary=summary))
    return reports
