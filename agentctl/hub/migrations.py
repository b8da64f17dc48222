"""The hub database's schema history: every version of what the hub persists, as migrations for SQLite and
PostgreSQL (applied by agentctl.migrations).

Version 1 is the schema the hub wrote before migrations existed (SQLite `user_version` 1, no
schema_version table): such a file is recognized by its tables and recorded as version 1 as it is. A new
version is appended here, never an old one edited: a database at any earlier version must reach the latest
by running the steps after it.
"""

from __future__ import annotations

from agentctl.migrations import Family, Migration

_V1_SESSIONS = ("session_id", "task_id", "current_execution_id", "stale_rejected", "last_contact_at")
_V1_EXECUTIONS = ("session_id", "execution_id", "hello_order", "identity", "daemon_version", "first_hello_at",
                  "last_contact_at", "connected", "rejected_frames", "history")

_V1_SQLITE = (
    """CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    current_execution_id TEXT NOT NULL,
    stale_rejected INTEGER NOT NULL DEFAULT 0,
    last_contact_at TEXT NOT NULL
)""",
    """CREATE TABLE executions (
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    execution_id TEXT NOT NULL,
    hello_order INTEGER NOT NULL,
    identity TEXT NOT NULL,
    daemon_version TEXT NOT NULL,
    first_hello_at TEXT NOT NULL,
    last_contact_at TEXT NOT NULL,
    connected INTEGER NOT NULL DEFAULT 0,
    rejected_frames INTEGER NOT NULL DEFAULT 0,
    history TEXT,
    PRIMARY KEY (session_id, execution_id)
)""",
)

# The same tables in PostgreSQL's types: 64-bit counters, the JSON kept as text exactly as SQLite keeps it
# (the contract's encoder wrote it; nothing queries inside it).
_V1_POSTGRESQL = (
    """CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    current_execution_id TEXT NOT NULL,
    stale_rejected BIGINT NOT NULL DEFAULT 0,
    last_contact_at TEXT NOT NULL
)""",
    """CREATE TABLE executions (
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    execution_id TEXT NOT NULL,
    hello_order BIGINT NOT NULL,
    identity TEXT NOT NULL,
    daemon_version TEXT NOT NULL,
    first_hello_at TEXT NOT NULL,
    last_contact_at TEXT NOT NULL,
    connected INTEGER NOT NULL DEFAULT 0,
    rejected_frames BIGINT NOT NULL DEFAULT 0,
    history TEXT,
    PRIMARY KEY (session_id, execution_id)
)""",
)

# Version 2: hubs on several hosts sharing one PostgreSQL. Each execution row names the hub holding its daemon's
# connection (a hub that restarts clears only its own `connected` flags), and PostgreSQL hands out the hello
# order from a sequence, so which execution of a session is newest is decided in the database, never by a
# hub's memory or a host's clock. The sequence starts past every order already stored.
_V2_COMMON = (
    "ALTER TABLE executions ADD COLUMN hub TEXT NOT NULL DEFAULT ''",
    "CREATE INDEX executions_by_order ON executions(session_id, hello_order)",
)
_V2_POSTGRESQL = (
    *_V2_COMMON,
    "CREATE SEQUENCE hub_hello_order AS BIGINT",
    "SELECT setval('hub_hello_order', GREATEST(COALESCE(MAX(hello_order), 0), 1), COALESCE(MAX(hello_order), 0) > 0) "
    "FROM executions",
)

# Version 3: retention. Sessions are pruned by their last contact (an index, so the oldest are found without a
# scan), and every execution of a pruned session leaves a tombstone: what fencing needs (was it the session's
# current execution when pruned), so a late hello of a superseded execution is never taken as a new one.
_V3_COMMON = (
    "CREATE INDEX sessions_by_contact ON sessions(last_contact_at)",
    """CREATE TABLE tombstones (
    session_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    was_current INTEGER NOT NULL,
    pruned_at TEXT NOT NULL,
    PRIMARY KEY (session_id, execution_id)
)""",
)

# Version 4: the session list at fleet size. Each execution's listing is kept beside its history (agentctl.hub.listing:
# whether it needs attention, its rows' states, the words a search matches, and the current attempt without
# evidence and its agent as JSON, last), so a page of sessions is filtered, searched and ordered by the database,
# never by decoding histories. A table of its own: narrow rows, never read through a history's overflow pages.
# Rows written before get theirs from the hub's upkeep at its next start (agentctl.hub.retention), in batches.
_V4_COMMON = (
    """CREATE TABLE listings (
    session_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    attention INTEGER NOT NULL,
    statuses TEXT NOT NULL,
    search TEXT NOT NULL,
    summary TEXT NOT NULL,
    PRIMARY KEY (session_id, execution_id)
)""",
)

HUB = Family(
    name="hub",
    what="hub database",
    migrations=(
        Migration(1, "sessions and their executions (the schema from before migrations)", _V1_SQLITE, _V1_POSTGRESQL),
        Migration(2, "the hub holding each execution, and the hello order from the database", _V2_COMMON,
                  _V2_POSTGRESQL),
        Migration(3, "retention: sessions by last contact, and the tombstones of pruned executions", _V3_COMMON,
                  _V3_COMMON),
        Migration(4, "the session list: each execution's listing, attention, states and search words", _V4_COMMON,
                  _V4_COMMON),
    ),
    tables=("sessions", "executions", "tombstones", "listings"),
    upgrade_hint="start the hub (`agentctl hub serve`) or run `agentctl hub migrate` first",
    adopt=(1, {"sessions": _V1_SESSIONS, "executions": _V1_EXECUTIONS}),
)
