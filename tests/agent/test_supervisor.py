"""Supervisor with real subprocesses: whole-tree stop, SIGTERM/SIGKILL deadlines, environment scrubbing, exit evidence, parent death, stderr flood."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psutil
import pytest

from agentctl.agent.supervisor import (
    AgentStartError,
    ExitInfo,
    Supervisor,
    build_agent_env,
    register_own_child,
    unregister_own_child,
)
from tests.conftest import eventually

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
TREE = ("agent", "plain", "ignores_term", "escaped", "double_forked")


def fixture_cmd(name: str, *args: str) -> list[str]:
    return [sys.executable, str(FIXTURES / name), *args]



def dead(proc: psutil.Process) -> bool:
    """Gone, or a zombie nobody will run again. Reaps it if it was re-parented to this process."""
    try:
        os.waitpid(proc.pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def read_pids(directory: Path) -> dict[str, psutil.Process]:
    return {name: psutil.Process(int((directory / f"{name}.pid").read_text())) for name in TREE}


@pytest.fixture
async def make_supervisor() -> AsyncIterator[Callable[..., Supervisor]]:
    created: list[Supervisor] = []

    def make(**kwargs: object) -> Supervisor:
        supervisor = Supervisor(**kwargs)  # type: ignore[arg-type]
        created.append(supervisor)
        return supervisor

    yield make
    for supervisor in created:
        if supervisor.process is not None:
            await supervisor.stop(grace=0.1, term_timeout=0.1)


async def start_tree(make_supervisor: Callable[..., Supervisor], directory: Path, *args: str) -> tuple[Supervisor, dict[str, psutil.Process]]:
    supervisor = make_supervisor(track_interval=0.05)
    await supervisor.start(fixture_cmd("tree_agent.py", str(directory), *args), cwd=None, env={})
    await eventually(lambda: all((directory / f"{n}.pid").exists() for n in TREE), 15, "the agent tree to start")
    procs = read_pids(directory)
    assert procs["agent"].pid == supervisor.pid
    # The fixture really built the awkward cases: a session escapee and an orphan adopted by the agent's
    # shim (a subreaper between us and the agent), not by init.
    assert os.getsid(procs["escaped"].pid) == procs["escaped"].pid
    assert procs["double_forked"].ppid() == supervisor.process.shim_pid
    assert psutil.Process(supervisor.process.shim_pid).ppid() == os.getpid()
    return supervisor, procs


@pytest.mark.parametrize("stubborn", [False, True], ids=["agent-exits-on-stdin-close", "agent-ignores-everything"])
async def test_stop_leaves_no_process_of_the_tree(make_supervisor, tmp_path: Path, stubborn: bool) -> None:
    supervisor, procs = await start_tree(make_supervisor, tmp_path, *(["--stubborn"] if stubborn else []))
    started = time.monotonic()
    info = await supervisor.stop(grace=1.0, term_timeout=0.5)
    elapsed = time.monotonic() - started
    assert elapsed < 1.0 + 0.5 + 10  # generous: the point is that stop returns
    survivors = {name: p.pid for name, p in procs.items() if p.is_running()}
    # is_running() is true for zombies too: everything was killed *and* reaped.
    assert survivors == {}
    assert info.stopped
    if stubborn:
        assert (info.signal, info.reason) == (signal.SIGKILL, "killed by SIGKILL")
    else:
        assert (info.returncode, info.reason) == (0, "exited with code 0")
    assert not supervisor.running


async def test_exit_is_reported_while_descendants_hold_the_pipes(make_supervisor, tmp_path: Path) -> None:
    supervisor, procs = await start_tree(make_supervisor, tmp_path)
    supervisor.stdin.close()
    # asyncio's Process.wait() would hang here: grandchildren still hold stdout and stderr.
    info = await asyncio.wait_for(supervisor.wait_exit(), 10)
    assert info == ExitInfo(0, None, "exited with code 0", stopped=False)
    assert procs["plain"].is_running()
    await supervisor.stop(grace=0.1, term_timeout=0.2)
    assert not any(p.is_running() for p in procs.values())


async def test_adopted_orphans_are_reaped_while_the_agent_runs(make_supervisor, tmp_path: Path) -> None:
    supervisor, procs = await start_tree(make_supervisor, tmp_path)
    orphan = procs["double_forked"]
    orphan.kill()
    # Only the tracker can reap it: it is our child, not asyncio's.
    await eventually(lambda: not orphan.is_running(), 5, "the adopted zombie to be reaped")
    assert supervisor.running


async def test_the_tree_tracker_slows_down_while_the_tree_stays_the_same(make_supervisor, tmp_path: Path) -> None:
    # Every scan reads the whole process table: fifty idle daemons scanning every interval would cost the
    # square of the fleet. Counting the real scans (a wrapper, nothing replaced) shows the back-off.
    supervisor, procs = await start_tree(make_supervisor, tmp_path)  # base interval 0.05 s
    agent = supervisor.process
    times: list[float] = []
    scan = agent._scan

    def counted(full: bool):
        times.append(time.monotonic())
        return scan(full)

    agent._scan = counted
    await eventually(lambda: len(times) >= 8, 30, "eight more scans")
    gaps = [b - a for a, b in zip(times, times[1:])]
    # At 0.05 s without back-off, seven gaps take ~0.35 s; doubling to the 0.4 s cap makes the late ones 0.4 s.
    assert max(gaps[-3:]) >= 0.05 * 8 * 0.9, gaps
    # A change in the tree (a member dies) brings the interval back to its base at once.
    killed_at = len(times)
    procs["plain"].kill()
    await eventually(lambda: any(b - a < 0.3 for a, b in zip(times[killed_at:], times[killed_at + 1:])), 30,
                     "a scan at the base interval after the change")


async def test_daemon_children_are_not_swept_or_reaped(make_supervisor, tmp_path: Path) -> None:
    same_session = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    registered = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"], start_new_session=True)
    register_own_child(registered.pid)
    try:
        supervisor, procs = await start_tree(make_supervisor, tmp_path)
        short_lived = await asyncio.create_subprocess_exec(sys.executable, "-c", "raise SystemExit(7)")
        assert await asyncio.wait_for(short_lived.wait(), 10) == 7
        await supervisor.stop(grace=0.1, term_timeout=0.2)
        assert not any(p.is_running() for p in procs.values())
        assert same_session.poll() is None
        assert registered.poll() is None
    finally:
        unregister_own_child(registered.pid)
        for proc in (same_session, registered):
            proc.kill()
            proc.wait(timeout=10)


async def test_agent_ignoring_stdin_close_and_sigterm_is_killed_within_deadlines(make_supervisor) -> None:
    exits: list[ExitInfo] = []
    supervisor = make_supervisor(on_exit=exits.append)
    await supervisor.start(fixture_cmd("stubborn_agent.py"), cwd=None, env={})
    assert await asyncio.wait_for(supervisor.stdout.readline(), 15) == b"ready\n"
    started = time.monotonic()
    info = await supervisor.stop(grace=0.3, term_timeout=0.3)
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 0.6 + 5
    assert info == ExitInfo(None, signal.SIGKILL, "killed by SIGKILL", stopped=True)
    assert exits == [info]
    assert supervisor.exit_info == info
    assert not psutil.pid_exists(supervisor.pid)  # reaped
    # A second stop is a no-op answering the same evidence.
    assert await supervisor.stop() == info
    assert exits == [info]


async def test_environment_is_scrubbed(make_supervisor, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in {
        "NOTIFY_SOCKET": "/run/systemd/notify",
        "WATCHDOG_USEC": "30000000",
        "WATCHDOG_PID": "1",
        "LISTEN_FDS": "2",
        "LISTEN_PID": "1",
        "LISTEN_FDNAMES": "a:b",
        "AGENTCTL_TEST_SECRET": "hunter2",
        "AGENTCTL_TEST_INHERITED": "kept",
    }.items():
        monkeypatch.setenv(name, value)
    supervisor = make_supervisor(secret_env_names={"AGENTCTL_TEST_SECRET"})
    await supervisor.start(
        fixture_cmd("env_agent.py"),
        cwd=str(tmp_path),
        env={"SPEC_VAR": "from-spec", "AGENTCTL_TEST_INHERITED": "overridden", "WATCHDOG_FROM_SPEC": "x"},
        extra_env={"AGENTCTL_EXTRA": "daemon-supplied"},
    )
    seen = json.loads(await asyncio.wait_for(supervisor.stdout.readline(), 15))
    env = seen["env"]
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "WATCHDOG_FROM_SPEC", "AGENTCTL_TEST_SECRET"):
        assert name not in env
    assert "hunter2" not in json.dumps(env)
    assert env["SPEC_VAR"] == "from-spec"
    assert env["AGENTCTL_TEST_INHERITED"] == "overridden"
    assert env["AGENTCTL_EXTRA"] == "daemon-supplied"
    assert env["PATH"] == os.environ["PATH"]
    assert seen["cwd"] == str(tmp_path)
    assert (await asyncio.wait_for(supervisor.wait_exit(), 10)).returncode == 0


def test_build_agent_env_precedence() -> None:
    env = build_agent_env(
        {"A": "spec", "NOTIFY_SOCKET": "spec"},
        {"A": "extra"},
        secret_env_names={"TOKEN"},
        base={"TOKEN": "t", "HOME": "/h", "LISTEN_FDS": "3", "A": "base"},
    )
    assert env == {"HOME": "/h", "A": "extra"}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("code", "3"), ExitInfo(3, None, "exited with code 3")),
        (("code", "0"), ExitInfo(0, None, "exited with code 0")),
        (("signal", "SIGUSR1"), ExitInfo(None, signal.SIGUSR1, "killed by SIGUSR1")),
    ],
)
async def test_exit_code_and_signal_are_reported_sanitized(make_supervisor, args: tuple[str, str], expected: ExitInfo) -> None:
    exits: list[ExitInfo] = []
    supervisor = make_supervisor(on_exit=exits.append)
    await supervisor.start(fixture_cmd("exit_agent.py", *args), cwd=None, env={})
    info = await asyncio.wait_for(supervisor.wait_exit(), 15)
    assert info == expected
    assert "MARKER" not in info.reason
    assert exits == [info]
    assert not supervisor.running
    assert await supervisor.stop() == info
    assert exits == [info]
    # The output went where it belongs: stdout to the reader, stderr to the window only.
    assert await supervisor.stdout.readline() == b"SECRET-STDOUT-MARKER\n"
    assert supervisor.stderr_snapshot().lines == ["SECRET-STDERR-MARKER"]


async def test_async_on_exit_is_awaited(make_supervisor) -> None:
    seen = asyncio.Event()

    async def on_exit(info: ExitInfo) -> None:
        seen.set()

    supervisor = make_supervisor(on_exit=on_exit)
    await supervisor.start(fixture_cmd("exit_agent.py", "code", "1"), cwd=None, env={})
    await asyncio.wait_for(seen.wait(), 15)


async def test_a_failing_on_exit_callback_logs_its_type_and_the_traceback_only_at_debug(
    make_supervisor, caplog: pytest.LogCaptureFixture
) -> None:
    canary = "STATE-CANARY-0c4d"

    def on_exit(info: ExitInfo) -> None:
        raise ValueError(f"cannot use {canary}")

    caplog.set_level(logging.INFO, logger="agentctl")
    supervisor = make_supervisor(on_exit=on_exit)
    await supervisor.start(fixture_cmd("exit_agent.py", "code", "1"), cwd=None, env={})
    await asyncio.wait_for(supervisor.wait_exit(), 15)
    (line,) = [r for r in caplog.records if "on_exit" in r.getMessage()]
    assert line.getMessage() == "agent on_exit callback failed (ValueError)" and line.exc_info is None
    assert canary not in caplog.text

    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="agentctl")
    supervisor = make_supervisor(on_exit=on_exit)
    await supervisor.start(fixture_cmd("exit_agent.py", "code", "1"), cwd=None, env={})
    await asyncio.wait_for(supervisor.wait_exit(), 15)
    assert "Traceback" in caplog.text and canary in caplog.text


async def test_start_failures_are_sanitized(make_supervisor, tmp_path: Path) -> None:
    supervisor = make_supervisor()
    with pytest.raises(AgentStartError, match="^cannot start agent: executable not found$"):
        await supervisor.start([str(tmp_path / "no-such-agent")], cwd=None, env={})
    with pytest.raises(AgentStartError, match="^cannot start agent: working directory not found$"):
        await supervisor.start([sys.executable, "-c", "pass"], cwd=str(tmp_path / "missing"), env={})
    assert supervisor.process is None


async def test_agent_dies_when_the_daemon_is_sigkilled(tmp_path: Path) -> None:
    pidfile = tmp_path / "agent.pid"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    daemon = subprocess.Popen([sys.executable, str(FIXTURES / "mini_daemon.py"), str(pidfile)], env=env, cwd=REPO)
    try:
        await eventually(pidfile.exists, 15, "the stand-in daemon to start its agent")
        agent = psutil.Process(int(pidfile.read_text()))
        assert psutil.Process(agent.ppid()).ppid() == daemon.pid  # the agent's parent is its shim
    finally:
        daemon.kill()
        daemon.wait(timeout=10)
    await eventually(lambda: dead(agent), 5, "the agent to die with its daemon")


async def test_stderr_flood_does_not_block_the_agent_or_grow_memory(make_supervisor) -> None:
    me = psutil.Process()
    baseline = me.memory_info().rss
    peak = baseline
    supervisor = make_supervisor()
    await supervisor.start(fixture_cmd("flood_agent.py", "500", str(MIB)), cwd=None, env={})

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, me.memory_info().rss)
            await asyncio.sleep(0.05)  # the sampling interval of the RSS sampler, not a wait

    sampler = asyncio.create_task(sample())
    try:
        # Generous bound: the point is that the agent is never stuck on a full stderr pipe.
        info = await asyncio.wait_for(supervisor.wait_exit(), 60)
    finally:
        sampler.cancel()
    assert info.returncode == 0
    assert await asyncio.wait_for(supervisor.stdout.readline(), 5) == b"done\n"
    await supervisor.stop(grace=0.1, term_timeout=0.1)
    peak = max(peak, me.memory_info().rss)
    assert peak - baseline < 20 * MIB
    window = supervisor.stderr_snapshot()
    assert window.total_bytes_seen == 500 * MIB
    assert window.truncated
    # Each line is 1 MiB: the window is the tail of the last one.
    assert window.lines == ["x" * (16 * 1024)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are a Linux fcntl")
async def test_the_agents_stderr_pipe_holds_256_kib_so_a_flood_is_read_in_fewer_larger_chunks(make_supervisor) -> None:
    # The agent asks the kernel after the supervisor has connected its pipes (it waits for a line).
    code = "import fcntl, sys; sys.stdin.readline(); print(fcntl.fcntl(2, fcntl.F_GETPIPE_SZ), flush=True)"
    supervisor = make_supervisor()
    await supervisor.start([sys.executable, "-c", code], cwd=None, env={})
    supervisor.stdin.write(b"go\n")
    await supervisor.stdin.drain()
    assert int(await asyncio.wait_for(supervisor.stdout.readline(), 10)) == 256 * 1024


async def test_ten_megabyte_line_without_newline(make_supervisor) -> None:
    supervisor = make_supervisor()
    await supervisor.start(fixture_cmd("flood_agent.py", "10", str(MIB), "--no-newline"), cwd=None, env={})
    assert (await asyncio.wait_for(supervisor.wait_exit(), 30)).returncode == 0
    await supervisor.stop(grace=0.1, term_timeout=0.1)
    window = supervisor.stderr_snapshot()
    assert window.lines == ["x" * (16 * 1024)]
    assert window.truncated
    assert window.total_bytes_seen == 10 * MIB


# -- the shim between the daemon and the agent ----------------------------------------------------------

SIGNAL_AGENT = """
import os, signal, sys
def noted(signum, frame):
    sys.stdout.write(signal.Signals(signum).name + "\\n"); sys.stdout.flush()
    if signum == signal.SIGTERM:
        sys.exit(7)
for s in (signal.SIGUSR1, signal.SIGHUP, signal.SIGTERM):
    signal.signal(s, noted)
sys.stdout.write("ready\\n"); sys.stdout.flush()
while True:
    signal.pause()
"""


async def test_signals_sent_to_the_shim_reach_the_agent_and_its_real_exit_code_comes_back(make_supervisor) -> None:
    supervisor = make_supervisor()
    await supervisor.start([sys.executable, "-c", SIGNAL_AGENT], cwd=None, env={})
    assert await asyncio.wait_for(supervisor.stdout.readline(), 15) == b"ready\n"
    shim = supervisor.process.shim_pid
    for sig, name in ((signal.SIGUSR1, b"SIGUSR1\n"), (signal.SIGHUP, b"SIGHUP\n")):
        os.kill(shim, sig)
        assert await asyncio.wait_for(supervisor.stdout.readline(), 15) == name
    assert supervisor.running
    os.kill(shim, signal.SIGTERM)
    assert await asyncio.wait_for(supervisor.stdout.readline(), 15) == b"SIGTERM\n"
    assert await asyncio.wait_for(supervisor.wait_exit(), 15) == ExitInfo(7, None, "exited with code 7")
    await eventually(lambda: not psutil.pid_exists(shim), 10, "the shim to leave once its tree is gone")


def _asleep_with_libc(pid: int) -> bool:
    process = psutil.Process(pid)
    loaded = any("libc" in os.path.basename(m.path) for m in process.memory_maps(grouped=False))
    return loaded and process.status() == psutil.STATUS_SLEEPING


async def test_the_agent_gets_only_its_stdio_default_signal_dispositions_and_a_session_of_its_own(make_supervisor) -> None:
    sleep = shutil.which("sleep")
    assert sleep, "coreutils sleep: an agent that is not Python (Python ignores SIGPIPE and SIGXFSZ itself)"
    supervisor = make_supervisor()
    # A signal blocked in the spawning thread (libraries do that) is inherited through fork and exec.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    try:
        await supervisor.start([sleep, "60"], cwd=None, env={})
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    agent = supervisor.pid
    await eventually(lambda: psutil.Process(agent).exe() == os.path.realpath(sleep), 15, "the exec")
    # The exe flips before the dynamic loader runs, and the loader briefly holds fd 3 (ld.so.cache, libc):
    # list the fds once sleep is in its nanosleep, the loader done.
    await eventually(lambda: _asleep_with_libc(agent), 15, "sleep to be loaded and asleep")
    # 0-2 only: neither the daemon's channel to the shim nor any other fd of the daemon or the shim.
    assert sorted(os.listdir(f"/proc/{agent}/fd")) == ["0", "1", "2"]
    status = dict(line.split(":\t", 1) for line in Path(f"/proc/{agent}/status").read_text().splitlines() if ":\t" in line)
    # The shim is Python, which ignores SIGPIPE and SIGXFSZ: the agent must start with every default.
    # Signals 32 and 33 are the C library's own (SIGRTMIN is 34): no program sends them and libc lets
    # nobody block, ignore or restore them, so a state inherited from whatever started the test run is
    # not the shim's to change.
    libc_own = (1 << 31) | (1 << 32)
    assert (int(status["SigIgn"], 16) & ~libc_own, int(status["SigBlk"], 16) & ~libc_own) == (0, 0), status
    assert os.getsid(agent) == os.getpgid(agent) == agent != os.getsid(0)


async def test_a_killed_shim_is_an_unknown_exit_said_so_and_the_orphans_are_still_swept(make_supervisor, tmp_path: Path) -> None:
    exits: list[ExitInfo] = []
    supervisor, procs = await start_tree(make_supervisor, tmp_path)
    supervisor.on_exit = exits.append
    supervisor.process._on_exit = exits.append
    os.kill(supervisor.process.shim_pid, signal.SIGKILL)  # not something the daemon does: someone else did
    info = await asyncio.wait_for(supervisor.wait_exit(), 15)
    # The agent died of its parent-death signal, but nobody can read its status now: not guessed.
    assert info == ExitInfo(None, None, "exit status unknown: the agent's shim was killed by SIGKILL")
    assert exits == [info]
    await eventually(lambda: dead(procs["agent"]), 10, "the agent to die with its shim")
    # Its escaped descendants are re-parented to us (a subreaper too) and ended at once; a stop finds the rest.
    await supervisor.stop(grace=0.1, term_timeout=0.2)
    # A killed descendant may still be an unreaped zombie for a moment: dead() counts that as gone.
    assert all(dead(p) for p in procs.values())


async def test_a_shim_killed_alone_takes_the_agents_descendants_down_without_waiting_for_a_stop(
    make_supervisor, tmp_path: Path
) -> None:
    supervisor, procs = await start_tree(make_supervisor, tmp_path)
    agent = procs["agent"]
    os.kill(supervisor.process.shim_pid, signal.SIGKILL)  # a real SIGKILL of the shim alone, by someone else
    info = await asyncio.wait_for(supervisor.wait_exit(), 15)
    assert info.reason == "exit status unknown: the agent's shim was killed by SIGKILL"
    # Nobody asked for a stop: the grandchildren (one ignoring SIGTERM, a setsid escapee, a double-forked
    # orphan) are ended all the same, within the SIGTERM grace and the SIGKILL that follows it.
    # is_running() is true for a zombie: each one, the agent's own included (re-parented to us when its shim
    # died), is reaped by the supervisor, not left in the process table.
    await eventually(lambda: not any(p.is_running() for p in procs.values()), 15,
                     "the agent's tree to die with its shim and be reaped")
    assert not agent.is_running()


async def test_an_agent_that_cannot_be_executed_leaves_no_shim_behind(make_supervisor, tmp_path: Path) -> None:
    before = {p.pid for p in psutil.Process().children()}
    supervisor = make_supervisor()
    with pytest.raises(AgentStartError, match="^cannot start agent: permission denied$"):
        await supervisor.start([str(FIXTURES)], cwd=None, env={})  # a directory: EACCES from exec
    await eventually(lambda: {p.pid for p in psutil.Process().children() if not dead(p)} <= before, 10,
                     "the shim to be gone")
    assert supervisor.process is None


async def test_the_shim_also_runs_as_a_hidden_agentctl_subcommand_for_builds_without_its_file() -> None:
    import socket as socketlib

    ours, theirs = socketlib.socketpair()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentctl.cli", "agent-shim", str(theirs.fileno()), "--", sys.executable, "-c", "print('hi')"],
        pass_fds=(theirs.fileno(),), stdout=subprocess.PIPE, cwd=REPO,
    )
    theirs.close()
    try:
        reader = ours.makefile("rb")
        kind, pid = reader.readline().split()
        assert kind == b"P" and int(pid) > 0
        assert reader.readline() == b"X 0\n"
        assert proc.stdout.read() == b"hi\n"
        assert proc.wait(timeout=15) == 0
    finally:
        ours.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
