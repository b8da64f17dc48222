"""The evidence tests' fixed identity and clock origin (one definition for the reducer, ledger and fuzz tests)."""

from __future__ import annotations

from datetime import UTC, datetime

from agentctl.evidence.contract.report import Identity

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)

IDENT = Identity(
    task_id="task_1",
    session_id="sess_1",
    execution_id="exec_1",
    instance_id="inst_1",
    agent_id="agent_1",
    agent_profile_id="profile_1",
)
