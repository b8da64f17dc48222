"""`agentctl run`'s progress lines say what a reason code means, with the bare code beside it as detail."""

from __future__ import annotations

from datetime import UTC, datetime

from agentctl.daemon.run import progress_line
from agentctl.evidence.contract.report import EvidenceEvent

T = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _event(kind: str, server: str | None, **fields) -> EvidenceEvent:
    return EvidenceEvent(kind=kind, occurred_at=T, task_id="t", session_id="s", execution_id="e", instance_id="i",
                         attempt_id="a", server=server, **fields)


def test_a_filtered_server_and_an_error_read_as_words_with_the_code_as_detail() -> None:
    assert progress_line(_event("filtered", "docs", reason_code="http_unsupported")) == (
        "  filtered    docs: not sent: the agent does not advertise MCP over HTTP [http_unsupported]")
    assert progress_line(_event("explicit_error", "docs", reason_code="session_rejected", summary="MCP server 'docs' down")) == (
        "  error       docs: the agent refused the session [session_rejected: MCP server 'docs' down]")
    assert progress_line(_event("explicit_error", None, reason_code="session_timeout")) == (
        "  error       session: the agent did not answer the session request in time [session_timeout]")
