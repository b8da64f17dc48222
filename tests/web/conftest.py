"""Fixtures for the hub page tests: a short private directory, a world of real daemons (world.py), and
headless Chromium from the system's packages driven by Playwright (it never downloads a browser).

Browser tests skip with the reason when Chromium or the Playwright driver is missing, so `make test` works
on a machine without them; `.ci/run` installs both, so CI runs them. Screenshots go to tests/web/artifacts/.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import eventually  # noqa: F401 - re-exported to the page tests
from tests.web.world import World, world

ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


REQUIRE = "AGENTCTL_REQUIRE_BROWSER"  # .ci/run sets it: there a missing browser fails instead of skipping
NO_DRIVER = "browser tests need the Playwright driver (the `test` extra: pip install -e '.[test]')"
NO_CHROMIUM = "browser tests need Chromium at /usr/bin/chromium (apt-get install chromium; .ci/run installs it)"


def unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE):
        pytest.fail(f"{reason}; {REQUIRE} is set", pytrace=False)
    pytest.skip(reason)


def chromium_path() -> str | None:
    for candidate in (os.environ.get("AGENTCTL_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGENTCTL_SOCKET", "AGENTCTL_RUNTIME_DIR", "RUNTIME_DIRECTORY", "NO_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    # Token estimates come from the encoding shipped in the package, with no network.
    monkeypatch.delenv("AGENTCTL_O200K_PATH", raising=False)



@pytest.fixture
async def running(short_dir: Path) -> AsyncIterator[World]:
    """The world with both sessions opened: session-a (mixed states) and session-b (lazy: delivered)."""
    async with world(short_dir) as w:
        await w.a.agent.acp.new_session()
        await w.b.agent.acp.new_session()
        # Each daemon counts its catalog at start (a helper, or the run's estimate cache); a listing made
        # before the counts arrived is recorded again with estimates.
        loader = w.a.endpoint.estimator_loader
        await eventually(lambda: loader is None or loader.ready, 60, "the token estimator")
        for sid, daemon in (("session-a", w.a), ("session-b", w.b)):
            # The hub has folded the daemon's last evidence (a snapshot may arrive before the session's result).
            await eventually(lambda: None != _rows_at_hub(w, sid) == _rows(daemon.ledger.history.current), 15.0,
                             what=f"{sid} at the hub")
        if loader is not None:
            # The listing recorded again with estimates reaches the hub before a page opens, so no test sees
            # the page change under it.
            await eventually(lambda: _estimates_at_hub(w), 30, "the estimates at the hub")
        yield w


def _estimates_at_hub(w: World) -> bool:
    report = w.hub.report("session-a")
    rows = report.history.current.servers if report and report.history and report.history.current else []
    return any(row.catalog is not None and row.catalog.estimator for row in rows)


def _rows(attempt: Any) -> list[tuple[str, str]] | None:
    return [(row.name, row.status) for row in attempt.servers] if attempt is not None else None


def _rows_at_hub(w: World, sid: str) -> list[tuple[str, str]] | None:
    report = w.hub.report(sid)
    return _rows(report.history.current) if report and report.history else None


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    path = chromium_path()
    if path is None:
        unavailable(NO_CHROMIUM)
    try:
        from playwright.async_api import async_playwright, expect
    except ImportError:
        unavailable(NO_DRIVER)
    # A page update crosses daemon, hub, event stream and Chromium, all on a machine shared with another worker:
    # Playwright's 5 s default for `expect` is no bound chosen for that (a passing check returns at once).
    expect.set_options(timeout=20_000)
    async with async_playwright() as p:
        # Playwright starts Chromium with a new empty profile directory of its own every launch.
        chromium = await p.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS, headless=True)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


async def desktop(browser: Any, **extra: Any) -> Any:
    context = await browser.new_context(viewport={"width": 1280, "height": 800}, **extra)
    return context


async def phone(browser: Any, **extra: Any) -> Any:
    return await browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True, is_mobile=True,
                                     device_scale_factor=2, **extra)


async def watched_page(context: Any, url: str) -> Any:
    """A new page opened at `url`; `page.errors` collects its uncaught exceptions."""
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors  # type: ignore[attr-defined]
    await page.goto(url)
    return page


async def open_page(context: Any, w: World) -> Any:
    page = await watched_page(context, w.page_url)
    await page.wait_for_selector("li.session[data-sid='session-a']")
    await page.wait_for_selector("li.session[data-sid='session-b']")
    return page
