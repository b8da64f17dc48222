"""Real SIGTERM/SIGINT at several points of a real `agentctl serve`, `agentctl run` and `agentctl hub serve`:
before the event loop, while the agent's initialize is pending, while the drain waits on a stubborn agent.
Every one drains (exit 0; `run` 128 + N: its job was interrupted), removes its socket and persists the
truthful state; a second signal forces a fast exit; the stop is bounded by shutdown_timeout."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from agentctl.evidence.store import read_report
from tests.agent.serve_support import REFERENCE_AGENT, agent_pid, base_url, gone, http_get
from tests.conftest import REPO, ServeProcess, agentctl_cmd, poll, write_spec


def agent_section(*flags: str, extra: str = "") -> str:
    command = json.dumps([*REFERENCE_AGENT, *flags])
    return f"[agent]\ncommand = {command}\ninitialize_timeout = 120\n{extra}\n"


@contextmanager
def launched(*args: str, cwd: Path = REPO) -> Iterator[subprocess.Popen]:
    """The real CLI as a subprocess; killed at the end if the test did not see it exit."""
    proc = subprocess.Popen(agentctl_cmd(*args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def tree_of(proc: subprocess.Popen) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def writer_once_read(fifo: Path) -> int:
    """A write end of `fifo`, opened once a process holds it open for reading (blocked in open(), waiting
    for a writer). The end is kept: a probe that opened and closed a writer would let the reader's open()
    return and its read() see end-of-file before the real data came."""
    def open_writer() -> int | None:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            assert exc.errno == errno.ENXIO
            return None

    fd = poll(open_writer, timeout=30, what="the command to reach its read of the FIFO")
    os.set_blocking(fd, True)
    return fd


def feed(fd: int, data: bytes) -> None:
    with open(fd, "wb") as fh:
        fh.write(data)


def test_serve_sigterm_while_the_agents_initialize_is_pending_drains_exits_0_and_persists_the_truth(tmp_path, short_tmp):
    sock = short_tmp / "c.sock"
    spec = write_spec(tmp_path, agent_section("--delay-initialize", "120"))
    with launched("serve", str(spec), "--socket", str(sock)) as proc:
        daemon = ServeProcess(proc, {})
        agent = agent_pid(daemon)
        poll(sock.exists, timeout=30, what="the control socket")
        tree = tree_of(proc)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert time.monotonic() - started < 60, "drained, not waiting out the 120 s initialize"
    assert out == "", "never ready: no ready line"
    assert "Traceback" not in err
    assert not sock.exists(), "the control socket is removed"
    poll(lambda: all(gone(p) for p in [agent, *tree]), timeout=10, what="the agent tree to be gone")
    report = read_report(tmp_path / "state", "exec-test")
    assert report.agent.state == "exited" and report.agent.stopped_by_daemon, "not stuck at starting"


def test_serve_sigterm_before_the_event_loop_is_kept_and_exits_0_having_started_nothing(tmp_path, short_tmp):
    # The spec is a FIFO: the CLI blocks reading it, signals already captured, long before any loop exists.
    sock = short_tmp / "c.sock"
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    src = tmp_path / "src"
    src.mkdir()
    text = write_spec(src, state_dir=tmp_path / "state").read_bytes()
    with launched("serve", str(fifo), "--socket", str(sock)) as proc:
        writer = writer_once_read(fifo)
        proc.send_signal(signal.SIGTERM)
        feed(writer, text)
        out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (0, ""), err
    assert not sock.exists() and not (tmp_path / "state" / "exec-test").exists()


def test_a_second_signal_during_the_drain_forces_a_fast_exit_that_still_kills_the_tree_and_persists(tmp_path, short_tmp):
    sock = short_tmp / "c.sock"
    extra = "stop_grace = 60\n[daemon]\nshutdown_timeout = 120\n"
    spec = write_spec(tmp_path, agent_section("--hang-on-shutdown", extra=extra))
    with launched("serve", str(spec), "--socket", str(sock)) as proc:
        daemon = ServeProcess(proc, json.loads(proc.stdout.readline()))
        agent = agent_pid(daemon)
        tree = tree_of(proc)
        proc.send_signal(signal.SIGTERM)
        # Draining: /readyz says stopping while the stubborn agent gets its 60 s stop_grace.
        poll(lambda: http_get(base_url(daemon) + "/readyz?verbose")[1].get("stopping"), timeout=30, what="the drain")
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert time.monotonic() - started < 10, "not the 60 s stop_grace"
    assert not sock.exists()
    poll(lambda: all(gone(p) for p in [agent, *tree]), timeout=10, what="the agent tree to be gone")
    report = read_report(tmp_path / "state", "exec-test")
    assert report.agent.state == "exited" and report.agent.exit_signal == signal.SIGKILL
    assert report.agent.stopped_by_daemon


def test_the_stop_is_bounded_by_shutdown_timeout(tmp_path, short_tmp):
    sock = short_tmp / "c.sock"
    extra = "stop_grace = 60\n[daemon]\nshutdown_timeout = 2\n"
    spec = write_spec(tmp_path, agent_section("--hang-on-shutdown", extra=extra))
    with launched("serve", str(spec), "--socket", str(sock)) as proc:
        assert json.loads(proc.stdout.readline())["event"] == "ready"
        agent = agent_pid(ServeProcess(proc, {}))
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, err
    assert 2 <= elapsed < 2 + 8, elapsed
    assert "shutdown exceeded 2.0 s" in err
    assert not sock.exists()
    poll(lambda: gone(agent), timeout=10, what="the agent to be gone")
    assert read_report(tmp_path / "state", "exec-test").agent.state == "exited"


def test_run_sigterm_while_the_agents_initialize_is_pending_stops_in_order_and_says_so(tmp_path, short_tmp):
    sock = short_tmp / "c.sock"
    spec = write_spec(tmp_path, agent_section("--delay-initialize", "120"))
    with launched("run", str(spec), "--socket", str(sock), cwd=tmp_path) as proc:
        agent = agent_pid(ServeProcess(proc, {}))
        poll(sock.exists, timeout=30, what="the control socket")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=90)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "interrupted by SIGTERM: stopped the agent; report persisted to" in err and "Traceback" not in err
    assert not sock.exists()
    poll(lambda: gone(agent), timeout=10, what="the agent to be gone")
    report = read_report(tmp_path / "state", "exec-test")
    assert report.agent.state == "exited" and report.agent.stopped_by_daemon


def test_hub_serve_refuses_a_fifo_token_file_at_once_without_blocking_on_it_and_creates_nothing(tmp_path, short_tmp):
    # A FIFO used to block the hub before its loop existed (and a signal then had to be kept); the token file
    # is now checked before it is opened (only a regular file of ours is read), so nothing can hold the start.
    fifo = tmp_path / "token"
    os.mkfifo(fifo, 0o600)
    sock = short_tmp / "hub.sock"
    with launched("hub", "serve", "--socket", str(sock), "--db", str(tmp_path / "hub.sqlite3"),
                  "--http", "0", "--token-file", str(fifo)) as proc:
        out, err = proc.communicate(timeout=60)  # nobody ever writes the FIFO: it must not wait for a writer
    assert (proc.returncode, out) == (1, ""), err
    assert "is not a regular file" in err
    assert not sock.exists() and not (tmp_path / "hub.sqlite3").exists()


def test_hub_serve_sigterm_once_ready_drains_and_removes_its_socket(tmp_path, short_tmp):
    sock = short_tmp / "hub.sock"
    with launched("hub", "serve", "--socket", str(sock), "--db", str(tmp_path / "hub.sqlite3")) as proc:
        assert json.loads(proc.stdout.readline())["event"] == "ready"
        assert sock.exists()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert not sock.exists()
