"""ACP session notices (the Session Notices RFD): the opt-in at initialize, taking a `notice` session/update off
the wire, and what of it becomes evidence: a weak, report-level line, never a row's status.

A notice is `session/update` with `update = {"sessionUpdate": "notice", "severity": "info"|"warning"|"error",
"title": TEXT, "description": TEXT|null}`: a live, fire-and-forget event with no id, which fails nothing (an
agent's example: "MCP server unavailable"). In ACP v1 a client opts in with `clientCapabilities.session.notices
= {}`.

The pinned ACP SDK (agent-client-protocol 0.12.1) knows neither: its SessionNotification union has no `notice`
variant, so the router's `model_validate` raises, and the SDK's notification runner logs the error and drops
the frame; its ClientSessionCapabilities has no `notices` field (pydantic ignores one given). Without patching
the SDK, agentctl's own stdio transport (agentctl/agent/transports.py) adds the opt-in to the initialize frame
on its way out (`advertise`) and hands each incoming frame to `NoticeTap.take` before the SDK sees it: a
notice is consumed there, so the SDK neither sees nor logs it.

What is kept (`parse_notice`): the severity (an unknown one as `unknown`), the title and description redacted
and bounded as a summary (URLs to their origin, secrets masked), and the one delivered server the text names
as a server (agentctl/agent/attribution.py's rule), if any. Nothing else of the frame.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from agentctl.agent.attribution import attribute
from agentctl.evidence.contract.report import NOTICE_SEVERITIES, AgentNotice
from agentctl.evidence.sanitize import summarize
from agentctl.evidence.secret_registry import SecretRegistry

log = logging.getLogger(__name__)

SOURCE = "acp:session-notice"
NOTICE_KIND = "notice"
NO_TITLE = "(the notice had no title)"

# session id (None when the agent sent none), the update object as received.
NoticeHandler = Callable[[str | None, dict[str, Any]], None]


def advertise(message: dict[str, Any]) -> dict[str, Any]:
    """The outgoing frame, with `clientCapabilities.session.notices = {}` added to an initialize request."""
    params = message.get("params")
    if message.get("method") != "initialize" or not isinstance(params, dict):
        return message
    caps = params.get("clientCapabilities")
    if caps is None:
        caps = params["clientCapabilities"] = {}
    if isinstance(caps, dict):
        session = caps.get("session")
        if not isinstance(session, dict):
            session = caps["session"] = {}
        session.setdefault("notices", {})
    return message


def notice_update(message: dict[str, Any]) -> tuple[str | None, dict[str, Any]] | None:
    """(session id, update) when the frame is a session notice, else None."""
    if message.get("method") != "session/update" or "id" in message:
        return None
    params = message.get("params")
    if not isinstance(params, dict):
        return None
    update = params.get("update")
    if not isinstance(update, dict) or update.get("sessionUpdate") != NOTICE_KIND:
        return None
    session_id = params.get("sessionId")
    return (session_id if isinstance(session_id, str) else None), update


class NoticeTap:
    """The transport's intercept: consumes session notices (to `on_notice`) and passes every other frame on."""

    def __init__(self, on_notice: NoticeHandler) -> None:
        self._on_notice = on_notice

    def take(self, message: dict[str, Any]) -> bool:
        found = notice_update(message)
        if found is None:
            return False
        try:
            self._on_notice(*found)
        except Exception as exc:  # a notice must never cost the connection (this runs in the receive loop)
            log.warning("an agent's session notice could not be recorded (%s)", type(exc).__name__)
        return True


def _text(value: Any, secrets: Iterable[str] | SecretRegistry) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return summarize("x", value, secrets).summary or None


def parse_notice(
    update: dict[str, Any], delivered: Sequence[str], now: datetime, secrets: Iterable[str] | SecretRegistry = ()
) -> AgentNotice:
    """The evidence of one notice: severity, the redacted and bounded texts, the server it names (if one)."""
    severity = update.get("severity")
    title = _text(update.get("title"), secrets) or NO_TITLE
    description = _text(update.get("description"), secrets)
    raw = " ".join(v for v in (update.get("title"), update.get("description")) if isinstance(v, str))
    named = attribute(raw, None, list(delivered)).servers if raw else []
    return AgentNotice(
        severity=severity if severity in NOTICE_SEVERITIES else "unknown",
        title=title,
        description=description,
        occurred_at=now,
        source=SOURCE,
        server=named[0] if len(named) == 1 else None,
    )
