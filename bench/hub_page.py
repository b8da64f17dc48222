"""The hub page at fleet size: first paint in a real Chromium and the API's answer sizes, at 1,000 and 10,000
sessions (SQLite), side by side.

Run:  .venv/bin/python bench/hub_page.py [--sizes 1000,10000] [--rounds 3] [--json PATH]

The database is filled through the hub store (`write`, as the hub's flush does) with real Ledger histories: the
built-in server and a third-party one, one session in ten with a failed server, one in ten with every server
filtered, the rest delivered or active, 100 tasks, every session last in contact at its own time. A real
`agentctl hub serve --http` starts over it, and headless Chromium (Playwright, as tests/web drives it; never a
downloaded browser) opens the page with its token, each round in a new context (nothing cached):
  - first rows: from navigation start to the first session row in the DOM (a MutationObserver installed before
    the page's scripts), and the browser's own first-contentful-paint;
  - answer sizes: the page's first answer (/api/sessions), the largest window the hub gives (limit=200), the
    attention filter, a search; the reference is the answer the page asked for before (every session in one
    /api/status answer, built here with the hub's own view of every session's listing).
Goal: first rows under 1 s at 10,000 sessions. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import msgspec  # noqa: E402

import _common as c  # noqa: E402
from agentctl.evidence.contract.base import encode  # noqa: E402
from agentctl.evidence.contract.report import Identity  # noqa: E402
from agentctl.evidence.ledger import Ledger  # noqa: E402
from agentctl.hub.hub_store import ExecutionRecord, SessionRecord  # noqa: E402
from agentctl.hub.state import ExecutionState  # noqa: E402
from agentctl.hub.stores import open_store  # noqa: E402
from agentctl.hub.views import session_listing  # noqa: E402
from agentctl.hub.web_view import status_page  # noqa: E402
from bench.hub_ingest import SEEDS  # noqa: E402
from tests.web.conftest import CHROMIUM_FLAGS, chromium_path  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHUNK = 500
FIRST_ROW = """(() => {
  window.__firstRow = null;
  new MutationObserver((records, observer) => {
    if (document.querySelector("li.session")) { window.__firstRow = performance.now(); observer.disconnect(); }
  }).observe(document, { childList: true, subtree: true });
})();"""


def _histories() -> list[bytes]:
    """Encoded histories of four kinds: active, delivered, a failed server, every server filtered."""
    out = []
    for kind in ("active", "delivered", "failed", "filtered"):
        ident = Identity(task_id="task-0000", session_id="s", execution_id="exec-1", instance_id="inst-1",
                         agent_id="agent", agent_profile_id="profile")
        ledger = Ledger(ident)
        attempt, _ = ledger.begin_attempt("session_new", SEEDS)
        for k in range(20):
            ledger.record("tool_call_observed", attempt, "kandev", tool_name=f"tool_{k % 13}", outcome="ok")
        history = ledger.history
        assert history.current is not None
        rows = history.current.servers
        status = {"active": ["active", "delivered"], "delivered": ["delivered", "delivered"],
                  "failed": ["active", "failed"], "filtered": ["filtered", "filtered"]}[kind]
        history.current.servers = [msgspec.structs.replace(row, status=s) for row, s in zip(rows, status, strict=True)]
        out.append(encode(history))
    return out


def fill(path: Path, n: int) -> None:
    blobs = _histories()
    store = open_store(path, hub_id="bench-fill")
    try:
        for start in range(0, n, CHUNK):
            sessions, executions = [], []
            for i in range(start, min(n, start + CHUNK)):
                sid, task = f"s-{i:06d}", f"task-{i % 100:04d}"
                contact = T0 + timedelta(seconds=i)
                ident = Identity(task_id=task, session_id=sid, execution_id="exec-1", instance_id="inst-1",
                                 agent_id="agent", agent_profile_id="profile")
                state = ExecutionState(identity=ident, daemon_version="0.1.0", hello_order=i + 1, first_hello_at=T0,
                                       last_contact_at=contact)
                blob = blobs[2] if i % 10 == 3 else blobs[3] if i % 10 == 7 else blobs[i % 2]
                sessions.append(SessionRecord(sid, task, "exec-1", 0, contact))
                executions.append(ExecutionRecord.of(sid, state, blob))
            store.write(sessions, executions)
    finally:
        store.close()


def whole_list_bytes(path: Path) -> int:
    """The answer the page asked for before: every session's view in one /api/status."""
    store = open_store(path, readonly=True)
    try:
        sessions = [session_listing(s) for s in store.load().values()]
    finally:
        store.close()
    return len(encode(status_page(sessions, datetime.now(UTC))))


def get(base: str, token: str, path: str) -> tuple[int, float]:
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as resp:
        body = resp.read()
    return len(body), time.perf_counter() - t0


async def first_rows(url: str, rounds: int) -> tuple[list[float], list[float]]:
    from playwright.async_api import async_playwright

    rows, fcp = [], []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True)
        try:
            for _ in range(rounds + 1):  # the first round warms the hub's caches and is not counted
                context = await browser.new_context(viewport={"width": 1280, "height": 800})
                page = await context.new_page()
                await page.add_init_script(FIRST_ROW)
                await page.goto(url)
                await page.wait_for_selector("li.session", timeout=60_000)
                shown = await page.evaluate("window.__firstRow")
                paint = await page.evaluate("(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime")
                rows.append(shown / 1000)
                fcp.append((paint or 0) / 1000)
                await context.close()
        finally:
            await browser.close()
    return rows[1:], fcp[1:]


def run_size(tmp: Path, n: int, rounds: int) -> dict:
    db = tmp / f"hub-{n}.sqlite3"
    t0 = time.perf_counter()
    fill(db, n)
    filled = time.perf_counter() - t0
    token_file = tmp / f"{n}.token"
    proc = c.spawn([c.PYTHON, "-m", "agentctl.cli", "hub", "serve", "--socket", str(tmp / f"{n}.sock"), "--db",
                    str(db), "--tasks-db", str(tmp / f"{n}.tasks.sqlite3"), "--retention", "forever", "--http", "0",
                    "--token-file", str(token_file), "--log-level", "warning"], stdout=subprocess.PIPE, cwd=c.REPO)
    try:
        ready = json.loads(c.read_line(proc, timeout=600))
        base, token = ready["http"], token_file.read_text().strip()
        sizes = {name: get(base, token, path) for name, path in (
            ("first", "api/sessions?limit=50"), ("max", "api/sessions?limit=200"),
            ("attention", "api/sessions?filter=attention"), ("search", "api/sessions?q=s-0099"))}
        rows, fcp = asyncio.run(first_rows(f"{base}#token={token}", rounds))
    finally:
        c.end(proc)
    return {"sessions": n, "fill_seconds": round(filled, 1), "first_rows_s": round(statistics.median(rows), 3),
            "first_rows_max_s": round(max(rows), 3), "fcp_s": round(statistics.median(fcp), 3),
            **{f"{k}_bytes": v[0] for k, v in sizes.items()}, **{f"{k}_s": round(v[1], 3) for k, v in sizes.items()},
            "whole_list_bytes": whole_list_bytes(db)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    if chromium_path() is None:
        sys.exit("hub_page: needs Chromium (/usr/bin/chromium) and the Playwright driver")
    c.install_cleanup()
    results = []
    with c.temp_dir("hubpage-") as tmp:
        for n in (int(x) for x in args.sizes.split(",")):
            results.append(run_size(tmp, n, args.rounds))
    figures = []
    for r in results:
        n = f"{r['sessions']:,}"
        print(f"{n} sessions: first rows {r['first_rows_s']} s (max {r['first_rows_max_s']} s), FCP {r['fcp_s']} s; "
              f"answers: first {r['first_bytes']:,} B in {r['first_s']} s, limit=200 {r['max_bytes']:,} B, "
              f"attention {r['attention_bytes']:,} B in {r['attention_s']} s, search {r['search_bytes']:,} B in "
              f"{r['search_s']} s; the whole list in one answer (before): {r['whole_list_bytes']:,} B")
        figures += [
            c.figure(f"hub page at {n} sessions: first rows shown (Chromium)", r["first_rows_s"], unit="s",
                     target=("value", "<=", 1.0)),
            c.figure(f"hub page at {n} sessions: first answer", r["first_bytes"], r["whole_list_bytes"], unit="B",
                     reference_name="every session in one answer (before)"),
            c.figure(f"hub page at {n} sessions: largest answer (limit=200)", r["max_bytes"], r["whole_list_bytes"],
                     unit="B", reference_name="every session in one answer (before)"),
            c.figure(f"hub page at {n} sessions: attention filter answered", r["attention_s"], unit="s"),
            c.figure(f"hub page at {n} sessions: search answered", r["search_s"], unit="s"),
        ]
    c.emit({"bench": "hub_page", "results": results, "figures": figures}, args.json)


if __name__ == "__main__":
    main()
