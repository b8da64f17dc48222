"""A daemon SIGKILLed mid-run, then a new daemon for a new execution of the same session, with real processes
(`agentctl hub serve`, two `agentctl serve`, the CLI): the killed execution's report stays readable on disk
and at the hub, the hub holds the new execution as current, and frames that arrive late under the old
execution's identity are rejected and counted without touching either history.

The other upstream faults (absent at start, restarted mid-run, stalled) are proved in tests/upstream
(see tests/reliability/FAULTS.md)."""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from agentctl.evidence.contract.report import EvidenceEvent, Identity, decode_history
from agentctl.upstream import protocol as P
from agentctl.hub.hub_store import HubStore
from agentctl.hub.views import report_view
from tests.conftest import REPO, agentctl_cmd, eventually, poll
from tests.reliability.faults_support import open_attempt, prove_served
from tests.upstream.procs import daemon_report, hub_history, start_daemon, start_hub, write_spec
from tests.upstream.support import RawClient


def _hub_view(db: Path, execution: str | None = None) -> dict | None:
    """`agentctl hub report session-1 [--execution ID] --json`, read in process (polled often)."""
    store = HubStore(db, readonly=True)
    try:
        session = store.load().get("session-1")
    finally:
        store.close()
    view = report_view(session, execution) if session else None
    return None if view is None else msgspec.to_builtins(view)


def _agentctl(*args: str) -> dict:
    done = subprocess.run(agentctl_cmd(*args), capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _late_event(history: dict) -> EvidenceEvent:
    """An observation the old daemon might still have had in flight: newer than anything it sent."""
    last = msgspec.convert(history["current"]["evidence"][-1], EvidenceEvent)
    return msgspec.structs.replace(last, seq=history["last_seq"] + 1, occurred_at=datetime.now(UTC),
                                   kind="tool_call_observed", tool_name="get_task", outcome="ok")


def _settled(daemon, db) -> bool:
    """The hub holds the daemon's report, including the listing recorded again once the catalog's token
    counts are in (when the first tools/list came before them): nothing of the daemon's own is on its way."""
    report = daemon_report(daemon)
    current = report.get("current") or {}
    estimated = any((row.get("catalog") or {}).get("estimator") for row in current.get("servers", []))
    return estimated and hub_history(db) == report


async def test_a_sigkilled_daemon_keeps_its_report_and_the_hub_rejects_its_late_frames_once_a_new_execution_is_current(
    short_tmp,
):
    d = short_tmp
    db = d / "hub.sqlite3"
    hub = start_hub(d)
    old = start_daemon(d, write_spec(d, execution="exec-1"), "old")
    new = None
    try:
        await prove_served(open_attempt(d / "old.sock"))
        poll(lambda: _settled(old, db), timeout=60, interval=0.05, what="the hub caught up")
        last = daemon_report(old)
        old_file = d / "state" / "exec-1" / "report.json"
        poll(lambda: old_file.exists() and json.loads(old_file.read_bytes()) == last, timeout=10,
             what="the old report on disk")
        old_bytes = old_file.read_bytes()

        old.popen.send_signal(signal.SIGKILL)
        assert old.popen.wait(timeout=10) == -signal.SIGKILL
        poll(lambda: not _hub_view(db)["session"]["connected"], timeout=30, interval=0.05, what="the hub saw it go")

        new = start_daemon(d, write_spec(d, execution="exec-2", name="spec2.toml"), "new")
        await prove_served(open_attempt(d / "new.sock"))
        poll(lambda: _settled(new, db), timeout=60, interval=0.05, what="the new execution")
        session = _hub_view(db)["session"]
        assert session["current_execution_id"] == "exec-2" and session["connected"]

        # The killed execution's report: whole on disk, read offline by the CLI, and kept by the hub.
        assert _agentctl("report", "--state-dir", str(d / "state"), "--execution", "exec-1", "--json") == last
        assert _hub_view(db, "exec-1")["history"] == last

        # Late frames under the old execution's identity, over the hub's real socket.
        late = await RawClient.connect(d / "hub.sock")
        try:
            await late.hello(msgspec.convert(last["identity"], Identity))
            refusal = await late.recv()
            assert isinstance(refusal, P.ErrorFrame) and refusal.code == "stale_execution"
            await late.send(P.frame(P.SnapshotFrame, history=decode_history(json.dumps(last))))
            await late.send(P.frame(P.EvidenceFrame, event=_late_event(last)))
            await eventually(lambda: _hub_view(db)["session"].get("stale_rejected", 0) >= 3, timeout=10,
                             what="the late frames counted")
        finally:
            await late.close()

        view = _agentctl("hub", "report", "session-1", "--db", str(db), "--json")
        assert view["session"]["current_execution_id"] == "exec-2" and view["session"].get("stale_rejected") == 3
        executions = {e["execution_id"]: e for e in view["executions"]}
        assert executions["exec-1"].get("rejected_frames") == 3 and not executions["exec-1"]["current"]
        assert executions["exec-2"].get("rejected_frames", 0) == 0 and executions["exec-2"]["current"]
        assert view["history"] == daemon_report(new), "the current execution's history is untouched"
        assert _hub_view(db, "exec-1")["history"] == last, "and so is the old one's"
        assert old_file.read_bytes() == old_bytes, "the new daemon never writes the old execution's report"
        assert new.stop() == 0
    finally:
        for proc in (old, new, hub):
            if proc is not None:
                proc.kill()
