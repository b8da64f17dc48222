"""A state directory that fills up (ENOSPC) or turns read-only (EROFS) under a real `agentctl serve`: the
execution's report directory is a real small tmpfs, filled with a filler file or remounted read-only. Live
state keeps working, the failure is logged once, the report on disk stays whole (the last good one), and
once the space is freed or the mount writable again the report on disk catches up with the live one."""

from __future__ import annotations

import pytest

from agentctl.evidence.store import LOCK_NAME, ReportNotFound, read_report
from tests.agent.serve_support import cli, cli_json, http_get, report_of, row, status
from tests.conftest import poll, write_spec
from tests.reliability.faults_support import fill, open_attempt, prove_served, remount, tmpfs
from tests.upstream.procs import builtins, start_daemon

EXEC = "exec-test"


def _on_disk(state) -> dict | None:
    try:
        return builtins(read_report(state, EXEC))
    except ReportNotFound:  # not written yet; a torn or corrupt report would fail the test
        return None


def _log_lines(daemon, needle: str) -> list[str]:
    return [line for line in daemon.log.read_text().splitlines() if needle in line]


def _assert_degraded(daemon, sock, errno_name: str) -> None:
    """status (--json and text), diagnostics and /readyz?verbose all say the report cannot be written."""
    body = poll(lambda: (s := status(sock))["degraded"] and s, timeout=10, what="degraded in status --json")
    assert body["degraded"] == {"persistence": "report_write_failed"} and body["ready"] is True
    assert cli(sock, "status").stdout.startswith("Daemon: ready, degraded (persistence: report_write_failed)")
    assert "Daemon: ready, degraded (persistence: report_write_failed)" in cli(sock, "diagnostics").stdout
    assert cli_json(sock, "diagnostics")["degraded"] == {"persistence": "report_write_failed"}
    code, ready = http_get(daemon.ready["mcp_url"][: -len("/mcp")] + "/readyz?verbose")
    assert code == 200, "degraded is not unready: the daemon still serves MCP"
    assert ready["degraded"] == {"persistence": "report_write_failed"}
    assert ready["checks"]["persistence"] == {"ok": True, "detail": f"report_write_failed: {errno_name}"}


@pytest.mark.parametrize(("fault", "errno_name"), [("full", "ENOSPC"), ("read_only", "EROFS")])
async def test_a_full_or_read_only_state_directory_keeps_live_state_logs_once_and_persistence_catches_up(
    short_tmp, fault, errno_name
):
    d = short_tmp
    state = d / "state"
    # The mount is the execution's report directory: the task store one level up stays writable (and open,
    # which would make a remount read-only of a mount holding it refused as busy).
    with tmpfs(state / EXEC, "1m") as exec_dir:
        sock = d / "daemon.sock"
        # At debug level the repeats of the failure are visible too: one WARNING, the rest at DEBUG.
        daemon = start_daemon(d, write_spec(d), extra=("--log-level", "debug"))
        try:
            first = open_attempt(sock)
            await prove_served(first)
            poll(lambda: _on_disk(state) == report_of(sock), timeout=10, what="the first report on disk")
            before = _on_disk(state)

            if fault == "full":
                filler = fill(exec_dir)
            else:
                remount(exec_dir, "ro")
            second = open_attempt(sock, "/v1/session/reset")
            await prove_served(second)
            poll(lambda: _log_lines(daemon, "report write failed"), timeout=10, what="the failed write logged")
            await prove_served(second)  # more changes during the outage: retried, not logged again
            poll(lambda: len(_log_lines(daemon, "report write failed")) >= 2, timeout=10, what="a retried write")

            live = report_of(sock)
            assert live["current"]["attempt_id"] == second["attempt_id"]
            assert row(live, "kandev")["status"] == "active", "live state goes on without the disk"
            assert _on_disk(state) == before, "the report on disk is the last whole one, not a torn one"
            # Visible on every surface, not only in the log: degraded with its reason code, still ready.
            _assert_degraded(daemon, sock, errno_name)

            if fault == "full":
                filler.unlink()
            else:
                remount(exec_dir, "rw")
            await prove_served(second)  # the next change writes
            poll(lambda: _on_disk(state) == report_of(sock), timeout=10, what="the report on disk to catch up")
            poll(lambda: _log_lines(daemon, "report write to"), timeout=5, what="the recovery logged")
            poll(lambda: status(sock)["degraded"] == {}, timeout=5, what="degraded to clear after a good write")
            code, ready = http_get(daemon.ready["mcp_url"][: -len("/mcp")] + "/readyz?verbose")
            assert code == 200 and ready["degraded"] == {} and ready["checks"]["persistence"] == {"ok": True}
            assert "degraded" not in cli(sock, "status").stdout

            failed = _log_lines(daemon, "report write failed")
            warnings = [line for line in failed if "WARNING" in line]
            assert len(warnings) == 1 and failed[0] == warnings[0], failed
            assert all(errno_name in line and str(exec_dir / "report.json") in line for line in failed)
            assert "recovered after" in _log_lines(daemon, "report write to")[0]
            # The daemon's lock (held for its life) is the only other file; no temp file was left behind.
            assert sorted(p.name for p in exec_dir.iterdir()) == [LOCK_NAME, "report.json"], "no temp file left behind"
            last = report_of(sock)
            assert daemon.stop() == 0
            assert _on_disk(state)["current"] == last["current"]
        finally:
            daemon.kill()
