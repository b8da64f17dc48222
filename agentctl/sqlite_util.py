"""Opening agentctl's SQLite files (the task store, the hub database): one place for the file mode, pragmas
and schema version check, so every store gets the same durability and privacy settings.

A file this opens is the user's data (tool arguments among it). Its directory must be safe
(agentctl.safe_files: ours, writable by no other user, no link of theirs on the way; created 0700 when
missing), and it is opened by that directory's real path. The database file is created 0600 from the
first instant (O_EXCL, O_NOFOLLOW), and before SQLite opens anything, the database and its `-wal`,
`-shm` and `-journal` companions, where they exist, must be regular files of ours (never links: SQLite
follows them), tightened to 0600. SQLite creates the companions with the database file's own mode
(0600 here, whatever the umask), so no umask is changed. WAL mode and a busy timeout let several processes
share it; `synchronous=NORMAL` is durable across process crashes (WAL), which is what a sidecar needs.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

from agentctl.safe_files import check_private_file, ensure_private_dir, open_private

BUSY_TIMEOUT_MS = 5000


COMPANIONS = ("-wal", "-shm", "-journal")


def prepare_private_db(path: str | os.PathLike[str]) -> Path:
    """The database's real path, its directory checked (and created), every existing file of it checked
    and tightened, the database created 0600 when missing. Raises UnsafePath or OSError."""
    real = ensure_private_dir(Path(path).parent) / Path(path).name
    for candidate in (real, *(Path(f"{real}{suffix}") for suffix in COMPANIONS)):
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            continue
        check_private_file(candidate, st)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(candidate, 0o600, follow_symlinks=False)
    if not real.exists():
        try:
            os.close(open_private(real, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            os.close(open_private(real, os.O_RDONLY))  # created concurrently by another of our processes
    return real


def connect_sqlite(
    path: str | os.PathLike[str],
    *,
    foreign_keys: bool = False,
    row_factory: Callable[..., object] | None = None,
    busy_timeout_ms: int = BUSY_TIMEOUT_MS,
) -> sqlite3.Connection:
    """A writable connection to `path` (created private when missing) with the pragmas set, no schema.

    Autocommit mode (`isolation_level=None`: callers run their own BEGIN IMMEDIATE transactions), usable
    from any thread (callers serialise access). Raises sqlite3.Error when the file is not a usable database,
    UnsafePath when the directory or a file of it could be another user's, OSError when the directory or
    file cannot be created.
    """
    path = prepare_private_db(path)
    conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
    try:
        if row_factory is not None:
            conn.row_factory = row_factory
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        if foreign_keys:
            conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
    except BaseException:
        conn.close()
        raise
    return conn


def open_sqlite(
    path: str | os.PathLike[str],
    schema_sql: str,
    version: int,
    *,
    too_new: Callable[[int], Exception],
    foreign_keys: bool = False,
    row_factory: Callable[..., object] | None = None,
    busy_timeout_ms: int = BUSY_TIMEOUT_MS,
) -> sqlite3.Connection:
    """connect_sqlite() with the schema applied (`schema_sql`, idempotent) and `user_version` set to `version`.

    Raises `too_new(found_version)` when the file's `user_version` is above `version` (written by a newer
    agentctl), and what connect_sqlite raises.
    """
    conn = connect_sqlite(path, foreign_keys=foreign_keys, row_factory=row_factory, busy_timeout_ms=busy_timeout_ms)
    try:
        found = conn.execute("PRAGMA user_version").fetchone()[0]
        if found > version:
            raise too_new(found)
        conn.executescript(schema_sql)
        conn.execute(f"PRAGMA user_version={version}")
    except BaseException:
        conn.close()
        raise
    return conn


def open_sqlite_readonly(path: str | os.PathLike[str], *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> sqlite3.Connection:
    """A read-only connection to an existing file (never creates it). Raises sqlite3.Error when unusable."""
    uri = Path(path).absolute().as_uri() + "?mode=ro"  # as_uri escapes '?', '#' and '%' in the path
    conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_ms / 1000, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
    except BaseException:
        conn.close()
        raise
    return conn
