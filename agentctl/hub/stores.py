"""Owns choosing the hub's stores by their location: a PostgreSQL database shared by hubs (agentctl.hub.pg_store
and pg_tasks, whose driver is imported only then) or a SQLite file (agentctl.hub.hub_store, the embedded
task backend)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentctl.backend.embedded import EmbeddedBackend
from agentctl.dsn import PostgresDsn, SqlitePath
from agentctl.hub.hub_store import HubStore


def open_store(location: str | os.PathLike[str] | SqlitePath | PostgresDsn, *, readonly: bool = False,
               hub_id: str = "") -> Any:
    """The store for a location, writable (migrated at open) or read-only. Raises HubStoreError."""
    if isinstance(location, SqlitePath):
        location = location.path
    if isinstance(location, PostgresDsn):
        from agentctl.hub.pg_store import PgHubStore

        return PgHubStore(location, readonly=readonly, hub_id=hub_id)
    return HubStore(location, readonly=readonly)


def open_task_store(location: os.PathLike[str] | PostgresDsn) -> EmbeddedBackend:
    """The tool tunnel's task store (blocking: call it from a worker thread). Raises TaskStoreError."""
    info: dict[str, Any] = {"agents_info": {"agents": []}, "mcp_info": [], "execution_info": {}}
    if isinstance(location, PostgresDsn):
        from agentctl.hub.pg_tasks import PgTaskBackend

        return PgTaskBackend(location, **info)
    return EmbeddedBackend(Path(location), **info)


def label(location: os.PathLike[str] | PostgresDsn) -> str:
    """A location as messages name it: a DSN without its secrets, or the path."""
    return location.display() if isinstance(location, PostgresDsn) else str(location)
