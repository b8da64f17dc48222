"""The hub page and /metrics for sessions the required-server gate blocked (issue 30), in headless Chromium, fed
by real daemons and real reference agents: a lazy agent whose required built-in server is never attached in its
1 s (blocked) beside an eager one whose server attached (open). The filter "Blocked on a required server" shows
exactly the blocked session, its panel says the gate's reading beside the row it read (a note: the row keeps its
own state and tone), and the hub's /metrics counts one blocked session."""

from __future__ import annotations

import asyncio
import contextlib
import os
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentctl.daemon.app import Daemon
from agentctl.spec import parse_spec
from tests.conftest import eventually, spec_toml
from tests.web.conftest import NO_DRIVER, REQUIRE, desktop, watched_page
from tests.web.world import REF_AGENT, TOKEN, hub_with_page

try:
    from playwright.async_api import expect
except ImportError:
    if os.environ.get(REQUIRE):
        raise
    pytest.skip(NO_DRIVER, allow_module_level=True)

REQUIRED = {"builtin_required": True, "required_timeout": 1}


def _spec(d: Path, session: str, agent: dict) -> bytes:
    return spec_toml(execution_id=f"exec-{session}", agent=agent, mcp=REQUIRED, daemon={"persist_delay": 0.0},
                     identity={"task_id": "task-web", "session_id": session, "agent_id": "reference-agent",
                               "agent_profile_id": "profile-web"},
                     upstream=d / "hub.sock", state_dir=d / "state").encode()


@contextlib.asynccontextmanager
async def gated(d: Path) -> AsyncIterator[tuple[object, str]]:
    """A hub with its page; session-blocked's lazy agent leaves its required built-in server delivered past its
    1 s, session-open's eager agent attaches it at once. Yields the hub and the page's address."""
    lazy = _spec(d, "session-blocked", {"command": [REF_AGENT], "env": {"AGENTCTL_REF_MODE": "lazy,connect-timeout=30"}})
    eager = _spec(d, "session-open", {"command": [REF_AGENT]})
    async with hub_with_page(d) as (hub, web):
        async with Daemon(parse_spec(lazy), socket_path=d / "l.sock") as blocked, \
                Daemon(parse_spec(eager), socket_path=d / "e.sock") as opened:
            await blocked.agent.acp.new_session()
            await opened.agent.acp.new_session()
            for daemon, state in ((blocked, "blocked"), (opened, "open")):
                await eventually(lambda: (a := daemon.ledger.history.current) is not None and a.required is not None
                                 and a.required.state == state, 20, f"the gate {state} in the daemon's report")
            yield hub, web


async def _scrape(url: str) -> dict[tuple[str, tuple], float]:
    def get() -> str:
        with urllib.request.urlopen(url + "metrics", timeout=10) as resp:
            return resp.read().decode()

    text = await asyncio.to_thread(get)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_the_blocked_filter_shows_exactly_the_session_blocked_on_a_required_server_and_metrics_count_it(
        short_dir, browser, artifacts):
    async with gated(short_dir) as (hub, web):
        async def counted() -> bool:
            scraped = await _scrape(web.url)
            return scraped.get(("agentctl_hub_sessions_blocked_on_required", ())) == 1 \
                and scraped.get(("agentctl_hub_sessions", ())) == 2
        await eventually(counted, 20, "the hub counting one session blocked on a required server")

        context = await desktop(browser)
        page = await watched_page(context, web.url + "#token=" + TOKEN)  # web.url ends with /
        blocked = page.locator("li.session[data-sid='session-blocked']")
        opened = page.locator("li.session[data-sid='session-open']")
        await expect(blocked).to_be_visible()
        await expect(opened).to_be_visible()
        await page.locator("#filter").select_option("blocked")
        await expect(page.locator("#shown")).to_have_text("showing 1 of 2 sessions")
        await expect(opened).to_be_hidden()
        await expect(blocked).to_be_visible()
        # Beside the evidence, not instead of it: the row still says what the evidence says, the reading is a note.
        await blocked.locator(".mcp-trigger").click()
        panel = blocked.locator(".panel")
        await expect(panel.locator(".required")).to_have_text("required · kandev: required, not attached after 1 s")
        await expect(panel.locator("button.server .label")).not_to_have_text("failed")
        await page.screenshot(path=str(artifacts / "required-blocked-filter.png"))
        await page.locator("#filter").select_option("all")
        await expect(page.locator("#shown")).to_have_text("showing 2 of 2 sessions")
        assert page.errors == []
        await context.close()
