"""When the agent process has ended, every surface says so: `status` (text and --json), `diagnostics`,
`/readyz?verbose` and the hub page, with the rows keeping their strongest evidence.

Real processes: `agentctl hub serve --http`, `agentctl serve` with the shipped reference agent as its ACP
agent, a real SIGKILL of that agent in the middle of an accepted session.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request

import msgspec
import psutil

from agentctl.present.session import agent_gone
from agentctl.evidence.contract.report import AgentState
from tests.agent.serve_support import cli, http_get, row
from tests.conftest import poll
from tests.upstream.procs import control, start_daemon, start_hub, write_spec


def _agent_child(daemon) -> psutil.Process:
    def find() -> psutil.Process | None:
        # Below the agent shim (whose own command line carries the agent's): the agent process itself.
        for child in psutil.Process(daemon.pid).children(recursive=True):
            try:
                line = " ".join(child.cmdline())
                if "agentctl-reference-agent" in line and "from shim import main" not in line:
                    return child
            except psutil.Error:
                continue
        return None

    return poll(find, timeout=10, what="the agent process")


def _status(daemon) -> dict:
    code, body = control(daemon).get("/v1/status")
    assert code == 200, body
    return body


def _page(hub, path: str) -> dict:
    base, token = hub.ready["http"], hub.ready["page"].split("#token=", 1)[1]
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def test_a_killed_agent_is_shown_gone_on_every_surface_and_the_rows_keep_their_evidence(short_tmp):
    d = short_tmp
    hub = start_hub(d, extra=("--http", "127.0.0.1:0"))
    daemon = start_daemon(d, write_spec(d, agent=True))
    try:
        code, opened = control(daemon).post("/v1/session/new")
        assert code == 200 and opened["accepted"], opened
        poll(lambda: row(_status(daemon), "kandev")["status"] == "active", timeout=30, what="kandev active")
        sock = daemon.ready["control_socket"]
        before = cli(sock, "status").stdout
        assert "Daemon: ready" in before and "agent" not in before.split("\n", 1)[0]

        os.kill(_agent_child(daemon).pid, signal.SIGKILL)
        body = poll(lambda: (s := _status(daemon))["agent"]["state"] == "exited" and s, timeout=30,
                    what="the exit in status --json")
        assert body["agent"]["exit_signal"] == 9 and not body["agent"].get("stopped_by_daemon")
        assert row(body, "kandev")["status"] == "active", "the row keeps its strongest evidence"
        gone = "the agent has exited, killed by SIGKILL"
        assert agent_gone(msgspec.convert(body["agent"], AgentState)) == gone

        text = cli(sock, "status").stdout
        headline = text.splitlines()[0]
        assert headline == f"Daemon: not ready ({gone})", headline
        assert "waiting for agent" not in text
        flat = " ".join(text.split())  # wrapped at 80 columns
        assert "kandev    active" in text and f"{gone}; no more evidence will come from it" in flat

        diagnostics = " ".join(cli(sock, "diagnostics").stdout.split())
        assert f"Daemon: not ready ({gone})" in diagnostics and "exited (killed by SIGKILL)" in diagnostics
        assert diagnostics.count("no more evidence will come from it") == 1, "once per row of the current attempt"
        assert cli(sock, "diagnostics", "--json").stdout.count('"exit_signal": 9') == 1

        code, ready = http_get(daemon.ready["mcp_url"][: -len("/mcp")] + "/readyz?verbose")
        assert code == 503 and ready["checks"]["agent"] == {"ok": False, "detail": "exited: killed by SIGKILL"}
        assert ready["agent"] == {"state": "exited", "exit_signal": 9, "stopped_by_daemon": False}

        def page_row() -> dict | None:
            sessions = _page(hub, "api/status")["sessions"]
            attempt = sessions[0]["attempt"] if sessions else None
            server = attempt and next(s for s in attempt["servers"] if s["name"] == "kandev")
            return server if server and any("killed by SIGKILL" in x for x in server["details"]) else None

        server = poll(page_row, timeout=15, what="the hub page to show the agent gone")
        assert server["label"] == "active" and f"{gone}; no more evidence will come from it" in server["details"]
        session = _page(hub, "api/status")["sessions"][0]
        assert "exited (killed by SIGKILL)" in session["agent"]
        history = _page(hub, "api/sessions/session-1/history")
        assert any("killed by SIGKILL" in x for s in history["current"]["servers"] for x in s["details"])
        assert daemon.stop() == 0
    finally:
        daemon.kill()
        hub.stop()
