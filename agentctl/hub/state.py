"""The hub's state, held in memory and persisted by a store: one SessionState per session, one ExecutionState per
execution that said hello. Plain data: the rules (agentctl.hub.rules) decide how it changes, the store
(agentctl.hub.hub_store) how it is kept."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from agentctl.evidence.contract.report import AttachmentHistory, Identity


@dataclass
class ExecutionState:
    identity: Identity  # of the newest instance of this execution that said hello
    daemon_version: str
    hello_order: int  # hub-wide order of first hello: the highest in a session is its newest execution
    first_hello_at: datetime
    last_contact_at: datetime
    connected: bool = False
    rejected_frames: int = 0
    history: AttachmentHistory | None = None

    @property
    def execution_id(self) -> str:
        return self.identity.execution_id


@dataclass
class SessionState:
    session_id: str
    task_id: str
    current_execution_id: str
    last_contact_at: datetime
    stale_rejected: int = 0
    executions: dict[str, ExecutionState] = field(default_factory=dict)

    @property
    def current(self) -> ExecutionState:
        return self.executions[self.current_execution_id]
