"""Upstream end to end with real processes: `agentctl hub serve`, `agentctl serve` with the reference agent
or an MCP client, SIGTERM and SIGSTOP/SIGCONT on the hub."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request

import httpx2
import psutil
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from agentctl.cli import main
from agentctl.evidence.store import read_report
from tests.conftest import REPO, agentctl_cmd, poll
from tests.upstream.procs import builtins, control, daemon_report, hub_history, start_daemon, start_hub, write_spec


def _readyz(proc) -> tuple[int, dict]:
    url = proc.ready["mcp_url"][: -len("/mcp")] + "/readyz?verbose"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _upstream(proc) -> dict:
    status, body = control(proc).get("/v1/status")
    assert status == 200
    return body["upstream"]


def test_the_hub_restarts_mid_run_and_ends_with_exactly_the_daemons_report(short_tmp, capsys):
    d = short_tmp
    hub = start_hub(d)
    daemon = start_daemon(d, write_spec(d, agent=True))
    hub2 = None
    try:
        status, body = control(daemon).post("/v1/session/new")
        assert status == 200 and body["accepted"], body
        poll(lambda: hub_history(d / "hub.sqlite3") == daemon_report(daemon), timeout=30, interval=0.1, what="hub caught up")

        assert hub.stop() == 0
        status, reset = control(daemon).post("/v1/session/reset")  # evidence while the hub is down
        assert status == 200 and reset["accepted"]
        assert _upstream(daemon)["state"] == "buffering"
        code, ready = _readyz(daemon)
        assert code == 200 and ready["checks"]["upstream"] == {"ok": True, "detail": "buffering"}

        hub2 = start_hub(d, "hub2")
        poll(lambda: _upstream(daemon)["state"] == "connected", timeout=30, interval=0.1, what="reconnect")
        poll(lambda: hub_history(d / "hub.sqlite3") == daemon_report(daemon), timeout=30, interval=0.1, what="hub repaired")
        assert hub_history(d / "hub.sqlite3")["current"]["attempt_id"] == reset["attempt_id"]
        assert _upstream(daemon)["connects"] == 2

        assert daemon.stop() == 0  # the final snapshot carries the agent's exit
        persisted = builtins(read_report(d / "state", "exec-1"))
        capsys.readouterr()
        assert main(["hub", "report", "session-1", "--db", str(d / "hub.sqlite3"), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["history"] == persisted
        assert persisted["agent"]["state"] == "exited"
        assert main(["hub", "status", "--db", str(d / "hub.sqlite3")]) == 0
        text = capsys.readouterr().out
        assert "session session-1" in text and "kandev" in text
    finally:
        daemon.kill()
        hub.kill()
        if hub2 is not None:
            hub2.kill()


async def test_a_stalled_hub_leaves_mcp_calls_working_daemon_memory_bounded_and_is_repaired_after(short_tmp):
    d = short_tmp
    hub = start_hub(d)
    daemon = start_daemon(d, write_spec(d, profile="external"))
    try:
        status, _ = control(daemon).post("/v1/session/new")
        assert status == 200
        status, config = control(daemon).get("/v1/mcp-config")
        assert status == 200
        headers = config["headers"]
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with Client(streamable_http_client(config["url"], http_client=http), mode="legacy") as client:
                await client.list_tools()
                poll(lambda: hub_history(d / "hub.sqlite3") == daemon_report(daemon), timeout=30, interval=0.1, what="healthy")
                rss_before = psutil.Process(daemon.pid).memory_info().rss
                os.kill(hub.pid, signal.SIGSTOP)
                try:
                    held = 0
                    for n in range(150):  # the hub reads nothing now; every call and list is evidence for it
                        result = await client.call_tool("describe_execution", {})
                        assert result.is_error is False
                        await client.list_tools()
                        if n % 25 == 24:
                            held = max(held, _upstream(daemon)["buffered_bytes"])
                    # Frames were held back (the socket's buffers are full): the stall is real, and bounded.
                    assert held > 64 * 1024, "the hub never stopped reading: the stall was not real"
                    assert _readyz(daemon)[0] == 200
                    rss_after = psutil.Process(daemon.pid).memory_info().rss
                    assert rss_after - rss_before < 40 * 1024 * 1024, (rss_before, rss_after)
                finally:
                    os.kill(hub.pid, signal.SIGCONT)
        poll(lambda: hub_history(d / "hub.sqlite3") == daemon_report(daemon), timeout=30, interval=0.1, what="repaired after resume")
    finally:
        daemon.kill()
        hub.kill()


def _text(proc, *args: str) -> str:
    """`agentctl ARGS --socket` of that daemon, as one line of words (the text wraps at 80 columns)."""
    done = subprocess.run(agentctl_cmd(*args, "--socket", proc.ready["control_socket"]), capture_output=True,
                          text=True, timeout=60, cwd=REPO, env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


def _spec_in(d, name: str, execution: str = "exec-1"):
    """A spec with its own state directory under d/name, naming the hub at d/hub.sock."""
    (d / name).mkdir()
    return write_spec(d / name, execution=execution, upstream=str(d / "hub.sock"))


def test_a_second_instance_of_the_execution_that_dies_leaves_the_first_rejected_then_followed_again(short_tmp):
    # Two `agentctl serve` of one execution (each its own state dir and socket) against one real hub; the
    # second says hello last, then dies by SIGKILL. The first is alive and talking all along.
    d = short_tmp
    hub = start_hub(d)
    first = start_daemon(d, _spec_in(d, "a"), name="a")
    second = None
    try:
        status, opened = control(first).post("/v1/session/new")
        assert status == 200
        poll(lambda: hub_history(d / "hub.sqlite3") == daemon_report(first), timeout=30, interval=0.1,
             what="the hub to follow the first daemon")

        second = start_daemon(d, _spec_in(d, "b"), name="b")
        poll(lambda: _upstream(first)["state"] == "superseded", timeout=30, interval=0.1,
             what="the first daemon to be told it is superseded")
        upstream = _upstream(first)
        assert upstream["superseded_reason"] == "stale_instance" and upstream["superseded_at"]
        assert "upstream superseded (a newer daemon instance of this execution is current" in _text(first, "status")
        assert "upstream connected" not in _text(first, "status")
        assert "Upstream: superseded (a newer daemon instance" in _text(first, "diagnostics")
        code, ready = _readyz(first)
        assert code == 200, "superseded is degraded, not unready: the agent is still served"
        assert ready["checks"]["upstream"] == {"ok": True, "detail": "superseded: stale_instance"}
        assert ready["degraded"] == {"upstream": "stale_instance"}
        assert _upstream(second)["state"] == "connected"

        second.popen.kill()  # SIGKILL: no goodbye, the hub only sees the connection close
        second.popen.wait(timeout=10)
        # The hub asks the live first daemon back: a fresh hello and snapshot make it current again.
        poll(lambda: _upstream(first)["state"] == "connected" and _upstream(first)["connects"] == 2, timeout=30,
             interval=0.1, what="the first daemon to reconnect")
        assert _upstream(first)["last_error"] == "reconnect"
        poll(lambda: hub_history(d / "hub.sqlite3") == daemon_report(first), timeout=30, interval=0.1,
             what="the hub to hold the first daemon's history again")
        assert hub_history(d / "hub.sqlite3")["current"]["attempt_id"] == opened["attempt_id"]
        hub_status = subprocess.run(agentctl_cmd("hub", "status", "--db", str(d / "hub.sqlite3")),
                                    capture_output=True, text=True, timeout=60, cwd=REPO).stdout
        assert "no attachment attempt" not in hub_status and opened["attempt_id"] in hub_status
        assert "execution exec-1 · connected" in hub_status
        # And it keeps following it: new evidence lands.
        status, reset = control(first).post("/v1/session/reset")
        assert status == 200
        poll(lambda: (hub_history(d / "hub.sqlite3") or {}).get("current", {}).get("attempt_id") == reset["attempt_id"],
             timeout=30, interval=0.1, what="the reset to reach the hub")
        code, ready = _readyz(first)
        assert ready["degraded"] == {} and ready["checks"]["upstream"]["detail"] == "connected"
    finally:
        first.kill()
        if second is not None:
            second.kill()
        hub.kill()


def test_a_daemon_of_an_older_execution_is_shown_superseded_and_stays_so_when_the_newer_one_dies(short_tmp):
    d = short_tmp
    hub = start_hub(d)
    old = start_daemon(d, _spec_in(d, "a", "exec-old"), name="a")
    new = None
    try:
        poll(lambda: _upstream(old)["state"] == "connected", timeout=30, interval=0.1, what="connected")
        new = start_daemon(d, _spec_in(d, "b", "exec-new"), name="b")
        poll(lambda: _upstream(old)["state"] == "superseded", timeout=30, interval=0.1, what="superseded")
        assert _upstream(old)["superseded_reason"] == "stale_execution"
        assert "upstream superseded (a newer execution of this session is current" in _text(old, "status")
        assert "Upstream: superseded (a newer execution of this session is current" in _text(old, "diagnostics")
        code, ready = _readyz(old)
        assert code == 200 and ready["degraded"] == {"upstream": "stale_execution"}
        assert ready["checks"]["upstream"] == {"ok": True, "detail": "superseded: stale_execution"}
        new.popen.kill()
        new.popen.wait(timeout=10)
        # A newer execution superseded it: it is not asked back, and the hub keeps the newer one current.
        status, _ = control(old).post("/v1/session/new")
        assert status == 200
        poll(lambda: hub_history(d / "hub.sqlite3") is not None, timeout=30, interval=0.1, what="the hub's flush")
        assert hub_history(d / "hub.sqlite3")["identity"]["execution_id"] == "exec-new"
        assert _upstream(old)["state"] == "superseded" and _upstream(old)["connects"] == 1
    finally:
        old.kill()
        if new is not None:
            new.kill()
        hub.kill()
