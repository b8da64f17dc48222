"""The hub page at a glance, in headless Chromium: each card says in words how many servers need attention
(the trigger stays neutral), filter, search and a stable order; reason codes in plain language with the code
as detail; a refused token says so and a pasted #token= address signs in without a reload; dark mode with the
same contrast checks as light mode. Keyboard only where a person would type. Screenshots go to
tests/web/artifacts/."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.web.conftest import NO_DRIVER, REQUIRE, desktop, eventually, open_page, phone
from tests.web.world import TOKEN, hub_with_page

try:
    from playwright.async_api import expect
except ImportError:
    if os.environ.get(REQUIRE):
        raise
    pytest.skip(NO_DRIVER, allow_module_level=True)

STYLE = "el => { const s = getComputedStyle(el); return [s.color, s.backgroundColor, s.borderColor, s.borderWidth]; }"

# WCAG 2 contrast of every visible text against the colour behind it (semi-transparent layers composited):
# 4.5:1, or 3:1 for large text (24px, or 18.66px bold). Returns the failures.
CONTRAST = """() => {
  const rgba = (c) => { const m = c.match(/[\\d.]+/g).map(Number); return [m[0], m[1], m[2], m.length > 3 ? m[3] : 1]; };
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const over = (top, under) => { const a = top[3]; return [0, 1, 2].map((i) => top[i] * a + under[i] * (1 - a)).concat(1); };
  const behind = (el) => {
    const layers = [];
    for (let n = el; n; n = n.parentElement) {
      const c = rgba(getComputedStyle(n).backgroundColor);
      if (c[3] > 0) layers.push(c);
      if (c[3] >= 1) break;
    }
    let colour = [255, 255, 255, 1];
    for (const layer of layers.reverse()) colour = over(layer, colour);
    return colour;
  };
  const out = [];
  let checked = 0;
  for (const el of document.querySelectorAll("body *")) {
    if (![...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
    if (!el.checkVisibility({ opacityProperty: true, visibilityProperty: true })) continue;
    const s = getComputedStyle(el);
    if (parseFloat(s.opacity) < 1) continue;
    const bg = behind(el);
    const fg = over(rgba(s.color), bg);
    const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    const ratio = (hi + 0.05) / (lo + 0.05);
    const size = parseFloat(s.fontSize);
    const large = size >= 24 || (size >= 18.66 && parseInt(s.fontWeight) >= 700);
    checked += 1;
    if (ratio < (large ? 3 : 4.5)) out.push(`${el.textContent.trim().slice(0, 40)}: ${ratio.toFixed(2)} (${s.color} on ${bg})`);
  }
  return { checked, failures: out };
}"""


def _row(page, sid):
    return page.locator(f"li.session[data-sid='{sid}']")


async def _contrast(page) -> int:
    result = await page.evaluate(CONTRAST)
    assert result["failures"] == [], result["failures"]
    return result["checked"]


async def test_cards_count_servers_needing_attention_filter_search_and_sort_with_the_keyboard(running, browser, artifacts):
    context = await desktop(browser)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.clock.install()  # "delivered for longer than the threshold" happens when the test says so
    await page.goto(running.page_url)
    a, b = _row(page, "session-a"), _row(page, "session-b")
    # session-a: `docs` failed (the agent refused the session); `local` is third-party and delivered, which
    # is all agentctl can see of it, and `legacy` is filtered: neither needs attention. (On a loaded machine
    # the strict agent's own connect bound can fail the others too: the count follows the evidence.)
    rows = running.hub.report("session-a").history.current.servers
    failed = [row.name for row in rows if row.status == "failed"]
    assert "docs" in failed and "legacy" not in failed
    says = "1 server needs attention" if len(failed) == 1 else f"{len(failed)} servers need attention"
    await expect(a.locator(".attention")).to_have_text(says)
    await expect(a.locator(".why span")).to_have_text([f"{name} failed: the agent refused the session" for name in failed])
    # session-b: its own endpoint was delivered just now to a lazy agent: not yet a sign of trouble.
    await expect(b.locator(".attention")).to_have_text("no server needs attention")
    await expect(b.locator(".why")).to_be_hidden()
    # The text says it; the trigger stays neutral.
    assert await a.locator(".mcp-trigger").evaluate(STYLE) == await b.locator(".mcp-trigger").evaluate(STYLE)
    assert await a.locator(".attention").evaluate("el => getComputedStyle(el).color") != \
        await b.locator(".attention").evaluate("el => getComputedStyle(el).color")
    await expect(a.locator(".mcp-trigger")).to_have_accessible_description(says)
    await expect(page.locator("#attention-rule")).to_contain_text("more than 2 minutes ago")

    # Keyboard only: the search is the first stop; it matches task, session and agent.
    shown = page.locator("#shown")
    await page.keyboard.press("Tab")
    await expect(page.locator("#search")).to_be_focused()
    await page.keyboard.type("session-b")
    await expect(a).to_be_hidden()
    await expect(b).to_be_visible()
    await expect(shown).to_have_text("showing 1 of 2 sessions")
    await page.keyboard.press("Control+A")
    await page.keyboard.type("TASK-WEB reference")  # words in any case, each in the task or the agent
    await expect(shown).to_have_text("showing 2 of 2 sessions")
    await page.keyboard.press("Control+A")
    await page.keyboard.type("no-such-session")
    await expect(page.locator("#no-match")).to_be_visible()
    await expect(page.locator("section.task")).to_be_hidden()
    await page.keyboard.press("Control+A")
    await page.keyboard.press("Backspace")
    await expect(shown).to_have_text("showing 2 of 2 sessions")

    # Three minutes on, session-b's own endpoint is still only delivered: a neutral "not contacted yet", never a
    # failure (a lazy agent may connect later), so it still needs no attention and the hub's filter hides it.
    await page.clock.fast_forward("03:00")
    await expect(b.locator(".why .waiting")).to_have_text(re.compile(r"^kandev not contacted yet \([34] min\)$"))
    await expect(b.locator(".attention")).to_have_text("no server needs attention")
    assert await b.locator(".why .waiting").evaluate("el => getComputedStyle(el).color") == \
        await b.locator(".attention").evaluate("el => getComputedStyle(el).color"), "muted like the calm count, not red"
    assert await b.locator(".why .waiting").evaluate("el => getComputedStyle(el).color") != \
        await a.locator(".why span").first.evaluate("el => getComputedStyle(el).color")
    assert await a.locator(".mcp-trigger").evaluate(STYLE) == await b.locator(".mcp-trigger").evaluate(STYLE)
    await page.locator("#search").focus()
    await page.keyboard.press("Tab")
    await expect(page.locator("#filter")).to_be_focused()
    await page.keyboard.press("ArrowDown")  # "Needs attention"
    await expect(page.locator("#filter")).to_have_value("attention")
    await expect(b).to_be_hidden()
    await expect(a).to_be_visible()
    await expect(shown).to_have_text("showing 1 of 2 sessions")
    await expect(page.locator("#attention-rule")).to_contain_text("a lazy agent may connect later")
    await page.keyboard.press("ArrowDown")  # "Daemon connected": both daemons are
    await expect(page.locator("#filter")).to_have_value("connected")
    await expect(shown).to_have_text("showing 2 of 2 sessions")
    await page.keyboard.press("ArrowDown")  # "Daemon not connected"
    await expect(page.locator("#no-match")).to_be_visible()
    await page.keyboard.press("Home")
    await expect(page.locator("#filter")).to_have_value("all")
    await expect(shown).to_have_text("showing 2 of 2 sessions")  # the hub answered the filter

    # Reason codes: the row and the checklist say it in words, the bare code is the detail.
    await page.keyboard.press("Tab")
    await expect(a.locator(".mcp-trigger")).to_be_focused()  # attention first: session-a's card leads
    await page.keyboard.press("Enter")
    panel = a.locator(".panel")
    docs = panel.locator("button.server[data-server='docs']")
    await expect(docs.locator(".explain")).to_have_text("the agent refused the session")
    await expect(docs.locator(".detail").first).to_have_text(re.compile(r"^session_rejected"))
    await docs.focus()
    await page.keyboard.press("Enter")
    failed = panel.locator("li[data-step='failed']")
    await expect(failed.locator(".plain")).to_have_text("the agent refused the session")
    await expect(failed.locator(".detail")).to_have_text("session_rejected")
    legacy_plain = "not sent: the executor policy does not allow this transport"
    await page.keyboard.press("Escape")
    await page.screenshot(path=artifacts / "desktop-attention.png", full_page=True)
    await page.keyboard.press("Enter")
    await panel.locator("button.server[data-server='legacy']").focus()
    await page.keyboard.press("Enter")
    filtered = panel.locator("li[data-step='filtered']")
    await expect(filtered.locator(".plain")).to_have_text(legacy_plain)
    await expect(filtered.locator(".detail")).to_have_text("policy_denied")
    assert errors == []
    await context.close()

    # Phone: the same words beside the same neutral trigger, no horizontal overflow.
    context = await phone(browser)
    page = await open_page(context, running)
    a = _row(page, "session-a")
    await expect(a.locator(".attention")).to_have_text(says)
    box, trigger = await a.locator(".attention").bounding_box(), await a.locator(".mcp-trigger").bounding_box()
    # Under the trigger on a narrow screen, right-aligned with it, so the session's own lines keep their width.
    assert 0 <= box["y"] - (trigger["y"] + trigger["height"]) <= 12
    assert abs((box["x"] + box["width"]) - (trigger["x"] + trigger["width"])) <= 1
    assert await page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    await page.screenshot(path=artifacts / "phone-attention.png", full_page=True)
    await a.locator(".mcp-trigger").tap()
    await expect(a.locator(".panel")).to_be_visible()
    await page.screenshot(path=artifacts / "phone-attention-drawer.png")
    assert page.errors == []
    await context.close()


# The attention rule as a table, at 13:00: (servers as (name, status, builtin, delivered at)), what the card says,
# the lines that need attention, the neutral lines. Gemini in an untrusted folder filters every server.
def _row_of(name: str, status: str, builtin: bool = False, delivered: str | None = None) -> dict:
    explain = {"filtered": "not sent: the agent does not advertise MCP over SSE",
               "unavailable": "unavailable: agentctl has no way to give MCP servers to this CLI",
               "failed": "the agent refused the session"}.get(status, "sent to the agent")
    steps = [{"step": "delivered", "at": delivered}] if delivered else []
    return {"name": name, "status": status, "builtin": builtin, "explanation": explain, "steps": steps}


ATTENTION = [
    ([_row_of("kandev", "filtered"), _row_of("old", "unavailable")], "no server was sent to the agent",
     ["kandev not sent: the agent does not advertise MCP over SSE",
      "old unavailable: agentctl has no way to give MCP servers to this CLI"], []),
    ([_row_of("kandev", "delivered", True, "2026-01-01 12:57:00 UTC")], "no server needs attention",
     [], ["kandev not contacted yet (3 min)"]),
    ([_row_of("kandev", "delivered", True, "2026-01-01 12:59:30 UTC"), _row_of("old", "filtered")],
     "no server needs attention", [], []),
    ([_row_of("docs", "delivered", False, "2026-01-01 10:00:00 UTC")], "no server needs attention", [], []),
    ([_row_of("docs", "failed"), _row_of("kandev", "delivered", True, "2026-01-01 12:00:00 UTC")],
     "1 server needs attention", ["docs failed: the agent refused the session"], ["kandev not contacted yet (1 h)"]),
]

ATTENTION_JS = """async (cases) => {
  const m = await import("/views.js");
  const now = Date.parse("2026-01-01T13:00:00Z");
  return cases.map((servers) => {
    const found = m.attention({ attempt: { servers, session_error: null } }, now);
    return [m.attentionText(found), found.needs, found.servers.map((s) => `${s.name} ${s.why}`),
            found.waiting.map((s) => `${s.name} ${s.why}`)];
  });
}"""


async def test_no_server_sent_needs_attention_and_says_why_while_not_contacted_yet_stays_neutral(short_dir, browser):
    async with hub_with_page(short_dir) as (_hub, web):
        context = await desktop(browser)
        page = await context.new_page()
        await page.goto(web.url)
        got = await page.evaluate(ATTENTION_JS, [servers for servers, *_ in ATTENTION])
        want = [[text, bool(needs), needs, waiting] for _, text, needs, waiting in ATTENTION]
        assert got == want
        await context.close()


async def test_a_refused_token_says_so_and_a_pasted_token_address_signs_in_without_a_reload(short_dir, browser, artifacts):
    async with hub_with_page(short_dir) as (_hub, web):
        context = await desktop(browser)
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        statuses: list[int] = []
        page.on("response", lambda r: statuses.append(r.status) if "/api/sessions?" in r.url else None)
        await page.goto(web.url)  # no token at all: asked for, not refused
        await expect(page.locator("#token-title")).to_have_text("This page needs the hub's token")
        await expect(page.locator("#token-refused")).to_be_hidden()

        await page.goto(web.url + "#token=not-the-hub-token-1234")
        refused = page.locator("#token-refused")
        await expect(refused).to_be_visible()
        await expect(refused).to_have_text(re.compile(r"^The hub refused this token: it is wrong"))
        await expect(page.locator("#token-title")).to_have_text("The hub refused this token")
        await expect(page.locator("#live")).to_have_text("not signed in: token refused")
        await expect(page.locator("#token-input")).to_be_focused()
        assert "token" not in page.url
        assert await page.evaluate("sessionStorage.length") == 0
        await page.screenshot(path=artifacts / "desktop-token-refused.png")

        # Keyboard: a wrong token typed into the form is refused again, and says so again.
        count = len(statuses)
        await page.keyboard.type("another-wrong-token-5678")
        await page.keyboard.press("Enter")
        await eventually(lambda: statuses[count:] == [401], 15.0, what="the typed token refused")
        await expect(refused).to_be_visible()
        await expect(page.locator("#token-input")).to_have_value("")

        # The address the hub printed, pasted into this open page: signed in, same document, no reload.
        await page.evaluate("window.samePage = 'kept'")
        await page.goto(web.url + "#token=" + TOKEN)
        await expect(page.locator("#token-needed")).to_be_hidden()
        await expect(page.locator("#empty")).to_be_visible()
        await expect(page.locator("#live")).to_have_text("live")
        assert await page.evaluate("window.samePage") == "kept"
        assert "token" not in page.url

        # Signed in, a wrong address pasted: refused, and nothing from before stays on the page.
        await page.goto(web.url + "#token=wrong-again-wrong-again")
        await expect(refused).to_be_visible()
        await expect(page.locator("#empty")).to_be_hidden()
        await page.keyboard.type(TOKEN)
        await page.keyboard.press("Enter")
        await expect(page.locator("#empty")).to_be_visible()
        assert await page.evaluate("window.samePage") == "kept"
        assert errors == []
        await context.close()

        context = await phone(browser)
        page = await context.new_page()
        await page.goto(web.url + "#token=not-the-hub-token-1234")
        await expect(page.locator("#token-refused")).to_be_visible()
        assert (await page.locator("#token-form button").bounding_box())["height"] >= 44
        await page.screenshot(path=artifacts / "phone-token-refused.png")
        await context.close()


async def test_dark_mode_follows_the_system_with_the_same_contrast_checks_as_light_mode(running, browser, artifacts):
    backgrounds = {}
    for scheme in ("light", "dark"):
        context = await desktop(browser, color_scheme=scheme)
        page = await open_page(context, running)
        backgrounds[scheme] = await page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
        a = _row(page, "session-a")
        checked = await _contrast(page)
        await a.locator(".mcp-trigger").click()  # every tone: active, failed, filtered, delivered
        panel = a.locator(".panel")
        await expect(panel.locator("button.server")).to_have_count(4)
        checked += await _contrast(page)
        await page.screenshot(path=artifacts / f"desktop-{scheme}-popover.png")
        await panel.locator("button.server[data-server='docs']").click()
        await expect(panel.locator("li[data-step='failed'] .plain")).to_be_visible()
        checked += await _contrast(page)
        await page.keyboard.press("Escape")
        await _row(page, "session-b").locator(".mcp-trigger").click()  # amber whatever the machine's load
        await expect(_row(page, "session-b").locator(".panel .state.tone-amber").first).to_be_visible()
        checked += await _contrast(page)
        assert checked > 40  # the check saw the page, not an empty one
        # And it can fail: a text made too faint for this scheme is reported.
        await page.evaluate("document.querySelectorAll('.attention').forEach((el) => { "
                            "el.style.color = '#777'; el.style.background = '#888'; })")
        faint = await page.evaluate(CONTRAST)
        assert faint["failures"] and all("need attention" in f or "needs attention" in f for f in faint["failures"])
        await context.close()
    assert backgrounds == {"light": "rgb(255, 255, 255)", "dark": "rgb(13, 17, 23)"}

    context = await phone(browser, color_scheme="dark")
    page = await open_page(context, running)
    a = _row(page, "session-a")
    await a.locator(".mcp-trigger").tap()
    await expect(a.locator(".panel")).to_be_visible()
    await _contrast(page)
    await page.screenshot(path=artifacts / "phone-dark-drawer.png")
    assert page.errors == []
    await context.close()
