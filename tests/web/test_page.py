"""The hub page in headless Chromium against a hub fed by real daemons (world.py): the neutral trigger, the
desktop popover (hover, focus, pin, Escape, outside click), the phone drawer, server checklists and the
tool catalog, live updates through a reset with history kept, actions, and copied diagnostics without a
canary. Screenshots of desktop and phone go to tests/web/artifacts/."""

from __future__ import annotations

import json
import re

import os

import pytest

from tests.web.conftest import NO_DRIVER, REQUIRE, desktop, eventually, open_page, phone
from tests.web.world import TOKEN, hub_with_page, leaks, world

try:
    from playwright.async_api import expect
except ImportError:
    if os.environ.get(REQUIRE):
        raise
    pytest.skip(NO_DRIVER, allow_module_level=True)

GREEN, AMBER, RED, GREY = "rgb(26, 127, 55)", "rgb(154, 103, 0)", "rgb(207, 34, 46)", "rgb(110, 119, 129)"
WHEN = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
STYLE = "el => { const s = getComputedStyle(el); return [s.color, s.backgroundColor, s.borderColor, s.borderWidth]; }"
SESSION_A = [  # name, label, colour, plain-language line
    ("kandev", "active", GREEN, re.compile(r"^\d+ tools loaded, none used yet$")),
    ("docs", "failed", RED, re.compile(r"^the agent refused the session$")),
    ("legacy", "filtered", GREY, re.compile(r"^not sent: the executor policy does not allow this transport$")),
    ("local", "delivered · connection unverified", AMBER,
     re.compile(r"^sent to the agent; third-party servers connect directly to the agent, so this is expected$")),
]


def _row(page, sid):
    return page.locator(f"li.session[data-sid='{sid}']")


async def _check_servers(panel, expected) -> None:
    buttons = panel.locator("button.server")
    await expect(buttons).to_have_count(len(expected))
    for i, (name, label, colour, line) in enumerate(expected):
        button = buttons.nth(i)
        await expect(button.locator(".name")).to_have_text(name)
        await expect(button.locator(".state .label")).to_have_text(label)
        await expect(button.locator(".explain")).to_have_text(line)
        assert await button.locator(".state").evaluate("el => getComputedStyle(el).color") == colour, name


async def test_desktop_popover_opens_on_hover_and_focus_pins_on_click_and_closes_on_escape(running, browser, artifacts):
    context = await desktop(browser)
    page = await context.new_page()
    await page.clock.install()  # the hover close delay runs when the test says so, not on a wall clock
    await page.goto(running.page_url)
    a, b = _row(page, "session-a"), _row(page, "session-b")
    await expect(a).to_be_visible()
    await expect(b).to_be_visible()
    # The token left the address bar; both sessions sit under their one task.
    assert "token" not in page.url
    assert await page.locator("section.task[data-task='task-web'] li.session").count() == 2
    # Beside the session name, the daemon's link to the hub, named so nobody reads it as MCP state.
    await expect(a.locator(".link")).to_have_text("daemon connected")
    trigger, panel = a.locator(".mcp-trigger"), a.locator(".panel")
    # Neutral in every state: session-a has a failed server, session-b none; the triggers look the same.
    assert await trigger.evaluate(STYLE) == await b.locator(".mcp-trigger").evaluate(STYLE)
    await expect(trigger).to_have_attribute("aria-expanded", "false")
    await expect(trigger).to_have_attribute("aria-controls", await panel.get_attribute("id"))

    await trigger.hover()
    await expect(panel).to_be_visible()
    await expect(trigger).to_have_attribute("aria-expanded", "true")
    await _check_servers(panel, SESSION_A)
    await page.screenshot(path=artifacts / "desktop-popover.png")
    # The pointer can cross the gap into the popover (to read or select) without it closing.
    inside = await panel.locator("button.server").first.bounding_box()
    await page.mouse.move(inside["x"] + 20, inside["y"] + 10, steps=8)
    await page.clock.run_for(1000)
    await expect(panel).to_be_visible()
    await page.mouse.move(5, 790)
    await page.clock.run_for(1000)
    await expect(panel).to_be_hidden()
    await expect(trigger).to_have_attribute("aria-expanded", "false")

    # Keyboard: focus opens it, Tab goes into it (next in focus order), Escape closes and focus returns.
    await trigger.focus()
    await expect(panel).to_be_visible()
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.closest('.panel')?.id") == await panel.get_attribute("id")
    await page.keyboard.press("Escape")
    await expect(panel).to_be_hidden()
    await expect(trigger).to_be_focused()
    await expect(trigger).to_have_attribute("aria-expanded", "false")
    await page.keyboard.press("Enter")  # a click from the keyboard pins it
    await expect(panel).to_be_visible()
    await page.keyboard.press("Enter")
    await expect(panel).to_be_hidden()

    # Click pins: leaving with the pointer does not close it; a second click does; so does a click outside.
    await trigger.click()
    await page.mouse.move(5, 790)
    await page.clock.run_for(1000)
    await expect(panel).to_be_visible()
    await trigger.click()
    await expect(panel).to_be_hidden()
    await trigger.click()
    await expect(panel).to_be_visible()
    await page.mouse.click(5, 790)
    await expect(panel).to_be_hidden()
    # One popover at a time. session-a's card comes first (it needs attention), so session-b's popover, which
    # opens downwards, leaves session-a's trigger uncovered.
    await b.locator(".mcp-trigger").click()
    await expect(b.locator(".panel")).to_be_visible()
    await trigger.click()
    await expect(b.locator(".panel")).to_be_hidden()
    await expect(panel).to_be_visible()
    await context.close()


async def test_server_checklists_with_times_and_the_catalog_with_back_to_the_list_position(running, browser, artifacts):
    context = await desktop(browser)
    page = await open_page(context, running)
    a = _row(page, "session-a")
    panel = a.locator(".panel")
    await a.locator(".mcp-trigger").click()

    await panel.locator("button.server[data-server='docs']").click()
    await expect(panel.locator(".panel-title")).to_have_text("docs")
    failed = panel.locator("li[data-step='failed']")
    await expect(failed).to_have_class("done")
    await expect(failed.locator(".when")).to_have_text(WHEN)
    await expect(failed.locator(".detail")).to_have_text("session_rejected")
    await expect(panel.locator("li[data-step='delivered'] .when")).to_have_text(WHEN)
    await expect(panel.get_by_text("[-] initialize, tools loaded, used, disconnected: not observable")).to_be_visible()
    await expect(panel.get_by_text("no catalog: third-party servers connect directly")).to_be_visible()
    await panel.locator("button.back").click()

    await panel.locator("button.server[data-server='kandev']").click()
    for step in ("configured", "delivered", "initialize", "tools_loaded"):
        await expect(panel.locator(f"li[data-step='{step}'] .when")).to_have_text(WHEN)
    await expect(panel.locator("li[data-step='initialize'] .detail")).to_have_text("legacy era")
    await expect(panel.locator("li[data-step='tools_loaded'] .detail")).to_have_text(re.compile(r"^\d+ tools$"))
    await expect(panel.locator("li[data-step='used'] .when")).to_have_text("not observed")
    await page.screenshot(path=artifacts / "desktop-server.png")

    await panel.get_by_role("button", name=re.compile(r"^Tool catalog")).click()
    tools = panel.locator("button.tool")
    await expect(tools.first).to_be_visible()
    count = await tools.count()
    assert count >= 8
    # Estimates come from the encoding shipped in the package: always there.
    await expect(tools.locator(".tokens")).to_have_text([re.compile(r"^~[\d,]+ tokens$")] * count)
    await expect(panel.get_by_text("o200k_base over each tool's JSON definition; the agent may tokenize differently")).to_be_visible()
    # Pick a tool low in the list, so its position is worth keeping.
    chosen = panel.locator("button.tool[data-key='tool:update_task']")
    await chosen.scroll_into_view_if_needed()
    # A panel tall enough to show it unscrolled (the session's row sits higher when its daemon was the last
    # to contact the hub) is scrolled to its end, where the tool, low in the list, stays in view.
    await panel.evaluate("el => { if (el.scrollTop === 0) el.scrollTop = el.scrollHeight - el.clientHeight; }")
    await expect(chosen).to_be_in_viewport()
    scrolled = await panel.evaluate("el => el.scrollTop")
    assert scrolled > 0
    await chosen.click()
    await expect(panel.locator(".panel-title")).to_have_text("update_task")
    await expect(panel.locator(".args dt .name")).to_have_text(["description", "status"])
    await expect(panel.locator(".args dt .req")).to_have_text([" optional", " optional"])
    schema = json.loads(await panel.locator("pre.schema").text_content())
    assert set(schema["properties"]) == {"description", "status"}
    assert await panel.locator(".description").text_content()
    await page.screenshot(path=artifacts / "desktop-tool.png")

    await panel.locator("button.back").click()
    await expect(panel.locator(".panel-title")).to_have_text("Tool catalog")
    await expect(panel.locator("button.tool[data-key='tool:update_task']")).to_be_focused()
    assert await panel.evaluate("el => el.scrollTop") == scrolled
    assert page.errors == []
    await context.close()


async def test_phone_drawer_shows_the_same_servers_with_44px_targets_and_no_horizontal_overflow(running, browser, artifacts):
    context = await phone(browser)
    page = await open_page(context, running)
    assert await page.evaluate("matchMedia('(pointer: coarse)').matches")
    a = _row(page, "session-a")
    trigger, panel = a.locator(".mcp-trigger"), a.locator(".panel")
    box = await trigger.bounding_box()
    assert box["width"] >= 44 and box["height"] >= 44
    overflow = "document.documentElement.scrollWidth - window.innerWidth"
    assert await page.evaluate(overflow) <= 0
    await page.screenshot(path=artifacts / "phone-list.png")

    await trigger.tap()
    await expect(panel).to_be_visible()
    await expect(panel).to_have_class(re.compile(r"\bdrawer\b"))
    await expect(trigger).to_have_attribute("aria-expanded", "true")
    await expect(panel).to_have_attribute("aria-modal", "true")
    drawer = await panel.bounding_box()
    assert drawer["x"] == 0 and drawer["width"] == 390 and abs(drawer["y"] + drawer["height"] - 844) <= 1
    await _check_servers(panel, SESSION_A)
    await expect(panel.locator(".panel-foot button")).to_have_text(
        ["Attempt history", "Copy diagnostics", "View recent agent output"])
    for button in await panel.locator("button").all():
        assert (await button.bounding_box())["height"] >= 44, await button.text_content()
    assert await page.evaluate(overflow) <= 0
    await page.screenshot(path=artifacts / "phone-drawer.png")

    await panel.locator("button.server[data-server='kandev']").tap()
    await expect(panel.locator("li[data-step='tools_loaded'] .when")).to_have_text(WHEN)
    await panel.get_by_role("button", name=re.compile(r"^Tool catalog")).tap()
    await panel.locator("button.tool[data-key='tool:create_task']").tap()
    await expect(panel.locator(".args dt .name")).to_have_text(["title", "description"])
    assert await page.evaluate(overflow) <= 0
    await page.screenshot(path=artifacts / "phone-tool.png")

    await panel.get_by_role("button", name="Close").tap()
    await expect(panel).to_be_hidden()
    await expect(trigger).to_be_focused()
    await trigger.tap()
    await expect(panel).to_be_visible()
    await page.locator("#backdrop").tap(position={"x": 195, "y": 20})
    await expect(panel).to_be_hidden()
    assert page.errors == []
    await context.close()


async def test_a_reset_shows_live_as_delivered_while_history_keeps_the_active_attempt(running, browser, artifacts):
    context = await desktop(browser)
    page = await open_page(context, running)
    b = _row(page, "session-b")
    panel = b.locator(".panel")
    await b.locator(".mcp-trigger").click()
    kandev = panel.locator("button.server[data-server='kandev']")
    await expect(kandev.locator(".label")).to_have_text("delivered · connection unverified")
    await expect(kandev.locator(".explain")).to_have_text("sent to the agent; the agent has not contacted this endpoint yet")
    first_attempt = await panel.locator(".attempt .secondary").first.text_content()

    await running.b.agent.acp.prompt("hello")  # the lazy agent connects now: evidence reaches the page live
    await expect(kandev.locator(".label")).to_have_text("active")
    await expect(kandev.locator(".state")).to_have_css("color", GREEN)

    await running.b.agent.acp.reset()
    await expect(panel.locator(".attempt .secondary").first).not_to_have_text(first_attempt)
    await expect(panel.locator(".attempt .secondary").first).to_have_text(re.compile(r" \(reset\)( · |$)"))
    await expect(kandev.locator(".label")).to_have_text("delivered · connection unverified")
    await expect(kandev.locator(".state")).to_have_css("color", AMBER)
    search = panel.locator("button.server[data-server='search'] .explain")
    await expect(search).to_have_text("sent to the agent; third-party servers connect directly to the agent, so this is expected")

    await panel.get_by_role("button", name="Attempt history").click()
    previous = panel.locator("section.previous")
    await expect(previous).to_have_count(1)
    await expect(previous.locator(".secondary").first).to_have_text(first_attempt)
    old = previous.locator("li[data-server='kandev']")
    await expect(old.locator(".label")).to_have_text("active")
    await old.locator("summary").click()
    await expect(old.locator("li[data-step='tools_loaded'] .when")).to_have_text(WHEN)
    await page.screenshot(path=artifacts / "desktop-history.png")

    # A reload shows the current state at once, from the first request.
    await page.reload()
    await b.locator(".mcp-trigger").click()
    await expect(kandev.locator(".label")).to_have_text("delivered · connection unverified")
    assert page.errors == []
    await context.close()


async def test_actions_endpoint_test_agent_output_on_click_and_diagnostics_without_canaries(running, browser):
    context = await desktop(browser)
    page = await open_page(context, running)
    await context.grant_permissions(["clipboard-read", "clipboard-write"], origin=running.url.rstrip("/"))
    output_requests, output_cache = [], []
    page.on("request", lambda r: output_requests.append(r.url) if r.url.endswith("/agent-output") else None)
    page.on("response", lambda r: output_cache.append(r.headers.get("cache-control"))
            if r.url.endswith("/agent-output") else None)
    a = _row(page, "session-a")
    panel = a.locator(".panel")
    await a.locator(".mcp-trigger").click()

    # Endpoint tests: reachability, beside the row; the attachment status does not move.
    await panel.locator("button.server[data-server='kandev']").click()
    await panel.get_by_role("button", name="Test endpoint").click()
    await expect(panel.locator(".test-result .test")).to_have_text(
        re.compile(r"^reachable from the daemon, \d+ tools listed in [\d.]+ ms \(tested .*\)$"))
    await expect(panel.locator(".test-result .note")).to_have_text(
        "reachability from the daemon, not attachment: the row's status is unchanged")
    await expect(panel.locator(".server-head .label")).to_have_text("active")
    await panel.locator("button.back").click()
    await panel.locator("button.server[data-server='docs']").click()
    await panel.get_by_role("button", name="Test endpoint").click()
    await expect(panel.locator(".test-result .test")).to_have_text(
        re.compile(r"^test failed: could not connect to the server .* · connect_failed"))
    await expect(panel.locator(".test-result .note")).to_have_text(
        "a failed test is a test failure, not proof of what happened inside the agent")
    await expect(panel.locator(".server-head .label")).to_have_text("failed")
    await panel.locator("button.back").click()
    # The stored result arrives with the next snapshot and shows on the row as detail.
    await expect(panel.locator("button.server[data-server='docs'] .detail").filter(
        has_text="endpoint test failed")).to_have_text(
        re.compile(r"^endpoint test failed: could not connect to the server \[connect_failed\]"))

    # Recent agent output: a warning first, fetched only on the click, never cached.
    await panel.get_by_role("button", name="View recent agent output").click()
    await expect(panel.locator(".warn").first).to_have_text(re.compile(r"^Warning: recent agent output may contain sensitive data"))
    assert output_requests == []
    await panel.get_by_role("button", name="Show recent agent output").click()
    await expect(panel.locator("pre.stderr")).to_contain_text("reference-agent: INFO")
    assert len(output_requests) == 1 and output_cache == ["no-store"]
    agent_output = await panel.locator("pre.stderr").text_content()
    assert leaks(agent_output), "the canaries were planted where agent output shows them"
    await panel.locator("button.back").click()
    await expect(panel.locator("pre.stderr")).to_have_count(0)

    # Copied diagnostics: the CLI's report, sanitized; no agent output and no canary.
    await panel.get_by_role("button", name="Copy diagnostics").click()
    await expect(page.locator("#toast")).to_have_text("Diagnostics copied: sanitized, no agent output.")
    copied = await page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("agentctl diagnostics: safe to paste into a bug report")
    assert "  docs  failed" in copied and "endpoint test (reachability, not attachment): test failed" in copied
    assert "Upstream: agentctl hub; execution's daemon connected" in copied
    assert leaks(copied) == []
    assert not any(line in copied for line in agent_output.splitlines() if line.strip())

    await page.keyboard.press("Escape")
    await expect(panel).to_be_hidden()
    html = await page.content()
    assert leaks(html) == [] and "reference-agent: INFO" not in html  # nothing fetched stays in the page
    assert page.errors == []
    await context.close()


async def test_a_restarted_hub_shows_the_persisted_sessions_at_once(short_dir, browser):
    async with world(short_dir) as w:
        await w.a.agent.acp.new_session()
        await eventually(lambda: (r := w.hub.report("session-a")) and r.history and r.history.current
                         and any(s.status == "failed" for s in r.history.current.servers), 15.0, what="session-a evidence")
    # Everything stopped; a new hub on the same database (another socket: no daemon reconnects to it).
    async with hub_with_page(short_dir, socket="hub2.sock") as (hub, web):
        context = await desktop(browser)
        page = await context.new_page()
        await page.goto(web.url + "#token=" + TOKEN)
        a = _row(page, "session-a")
        await expect(a.locator(".link")).to_have_text("daemon not connected")
        await a.locator(".mcp-trigger").click()
        await _check_servers(a.locator(".panel"), SESSION_A)
        assert leaks(await page.content()) == []
        await context.close()
