"""What an agent operation returns or raises, without the ACP SDK: callers that only read outcomes (control
routes, `agentctl run`, passthrough) stay light, and the SDK's ~8 MB / ~0.4 s import happens only when an
ACP agent is started."""

from __future__ import annotations

from dataclasses import dataclass


class AgentError(Exception):
    """An agent operation that could not be done, phrased for the person at the CLI (sanitized)."""

    def __init__(self, reason_code: str, summary: str) -> None:
        super().__init__(f"{reason_code}: {summary}" if summary else reason_code)
        self.reason_code = reason_code
        self.summary = summary


@dataclass
class SessionOutcome:
    attempt_id: str
    accepted: bool
    acp_session_id: str | None = None
    reason_code: str | None = None
    summary: str | None = None
    failed_servers: tuple[str, ...] = ()
