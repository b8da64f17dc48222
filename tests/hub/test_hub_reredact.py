"""The hub redacts a daemon's free text again before keeping it (agentctl.evidence.foreign): a daemon that sends
credentials, URLs and tokens in a snapshot, an event or an agent frame (a RawClient: a real daemon redacts
first) leaves none of them in the hub's memory, its SQLite database or its views."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentctl.evidence import reducer
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import (
    AgentNotice,
    AgentState,
    AttachmentHistory,
    ErrorSummary,
    EvidenceEvent,
    ServerRow,
)
from agentctl.evidence.sanitize import REDACTED
from agentctl.upstream import protocol as P
from tests.upstream.support import RawClient, eventually, identity

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TOKEN = "ghp_Xq7vP2mK9sL4tR8wZ1nB6cF3hJ5dG0yAeU2o"
CANARIES = {
    "bearer": f"Authorization: Bearer {TOKEN}",
    "url": "https://alice:hunter2pw@mcp.example.com/t-8f3kq/mcp?key=QvLm2Xp9Rt4kk",
    "key": "api_key=Zx9Wq4Lm7Rt2Vb5Nc8",
}
LEAKS = ("Xq7vP2mK9sL4", "hunter2pw", "t-8f3kq", "QvLm2Xp9Rt4kk", "Zx9Wq4Lm7Rt2Vb5Nc8")


def _hostile_history(ident) -> AttachmentHistory:
    history = AttachmentHistory(version=1, identity=ident, updated_at=T0)
    reducer.begin_attempt(history, attempt_id="att_1", origin="manual", now=T0)
    text = " ".join(CANARIES.values())
    attempt = history.current
    attempt.session_error = ErrorSummary(reason_code="session_rejected", summary=f"refused: {text}")
    attempt.notices = [AgentNotice(severity="warning", title=CANARIES["bearer"], description=text, occurred_at=T0)]
    attempt.servers = [ServerRow(name="docs", status="failed", reason_code="connect_failed", summary=text,
                                 last_failure=ErrorSummary(reason_code="connect_failed", summary=text))]
    history.agent = AgentState(protocol="acp", state="running", name=f"agent {TOKEN}")
    return history


async def test_a_hostile_daemons_unredacted_text_is_redacted_again_before_the_hub_keeps_it(hub):
    ident = identity()
    client = await RawClient.connect(hub.socket_path)
    await client.hello(ident)
    await client.send(P.frame(P.SnapshotFrame, history=_hostile_history(ident)))
    event = EvidenceEvent(kind="explicit_error", occurred_at=T0 + timedelta(seconds=1), task_id="task-1",
                          session_id="session-1", execution_id="exec-1", instance_id="inst-1", attempt_id="att_1",
                          seq=1, server="docs", reason_code="connect_failed", summary=CANARIES["key"])
    await client.send(P.frame(P.EvidenceFrame, event=event))
    await client.send(P.frame(P.AgentFrame, agent=AgentState(protocol="acp", state="exited", name=CANARIES["url"])))

    def stored():
        report = hub.report("session-1")
        history = report.history if report else None
        return history if history and history.agent and history.agent.state == "exited" else None

    history = await eventually(stored, what="the hostile frames taken")
    kept = encode(history).decode()
    assert not [leak for leak in LEAKS if leak.lower() in kept.lower()], kept
    assert history.current.session_error.summary.startswith(f"refused: Authorization: Bearer {REDACTED}")
    assert [e.summary for e in history.current.evidence] == [f"api_key={REDACTED}"]
    assert history.agent.name == "https://mcp.example.com"
    assert REDACTED in history.current.notices[0].title and REDACTED in history.current.servers[0].summary
    await hub.flush()
    data = b"".join(p.read_bytes() for p in hub.db_path.parent.glob(hub.db_path.name + "*"))
    assert b"session_rejected" in data, "the history was stored"
    assert not [leak for leak in LEAKS if leak.lower().encode() in data.lower()]
    await client.close()


async def test_redacting_again_leaves_a_daemons_redacted_text_as_it_was(hub):
    ident = identity()
    history = AttachmentHistory(version=1, identity=ident, updated_at=T0)
    reducer.begin_attempt(history, attempt_id="att_1", origin="manual", now=T0)
    summary = f"initialize failed: refused POST {REDACTED}?{REDACTED} at https://mcp.example.com (see <path>)"
    history.current.session_error = ErrorSummary(reason_code="initialize_failed", summary=summary)
    history.agent = AgentState(protocol="acp", state="running", name="Claude Code", version="2.1.0")
    client = await RawClient.connect(hub.socket_path)
    await client.hello(ident)
    await client.send(P.frame(P.SnapshotFrame, history=history))
    report = await eventually(lambda: hub.report("session-1"), what="snapshot stored")
    assert encode(report.history) == encode(history)
    await client.close()


def test_the_second_redaction_changes_only_the_spans_it_redacts_keeping_control_characters_as_sent():
    from agentctl.evidence.foreign import reredact_agent, reredact_event

    name = "agent\x1b[2J\x1b[H\x1b]0;owned\x07  \u202eevil\u202c\nnext"
    agent = reredact_agent(AgentState(protocol="acp", state="running", name=name))
    assert agent is not None and agent.name == name  # nothing secret: kept exactly, for the renderer to show
    sent = f"line one\x1b[31m\n\tBearer\x00{TOKEN}\x85 and api_key=Zx9Wq4Lm7Rt2Vb5Nc8\x07 end"
    event = reredact_event(EvidenceEvent(kind="explicit_error", occurred_at=T0, task_id="t", session_id="s",
                                         execution_id="e", instance_id="i", attempt_id="a", seq=1,
                                         summary=sent))
    assert not [leak for leak in LEAKS if leak in (event.summary or "")]
    assert event.summary == f"line one\x1b[31m\n\tBearer {REDACTED}\x85 and api_key={REDACTED}\x07 end"
