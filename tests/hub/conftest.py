"""Fixtures for the hub tests: an in-process hub on a real socket in a short private directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentctl.hub.hub import Hub
from tests.upstream.conftest import short_dir  # noqa: F401 - a fixture, shared with the publisher's tests


@pytest.fixture
async def hub(short_dir: Path) -> AsyncIterator[Hub]:  # noqa: F811 - the fixture above, by name
    h = Hub(short_dir / "hub.sock", short_dir / "hub.sqlite3", flush_interval=0.02)
    await h.start()
    try:
        yield h
    finally:
        await h.stop()
