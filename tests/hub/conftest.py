"""Fixtures for the hub tests: an in-process hub on a real socket in a short private directory; two on one
real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from agentctl.dsn import parse_location
from agentctl.hub.hub import Hub
from agentctl.hub.stores import open_store
from agentctl.hub.web import HubWeb
from tests.pg import PgDatabase

Opener = Callable[..., object]


@asynccontextmanager
async def started_hub(short_dir: Path) -> AsyncIterator[Hub]:
    """An in-process hub on short_dir/hub.sock (a test that shortens its deadlines starts it after doing so)."""
    h = Hub(short_dir / "hub.sock", short_dir / "hub.sqlite3", flush_interval=0.02)
    await h.start()
    try:
        yield h
    finally:
        await h.stop()


@pytest.fixture
async def hub(short_dir: Path) -> AsyncIterator[Hub]:
    async with started_hub(short_dir) as h:
        yield h


@pytest.fixture
async def pg_hubs(pg_db: PgDatabase, short_dir: Path) -> AsyncIterator[tuple[Hub, Hub, HubWeb]]:
    """Two in-process hubs (two sockets) on one real PostgreSQL database, hub A with its page."""
    dsn = parse_location(pg_db.url)
    a = Hub(short_dir / "a.sock", dsn, flush_interval=0.05)  # the task store in the same database
    b = Hub(short_dir / "b.sock", dsn, flush_interval=0.05)
    await a.start()
    await b.start()
    page = HubWeb(a, "127.0.0.1", 0, token="t" * 32)
    await page.start()
    try:
        yield a, b, page
    finally:
        await page.stop()
        await b.stop()
        await a.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def open_db(request, tmp_path: Path) -> Iterator[Opener]:
    """open_db(readonly=False, hub_id="") -> a store on this test's database, closed after the test."""
    if request.param == "sqlite":
        location: object = tmp_path / "hub.sqlite3"
    else:
        pg_db: PgDatabase = request.getfixturevalue("pg_db")
        location = parse_location(pg_db.url)
    opened: list = []

    def opener(*, readonly: bool = False, hub_id: str = "") -> object:
        store = open_store(location, readonly=readonly, hub_id=hub_id)
        opened.append(store)
        return store

    opener.engine = request.param  # type: ignore[attr-defined]
    yield opener
    for store in opened:
        store.close()
