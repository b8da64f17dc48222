"""Behaviour of report persistence: state dir resolution, atomic replace, coalesced writes, failures, reading back."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import platformdirs
import pytest

from agentctl.evidence import store
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import Identity, decode_history
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from agentctl.evidence.store import (
    Persister,
    ReportCorrupt,
    ReportNotFound,
    StateDirError,
    ensure_state_dir,
    list_reports,
    read_report,
    remove_stale_temps,
    report_path,
    resolve_state_dir,
    write_atomic,
)
from tests.conftest import eventually, poll

REPO_ROOT = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).with_name("persist_writer.py")
EXEC_ID = "exec_store_test"
SECRETISH = "srv-with-a-distinctive-name"


def make_ledger(execution_id: str = EXEC_ID) -> Ledger:
    return Ledger(
        Identity(
            task_id="task_1",
            session_id="sess_1",
            execution_id=execution_id,
            instance_id="inst_1",
            agent_id="agent_1",
            agent_profile_id="profile_1",
        )
    )


def seeded(ledger: Ledger) -> str:
    attempt_id, _ = ledger.begin_attempt(
        "session_new", [ServerSeed(name=SECRETISH, source="profile", transport="http", target="https://h.test")]
    )
    return attempt_id



def wait_until(pred: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    poll(pred, timeout, interval=0.002, what=what)


def temp_files(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".tmp"))


# ----------------------------------------------------------------------------------------- state dir


def test_state_dir_comes_from_the_spec_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STATE_DIRECTORY", "/from/systemd")
    assert resolve_state_dir(str(tmp_path / "spec")) == tmp_path / "spec"


def test_state_dir_falls_back_to_the_first_systemd_state_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/agentctl:/var/lib/other")
    assert resolve_state_dir(None) == Path("/var/lib/agentctl")
    assert resolve_state_dir("") == Path("/var/lib/agentctl")


def test_state_dir_falls_back_to_platformdirs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    assert resolve_state_dir(None) == Path(platformdirs.user_state_dir("agentctl"))


def test_report_path_is_per_execution_and_refuses_path_tricks(tmp_path: Path) -> None:
    assert report_path(tmp_path, "exec_1") == tmp_path / "exec_1" / "report.json"
    for bad in ("", ".", "..", "a/b", "../x", "x..y", "/abs", "a\x00b"):
        with pytest.raises(ValueError):
            report_path(tmp_path, bad)


def test_ensure_state_dir_creates_private_directories(tmp_path: Path) -> None:
    root = tmp_path / "state"
    exec_dir = ensure_state_dir(root, "exec_1")
    assert exec_dir == root / "exec_1"
    assert stat.S_IMODE(root.stat().st_mode) & 0o077 == 0
    assert stat.S_IMODE(exec_dir.stat().st_mode) & 0o077 == 0
    assert ensure_state_dir(root, "exec_1") == exec_dir  # idempotent


def test_ensure_state_dir_failure_is_one_line_naming_the_dir_and_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("not a dir")
    with pytest.raises(StateDirError) as info:
        ensure_state_dir(blocker, "exec_1")
    msg = str(info.value)
    assert msg == f"state dir {blocker}: not a directory"
    assert "\n" not in msg and "Traceback" not in msg
    with pytest.raises(StateDirError) as info:
        ensure_state_dir(blocker / "below", "exec_1")
    assert str(info.value) == f"state dir {blocker / 'below'}: not a directory"


# -------------------------------------------------------------------------------------- atomic write


def test_atomic_write_replaces_content_with_private_mode_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    write_atomic(target, b"old")
    write_atomic(target, b"new content")
    assert target.read_bytes() == b"new content"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert temp_files(tmp_path) == []


def test_atomic_write_failure_keeps_the_old_file_and_removes_its_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "report.json"
    write_atomic(target, b"old")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        write_atomic(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert temp_files(tmp_path) == []


def test_atomic_write_into_a_missing_directory_fails_without_debris(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing" / "report.json", b"x")
    assert os.listdir(tmp_path) == []


def test_stale_temp_files_of_our_naming_are_removed_and_others_kept(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    stale = tmp_path / ".report.json.1234.abcdef.tmp"
    stale.write_bytes(b"partial")
    other = tmp_path / ".other.json.1.a.tmp"
    other.write_bytes(b"not ours")
    assert remove_stale_temps(target) == [stale]
    assert not stale.exists() and other.exists()


# ------------------------------------------------------------------------------------------- reading


def test_a_persisted_report_reads_back_and_is_listed(tmp_path: Path) -> None:
    ledger = make_ledger()
    seeded(ledger)
    path = report_path(tmp_path, EXEC_ID)
    ensure_state_dir(tmp_path, EXEC_ID)
    write_atomic(path, encode(ledger.history))
    (path.parent / ".report.json.1.ab.tmp").write_bytes(b"{")  # temp debris is ignored
    (tmp_path / "exec_without_report").mkdir()
    assert read_report(tmp_path, EXEC_ID) == ledger.history
    assert list_reports(tmp_path) == [EXEC_ID]
    assert list_reports(tmp_path / "absent") == []


def test_reading_a_missing_report_raises_report_not_found_naming_the_execution(tmp_path: Path) -> None:
    with pytest.raises(ReportNotFound) as info:
        read_report(tmp_path, "exec_missing")
    assert "exec_missing" in str(info.value) and str(tmp_path) in str(info.value)


@pytest.mark.parametrize("content", [b"", b'{"version": 1, "identity": {', b'{"version": 1}', b"[]"])
def test_reading_a_corrupt_report_raises_report_corrupt_naming_the_file(tmp_path: Path, content: bytes) -> None:
    path = report_path(tmp_path, EXEC_ID)
    ensure_state_dir(tmp_path, EXEC_ID)
    path.write_bytes(content)
    with pytest.raises(ReportCorrupt) as info:
        read_report(tmp_path, EXEC_ID)
    assert str(path) in str(info.value)


def test_a_report_of_another_execution_is_refused_as_corrupt(tmp_path: Path) -> None:
    ledger = make_ledger("exec_other")
    ensure_state_dir(tmp_path, EXEC_ID)
    report_path(tmp_path, EXEC_ID).write_bytes(encode(ledger.history))
    with pytest.raises(ReportCorrupt, match="exec_other"):
        read_report(tmp_path, EXEC_ID)


# ----------------------------------------------------------------------------------------- persister


async def test_a_change_only_marks_dirty_and_the_write_happens_later_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = make_ledger()
    path = report_path(tmp_path, EXEC_ID)
    ensure_state_dir(tmp_path, EXEC_ID)
    threads: list[int] = []
    real = store.write_atomic

    def spy(p: Path, data: bytes) -> None:
        threads.append(threading.get_ident())
        real(p, data)

    monkeypatch.setattr(store, "write_atomic", spy)
    persister = Persister(ledger, path, delay=0.05)
    persister.start()
    seeded(ledger)  # synchronous: must not have written anything yet
    assert threads == [] and not path.exists()
    assert persister.dirty
    await eventually(lambda: persister.writes >= 1, 5.0, what="first write")
    assert threading.get_ident() not in threads
    await persister.stop()
    assert decode_history(path.read_bytes()) == ledger.history


async def test_a_burst_of_1000_records_is_coalesced_into_a_few_writes_and_the_file_equals_the_history(
    tmp_path: Path,
) -> None:
    ledger = make_ledger()
    path = report_path(tmp_path, EXEC_ID)
    ensure_state_dir(tmp_path, EXEC_ID)
    persister = Persister(ledger, path, delay=0.2)
    persister.start()
    attempt_id = seeded(ledger)
    for i in range(1000):
        ledger.record("tool_call_observed", attempt_id, SECRETISH, tool_name=f"t{i}", outcome="ok")
        if i % 50 == 0:
            await asyncio.sleep(0)  # let the loop run, as a real request path would
    await persister.flush()
    assert 1 <= persister.writes <= 3
    assert persister.failures == 0
    assert path.read_bytes() == encode(ledger.history)
    assert decode_history(path.read_bytes()).last_seq == ledger.history.last_seq
    await persister.stop()
    assert temp_files(path.parent) == []


async def test_flush_writes_only_when_dirty(tmp_path: Path) -> None:
    ledger = make_ledger()
    path = report_path(tmp_path, EXEC_ID)
    ensure_state_dir(tmp_path, EXEC_ID)
    persister = Persister(ledger, path, delay=60)
    persister.start()
    assert await persister.flush()
    assert persister.writes == 1  # start() persists the state the ledger already has
    assert await persister.flush()
    assert persister.writes == 1
    seeded(ledger)
    assert await persister.flush()
    assert persister.writes == 2
    await persister.stop()
    assert persister.writes == 2


async def test_stop_writes_the_last_change_without_waiting_for_the_delay(tmp_path: Path) -> None:
    ledger = make_ledger()
    path = report_path(tmp_path, EXEC_ID)
    ensure_state_dir(tmp_path, EXEC_ID)
    persister = Persister(ledger, path, delay=60)
    persister.start()
    attempt_id = seeded(ledger)
    ledger.record("delivered", attempt_id, SECRETISH)
    started = time.monotonic()
    await persister.stop()
    assert time.monotonic() - started < 5
    assert read_report(tmp_path, EXEC_ID) == ledger.history


def _block_dir(exec_dir: Path) -> Path:
    """Replace the execution dir by a regular file: works as root (chmod would not), os.open gets ENOTDIR."""
    aside = exec_dir.with_name(exec_dir.name + ".aside")
    exec_dir.rename(aside)
    exec_dir.write_bytes(b"blocker")
    return aside


def _unblock_dir(exec_dir: Path, aside: Path) -> None:
    exec_dir.unlink()
    aside.rename(exec_dir)


async def test_a_failed_write_is_logged_once_keeps_live_state_and_the_next_change_retries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = make_ledger()
    path = report_path(tmp_path, EXEC_ID)
    exec_dir = ensure_state_dir(tmp_path, EXEC_ID)
    # A long backoff: the retry below can only come from the next change.
    health: list[tuple[str | None, str | None]] = []
    persister = Persister(ledger, path, delay=0.01, backoff_initial=60, backoff_max=60,
                          on_health=lambda code, errno_name: health.append((code, errno_name)))
    persister.start()
    attempt_id = seeded(ledger)
    await eventually(lambda: persister.writes >= 1 and not persister.dirty, 5.0, what="first write")
    writes_before = persister.writes
    assert health == [], "nothing to report while writes succeed"

    aside = _block_dir(exec_dir)
    caplog.set_level(logging.DEBUG, logger=store.__name__)
    event = ledger.record("delivered", attempt_id, SECRETISH)
    assert event is not None  # live state keeps working
    await eventually(lambda: persister.failures >= 1, 5.0, what="a failed write")
    assert persister.last_error == "ENOTDIR"
    assert persister.writes == writes_before and persister.dirty
    assert health[0] == ("report_write_failed", "ENOTDIR"), "the failure is reported to the surfaces"
    ledger.record("initialize_observed", attempt_id, SECRETISH, connection_id="conn_1", era="legacy")
    await eventually(lambda: persister.failures >= 2, 5.0, what="a retried, failed write")
    assert ledger.history.current is not None
    assert ledger.history.current.servers[0].status == "connected"

    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # one line per outage; repeats go to DEBUG
    line = warnings[0].getMessage()
    assert str(path) in line and "ENOTDIR" in line and "\n" not in line
    for record in caplog.records:
        assert SECRETISH not in record.getMessage() and attempt_id not in record.getMessage()

    _unblock_dir(exec_dir, aside)
    ledger.record("tools_list_observed", attempt_id, SECRETISH, tool_count=3)
    await eventually(lambda: persister.writes > writes_before and not persister.dirty, 5.0, what="recovered write")
    assert read_report(tmp_path, EXEC_ID) == ledger.history
    assert temp_files(exec_dir) == []
    assert health[-1] == (None, None) and health.count((None, None)) == 1, "cleared once the write succeeds"
    await persister.stop()


async def test_a_failed_write_is_retried_after_a_backoff_without_a_new_change(tmp_path: Path) -> None:
    ledger = make_ledger()
    path = report_path(tmp_path, EXEC_ID)
    exec_dir = ensure_state_dir(tmp_path, EXEC_ID)
    aside = _block_dir(exec_dir)
    persister = Persister(ledger, path, delay=0, backoff_initial=0.02, backoff_max=0.05)
    persister.start()
    seeded(ledger)
    await eventually(lambda: persister.failures >= 3, 5.0, what="backed-off retries")
    assert persister.writes == 0
    _unblock_dir(exec_dir, aside)
    await eventually(lambda: persister.writes >= 1, 5.0, what="a retry that succeeds")
    await persister.stop()
    assert read_report(tmp_path, EXEC_ID) == ledger.history


async def test_start_removes_stale_temp_files_left_by_a_killed_writer(tmp_path: Path) -> None:
    ledger = make_ledger()
    path = report_path(tmp_path, EXEC_ID)
    exec_dir = ensure_state_dir(tmp_path, EXEC_ID)
    (exec_dir / ".report.json.999.deadbeef.tmp").write_bytes(b'{"version":')
    persister = Persister(ledger, path, delay=60)
    persister.start()
    assert temp_files(exec_dir) == []
    await persister.stop()


# ----------------------------------------------------------------------------------------- SIGKILL


def _start_writer(path: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(path), EXEC_ID],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=str(REPO_ROOT),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == b"ready", (line, proc.stderr.read() if proc.poll() is not None else b"")
    return proc


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def _wait_replacements(path: Path, count: int, proc: subprocess.Popen[bytes]) -> None:
    seen = _inode(path)
    changes = 0
    deadline = time.monotonic() + 20
    while changes < count:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
        assert time.monotonic() < deadline, f"report replaced only {changes} of {count} times"
        ino = _inode(path)
        if ino is not None and ino != seen:
            seen = ino
            changes += 1


def _reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


def test_a_writer_killed_with_sigkill_during_a_burst_always_leaves_a_complete_report(tmp_path: Path) -> None:
    path = report_path(tmp_path, EXEC_ID)
    exec_dir = ensure_state_dir(tmp_path, EXEC_ID)
    rng = random.Random(0xA6E)
    left_behind: list[str] = []
    for _round in range(5):
        proc = _start_writer(path)
        try:
            # start() (done before "ready") removed the temp files an earlier kill left behind.
            assert not set(left_behind) & set(temp_files(exec_dir))
            _wait_replacements(path, 3, proc)
            # Kill at a random point of the write cycle: after a random number of further replacements,
            # then a random number of stat polls into the next write.
            _wait_replacements(path, rng.randint(0, 4), proc)
            for _ in range(rng.randint(0, 200)):
                _inode(path)
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=10) == -signal.SIGKILL
        finally:
            _reap(proc)
        history = decode_history(path.read_bytes())  # a complete report, never a torn one
        assert history.identity.execution_id == EXEC_ID
        assert history.current is not None and history.last_seq > 0
        assert read_report(tmp_path, EXEC_ID) == history
        # A temp file may survive the kill: it is named as ours, readers ignore it, the next start() removes it.
        left_behind = temp_files(exec_dir)
        assert all(name.startswith(".report.json.") for name in left_behind)
        assert list_reports(tmp_path) == [EXEC_ID]
