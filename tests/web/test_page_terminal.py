"""The agent's terminal on the hub page, in headless Chromium: offered only for a session whose agent runs on a
terminal, the warning before anything is fetched, the recent screen fetched on the click (and on Refresh, fresh
each time) and rendered read-only by the vendored xterm.js, and gone from the page when the panel closes."""

from __future__ import annotations

import os

import pytest

from tests.web.conftest import NO_DRIVER, REQUIRE, desktop, watched_page
from tests.web.world import TERMINAL_CANARY, TOKEN, terminal_world

try:
    from playwright.async_api import expect
except ImportError:
    if os.environ.get(REQUIRE):
        raise
    pytest.skip(NO_DRIVER, allow_module_level=True)


async def test_the_terminal_button_fetches_the_screen_on_click_and_xterm_shows_it_read_only(short_dir, browser, artifacts):
    async with terminal_world(short_dir) as (hub, web, daemon):
        context = await desktop(browser)
        page = await watched_page(context, web.url + "#token=" + TOKEN)
        fetches: list[str] = []
        page.on("request", lambda r: fetches.append(r.method) if r.url.endswith("/agent-terminal") else None)
        row = page.locator("li.session[data-sid='session-t']")
        panel = row.locator(".panel")
        await row.locator(".mcp-trigger").click()
        await panel.get_by_role("button", name="View agent terminal").click()
        await expect(panel.locator(".warn").first).to_have_text(
            "Warning: the agent's terminal screen may contain sensitive data (prompts, file contents, tokens); it is "
            "fetched from the daemon only when you ask, shown read-only, and never persisted")
        assert fetches == [], "nothing is fetched before the click"

        await panel.get_by_role("button", name="Show agent terminal").click()
        rows = panel.locator(".terminal-screen .xterm-rows")
        await expect(rows).to_contain_text(f"echo {TERMINAL_CANARY}")
        await expect(rows).to_contain_text("tty=True ctty=True fg=True size=24x80")
        await expect(panel.locator(".terminal .note")).to_have_text("24 rows x 80 columns, read-only")
        # xterm's own styles reach the screen although the page's CSP refuses inline styles (applied via CSSOM).
        style = await rows.evaluate("el => [getComputedStyle(el).color, getComputedStyle(el).fontFamily]")
        assert style[0] == "rgb(255, 255, 255)" and "monospace" in style[1], style
        await page.screenshot(path=artifacts / "desktop-terminal.png")
        # Read-only: typing into the terminal reaches nothing (xterm's input is off; the route takes no keys).
        await panel.locator(".terminal-screen .xterm").click()
        await page.keyboard.type("typed-in-the-page\n")
        async with page.expect_response(lambda r: r.url.endswith("/agent-terminal")) as refreshed:
            await panel.get_by_role("button", name="Refresh").click()
        assert (await refreshed.value).status == 200
        await expect(panel.get_by_role("button", name="Refresh")).to_be_enabled()
        await expect(panel.locator(".terminal-screen")).to_have_count(1)
        await expect(rows).to_contain_text(f"echo {TERMINAL_CANARY}")
        assert fetches == ["POST", "POST"], "fetched fresh on each click"
        assert b"typed-in-the-page" not in daemon.agent.supervisor.process.terminal.replay()

        await panel.locator("button.back").click()
        await expect(panel.locator(".xterm")).to_have_count(0)
        await page.keyboard.press("Escape")
        await expect(page.locator(".xterm")).to_have_count(0)
        assert TERMINAL_CANARY not in await page.content()
        assert page.errors == []
        await context.close()
