"""Owns choosing the hub's store by its location: a PostgreSQL database shared by hubs (agentctl.hub.pg_store,
whose driver is imported only then) or a SQLite file (agentctl.hub.hub_store)."""

from __future__ import annotations

import os
from typing import Any

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
