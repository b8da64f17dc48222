"""Opening agentctl's SQLite files (the task store, the hub database): one place for the file mode, pragmas
and schema version check, so every store gets the same durability and privacy settings.

A file this opens is the user's data: it is created 0600 from the first instant (never world-readable
between create and chmod), in a directory created 0700. WAL mode and a busy timeout let several
processes share it; `synchronous=NORMAL` is durable across process crashes (WAL), which is what a
sidecar needs.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

BUSY_TIMEOUT_MS = 5000


def _create_private(path: Path) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # created concurrently by another process: theirs, opened as it is
    os.close(fd)
    # The umask can only take bits away from 0600; set exactly 0600 in case it took ours.
    os.chmod(path, 0o600)


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
    """A writable connection to `path` (created private when missing) with the schema applied.

    Autocommit mode (`isolation_level=None`: callers run their own BEGIN IMMEDIATE transactions), usable
    from any thread (callers serialise access). Raises `too_new(found_version)` when the file's
    `user_version` is above `version` (written by a newer agentctl), sqlite3.Error when the file is not a
    usable database, OSError when the directory or file cannot be created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        _create_private(path)
    conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
    try:
        if row_factory is not None:
            conn.row_factory = row_factory
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        if foreign_keys:
            conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
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
