"""The in-process hub `agentctl run` starts when its spec names no upstream: a SQLite hub in a private directory."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentctl.hub.hub import Hub


@asynccontextmanager
async def embedded_hub(
    directory: str | os.PathLike[str],
    *,
    db_path: str | os.PathLike[str] | None = None,
    tasks_db: str | os.PathLike[str] | None = None,
) -> AsyncIterator[str]:
    """An in-process hub for `agentctl run`: yields the socket path to put in `[upstream] socket`.

    `directory` must be private (0700) and short enough for an AF_UNIX path; the database defaults to
    `directory/hub.sqlite3`, the task store to the database's name with `.tasks.sqlite3`.
    """
    directory = Path(directory)
    async with Hub(directory / "hub.sock", db_path or directory / "hub.sqlite3", tasks_db=tasks_db) as hub:
        yield str(hub.socket_path)
