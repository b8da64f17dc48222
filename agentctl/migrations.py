"""Owns versioned, forward-only schema migrations for agentctl's databases: a family of numbered steps (SQL per
dialect, as data), the `schema_version` table that records what was applied, and the runner.

A family is one schema with its own version line (the hub's; the tool tunnel's task store may be a second):
the rows of `schema_version` carry the family's name, so two families can share one PostgreSQL database.
Version N of a family is applied in one transaction together with its `schema_version` row, so a crash
anywhere leaves the database at N - 1 or N, never between. Each step starts with the runner's exclusive
lock, so concurrent starters serialize: SQLite's BEGIN IMMEDIATE (the file's write lock, waited for with the
busy timeout), PostgreSQL's transaction-scoped advisory lock. Inside the lock the version is read again, so
a starter that waited finds the work done and applies nothing.

The rules of what to do with a database (`decide`) are pure; `Dialect` is the edge that talks to one. A
database without `schema_version` is fresh when it holds none of the family's tables and no other table;
one holding exactly the tables and columns of a family's `adopt` version (a database written before
migrations existed) is recorded as that version without running anything; anything else is refused, never
guessed at: another program's database, a partial schema, or a version newer than this code.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

from agentctl import __version__
from agentctl.sqlite_util import BUSY_TIMEOUT_MS, connect_sqlite

VERSION_TABLE = "schema_version"
# The PostgreSQL advisory lock every migration step holds (its key space is per database): "agentctl" in
# ASCII, as a bigint, so another program's locks are unlikely to collide with it.
ADVISORY_LOCK_KEY = 0x6167656E7463746C
DialectName = Literal["sqlite", "postgresql"]


class MigrationError(Exception):
    """A database the runner will not migrate or could not migrate; str() is one line for the CLI."""


class SchemaTooNew(MigrationError):
    """The database was migrated by a newer agentctl than this one."""

    def __init__(self, message: str, found: int, known: int) -> None:
        super().__init__(message)
        self.found = found
        self.known = known


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    sqlite: tuple[str, ...]  # one statement per item (a script runner would commit mid-transaction)
    postgresql: tuple[str, ...]

    def statements(self, dialect: DialectName) -> tuple[str, ...]:
        return self.sqlite if dialect == "sqlite" else self.postgresql


@dataclass(frozen=True)
class Family:
    name: str  # the key in schema_version
    what: str  # for messages: "hub database"
    migrations: tuple[Migration, ...]
    tables: tuple[str, ...]  # every table the family has ever created: how its tables are told from others'
    upgrade_hint: str  # how a user brings a database to the latest version ("run `agentctl hub migrate`")
    # The version a database from before migrations is, and its shape: table -> column names.
    adopt: tuple[int, Mapping[str, tuple[str, ...]]] | None = None

    def __post_init__(self) -> None:
        versions = [m.version for m in self.migrations]
        if versions != list(range(1, len(versions) + 1)):
            raise ValueError(f"{self.name}: migrations must be numbered 1..N without gaps, got {versions}")
        if self.adopt is not None and not set(self.adopt[1]) <= set(self.tables):
            raise ValueError(f"{self.name}: the adopted shape names tables the family does not own")

    @property
    def latest(self) -> int:
        return len(self.migrations)

    def step(self, version: int) -> Migration:
        return self.migrations[version - 1]


@dataclass(frozen=True)
class Observed:
    """What a database holds, read inside the runner's lock."""

    recorded: tuple[int, ...] | None  # this family's rows in schema_version; None without the table
    tables: Mapping[str, tuple[str, ...]]  # every user table (except schema_version) -> its columns
    legacy_version: int = 0  # SQLite's PRAGMA user_version (written by agentctl before migrations)


@dataclass(frozen=True)
class Decision:
    current: int  # the version the database is at
    adopt: bool = False  # record `current` without running anything (a database from before migrations)


def decide(family: Family, seen: Observed, label: str) -> Decision:
    """The version a database is at, or the one-line reason it is refused (MigrationError)."""
    if seen.recorded:
        current = max(seen.recorded)
        if current > family.latest:
            raise SchemaTooNew(f"{label}: the {family.what} is at schema version {current}, newer than this "
                               f"agentctl knows ({family.latest}): it was migrated by a newer agentctl; upgrade "
                               "this one", current, family.latest)
        missing = sorted(set(range(1, current + 1)) - set(seen.recorded))
        if missing:
            raise MigrationError(f"{label}: the {family.what} records schema version {current} without version(s) "
                                 f"{', '.join(map(str, missing))}: not migrating a history with gaps")
        return Decision(current)
    if seen.legacy_version > (family.adopt[0] if family.adopt else 0):
        raise SchemaTooNew(f"{label}: the {family.what} says schema version {seen.legacy_version} (user_version), "
                           f"newer than this agentctl knows ({family.latest}): it was written by a newer agentctl; "
                           "upgrade this one", seen.legacy_version, family.latest)
    ours = {name: columns for name, columns in seen.tables.items() if name in family.tables}
    others = sorted(set(seen.tables) - set(ours))
    # Beside a schema_version of another family, other tables are that family's; without one, someone else's.
    if others and seen.recorded is None:
        raise MigrationError(f"{label} is not a {family.what}: it holds other tables ({', '.join(others[:5])}) "
                             "and no schema_version record; use an empty database")
    if not ours:
        return Decision(0)
    if family.adopt is not None:
        version, shape = family.adopt
        if ours == {name: tuple(cols) for name, cols in shape.items()}:
            return Decision(version, adopt=True)
        raise MigrationError(f"{label} has {', '.join(sorted(ours))} but not in the shape of the {family.what}'s "
                             f"schema version {version} ({_difference(shape, ours)}) and no schema_version "
                             "record: not adopting it")
    raise MigrationError(f"{label} has {', '.join(sorted(ours))} but no schema_version record: not adopting it")


def _difference(shape: Mapping[str, Sequence[str]], tables: Mapping[str, Sequence[str]]) -> str:
    for name, columns in sorted(shape.items()):
        if name not in tables:
            return f"no table {name}"
        if tuple(tables[name]) != tuple(columns):
            extra = [c for c in tables[name] if c not in columns]
            missing = [c for c in columns if c not in tables[name]]
            parts = ([f"{name} lacks {', '.join(missing)}"] if missing else []) + (
                [f"{name} has extra {', '.join(extra)}"] if extra else [])
            return "; ".join(parts) or f"{name} has its columns in another order"
    return f"extra table(s) {', '.join(sorted(set(tables) - set(shape)))}"


# ---- the edge ----------------------------------------------------------------------------------------------


class Dialect(Protocol):
    """One open database connection, in autocommit mode: the runner issues its own transactions."""

    name: DialectName

    def begin_exclusive(self) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def execute(self, sql: str, params: Sequence[Any] = ()) -> None: ...
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...
    def tables(self) -> dict[str, tuple[str, ...]]: ...
    def legacy_version(self) -> int: ...
    def set_legacy_version(self, version: int) -> None: ...


class SqliteDialect:
    name: DialectName = "sqlite"
    placeholder = "?"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def begin_exclusive(self) -> None:
        if self.conn.isolation_level is not None:
            raise ValueError("the migration runner needs an autocommit connection (isolation_level=None)")
        self.conn.execute("BEGIN IMMEDIATE")  # the write lock now, not at the first write: no stale reads

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        # The runner writes its own statements with %s; a migration's statements come without parameters.
        self.conn.execute(sql.replace("%s", "?") if params else sql, tuple(params))

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        rows = self.conn.execute(sql.replace("%s", "?") if params else sql, tuple(params)).fetchall()
        return [tuple(row) for row in rows]

    def tables(self) -> dict[str, tuple[str, ...]]:
        names = [row[0] for row in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        return {name: tuple(row[1] for row in self.conn.execute(f'PRAGMA table_info("{name}")'))
                for name in names}

    def legacy_version(self) -> int:
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def set_legacy_version(self, version: int) -> None:
        # Kept equal to the version: an agentctl from before migrations reads only this, and refuses a
        # file whose user_version is above its own.
        self.conn.execute(f"PRAGMA user_version={int(version)}")


class PostgresDialect:
    """Over a psycopg (3) connection in autocommit mode; the runner never imports the driver itself."""

    name: DialectName = "postgresql"

    def __init__(self, conn: Any) -> None:
        if not conn.autocommit:
            raise ValueError("the migration runner needs an autocommit connection")
        self.conn = conn

    def begin_exclusive(self) -> None:
        self.conn.execute("BEGIN")
        self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_LOCK_KEY,))

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def rollback(self) -> None:
        if not self.conn.closed:
            self.conn.execute("ROLLBACK")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.conn.execute(sql, tuple(params) or None)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self.conn.execute(sql, tuple(params) or None).fetchall()]

    def tables(self) -> dict[str, tuple[str, ...]]:
        rows = self.query(
            "SELECT c.table_name, c.column_name FROM information_schema.columns c JOIN information_schema.tables t "
            "ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
            "WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE' "
            "ORDER BY c.table_name, c.ordinal_position")
        tables: dict[str, list[str]] = {}
        for table, column in rows:
            tables.setdefault(table, []).append(column)
        return {name: tuple(cols) for name, cols in tables.items()}

    def legacy_version(self) -> int:
        return 0  # PostgreSQL support began with migrations

    def set_legacy_version(self, version: int) -> None:
        pass


# ---- the runner --------------------------------------------------------------------------------------------


@dataclass
class MigrationResult:
    family: str
    before: int  # the version found (0: a fresh database)
    after: int
    latest: int
    adopted: bool = False  # `before` was recognized from the tables of a database older than migrations
    applied: list[tuple[int, str]] = field(default_factory=list)  # (version, description), in order


_CREATE_VERSION_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (family TEXT NOT NULL, version INTEGER NOT NULL, "
    "description TEXT NOT NULL, applied_at TEXT NOT NULL, applied_by TEXT NOT NULL, adopted INTEGER NOT NULL "
    "DEFAULT 0, PRIMARY KEY (family, version))"
)


def _observe(db: Dialect, family: Family) -> Observed:
    tables = db.tables()
    recorded = None
    if VERSION_TABLE in tables:
        rows = db.query(f"SELECT version FROM {VERSION_TABLE} WHERE family = %s ORDER BY version", (family.name,))
        recorded = tuple(int(row[0]) for row in rows)
        del tables[VERSION_TABLE]
    return Observed(recorded=recorded, tables=tables, legacy_version=db.legacy_version())


def _record(db: Dialect, family: Family, version: int, now: datetime, *, adopted: bool) -> None:
    db.execute(_CREATE_VERSION_TABLE)
    db.execute(f"INSERT INTO {VERSION_TABLE} (family, version, description, applied_at, applied_by, adopted) "
               "VALUES (%s, %s, %s, %s, %s, %s)",
               (family.name, version, family.step(version).description, now.isoformat(), f"agentctl {__version__}",
                int(adopted)))
    db.set_legacy_version(version)


def require_latest(db: Dialect, family: Family, label: str) -> int:
    """For a reader that never migrates: the database must be at the family's latest version (a database
    from before migrations counts as its adopted version). Raises what `migrate` would refuse, and
    MigrationError for an older version, with the family's hint."""
    current = decide(family, _observe(db, family), label).current
    if current < family.latest:
        raise MigrationError(f"{label}: the {family.what} is at schema version {current}; this agentctl reads "
                             f"version {family.latest}: {family.upgrade_hint}")
    return current


def open_migrated_sqlite(path: str | os.PathLike[str], family: Family, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS,
                         target: int | None = None) -> tuple[sqlite3.Connection, MigrationResult]:
    """A writable connection to a private SQLite file (agentctl.sqlite_util) migrated to `target` (default:
    the latest), and what was done. Raises what connect_sqlite and migrate raise."""
    conn = connect_sqlite(path, busy_timeout_ms=busy_timeout_ms)
    try:
        return conn, migrate(SqliteDialect(conn), family, str(path), target=target)
    except BaseException:
        conn.close()
        raise


def migrate(db: Dialect, family: Family, label: str, *, target: int | None = None,
            clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> MigrationResult:
    """Bring the database to `target` (default: the family's latest), one transaction per version.

    `label` names the database in messages (a path, or a DSN already redacted). Raises SchemaTooNew,
    MigrationError for a database it refuses, and the driver's own error when a statement fails (that
    version rolled back; the ones before it stay applied).
    """
    goal = family.latest if target is None else target
    if not 0 <= goal <= family.latest:
        raise ValueError(f"target version {goal} is not one of 0..{family.latest}")
    result: MigrationResult | None = None
    while True:
        db.begin_exclusive()
        try:
            decision = decide(family, _observe(db, family), label)
            if result is None:
                result = MigrationResult(family=family.name, before=decision.current, after=decision.current,
                                         latest=family.latest)
            if decision.adopt:
                for version in range(1, decision.current + 1):
                    _record(db, family, version, clock(), adopted=True)
                result.adopted = True
            elif decision.current < goal:
                step = family.step(decision.current + 1)
                for statement in step.statements(db.name):
                    db.execute(statement)
                _record(db, family, step.version, clock(), adopted=False)
                result.applied.append((step.version, step.description))
                result.after = step.version
            else:
                db.commit()
                return result
            db.commit()
        except BaseException:
            with contextlib.suppress(Exception):  # a broken connection: the original error says more
                db.rollback()
            raise
