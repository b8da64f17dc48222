"""The state directory is not trusted blindly, and one execution has one daemon, against real processes:
another local user (a real second uid, via setpriv) who can write the state directory pre-creates the
task store and its WAL world-readable, or plants a symbolic link that would send a database elsewhere;
the daemon (and the hub, for its database directory) refuses with one clear line and touches nothing.
Two real `agentctl serve` of one execution in one state directory: the second is refused while the first
lives, and the lock dies with a SIGKILLed daemon so the next one starts."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentctl.control.client import ControlClient
from agentctl.evidence.store import LOCK_NAME
from tests.conftest import REPO, agentctl_cmd, poll, start_serve, write_spec
from tests.reliability.faults_support import NOBODY
from tests.upstream.procs import start_agentctl

SETPRIV = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.fixture
def world() -> Iterator[Path]:
    """A root-owned 0755 directory under /tmp that the other uid can reach (pytest's tmp_path it cannot).
    Control sockets go in its `run/` subdirectory: the socket's own directory is made private (0700)."""
    root = Path(tempfile.mkdtemp(prefix="actl-t-", dir="/tmp"))
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def as_nobody(script: str) -> None:
    """Run a shell script as the other user: what an attacker with no token and no privilege can do."""
    done = subprocess.run([*SETPRIV, "sh", "-ec", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def _serve_refused(spec: Path, sock: Path, *fragments: str) -> str:
    done = subprocess.run(agentctl_cmd("serve", str(spec), "--socket", str(sock)), capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0 and len(lines) == 1 and lines[0].startswith("agentctl: "), done.stderr
    assert "Traceback" not in done.stderr and not done.stdout
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def _untouched(path: Path, mode: int) -> None:
    st = os.lstat(path)
    assert st.st_uid == NOBODY and stat.S_IMODE(st.st_mode) == mode and st.st_size == 0, path


@pytest.mark.parametrize("dir_mode", [0o777, 0o1777], ids=["world-writable", "world-writable-sticky"])
def test_a_task_store_and_wal_pre_created_world_readable_by_another_user_are_refused_untouched(world, dir_mode):
    shared = world / "shared"
    shared.mkdir()
    os.chmod(shared, dir_mode)
    # The other user plants the files the daemon would open, readable and writable by everyone.
    as_nobody(f"cd {shared} && umask 0 && touch tasks.sqlite3 tasks.sqlite3-wal tasks.sqlite3-shm && "
              f"chmod 0666 tasks.sqlite3 tasks.sqlite3-wal tasks.sqlite3-shm")
    spec = write_spec(world, state_dir=shared)
    line = _serve_refused(spec, world / "run" / "c.sock", f"state dir {shared}", "writable by other users")
    assert f"mode {dir_mode:04o}" in line
    for name in ("tasks.sqlite3", "tasks.sqlite3-wal", "tasks.sqlite3-shm"):
        _untouched(shared / name, 0o666)  # never opened: no tool argument could ever land in them
    assert sorted(os.listdir(shared)) == ["tasks.sqlite3", "tasks.sqlite3-shm", "tasks.sqlite3-wal"]


def test_a_symlink_planted_by_another_user_never_makes_the_daemon_create_a_database_elsewhere(world):
    public = world / "public"
    public.mkdir()
    os.chmod(public, 0o1777)  # like /tmp: sticky, so the other user owns only what they create
    elsewhere = world / "elsewhere"
    elsewhere.mkdir(mode=0o700)  # ours: a link into it would otherwise pass every check of the target
    as_nobody(f"ln -s {elsewhere} {public / 'state'}")
    spec = write_spec(world, state_dir=public / "state")
    _serve_refused(spec, world / "run" / "c.sock", f"state dir {public / 'state'}", "symbolic link owned by uid 65534")
    assert os.listdir(elsewhere) == []  # no task store, no execution directory, no report

    # A state directory the other user made (theirs, though root could write into it) is refused too.
    as_nobody(f"mkdir -m 0700 {public / 'theirs'}")
    spec = write_spec(world, state_dir=public / "theirs")
    _serve_refused(spec, world / "run" / "c.sock", "owned by uid 65534, not by this user")


def test_a_state_directory_below_another_users_directory_is_refused_and_nothing_is_written_there(world):
    public = world / "public"
    public.mkdir()
    os.chmod(public, 0o1777)
    # The other user's own directory, even read-only to them: its owner could rename the state directory the
    # daemon makes below it and put a link in its place, and the next report.json would land where they chose.
    as_nobody(f"mkdir -m 0755 {public / 'theirs'} && mkdir -m 0777 {public / 'theirs' / 'deeper'}")
    for state in (public / "theirs" / "state", public / "theirs" / "deeper" / "state"):
        spec = write_spec(world, state_dir=state)
        _serve_refused(spec, world / "run" / "c.sock", f"state dir {state}",
                       f"{public / 'theirs'} is owned by uid 65534, who could swap the private directory below it")
        assert not state.exists()
    # The hub's database directory is held to the same rule.
    done = subprocess.run(agentctl_cmd("hub", "serve", "--socket", str(world / "run" / "hub.sock"), "--db",
                                       str(public / "theirs" / "hub" / "hub.sqlite3")),
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0 and len(lines) == 1 and "is owned by uid 65534, who could swap" in lines[0], done.stderr
    assert sorted(os.listdir(public / "theirs")) == ["deeper"] and os.listdir(public / "theirs" / "deeper") == []


def test_a_database_file_that_is_a_link_or_another_users_is_refused_even_in_a_safe_directory(world):
    state = world / "state"
    state.mkdir(mode=0o700)
    victim = world / "victim.sqlite3"
    (state / "tasks.sqlite3").symlink_to(victim)
    spec = write_spec(world, state_dir=state)
    _serve_refused(spec, world / "run" / "c.sock", "refusing the task store", "is a symbolic link")
    assert not victim.exists()
    (state / "tasks.sqlite3").unlink()
    (state / "tasks.sqlite3").touch(mode=0o600)
    (state / "tasks.sqlite3-wal").touch(mode=0o600)
    os.chown(state / "tasks.sqlite3-wal", NOBODY, NOBODY)  # left by another user's run, say
    _serve_refused(spec, world / "run" / "c.sock", "tasks.sqlite3-wal is owned by uid 65534")


def test_a_state_subdirectory_in_a_world_writable_volume_starts_with_one_warning_like_a_kubernetes_emptydir(world):
    volume = world / "volume"
    volume.mkdir()
    os.chmod(volume, 0o2777)  # what an emptyDir with an fsGroup looks like: root's, setgid, world-writable
    spec = write_spec(world, state_dir=volume / "state", execution_id="exec-pod")
    daemon = start_agentctl(["serve", str(spec), "--socket", str(world / "run" / "c.sock")], world / "daemon.log")
    try:
        poll((volume / "state" / "exec-pod" / "report.json").exists, what="the report")
    finally:
        daemon.stop()
    assert stat.S_IMODE(os.stat(volume / "state").st_mode) == 0o700
    # Each line after its timestamp.
    warnings = [line.split(" ", 1)[1] for line in daemon.log.read_text().splitlines() if "agentctl.files" in line]
    assert warnings == [f"agentctl WARNING agentctl.files: {volume} is writable by other users (mode 2777) and not "
                        "sticky: another user could swap the private directory below it; prefer a parent only "
                        "you (or root) can write"]


def test_every_file_the_daemon_creates_is_0600_and_its_directories_0700_even_under_umask_0(world):
    state = world / "state"
    spec = write_spec(world, state_dir=state, execution_id="exec-umask")
    proc = subprocess.Popen(agentctl_cmd("serve", str(spec), "--socket", str(world / "run" / "c.sock")), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO, umask=0)
    try:
        ready = json.loads(proc.stdout.readline())
        client = ControlClient(Path(ready["control_socket"]))
        assert client.post("/v1/session/new")[0] == 200  # evidence: the report is written
        poll(lambda: (state / "exec-umask" / "report.json").exists(), what="the report")
        poll(lambda: (state / "tasks.sqlite3-wal").exists(), what="the task store's WAL")
        modes = {p.relative_to(state).as_posix(): stat.S_IMODE(p.lstat().st_mode) for p in [state, *state.rglob("*")]}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    assert modes.pop(".") == 0o700 and modes.pop("exec-umask") == 0o700
    assert {"tasks.sqlite3", "tasks.sqlite3-wal", "tasks.sqlite3-shm", f"exec-umask/{LOCK_NAME}",
            "exec-umask/report.json"} <= set(modes)
    assert set(modes.values()) == {0o600}, modes


def test_a_hub_database_directory_writable_by_another_user_is_refused_with_one_line(world):
    shared = world / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    as_nobody(f"cd {shared} && umask 0 && touch hub.sqlite3")
    done = subprocess.run(agentctl_cmd("hub", "serve", "--socket", str(world / "run" / "hub.sock"), "--db",
                                       str(shared / "hub.sqlite3")), capture_output=True, text=True, timeout=60, cwd=REPO)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"agentctl: refusing hub database {shared / 'hub.sqlite3'}: {shared} is writable "
                               "by other users")
    _untouched(shared / "hub.sqlite3", 0o666)


# ---- one daemon per execution ---------------------------------------------------------------------------


def test_a_second_daemon_of_one_execution_is_refused_while_the_first_lives_and_starts_after_a_sigkill(world):
    spec = write_spec(world, state_dir=world / "state", execution_id="exec-once")
    first = start_serve(spec, world / "run" / "one.sock")
    report = world / "state" / "exec-once" / "report.json"
    try:
        poll(report.exists, what="the first daemon's report")
        before = json.loads(report.read_bytes())["identity"]["instance_id"]
        assert before == first.ready["instance_id"]
        line = _serve_refused(spec, world / "run" / "two.sock", "another agentctl daemon", f"pid {first.proc.pid}",
                              "execution exec-once", f"state dir {world / 'state'}")
        assert "stop it first" in line
        # The first one still serves, and its report is its own.
        assert ControlClient(Path(first.ready["control_socket"])).get("/v1/health")[0] == 200
        assert json.loads(report.read_bytes())["identity"]["instance_id"] == before
        assert not (world / "run" / "two.sock").exists()
    finally:
        first.proc.kill()  # SIGKILL: no cleanup at all; the kernel drops the flock with the process
        first.proc.wait(timeout=10)
    third = start_serve(spec, world / "run" / "three.sock")
    try:
        poll(lambda: json.loads(report.read_bytes())["identity"]["instance_id"] == third.ready["instance_id"],
             what="the next daemon's report")
    finally:
        assert third.stop() == 0
    assert (world / "state" / "exec-once" / LOCK_NAME).read_text().strip() == str(third.proc.pid)
