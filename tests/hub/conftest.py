"""Fixtures for the hub tests: an in-process hub on a real socket in a short private directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentctl.hub.hub import Hub


@pytest.fixture
async def hub(short_dir: Path) -> AsyncIterator[Hub]:
    h = Hub(short_dir / "hub.sock", short_dir / "hub.sqlite3", flush_interval=0.02)
    await h.start()
    try:
        yield h
    finally:
        await h.stop()
