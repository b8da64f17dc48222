"""The daemons on this host: `serve` binds where $AGENTCTL_SOCKET says, `agentctl ls` lists every daemon under the
runtime dir (a dead socket as dead and left in place, another user's as not yours, a hung one as unresponsive,
within its own timeout), and `stop --wait` returns once the daemon is gone, or says it is not within the bound."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import socketserver
import subprocess
import threading
import time
from pathlib import Path

import msgspec
import pytest

from agentctl.commands.host_daemons import render_listing, wait_gone
from agentctl.control.socket import STALE_AFTER
from agentctl.evidence.contract.control import DaemonEntry, DaemonListing
from agentctl.exit_codes import EXIT_NO_DAEMON, EXIT_OK, EXIT_STILL_RUNNING
from tests.conftest import REPO, agentctl_cmd, poll, write_spec


def cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("AGENTCTL_SOCKET", "AGENTCTL_RUNTIME_DIR", "RUNTIME_DIRECTORY")}
    return subprocess.run(agentctl_cmd(*args), cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**base, "NO_COLOR": "1", **env})


def dead_socket(path: Path) -> Path:
    """A socket file nobody listens on (its daemon was killed), old enough not to be a daemon starting."""
    path.parent.mkdir(mode=0o700)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()
    past = time.time() - STALE_AFTER - 1
    os.utime(path, (past, past))
    return path


def in_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: dict[str, str],
               *argv: str) -> subprocess.CompletedProcess[str]:
    """The CLI in this process (a daemon in another), its output captured: no interpreter start per call."""
    from agentctl.cli import main

    for name in ("AGENTCTL_SOCKET", "AGENTCTL_RUNTIME_DIR", "RUNTIME_DIRECTORY", "NO_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = main(list(argv))
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(list(argv), code, captured.out, captured.err)


def test_serve_binds_where_agentctl_socket_says_and_ls_lists_every_kind_of_daemon_then_stop_waits_until_it_is_gone(
    tmp_path: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def agentctl(*argv: str) -> subprocess.CompletedProcess[str]:
        return in_process(monkeypatch, capsys, env, *argv)

    runtime = short_tmp / "run"
    runtime.mkdir(mode=0o700)
    named = short_tmp / "exec" / "ctl.sock"  # outside the runtime dir: the executor chose it
    dead = dead_socket(runtime / "exec-dead" / "control.sock")
    hung_path = runtime / "exec-hung" / "control.sock"
    hung_path.parent.mkdir(mode=0o700)
    hung = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hung.bind(str(hung_path))
    hung.listen(8)  # accepts connections (the backlog) and never answers: a hung daemon
    foreign = dead_socket(runtime / "exec-foreign" / "control.sock")
    if os.geteuid() == 0:
        os.chown(foreign.parent, 65534, 65534)
        os.chown(foreign, 65534, 65534)
    env = {"AGENTCTL_SOCKET": str(named), "AGENTCTL_RUNTIME_DIR": str(runtime)}
    full_env = {**{k: v for k, v in os.environ.items() if k != "RUNTIME_DIRECTORY"}, **env}
    proc = subprocess.Popen(agentctl_cmd("serve", str(write_spec(tmp_path, execution_id="exec-named"))),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=REPO)
    try:
        ready = json.loads(proc.stdout.readline() or b"null")
        assert ready, proc.stderr.read().decode()
        assert ready["control_socket"] == str(named) and named.is_socket()

        status = agentctl("status", "--json")
        assert status.returncode == EXIT_OK, status.stderr
        assert json.loads(status.stdout)["identity"]["execution_id"] == "exec-named"

        started = time.monotonic()
        listed = agentctl("ls", "--json", "--timeout", "3")  # the live daemon must answer in time, even on a busy machine
        took = time.monotonic() - started
        assert listed.returncode == EXIT_OK, listed.stderr
        listing = msgspec.json.decode(listed.stdout, type=DaemonListing)
        by_socket = {d.socket: d for d in listing.daemons}
        assert listing.runtime_dir == str(runtime)
        assert set(by_socket) == {str(named), str(dead), str(hung_path), str(foreign)}
        mine = by_socket[str(named)]
        assert (mine.state, mine.execution_id, mine.task_id, mine.session_id, mine.agent_id, mine.pid) == (
            "ready", "exec-named", "task-1", "session-1", "agent-1", proc.pid)
        assert by_socket[str(dead)] == DaemonEntry(socket=str(dead), state="dead")
        assert by_socket[str(hung_path)].state == "unresponsive" and by_socket[str(hung_path)].execution_id is None
        if os.geteuid() == 0:
            assert by_socket[str(foreign)] == DaemonEntry(socket=str(foreign), state="not_yours")
        assert dead.is_socket(), "ls removes nothing"
        assert took < 15, f"one hung daemon costs its own timeout, not the listing's: {took:.1f} s"

        hung.close()  # refusing from now on (dead, or starting while young): the hung case is proved above
        text = agentctl("ps")  # the alias, as text
        assert text.returncode == EXIT_OK, text.stderr
        lines = text.stdout.splitlines()
        assert lines[0].split() == ["EXECUTION", "TASK", "SESSION", "AGENT", "STATE", "PID", "SOCKET"]
        row = next(line for line in lines if line.endswith(str(named)))
        assert row.split()[:2] == ["exec-named", "task-1"] and " ready " in row and f" {proc.pid} " in row
        assert any(" dead " in line and line.endswith(str(dead)) for line in lines)
        assert any(line.endswith(str(hung_path)) and (" dead " in line or " starting " in line) for line in lines)

        stopped = agentctl("stop", "--wait", "30")
        assert (stopped.returncode, stopped.stdout) == (EXIT_OK, "stopped: the daemon has exited\n"), stopped.stderr
        # When it returned the daemon was gone: its process had exited and its socket was removed.
        assert proc.poll() is not None or poll(lambda: proc.poll() is not None, timeout=1, what="exit")
        assert not named.exists()
        again = agentctl("stop", "--wait")
        assert again.returncode == EXIT_NO_DAEMON, again.stderr
    finally:
        hung.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the CLI as another uid: needs root")
def test_ls_run_by_another_user_lists_the_daemon_it_cannot_look_into_as_not_yours_without_asking_it(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.reliability.faults_support import cli_as

    short_tmp.chmod(0o755)
    runtime = short_tmp / "run"
    runtime.mkdir(mode=0o755)  # a shared runtime dir; each daemon's directory is its own, 0700
    path = runtime / "exec-root" / "control.sock"
    path.parent.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    listener.setblocking(False)
    try:
        monkeypatch.setenv("AGENTCTL_RUNTIME_DIR", str(runtime))
        monkeypatch.delenv("AGENTCTL_SOCKET", raising=False)
        done = cli_as(65534, "ls", "--json")
        assert done.returncode == EXIT_OK, done.stderr
        listing = msgspec.json.decode(done.stdout, type=DaemonListing)
        assert listing.daemons == [DaemonEntry(socket=str(path), state="not_yours")]
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected: another user's daemon is not asked
    finally:
        listener.close()


class _StopButStay(http.server.BaseHTTPRequestHandler):
    """Answers POST /v1/stop as a daemon does and then stays: one whose drain hangs."""

    def do_POST(self) -> None:
        body = b'{"stopping": true}'
        self.send_response(202)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_stop_wait_on_a_daemon_that_does_not_go_exits_still_running_with_one_line(short_tmp: Path) -> None:
    # A real socket and HTTP exchange; the daemon is a stand-in, because a drain that never ends cannot be
    # caused in a real daemon (every step of its shutdown is bounded). Its pid is this test's.
    path = short_tmp / "d" / "control.sock"
    path.parent.mkdir(mode=0o700)
    server = socketserver.UnixStreamServer(str(path), _StopButStay)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        done = cli({}, "stop", "--socket", str(path), "--wait", "0.5")
        waited = time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == EXIT_STILL_RUNNING, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentctl: the daemon did not stop within 0.5 s")
    assert f"pid {os.getpid()} still there" in lines[0] and done.stdout == ""
    assert waited >= 0.5


def test_wait_gone_is_true_at_once_for_a_process_that_has_exited_and_a_socket_that_is_gone(short_tmp: Path) -> None:
    proc = subprocess.Popen(["true"])
    proc.wait(timeout=10)
    assert wait_gone(short_tmp / "none.sock", proc.pid, 0.01)
    assert not wait_gone(short_tmp / "none.sock", os.getpid(), 0.05)  # this process is still running
    # A socket that still answers is not gone, even once the process has exited; one left behind that nobody
    # listens on (the daemon crashed) is.
    path = short_tmp / "taken.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    try:
        assert not wait_gone(path, None, 0.05), "a live socket, no pid: still there"
        assert not wait_gone(path, proc.pid, 0.05), "its own socket still answering: not gone"
    finally:
        listener.close()
    assert wait_gone(path, proc.pid, 0.05), "exited, its socket left dead"


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "soon", "3601"])
def test_stop_wait_refuses_a_wait_that_is_not_a_bounded_number_of_seconds(bad: str, capsys) -> None:
    from agentctl.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["stop", "--wait", bad])
    assert exited.value.code == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("agentctl: stop: argument --wait")


def test_the_listing_renders_one_aligned_line_per_daemon_with_what_is_known() -> None:
    listing = DaemonListing(runtime_dir="/run/a", daemons=[
        DaemonEntry(socket="/run/a/e1/control.sock", state="ready", pid=42, execution_id="e1", task_id="t1",
                    session_id="s1", acp_session_id="acp-9", agent_id="claude", agent="claude-code",
                    agent_state="running"),
        DaemonEntry(socket="/run/a/e2/control.sock", state="not_yours"),
        DaemonEntry(socket="/run/a/e3/control.sock", state="not_ready", execution_id="e3\x1b[31m", task_id="t3"),
        DaemonEntry(socket="/run/a/e4/control.sock", state="unresponsive", pid=7),
    ])
    lines = render_listing(listing).splitlines()
    assert [line.index("STATE") for line in lines[:1]] == [lines[1].index("ready")]
    assert lines[1].split() == ["e1", "t1", "s1", "/", "acp-9", "claude-code", "(running)", "ready", "42",
                                "/run/a/e1/control.sock"]
    assert lines[2].split() == ["-", "-", "-", "-", "not", "yours", "-", "/run/a/e2/control.sock"]
    assert "\x1b" not in lines[3] and "not ready" in lines[3]  # a spec's text cannot drive the terminal
    assert lines[4].split() == ["-", "-", "-", "-", "unresponsive", "7", "/run/a/e4/control.sock"]
    assert render_listing(DaemonListing(runtime_dir="/run/a")) == "no agentctl daemon under /run/a\n"


def test_ls_shows_a_sigkilled_daemon_as_dead_at_once_and_a_socket_still_bound_by_a_live_process_as_starting(
    tmp_path: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime = short_tmp / "run"
    runtime.mkdir(mode=0o700)
    env = {"AGENTCTL_RUNTIME_DIR": str(runtime)}
    full_env = {**{k: v for k, v in os.environ.items() if k not in ("RUNTIME_DIRECTORY", "AGENTCTL_SOCKET")}, **env}
    proc = subprocess.Popen(agentctl_cmd("serve", str(write_spec(tmp_path, execution_id="exec-killed"))),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=REPO)
    try:
        ready = json.loads(proc.stdout.readline() or b"null")
        assert ready, proc.stderr.read().decode()
    finally:
        proc.kill()
        proc.wait(timeout=20)
    killed = Path(ready["control_socket"])
    assert killed.is_socket(), "SIGKILL leaves the socket file behind"
    # Bound by this live process and not listening (a daemon between bind and listen), however old its file.
    binding = runtime / "exec-binding" / "control.sock"
    binding.parent.mkdir(mode=0o700)
    holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    holder.bind(str(binding))
    past = time.time() - STALE_AFTER - 1
    os.utime(binding, (past, past))
    try:
        listed = in_process(monkeypatch, capsys, env, "ls", "--json")
    finally:
        holder.close()
    assert listed.returncode == EXIT_OK, listed.stderr
    states = {d.socket: d.state for d in msgspec.json.decode(listed.stdout, type=DaemonListing).daemons}
    assert states == {str(killed): "dead", str(binding): "starting"}
