"""The hub page's API without a browser: `agentctl hub serve --http` as a real process (token auth, constant
time, never in a URL or a log line, --token-file), the stored-name-only actions against real daemons, and
the bundled page itself (no external resource, no HTML rendering of data)."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

from tests.conftest import REPO, agentctl_cmd, eventually
from tests.web.world import TOKEN, leaks

STATIC = REPO / "agentctl" / "hub" / "static"


def _serve(d: Path, *extra: str) -> tuple[subprocess.Popen, dict[str, Any], Path]:
    log = d / "hub.log"
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            agentctl_cmd("hub", "serve", "--socket", str(d / "hub.sock"), "--db", str(d / "hub.sqlite3"),
                         "--log-level", "debug", "--http", "127.0.0.1:0", *extra),
            stdout=subprocess.PIPE, stderr=err, cwd=REPO,
        )
    line = proc.stdout.readline()
    assert line, log.read_text()
    return proc, json.loads(line), log


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    proc.stdout.close()


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_the_api_needs_the_printed_token_in_a_header_and_never_logs_or_accepts_it_in_a_url(short_dir):
    proc, ready, log = _serve(short_dir)
    try:
        base = ready["http"]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", base)
        assert ready["page"].startswith(base + "#token=")  # the fragment: a browser never sends it anywhere
        token = ready["page"].split("#token=", 1)[1]
        assert len(token) >= 40

        status, headers, _ = _get(base + "api/status")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        assert _get(base + "api/status", {"Authorization": "Bearer " + token[:-1] + "x"})[0] == 401
        assert _get(base + "api/status", {"Authorization": "Basic " + token})[0] == 401
        status, headers, body = _get(base + "api/status", {"Authorization": "Bearer " + token})
        assert status == 200 and json.loads(body)["sessions"] == []
        assert headers["Cache-Control"] == "no-store"

        # A token in a URL query is refused even beside a valid header, on the API and on the page.
        status, _, body = _get(base + "api/status?token=" + token, {"Authorization": "Bearer " + token})
        assert status == 400 and b"never put the token in a URL" in body
        assert _get(base + "?access_token=" + token)[0] == 400
        # Only loopback host names: a page elsewhere cannot reach the hub by rebinding its own name.
        assert _get(base + "api/status", {"Authorization": "Bearer " + token, "Host": "evil.example"})[0] == 421

        status, headers, body = _get(base)
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert headers["X-Frame-Options"] == "DENY" and headers["Referrer-Policy"] == "no-referrer"
        assert _get(base + "app.js")[0] == 200 and _get(base + "views.js")[0] == 200
        assert _get(base + "static/../../hub.py")[0] == 404
    finally:
        _stop(proc)
    text = log.read_text()
    assert "GET /api/status 401" in text and "GET /api/status 400" in text  # requests were logged (debug)...
    assert token not in text  # ...without the token, not even from the refused URL


def test_a_token_file_is_created_private_or_read_and_refused_when_others_can_read_it(short_dir):
    token_file = short_dir / "page.token"
    proc, ready, _ = _serve(short_dir, "--token-file", str(token_file))
    try:
        assert "#token=" not in ready["page"] and ready["token_file"] == str(token_file)
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        assert _get(ready["http"] + "api/status", {"Authorization": "Bearer " + token})[0] == 200
    finally:
        _stop(proc)

    shared = short_dir / "shared.token"
    shared.write_text("a-token-that-others-can-read-1234\n")
    os.chmod(shared, 0o644)
    done = subprocess.run(agentctl_cmd("hub", "serve", "--socket", str(short_dir / "h2.sock"), "--db",
                                       str(short_dir / "h2.sqlite3"), "--http", "127.0.0.1:0", "--token-file",
                                       str(shared)), capture_output=True, text=True, timeout=30, cwd=REPO)
    assert done.returncode == 1
    assert "readable by other users (chmod 600 it)" in done.stderr and "a-token-that" not in done.stderr
    # Planted by another user: a link to a token of theirs, or their own file in our path. Never read.
    planted = short_dir / "planted.token"
    theirs = short_dir / "theirs.token"
    theirs.write_text("a-token-the-other-user-knows-5678\n")
    os.chmod(theirs, 0o600)
    os.chown(theirs, 65534, 65534)
    planted.symlink_to(theirs)
    for path, why in ((planted, "is a symbolic link; refusing to follow it"),
                      (theirs, "is owned by uid 65534, not by this user")):
        done = subprocess.run(agentctl_cmd("hub", "serve", "--socket", str(short_dir / "h3.sock"), "--db",
                                           str(short_dir / "h3.sqlite3"), "--http", "127.0.0.1:0", "--token-file",
                                           str(path)), capture_output=True, text=True, timeout=30, cwd=REPO)
        assert done.returncode == 1 and why in done.stderr and "other-user-knows" not in done.stderr, done.stderr
    done = subprocess.run(agentctl_cmd("hub", "serve", "--http", "127.0.0.1:notaport"),
                          capture_output=True, text=True, timeout=30, cwd=REPO)
    assert done.returncode == 1 and "--http: not HOST:PORT" in done.stderr


async def test_actions_take_stored_server_names_only_and_agent_output_is_never_cached(running):
    base = running.url + "api/sessions/"
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer " + TOKEN}) as http:
        async def call(method: str, path: str, body: Any = None) -> tuple[int, Any, Any]:
            async with http.request(method, base + path, json=body) as resp:
                return resp.status, await resp.json(), resp.headers

        status, body, _ = await call("POST", "session-a/test-endpoint", {"server": "http://127.0.0.1:9/mcp"})
        assert status == 404 and body["reason_code"] == "unknown_server"
        assert body["error"].endswith("known: kandev, docs, legacy, local")
        status, body, _ = await call("POST", "session-a/test-endpoint", {"server": "docs", "url": "http://x"})
        assert status == 400 and "only a server name is accepted" in body["error"]
        status, body, _ = await call("POST", "session-a/test-endpoint", {"server": "docs", "command": "sh"})
        assert status == 400
        status, body, _ = await call("POST", "no-such-session/test-endpoint", {"server": "docs"})
        assert status == 404
        status, body, _ = await call("POST", "session-a/test-endpoint", {"server": "legacy"})
        assert status == 200 and body["view"]["line"].startswith("test failed")  # the stored sse URL, refused

        status, body, headers = await call("POST", "session-a/agent-output")
        assert status == 200 and headers["Cache-Control"] == "no-store"
        assert body["view"]["warning"].startswith("recent agent output may contain sensitive data")
        assert any("reference-agent: INFO" in line for line in body["view"]["lines"])
        async with http.get(base + "session-a/agent-output") as resp:
            assert resp.status == 405  # only on an explicit POST: no prefetch, no cache
        # An agent not on a terminal: refused plainly, the daemon never asked (it would not know the frame).
        status, body, headers = await call("POST", "session-a/agent-terminal")
        assert status == 409 and body["reason_code"] == "no_terminal" and headers["Cache-Control"] == "no-store"
        assert running.hub._live_conn("session-a") is not None, "the daemon is still connected"

        status, body, _ = await call("GET", "session-a/diagnostics")
        assert status == 200 and leaks(body["text"]) == [] and "reference-agent: INFO" not in body["text"]
        for path in ("session-a/history", "session-a/tools", "session-a/tools/get_task"):
            status, body, _ = await call("GET", path)
            assert status == 200 and leaks(json.dumps(body)) == [], path
        async with http.get(running.url + "api/status") as resp:
            assert leaks(await resp.text()) == []


def _section(text: str) -> str:
    return text[text.index("Checklist:"): text.index("HTTP requests refused")]


async def test_the_page_says_what_the_cli_says(running):
    """Labels and plain-language lines are `agentctl hub status`'s; the copied checklist is the daemon's own
    `agentctl diagnostics` checklist, word for word."""
    from agentctl.diagnostics.diagnostics import build_diagnostics
    from agentctl.diagnostics.render import render_diagnostics
    from agentctl.hub.commands import render_hub_status

    async with aiohttp.ClientSession(headers={"Authorization": "Bearer " + TOKEN}) as http:
        async with http.get(running.url + "api/status") as resp:
            page = await resp.json()
        cli = " ".join(render_hub_status(running.hub.status(), color=False).split())
        servers = [s for session in page["sessions"] for s in session["attempt"]["servers"]]
        assert {s["label"] for s in servers} >= {"active", "failed", "filtered", "delivered · connection unverified"}
        for server in servers:
            assert f"{server['name']} {server['label']} {server['explanation']}" in cli, server["name"]

        async def copied() -> str:
            async with http.get(running.url + "api/sessions/session-a/diagnostics") as resp:
                return (await resp.json())["text"]

        def daemon() -> str:
            return _section(render_diagnostics(build_diagnostics(running.a.ctx), color=False))

        async def same() -> bool:
            return _section(await copied()) == daemon()

        await eventually(same, 10, "the hub to fold the daemon's last evidence")
        assert _section(await copied()) == daemon()


def test_the_bundled_page_loads_nothing_external_and_never_renders_data_as_html():
    files = {p.name: p.read_text() for p in STATIC.iterdir() if p.is_file()}
    scripts = {"app.js", "state.js", "list.js", "panel.js", "terminal.js", "views.js"}
    assert set(files) == {"index.html", "app.css", *scripts}
    assert {p.name for p in STATIC.iterdir() if p.is_dir()} == {"vendor"}
    vendor = STATIC / "vendor" / "xterm"
    assert {p.name for p in vendor.iterdir()} == {"xterm.js", "xterm.css", "LICENSE", "README.md"}
    for name, text in files.items():
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), name  # no CDN, font or image
        assert "@import" not in text, name
    # The vendored widget fetches nothing either: its only addresses are XML namespaces and a doc link in an error message.
    widget = (vendor / "xterm.js").read_text()
    assert set(re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", widget, re.I)) == {
        "http://www.w3.org", "https://developer.mozilla.org"}
    assert "@import" not in (vendor / "xterm.css").read_text() and "url(" not in (vendor / "xterm.css").read_text()
    for name in scripts:
        assert len(files[name].splitlines()) < 600, name
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in files[name], (name, sink)


def test_static_assets_are_served_gzip_compressed_to_who_accepts_it_and_revalidated_for_an_empty_304(short_dir):
    proc, ready, _ = _serve(short_dir)
    try:
        url = ready["http"] + "vendor/xterm/xterm.js"
        original = (STATIC / "vendor" / "xterm" / "xterm.js").read_bytes()
        status, headers, body = _get(url, {"Accept-Encoding": "gzip, deflate"})
        assert status == 200 and headers["Content-Encoding"] == "gzip" and "Accept-Encoding" in headers["Vary"]
        assert gzip.decompress(body) == original and len(body) < len(original) // 3
        etag = headers["ETag"]
        assert headers["Cache-Control"] == "no-cache" and etag.startswith('"')
        status, headers, body = _get(url, {"Accept-Encoding": "gzip", "If-None-Match": etag})
        assert (status, body, headers["ETag"]) == (304, b"", etag)
        # Without gzip (or refusing it with q=0): the file as it is.
        for refusing in ({}, {"Accept-Encoding": "gzip;q=0, identity"}):
            status, headers, body = _get(url, refusing)
            assert status == 200 and "Content-Encoding" not in headers and body == original
        status, headers, body = _get(ready["http"], {"Accept-Encoding": "gzip"})
        assert status == 200 and b"<html" in gzip.decompress(body).lower()
        assert "default-src 'none'" in headers["Content-Security-Policy"]
    finally:
        _stop(proc)


async def test_the_session_list_is_a_bounded_window_the_hub_filters_searches_and_orders(short_dir):
    from agentctl.hub.stores import open_store
    from tests.hub.test_listing import write_session
    from tests.web.world import hub_with_page

    async with hub_with_page(short_dir) as (hub, web):
        store = open_store(hub.db_path)  # a second writer on the file, as another process would be
        try:
            for i in range(260):
                write_session(store, f"s-{i:03d}", ["failed"] if i % 13 == 0 else ["active"], agent=f"agent-{i % 2}")
        finally:
            store.close()
        auth = {"Authorization": "Bearer " + TOKEN}
        async with aiohttp.ClientSession(headers=auth) as http:
            async def get(query: str) -> tuple[int, dict]:
                async with http.get(web.url + "api/sessions" + query) as resp:
                    return resp.status, await resp.json()

            status, first = await get("")
            assert status == 200 and (first["total"], first["matched"], len(first["sessions"])) == (260, 260, 50)
            assert [s["session_id"] for s in first["sessions"][:20]] == [f"s-{i:03d}" for i in range(0, 260, 13)]
            status, widest = await get("?limit=200&offset=200")
            assert status == 200 and len(widest["sessions"]) == 60 and widest["offset"] == 200
            _, failed = await get("?filter=attention&q=AGENT-1")
            assert {s["session_id"] for s in failed["sessions"]} == {f"s-{i:03d}" for i in range(13, 260, 26)}
            assert failed["matched"] == 10 and failed["total"] == 260
            async with http.get(web.url + "api/status") as resp:
                assert (await resp.json())["sessions"] == first["sessions"], "the first page, as /api/sessions"
            for query, says in (("?limit=201", "limit: at most 200"), ("?filter=nope", "filter: unknown value"),
                                ("?q=" + "+".join(f"w{i}" for i in range(9)), "q: at most 8 words")):
                status, body = await get(query)
                assert status == 400 and body["reason_code"] == "bad_query" and body["error"].startswith(says)
