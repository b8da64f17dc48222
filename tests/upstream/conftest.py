"""Fixtures for the upstream tests: a short private directory and an in-process hub on a real socket."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agentctl.hub.hub import Hub


@pytest.fixture
def short_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="actl-up-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
async def hub(short_dir: Path) -> AsyncIterator[Hub]:
    h = Hub(short_dir / "hub.sock", short_dir / "hub.sqlite3", flush_interval=0.02)
    await h.start()
    try:
        yield h
    finally:
        await h.stop()
