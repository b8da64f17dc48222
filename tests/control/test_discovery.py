"""Finding the daemon without --socket: sockets left by daemons killed with SIGKILL never count as daemons and
are cleaned up; `agentctl status` with one live daemon among dead sockets talks to the live one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from agentctl.control.socket import STALE_AFTER, discover
from tests.conftest import REPO, agentctl_cmd, start_serve, write_spec


def cli(base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RUNTIME_DIRECTORY", "AGENTCTL_SOCKET", "AGENTCTL_RUNTIME_DIR")}
    return subprocess.run(agentctl_cmd(*args), cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**env, "AGENTCTL_RUNTIME_DIR": str(base), "NO_COLOR": "1"})


def killed_daemons(tmp_path: Path, base: Path, n: int) -> list[Path]:
    """`n` real daemons under `base`, killed with SIGKILL: their sockets stay, nobody listens on them."""
    sockets = []
    for i in range(n):
        directory = tmp_path / f"dead{i}"
        directory.mkdir()
        sock = base / f"exec-dead-{i}" / "control.sock"
        daemon = start_serve(write_spec(directory, execution_id=f"exec-dead-{i}"), sock)
        daemon.proc.kill()
        daemon.proc.wait(timeout=10)
        assert sock.exists()
        # Killed a while ago: a socket younger than STALE_AFTER may be a daemon between bind and listen.
        past = time.time() - STALE_AFTER - 1
        os.utime(sock, (past, past))
        sockets.append(sock)
    return sockets


def test_status_with_one_live_daemon_among_dead_sockets_talks_to_the_live_one_and_removes_the_dead(
    tmp_path, short_tmp, serve
):
    base = short_tmp / "run"
    dead = killed_daemons(tmp_path, base, 3)
    live_dir = tmp_path / "live"
    live_dir.mkdir()
    live = serve(write_spec(live_dir, execution_id="exec-live"), base / "exec-live" / "control.sock")
    done = cli(base, "status", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["identity"]["execution_id"] == "exec-live"
    assert "removed the stale control socket(s) of 3 dead daemon(s)" in done.stderr
    assert "several daemons" not in done.stderr
    assert not any(p.exists() or p.parent.exists() for p in dead), "each dead daemon's socket and directory"
    assert discover(base) == ([base / "exec-live" / "control.sock"], [])
    again = cli(base, "health")
    assert (again.returncode, again.stdout, again.stderr) == (0, "live\n", "")
    assert live.stop() == 0


def test_only_dead_sockets_mean_no_daemon_is_running_and_they_are_removed(tmp_path, short_tmp):
    base = short_tmp / "run"
    dead = killed_daemons(tmp_path, base, 2)
    done = cli(base, "health")
    assert done.returncode == 2, "unreachable, not a bad argument"
    lines = done.stderr.strip().splitlines()
    assert "removed the stale control socket(s) of 2 dead daemon(s)" in lines[0]
    assert lines[-1].startswith("agentctl: no agentctl daemon is running under")
    assert not any(p.exists() for p in dead) and "Traceback" not in done.stderr


def test_a_socket_bound_a_moment_ago_is_neither_a_daemon_nor_removed(short_tmp):
    # A daemon between bind() and listen() refuses connections too: too young to be called stale.
    base = short_tmp / "run"
    (base / "exec-starting").mkdir(parents=True)
    path = base / "exec-starting" / "control.sock"
    starting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    starting.bind(str(path))
    try:
        assert discover(base) == ([], [])
        done = cli(base, "status")
        assert done.returncode == 2 and "cannot locate the control socket" in done.stderr
        assert path.exists()
    finally:
        starting.close()


@pytest.mark.parametrize("listening", [True, False], ids=["two-live", "one-live-one-young"])
def test_several_live_daemons_still_need_an_execution_id(short_tmp, listening):
    base = short_tmp / "run"
    servers = []
    for name in ("exec-a", "exec-b"):
        (base / name).mkdir(parents=True)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(base / name / "control.sock"))
        if listening or name == "exec-a":
            s.listen(1)
        servers.append(s)
    try:
        live, stale = discover(base)
        assert [p.parent.name for p in live] == (["exec-a", "exec-b"] if listening else ["exec-a"]) and stale == []
    finally:
        for s in servers:
            s.close()
