"""The hub's rules end to end with real processes: `agentctl hub serve` and `agentctl serve` daemons of one session,
superseded by a newer instance or a newer execution, one killed with SIGKILL."""

from __future__ import annotations

import subprocess

from tests.conftest import REPO, agentctl_cmd, poll
from tests.upstream.procs import (
    cli_text,
    control,
    daemon_report,
    hub_history,
    readyz,
    spec_in,
    start_daemon,
    start_hub,
    upstream_of,
)


def test_a_second_instance_of_the_execution_that_dies_leaves_the_first_rejected_then_followed_again(short_tmp):
    # Two `agentctl serve` of one execution (each its own state dir and socket) against one real hub; the
    # second says hello last, then dies by SIGKILL. The first is alive and talking all along.
    d = short_tmp
    hub = start_hub(d)
    first = start_daemon(d, spec_in(d, "a"), name="a")
    second = None
    try:
        status, opened = control(first).post("/v1/session/new")
        assert status == 200
        poll(lambda: hub_history(d / "hub.sqlite3") == daemon_report(first), timeout=30, interval=0.1,
             what="the hub to follow the first daemon")

        second = start_daemon(d, spec_in(d, "b"), name="b")
        poll(lambda: upstream_of(first)["state"] == "superseded", timeout=30, interval=0.1,
             what="the first daemon to be told it is superseded")
        upstream = upstream_of(first)
        assert upstream["superseded_reason"] == "stale_instance" and upstream["superseded_at"]
        assert "upstream superseded (a newer daemon instance of this execution is current" in cli_text(first, "status")
        assert "upstream connected" not in cli_text(first, "status")
        assert "Upstream: superseded (a newer daemon instance" in cli_text(first, "diagnostics")
        code, ready = readyz(first)
        assert code == 200, "superseded is degraded, not unready: the agent is still served"
        assert ready["checks"]["upstream"] == {"ok": True, "detail": "superseded: stale_instance"}
        assert ready["degraded"] == {"upstream": "stale_instance"}
        assert upstream_of(second)["state"] == "connected"

        second.popen.kill()  # SIGKILL: no goodbye, the hub only sees the connection close
        second.popen.wait(timeout=10)
        # The hub asks the live first daemon back: a fresh hello and snapshot make it current again.
        poll(lambda: upstream_of(first)["state"] == "connected" and upstream_of(first)["connects"] == 2, timeout=30,
             interval=0.1, what="the first daemon to reconnect")
        assert upstream_of(first)["last_error"] == "reconnect"
        poll(lambda: hub_history(d / "hub.sqlite3") == daemon_report(first), timeout=30, interval=0.1,
             what="the hub to hold the first daemon's history again")
        assert hub_history(d / "hub.sqlite3")["current"]["attempt_id"] == opened["attempt_id"]
        hub_status = subprocess.run(agentctl_cmd("hub", "status", "--db", str(d / "hub.sqlite3")),
                                    capture_output=True, text=True, timeout=60, cwd=REPO).stdout
        assert "no attachment attempt" not in hub_status and opened["attempt_id"] in hub_status
        assert "execution exec-1 · daemon connected" in hub_status
        # And it keeps following it: new evidence lands.
        status, reset = control(first).post("/v1/session/reset")
        assert status == 200
        poll(lambda: (hub_history(d / "hub.sqlite3") or {}).get("current", {}).get("attempt_id") == reset["attempt_id"],
             timeout=30, interval=0.1, what="the reset to reach the hub")
        code, ready = readyz(first)
        assert ready["degraded"] == {} and ready["checks"]["upstream"]["detail"] == "connected"
    finally:
        first.kill()
        if second is not None:
            second.kill()
        hub.kill()


def test_a_daemon_of_an_older_execution_is_shown_superseded_and_stays_so_when_the_newer_one_dies(short_tmp):
    d = short_tmp
    hub = start_hub(d)
    old = start_daemon(d, spec_in(d, "a", "exec-old"), name="a")
    new = None
    try:
        poll(lambda: upstream_of(old)["state"] == "connected", timeout=30, interval=0.1, what="connected")
        new = start_daemon(d, spec_in(d, "b", "exec-new"), name="b")
        poll(lambda: upstream_of(old)["state"] == "superseded", timeout=30, interval=0.1, what="superseded")
        assert upstream_of(old)["superseded_reason"] == "stale_execution"
        assert "upstream superseded (a newer execution of this session is current" in cli_text(old, "status")
        assert "Upstream: superseded (a newer execution of this session is current" in cli_text(old, "diagnostics")
        code, ready = readyz(old)
        assert code == 200 and ready["degraded"] == {"upstream": "stale_execution"}
        assert ready["checks"]["upstream"] == {"ok": True, "detail": "superseded: stale_execution"}
        new.popen.kill()
        new.popen.wait(timeout=10)
        # A newer execution superseded it: it is not asked back, and the hub keeps the newer one current.
        status, _ = control(old).post("/v1/session/new")
        assert status == 200
        poll(lambda: hub_history(d / "hub.sqlite3") is not None, timeout=30, interval=0.1, what="the hub's flush")
        assert hub_history(d / "hub.sqlite3")["identity"]["execution_id"] == "exec-new"
        assert upstream_of(old)["state"] == "superseded" and upstream_of(old)["connects"] == 1
    finally:
        old.kill()
        if new is not None:
            new.kill()
        hub.kill()
