"""A hostile agent echoes every secret it was handed, mangled every way an agent may (cut, split, broken by
line breaks, zero-width characters or ANSI codes, percent-, `\\u`-, `\\x`- or HTML-escaped, spaced out,
fullwidth, reversed, ROT13: agentctl.testing.secret_forms), in its agent name, its session notices, a session
error and its stderr. No sink holds a fragment of N or more characters of any of them (N: 8 for a random
secret, 12 for a word-like one): not report.json, not the CLI's text or JSON, not an upstream frame, not the
hub's database (SQLite and PostgreSQL), not the hub page's API nor the page as Chromium renders it, not a log
at the default level.

Real parts: the shipped reference agent in its hostile-echo mode, `agentctl serve`, `agentctl hub serve` (on
SQLite, and on a real PostgreSQL server), a recording relay (real Unix sockets) between them, the `agentctl`
CLI as subprocesses and the hub page over HTTP. Each sink is searched on its bytes and on the normalized view
of them (agentctl.evidence.fragments.normalize), so an escaped or spaced-out fragment counts as a hit too.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from agentctl.evidence.contract.report import MAX_NOTICES_PER_ATTEMPT
from agentctl.evidence.fragments import fragment_length
from agentctl.evidence.sanitize import REDACTED
from agentctl.testing.secret_forms import FORMS, SHAPES, fragment_hits, view_hits
from tests.conftest import REPO, agentctl_cmd, eventually, spec_toml
from tests.diagnostics.conftest import PY, REF_AGENT
from tests.upstream.procs import Proc, start_agentctl
from tests.upstream.support import Relay
from tests.web.conftest import CHROMIUM_FLAGS, NO_CHROMIUM, chromium_path, unavailable

SECRETS = {
    "agent env (random43)": SHAPES["random43"],
    "bearer header (random33)": SHAPES["random33"],
    "api key header (jwt)": SHAPES["jwt"],
    "stdio env (passphrase34)": SHAPES["passphrase34"],
}
# session/new, then resets: each session's notices carry the next MAX_NOTICES_PER_ATTEMPT forms.
SESSIONS = -(-len(FORMS) // MAX_NOTICES_PER_ATTEMPT)


@dataclass
class Sinks:
    cli: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    frames: list[bytes] = field(default_factory=list)
    web: dict[str, str] = field(default_factory=dict)
    database: dict[str, str] = field(default_factory=dict)
    dom: dict[str, str] = field(default_factory=dict)  # the hub page as Chromium rendered it, by view
    stderr: str = ""


def _spec(root: Path) -> str:
    return spec_toml(
        agent={"command": [REF_AGENT, "--hostile-echo", "--ignore-mcp"],
               "env": {"AGENT_SECRET": SECRETS["agent env (random43)"]}},
        servers=[
            {"name": "docs", "type": "http", "url": "http://127.0.0.1:1/mcp",
             "headers": {"Authorization": f"Bearer {SECRETS['bearer header (random33)']}",
                         "X-Api-Key": SECRETS["api key header (jwt)"]}},
            {"name": "local", "type": "stdio", "command": PY, "args": ["-c", "pass"],
             "env": {"TOOL_SECRET": SECRETS["stdio env (passphrase34)"]}},
        ],
        upstream=root / "relay.sock", state_dir=root / "state", execution_id="exec-frag",
    )


async def _cli(sinks: Sinks, sock: Path | None, *argv: str, ok: tuple[int, ...] = (0,)) -> str:
    full = [*argv, "--socket", str(sock)] if sock else list(argv)
    proc = await asyncio.to_thread(subprocess.run, agentctl_cmd(*full), capture_output=True, text=True, cwd=REPO,
                                   timeout=90)
    assert proc.returncode in ok, (argv, proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    key = " ".join(argv)
    while key in sinks.cli:
        key += " (again)"
    sinks.cli[key] = proc.stdout + proc.stderr
    return proc.stdout


async def _page(hub: Proc, sinks: Sinks) -> None:
    token = Path(hub.ready["token_file"]).read_text().strip()
    async with aiohttp.ClientSession(hub.ready["http"], headers={"Authorization": f"Bearer {token}"}) as http:
        for route in ("/api/status", "/api/sessions/session-1/history", "/api/sessions/session-1/diagnostics"):
            async with http.get(route) as resp:
                assert resp.status == 200, (route, resp.status)
                sinks.web[route] = await resp.text()


async def _rendered(hub: Proc, sinks: Sinks) -> None:
    """The hub page in the system's Chromium: the session's row, its servers panel and each server's checklist."""
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True)
        try:
            page = await (await browser.new_context(viewport={"width": 1280, "height": 800})).new_page()
            token = Path(hub.ready["token_file"]).read_text().strip()
            await page.goto(hub.ready["page"].split("#")[0] + "#token=" + token)
            row = page.locator("li.session[data-sid='session-1']")
            await row.wait_for()
            sinks.dom["list"] = await page.content()
            await row.locator(".mcp-trigger").click()
            for server in ("docs", "local"):
                await row.locator(f".panel button.server[data-server='{server}']").click()
                await row.locator(".panel button.back").wait_for()
                sinks.dom[server] = await page.content()
                sinks.dom[server + " (text)"] = await page.inner_text("body")
                await row.locator(".panel button.back").click()
        finally:
            await browser.close()


def _pg_rows(url: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(url) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")]
        return {t: "\n".join(r[0] for r in conn.execute(f'SELECT x::text FROM "{t}" x')) for t in tables}


async def _run(root: Path, db_args: list[str], pg_url: str | None) -> Sinks:
    sinks = Sinks()
    spec = root / "spec" / "spec.toml"
    spec.parent.mkdir()
    spec.write_text(_spec(root))
    hub = await asyncio.to_thread(start_agentctl, ["hub", "serve", "--socket", str(root / "hub.sock"), *db_args,
                                                   "--http", "127.0.0.1:0", "--token-file", str(root / "page.token")],
                                  root / "hub.log")
    relay, daemon = Relay(root / "relay.sock", root / "hub.sock"), None
    try:
        await relay.start()
        daemon = await asyncio.to_thread(start_agentctl, ["serve", str(spec), "--socket", str(root / "d.sock")],
                                         root / "daemon.log")
        sock = Path(daemon.ready["control_socket"])
        await _cli(sinks, sock, "session", "new")
        for _ in range(SESSIONS - 1):
            await _cli(sinks, sock, "session", "reset")
        acp_session = json.loads(await _cli(sinks, sock, "report", "--json"))["current"]["acp_session_id"]
        await _cli(sinks, sock, "session", "load", acp_session, ok=(1,))
        sinks.stderr = await _cli(sinks, sock, "stderr")
        for argv in (("status",), ("report",), ("diagnostics",), ("health",)):
            await _cli(sinks, sock, *argv)
            await _cli(sinks, sock, *argv, "--json")
        await eventually(lambda: any(b"session_rejected" in line for _, line in relay.lines), 20, "the error upstream")
        await _page(hub, sinks)
        if chromium_path() is not None:
            await _rendered(hub, sinks)
        await _cli(sinks, sock, "stop")
        assert await asyncio.to_thread(daemon.popen.wait, 30) == 0
        await _cli(sinks, None, "report", "--state-dir", str(root / "state"), "--execution", "exec-frag")
        db = ["--db", str(root / "hub.sqlite3")] if pg_url is None else ["--db-file", str(root / "hub.dsn")]
        for argv in (("hub", "status"), ("hub", "report", "session-1")):
            await _cli(sinks, None, *argv, *db)
            await _cli(sinks, None, *argv, *db, "--json")
        if pg_url is not None:
            sinks.database = await asyncio.to_thread(_pg_rows, pg_url)
    finally:
        if daemon is not None:
            daemon.kill()
        relay.stop()
        await asyncio.to_thread(hub.stop)
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_socket() and path.parent.name != "spec" and path.name != "page.token":
            sinks.files[str(path.relative_to(root))] = path.read_bytes()
    if pg_url is None:
        sinks.database = {name: data.decode("utf-8", "replace") for name, data in sinks.files.items()
                          if name.startswith("hub.sqlite3")}
    sinks.frames = [line for _, line in relay.lines]
    return sinks


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def run(request) -> Sinks:
    with tempfile.TemporaryDirectory(prefix="actl-f-", dir="/tmp") as tmp:
        root = Path(tmp)
        if request.param == "sqlite":
            return asyncio.run(_run(root, ["--db", str(root / "hub.sqlite3")], None))
        server = request.getfixturevalue("pg_server")
        db = server.create_database("frag")
        try:
            dsn = root / "hub.dsn"
            dsn.write_text(db.url + "\n")
            dsn.chmod(0o600)
            args = ["--db-file", str(dsn), "--tasks-db", str(root / "hub.tasks.sqlite3")]
            sinks = asyncio.run(_run(root, args, db.url))
            sinks.files.pop("hub.dsn", None)
            return sinks
        finally:
            server.drop_database(db)


def _fragments(data: str | bytes) -> dict[str, list[str]]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    found = {}
    for name, secret in SECRETS.items():
        size = min(fragment_length(secret), len(secret))
        if hits := sorted(set(view_hits(text, secret, size)) | set(fragment_hits(text, secret, size))):
            found[name] = hits
    return found


def _leaks(items: dict[str, str | bytes]) -> dict[str, dict[str, list[str]]]:
    return {where: hits for where, data in items.items() if (hits := _fragments(data))}


def test_the_hostile_agent_really_echoed_every_form_of_every_secret_and_agentctl_kept_the_redacted_words(run):
    # Its stderr, shown on request only (never stored): every form of every secret, unredacted.
    # (The stderr view shows control characters its own way: those forms are checked by their line.)
    for form, mangle in FORMS.items():
        assert f"hostile-echo {form}: " in run.stderr, form
        printable = [m for secret in SECRETS.values() if (m := mangle(secret)).isprintable()]
        assert all(m in run.stderr for m in printable), form
    assert set(_fragments(run.stderr)) == set(SECRETS)
    report = json.loads(run.cli["report --json (again)"])
    attempts = [report["current"], *report["previous"]]
    notices = [n for attempt in attempts for n in attempt.get("notices", [])]
    assert len(notices) >= 2 * MAX_NOTICES_PER_ATTEMPT
    # Each kept notice has its secrets as markers (a URL's as the URL's target: the generic rule went first).
    assert all(REDACTED in n["description"] or n["title"] == "url_query: https://mcp.example.com" for n in notices)
    # The refused load named every server with its own reason: each row's summary, redacted.
    rows = report["current"]["servers"]
    assert {row["reason_code"] for row in rows} == {"session_rejected"}
    assert all(row["summary"].count(REDACTED) >= 5 for row in rows), rows
    assert report["agent"]["name"].startswith(f"hostile whole: {REDACTED}")


def test_no_persisted_file_and_no_log_holds_a_fragment(run):
    assert {"state/exec-frag/report.json", "daemon.log", "hub.log"} <= set(run.files), sorted(run.files)
    assert b"session_rejected" in run.files["state/exec-frag/report.json"]
    assert _leaks(run.files) == {}


def test_no_upstream_frame_holds_a_fragment(run):
    assert any(b'"notice' in line or b"notices" in line for line in run.frames)
    assert _leaks({f"frame #{n}": line for n, line in enumerate(run.frames)}) == {}


def test_the_hub_database_holds_no_fragment(run):
    assert any("session_rejected" in rows for rows in run.database.values()), "the history was stored"
    assert _leaks(run.database) == {}


def test_no_cli_output_text_or_json_holds_a_fragment_except_the_stderr_asked_for(run):
    outputs = {argv: out for argv, out in run.cli.items() if not argv.startswith("stderr")}
    assert len(outputs) >= 20 and any("--json" in argv for argv in outputs)
    assert _leaks(outputs) == {}


def test_the_hub_page_api_holds_no_fragment(run):
    assert "session_rejected" in run.web["/api/sessions/session-1/history"]
    assert _leaks(run.web) == {}


def test_the_rendered_hub_page_holds_no_fragment(run):
    if not run.dom:
        unavailable(NO_CHROMIUM)
    assert "session_rejected" in run.dom["docs (text)"] and REDACTED in run.dom["docs (text)"]
    assert _leaks(run.dom) == {}
