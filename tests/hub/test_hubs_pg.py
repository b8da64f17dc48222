"""Two real `agentctl hub serve` processes (two Unix sockets, as on two executor hosts) sharing one real PostgreSQL:
a session's execution 1 on hub A, execution 2 (a real `agentctl serve` daemon) on hub B. The database fences
execution 1; hub A tells its daemon and rejects its late frames; both hubs' pages and `hub status` show
execution 2 current, with every count what the daemons sent; a change through B reaches A's page live; and
hub A SIGKILLed leaves hub B's view right (A's daemon shown not connected), and when A returns on its socket
its daemon resyncs through its snapshot, to the same view on both hubs."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from agentctl.evidence import reducer
from agentctl.evidence.contract.report import AttachmentHistory, EvidenceEvent
from agentctl.upstream import protocol as P
from tests.conftest import REPO, agentctl_cmd
from tests.conftest import eventually as eventually_every
from tests.pg import PgDatabase
from tests.upstream.procs import Proc, control, daemon_report, start_agentctl, start_daemon, write_spec
from tests.upstream.support import RawClient, eventually, identity

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
FENCE_BOUND = 5.0  # seconds: a notification normally, the hub's once-a-second check at worst (plus a loaded CI)


def _dsn_file(d: Path, db: PgDatabase) -> Path:
    path = d / "hub.dsn"
    path.write_text(db.url + "\n")
    path.chmod(0o600)
    return path


def _start_hub(d: Path, name: str, dsn: Path) -> Proc:
    return start_agentctl(["hub", "serve", "--socket", str(d / f"{name}.sock"), "--db-file", str(dsn),
                           "--tasks-db", str(d / f"{name}.tasks.sqlite3"), "--http", "0",
                           "--token-file", str(d / f"{name}.token")], d / f"{name}.log")


def _page(hub: Proc, path: str = "/api/status") -> dict:
    token = Path(hub.ready["token_file"]).read_text().strip()
    request = urllib.request.Request(hub.ready["http"].rstrip("/") + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def _cli(*args: str, dsn: Path) -> dict:
    done = subprocess.run(agentctl_cmd("hub", *args, "--db-file", str(dsn), "--json"), capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _event(seq: int, *, execution: str = "exec-1", instance: str = "inst-a") -> EvidenceEvent:
    return EvidenceEvent(kind="configured", occurred_at=T0 + timedelta(seconds=seq), task_id="task-1",
                         session_id="session-1", execution_id=execution, instance_id=instance, attempt_id="att_1",
                         seq=seq, server=f"s{seq}")


def _current(view: dict) -> str | None:
    sessions = view["sessions"]
    return sessions[0]["execution_id"] if sessions else None


def _assert_no_password(text: str, password: str) -> None:
    from urllib.parse import quote

    for form in (password, quote(password, safe=""), password.lower()):
        assert form not in text, form


async def test_execution_2_on_hub_b_fences_execution_1_on_hub_a_and_both_hubs_show_it_with_every_count(
        pg_db: PgDatabase, short_dir: Path):
    d = short_dir
    dsn = _dsn_file(d, pg_db)
    hub_a, hub_b = _start_hub(d, "a", dsn), _start_hub(d, "b", dsn)
    daemon = client = None
    try:
        # Execution 1 on hub A: a snapshot with one attempt, then three events (exact counts: raw frames).
        one = identity(execution="exec-1", instance="inst-a")
        client = await RawClient.connect(d / "a.sock")
        await client.hello(one)
        history = AttachmentHistory(version=1, identity=one, updated_at=T0)
        reducer.begin_attempt(history, attempt_id="att_1", origin="manual", now=T0)
        await client.send(P.frame(P.SnapshotFrame, history=history))
        for seq in (1, 2, 3):
            await client.send(P.frame(P.EvidenceFrame, event=_event(seq)))
        await eventually(lambda: (_page(hub_b)["sessions"] or [{}])[0].get("execution_id") == "exec-1", timeout=20,
                         what="hub B's page to list hub A's session live")

        # Execution 2 on hub B: a real daemon, which opens an attachment attempt.
        spec = write_spec(d, execution="exec-2", upstream=str(d / "b.sock"), name="b-spec.toml")
        daemon = start_daemon(d, spec, name="daemon-b")
        status, opened = control(daemon).post("/v1/session/new")
        assert status == 200

        # Hub A tells execution 1's connection, within a bounded delay, that it is fenced; it stays open.
        started = time.monotonic()
        told = await client.recv(timeout=FENCE_BOUND + 20)
        assert isinstance(told, P.ErrorFrame) and told.code == "stale_execution" and not told.fatal
        assert time.monotonic() - started < FENCE_BOUND + 20

        # Its late frames are rejected and counted, on hub A, in the shared database.
        for seq in (4, 5, 6, 7):
            await client.send(P.frame(P.EvidenceFrame, event=_event(seq)))

        def settled() -> bool:
            page = _page(hub_b, "/api/sessions/session-1/history")  # hub B reads what hub A wrote
            flags = {e["execution_id"]: e["flags"] for e in page["executions"]}
            return "4 frames rejected" in flags.get("exec-1", "") and page["current"] is not None

        await eventually(settled, timeout=30, what="both executions' frames in the shared database")
        await eventually(lambda: _cli("report", "session-1", dsn=dsn)["history"]["current"]
                         == daemon_report(daemon)["current"], timeout=30, what="execution 2's history stored whole")
        status_view = _cli("status", dsn=dsn)
        assert [s["current_execution_id"] for s in status_view["sessions"]] == ["exec-2"]
        report = _cli("report", "session-1", dsn=dsn)
        by_id = {e["execution_id"]: e for e in report["executions"]}
        assert by_id["exec-2"]["current"] and not by_id["exec-1"]["current"]
        assert by_id["exec-1"]["rejected_frames"] == 4 and by_id["exec-2"].get("rejected_frames", 0) == 0
        old = _cli("report", "session-1", "--execution", "exec-1", dsn=dsn)
        assert [e["seq"] for e in old["history"]["current"]["evidence"]] == [1, 2, 3], "no late frame landed"
        assert report["history"]["current"]["attempt_id"] == opened["attempt_id"]

        # Both hubs' pages show execution 2 current with the same counts.
        for hub in (hub_a, hub_b):
            await eventually(lambda hub=hub: _current(_page(hub)) == "exec-2"
                             and _page(hub)["sessions"][0]["stale"] == "rejected 4 frames from superseded executions "
                             "or instances", timeout=FENCE_BOUND + 10, what="the page of each hub")
            page = _page(hub, "/api/sessions/session-1/history")
            flags = {e["execution_id"]: e["flags"] for e in page["executions"]}
            assert flags["exec-1"].startswith("superseded") and "4 frames rejected" in flags["exec-1"]
            assert flags["exec-2"].startswith("current, daemon connected")

        # A change through hub B (a reset on its daemon) reaches hub A's page live.
        status, reset = control(daemon).post("/v1/session/reset")
        assert status == 200
        began = time.monotonic()
        await eventually_every(lambda: (_page(hub_a)["sessions"][0]["attempt"] or {}).get("attempt_id")
                               == reset["attempt_id"], timeout=10, interval=0.05, what="B's change on A's page")
        assert time.monotonic() - began < 10

        # Hub A SIGKILLed: hub B's view stays right and its daemon's changes keep landing.
        hub_a.popen.kill()
        hub_a.popen.wait(timeout=10)
        status, again = control(daemon).post("/v1/session/reset")
        assert status == 200
        await eventually(lambda: (_page(hub_b)["sessions"][0]["attempt"] or {}).get("attempt_id") == again["attempt_id"],
                         timeout=10, what="B's page after A died")
        after = _page(hub_b)["sessions"][0]
        assert after["execution_id"] == "exec-2" and after["connected"] and "rejected 4 frames" in after["stale"]

        for hub in (hub_a, hub_b):  # no password in the ready line or the log
            _assert_no_password(json.dumps(hub.ready) + hub.log.read_text(), pg_db.password)
        assert hub_a.ready["db"].startswith("postgresql://agentctl:***@/")
    finally:
        if client is not None:
            await client.close()
        if daemon is not None:
            daemon.kill()
        for hub in (hub_a, hub_b):
            hub.kill()


def _views(hub: Proc) -> tuple[list[dict], dict]:
    """The hub's page: its sessions (without the last contact, which heartbeats move) and session-1's history."""
    sessions = [{k: v for k, v in s.items() if k != "last_contact"} for s in _page(hub)["sessions"]]
    history = _page(hub, "/api/sessions/session-1/history")
    history["session"].pop("last_contact")
    for execution in history["executions"]:
        execution.pop("last_contact")
    return sessions, history


async def test_a_hub_sigkilled_leaves_the_other_hubs_view_right_and_its_daemon_resyncs_through_the_snapshot_on_return(
        pg_db: PgDatabase, short_dir: Path):
    d = short_dir
    dsn = _dsn_file(d, pg_db)
    hub_a, hub_b = _start_hub(d, "a", dsn), _start_hub(d, "b", dsn)
    daemon = None
    try:
        daemon = start_daemon(d, write_spec(d, execution="exec-1", upstream=str(d / "a.sock")), name="daemon-a")
        status, opened = control(daemon).post("/v1/session/new")
        assert status == 200

        def listed(hub: Proc, attempt: str, connected: bool) -> bool:
            sessions = _page(hub)["sessions"]
            return (len(sessions) == 1 and sessions[0]["execution_id"] == "exec-1"
                    and (sessions[0]["attempt"] or {}).get("attempt_id") == attempt
                    and sessions[0]["connected"] is connected)

        await eventually(lambda: listed(hub_b, opened["attempt_id"], True), timeout=20, what="A's daemon on B's page")

        # Hub A SIGKILLed: no goodbye, no flag cleared by A. Hub B sees it gone from the database and shows A's
        # daemon not connected, its session otherwise as A last wrote it.
        hub_a.popen.kill()
        hub_a.popen.wait(timeout=10)
        await eventually(lambda: listed(hub_b, opened["attempt_id"], False), timeout=FENCE_BOUND + 10,
                         what="B to show the dead hub's daemon not connected")  # ~2 s: two checks, then a reread

        # The daemon goes on meanwhile (its publisher buffers); hub A returns on the same socket.
        status, reset = control(daemon).post("/v1/session/reset")
        assert status == 200
        hub_a = _start_hub(d, "a", dsn)
        await eventually(lambda: listed(hub_a, reset["attempt_id"], True) and listed(hub_b, reset["attempt_id"], True),
                         timeout=20, what="the daemon's snapshot through the returned hub on both pages")
        # Both views are the same, and the history is the daemon's own.
        await eventually(lambda: _views(hub_a) == _views(hub_b), timeout=10, what="both hubs' views equal")
        _, history = _views(hub_b)
        assert history["current"]["attempt_id"] == daemon_report(daemon)["current"]["attempt_id"] == reset["attempt_id"]
        assert [e["flags"] for e in history["executions"]] == ["current, daemon connected"]
        assert [p["attempt_id"] for p in history["previous"]] == [opened["attempt_id"]]
    finally:
        if daemon is not None:
            daemon.kill()
        for hub in (hub_a, hub_b):
            hub.kill()
