"""Owns opening PostgreSQL connections for agentctl's stores: the driver (psycopg 3, the `postgres` extra) is
imported here only, and only when a postgresql:// location is used, so neither the daemon nor a SQLite hub
ever loads it. A failure is one line that names the database by its display form and quotes the driver's
message with the DSN's secrets masked.
"""

from __future__ import annotations

import os
from typing import Any

from agentctl.dsn import PostgresDsn

# libpq waits for the operating system's TCP timeout (minutes) when neither the DSN nor PGCONNECT_TIMEOUT
# sets one; a command line and a starting hub answer sooner.
DEFAULT_CONNECT_TIMEOUT = 10
NOT_INSTALLED = "PostgreSQL support is not installed: pip install 'agentctl[postgres]'"


class PostgresUnavailable(Exception):
    """The driver is missing or the database cannot be reached; str() is one line with no secret in it."""


def driver() -> Any:
    try:
        import psycopg
    except ImportError:
        raise PostgresUnavailable(NOT_INSTALLED) from None
    return psycopg


def _connect_args(dsn: PostgresDsn, application_name: str | None) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if dsn.get("connect_timeout") is None and not os.environ.get("PGCONNECT_TIMEOUT"):
        args["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT
    if application_name is not None:  # a hub's name in pg_stat_activity (agentctl.hub.pg_store.hub_tag)
        args["application_name"] = application_name
    return args


def describe_error(dsn: PostgresDsn, exc: BaseException) -> str:
    """One line: the driver's message (libpq's, which can span lines) with the DSN's secrets masked."""
    text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip()) or type(exc).__name__
    return dsn.scrub(text)


async def connect_async(dsn: PostgresDsn, *, application_name: str | None = None) -> Any:
    """A psycopg AsyncConnection in autocommit mode (a listener on the event loop). Raises PostgresUnavailable."""
    psycopg = driver()
    try:
        return await psycopg.AsyncConnection.connect(dsn.conninfo, autocommit=True,
                                                     **_connect_args(dsn, application_name))
    except psycopg.Error as exc:
        raise PostgresUnavailable(f"cannot connect to {dsn.display()}: {describe_error(dsn, exc)}") from None


def connect(dsn: PostgresDsn, *, autocommit: bool = True, application_name: str | None = None) -> Any:
    """A psycopg connection (blocking API). Raises PostgresUnavailable."""
    psycopg = driver()
    try:
        return psycopg.connect(dsn.conninfo, autocommit=autocommit, **_connect_args(dsn, application_name))
    except psycopg.Error as exc:
        raise PostgresUnavailable(f"cannot connect to {dsn.display()}: {describe_error(dsn, exc)}") from None


def migrate_postgres(dsn: PostgresDsn, family: Any, target: int | None = None) -> Any:
    """Run `family`'s migrations (agentctl.migrations) on the database; the MigrationResult. Raises
    MigrationError for a database the runner refuses, PostgresUnavailable when a statement or the connection
    fails (the failed version rolled back)."""
    from agentctl.migrations import PostgresDialect, migrate

    psycopg = driver()
    conn = connect(dsn)
    try:
        return migrate(PostgresDialect(conn), family, dsn.display(), target=target)
    except psycopg.Error as exc:
        raise PostgresUnavailable(f"migrating {dsn.display()}: {describe_error(dsn, exc)}") from None
    finally:
        conn.close()
