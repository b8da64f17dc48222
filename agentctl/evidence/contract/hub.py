"""The reference hub's answers (`agentctl hub serve|status|report|migrate --json`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from agentctl.evidence.contract.base import Base, surface_schema
from agentctl.evidence.contract.report import AgentState, AttachmentHistory, Attempt


class HubReady(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="event", tag="ready"):
    """The one JSON line `agentctl hub serve` prints on stdout once the hub is ready (`"event": "ready"`)."""

    socket: str
    db: str
    tasks_db: str
    pid: int
    http: str | None = None  # with --http: the status page's address
    # That address with a new token in its fragment (`#token=...`; a browser never sends a fragment): SECRET.
    page: str | None = None
    token_file: str | None = None  # with --token-file: where the page's token is kept


class HubExecution(Base, kw_only=True):
    """One execution of a session as the hub knows it (`agentctl hub report --json`)."""

    execution_id: str
    instance_id: str
    agent_id: str
    agent_profile_id: str
    daemon_version: str
    current: bool  # the newest execution of the session that said hello
    connected: bool  # as last recorded by the hub
    first_hello_at: datetime
    last_contact_at: datetime
    rejected_frames: int = 0  # frames refused because a newer execution of the session said hello


class HubSession(Base, kw_only=True):
    """One session in `agentctl hub status --json`: its current execution and that execution's current attempt.

    `current_attempt` is listed without its evidence log and catalog (`agentctl hub report` has them).
    """

    task_id: str
    session_id: str
    current_execution_id: str
    connected: bool
    last_contact_at: datetime
    executions: int = 1
    stale_rejected: int = 0  # frames from older executions of this session, rejected
    current_attempt: Attempt | None = None
    agent: AgentState | None = None


class HubDatabase(Base, kw_only=True):
    """The hub database's footprint: what retention keeps (sizing: docs/design.md)."""

    size_bytes: int  # SQLite: the file and its write-ahead log; PostgreSQL: the hub's tables with their indexes
    oldest_contact_at: datetime | None = None  # the oldest last contact of a session kept; null: no session


class HubStatus(Base, kw_only=True):
    """`agentctl hub status --json`: every session the hub has heard of, most recent contact first."""

    version: int
    # Required, so an empty hub still prints `"sessions": []` (a default would be omitted).
    sessions: list[HubSession]
    database: HubDatabase | None = None  # `hub status` reads it from the database; null where not measured


class HubSessionReport(Base, kw_only=True):
    """`agentctl hub report SESSION_ID --json`: the session, its executions (newest first) and one history."""

    version: int
    session: HubSession
    executions: list[HubExecution] = []
    history: AttachmentHistory | None = None  # the current execution's, unless another was asked for


class MigrationStep(Base, kw_only=True):
    version: int
    description: str


class HubMigration(Base, kw_only=True):
    """`agentctl hub migrate --json`: the schema version found, the one left, and the steps applied between.

    `database` is the location as displayed: a path, or a connection string with its secrets as `***`.
    `adopted`: the database was written before versioned migrations and recorded as `schema_to` as it was.
    """

    version: int
    database: str
    engine: Literal["sqlite", "postgresql"]
    schema_from: int
    schema_to: int
    schema_latest: int
    # Required, so `--json` always has them (a default would be omitted): `"applied": []` when up to date.
    adopted: bool
    applied: list[MigrationStep]


def schema() -> dict[str, Any]:
    """JSON Schema of this surface's types (`agentctl schema hub`; `make schema` writes docs/hub.schema.json)."""
    return surface_schema("agentctl hub answers (hub serve|status|report|migrate --json)", globals(), __name__)
