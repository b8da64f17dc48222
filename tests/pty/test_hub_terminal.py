"""The hub page's view of a terminal agent's screen, end to end: a real daemon whose agent runs on a PTY, a real
hub asking it over the upstream socket (`terminal_read`), the page's route answering the recent screen, read-only
and on request (a closed terminal's last screen too, marked so); the screen reaches no file and no log line."""

from __future__ import annotations

import base64
import logging

import aiohttp

from tests.conftest import eventually
from tests.pty.conftest import Collector, screen_text
from tests.web.world import TERMINAL_CANARY, TOKEN, terminal_world


async def test_the_hub_route_returns_the_terminal_agents_recent_screen_then_its_last_and_keeps_it_nowhere(short_dir, caplog):
    caplog.set_level(logging.DEBUG)
    async with terminal_world(short_dir) as (hub, web, daemon):
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer " + TOKEN}) as http:
            async with http.get(web.url + "api/status") as resp:
                [session] = (await resp.json())["sessions"]
            assert session["terminal"] is True  # the page offers the view for this session only
            async with http.post(web.url + "api/sessions/session-t/agent-terminal") as resp:
                assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
                body = await resp.json()
            async with http.get(web.url + "api/sessions/session-t/agent-terminal") as resp:
                assert resp.status == 405  # only on an explicit POST
        view = body["view"]
        assert view["terminal"] is True and view["open"] is True and (view["rows"], view["cols"]) == (24, 80)
        assert view["warning"].startswith("the agent's terminal screen may contain sensitive data")
        screen = base64.b64decode(view["screen"])
        assert screen == daemon.agent.supervisor.process.terminal.replay()  # as the terminal printed it
        shown = screen_text(screen, view["rows"], view["cols"])
        assert "tty=True ctty=True fg=True size=24x80" in shown and f"echo {TERMINAL_CANARY}" in shown
        assert body["notes"] == ["24 rows x 80 columns, read-only"]

        # The agent exits (it is told `quit`): its terminal closes, and its last screen is still shown, marked so.
        host = daemon.agent.supervisor.process.terminal
        typist = Collector()
        host.attach(typist)
        assert host.claim(typist) and host.write(typist, b"quit\r")
        await eventually(lambda: not host.open, what="the agent's terminal closed")
        await eventually(lambda: hub.report("session-t").session.agent.state == "exited", what="the exit at the hub")
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer " + TOKEN}) as http:
            async with http.post(web.url + "api/sessions/session-t/agent-terminal") as resp:
                assert resp.status == 200
                last = await resp.json()
        assert last["view"]["open"] is False and last["view"]["agent_state"] == "exited"
        assert "echo quit" in screen_text(base64.b64decode(last["view"]["screen"]))
        assert "(the agent's terminal is closed: the agent is not running; this is its last screen)" in last["notes"]
        await hub.flush()
    # Shown on request only: the hub kept it in no file and no log line (at debug level, every logger).
    files = [path for path in short_dir.rglob("*") if path.is_file()]
    assert {"hub.sqlite3", "report.json"} <= {path.name for path in files}
    for path in files:  # the hub's database and task store, the daemon's report
        assert TERMINAL_CANARY.encode() not in path.read_bytes(), path.name
    assert TERMINAL_CANARY not in caplog.text
