"""Agent process supervision: spawn the agent argv in its own session with a scrubbed environment and a parent-death signal, drain its stderr into the bounded ring, report its exit, and stop its whole process tree (stdin close, SIGTERM, SIGKILL, psutil sweep, reaping)."""

from __future__ import annotations

import asyncio
import ctypes
import fcntl
import inspect
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec
import psutil

from agentctl.agent.stderr_ring import DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES, StderrRing, StderrWindow

# The daemon's service-manager variables (an agent holding NOTIFY_SOCKET could tell systemd the daemon
# is ready or stopping) are stripped from every agent environment.
from agentctl.daemon.systemd import SERVICE_MANAGER_ENV_PREFIXES
from agentctl.logs import log_failure

log = logging.getLogger(__name__)

# The ACP SDK's own frame limit (acp.core.DEFAULT_STDIO_BUFFER_LIMIT_BYTES): a frame larger than the
# StreamReader limit makes readline() fail, so stdout must allow what the SDK allows.
DEFAULT_STDOUT_LIMIT = 50 * 1024 * 1024
# The tree tracker slows to at most this many times its interval while the agent tree does not change.
TRACK_BACKOFF = 8

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_SIGKILL = int(signal.SIGKILL)


def _load_prctl() -> Any:
    try:
        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


# Resolved at import: the preexec hook runs in a forked child and must not load libraries there.
_prctl = _load_prctl()

_subreaper_pid: int | None = None


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux), so agent descendants that escape with setsid
    and lose their parent are re-parented to us instead of init, and stay sweepable and reapable.

    Idempotent. The flag is not inherited across fork, hence the per-pid memo.
    """
    global _subreaper_pid
    if _subreaper_pid == os.getpid():
        return True
    if _prctl is None or _prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return False
    _subreaper_pid = os.getpid()
    return True


# Children of this process that are not agent-tree orphans and must never be swept or reaped by
# us. Agents register themselves (asyncio's child watcher reaps them). Other daemon code that spawns
# children with a new session after an agent started must register them too; children that share
# the daemon's session are never mistaken for agent descendants (an agent tree cannot rejoin it).
_own_children: set[int] = set()


def register_own_child(pid: int) -> None:
    _own_children.add(pid)


def unregister_own_child(pid: int) -> None:
    _own_children.discard(pid)


def build_agent_env(
    spec_env: Mapping[str, str],
    extra_env: Mapping[str, str] | None = None,
    *,
    secret_env_names: Iterable[str] = (),
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The daemon's environment minus its own secrets, plus the spec's env, plus `extra_env`;
    service-manager variables are removed from the result whatever their source."""
    secrets = set(secret_env_names)
    inherited = os.environ if base is None else base
    env = {k: v for k, v in inherited.items() if k not in secrets}
    env.update(spec_env)
    env.update(extra_env or {})
    return {k: v for k, v in env.items() if not k.startswith(SERVICE_MANAGER_ENV_PREFIXES)}


class ExitInfo(msgspec.Struct, frozen=True):
    returncode: int | None
    signal: int | None
    # Sanitized: built only from the code or signal number, never from anything the agent wrote.
    reason: str
    # The exit followed a stop request from the daemon (rather than the agent exiting on its own).
    stopped: bool = False


def exit_info_from_returncode(returncode: int | None, *, stopped: bool = False) -> ExitInfo:
    if returncode is None:
        return ExitInfo(None, None, "exit status unknown", stopped)
    if returncode < 0:
        signum = -returncode
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return ExitInfo(None, signum, f"killed by {name}", stopped)
    return ExitInfo(returncode, None, f"exited with code {returncode}", stopped)


class AgentStartError(Exception):
    """The agent could not be spawned; the message is sanitized (no argv, no paths, no env)."""


# A flooding agent's stderr arrives in reads of at most the pipe's size, and each read costs the loop a
# wake-up and the ring a feed whatever its size: 256 KiB (asyncio's read size) instead of Linux's 64 KiB
# default makes a flood about four times fewer of them (bench/stderr_flood.py: less than half the daemon
# CPU for 1 MiB writes). Kernel memory, used only while bytes wait unread; it counts against the user's
# pipe-buffer quota (fs.pipe-user-pages-soft, 64 MiB by default: 48 KiB more per agent).
STDERR_PIPE_BYTES = 256 * 1024


def _grow_pipe(pipe: asyncio.BaseTransport | None) -> None:
    setpipe = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
    if pipe is None or setpipe is None:
        return
    try:
        fcntl.fcntl(pipe.get_extra_info("pipe").fileno(), setpipe, STDERR_PIPE_BYTES)
    except (OSError, ValueError, AttributeError):
        pass  # e.g. an unprivileged user over its pipe-buffer quota: the default size still works


class _AgentProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's stream protocol with two changes: stderr bypasses a StreamReader and goes
    straight into the ring (the pipe never fills and nothing buffers beyond the ring's bound,
    whatever the stdout limit), and the exit is reported as soon as the process is reaped.
    `Process.wait()` only returns once every pipe is closed too, which never happens while a
    grandchild holds stdout."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop, ring: StderrRing, on_exited: Callable[[int | None], None]) -> None:
        super().__init__(limit=limit, loop=loop)
        self._ring = ring
        self._on_exited = on_exited
        self._subprocess_transport: asyncio.SubprocessTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._subprocess_transport = transport  # type: ignore[assignment]
        # fd 2 stays in the base class's open-pipe bookkeeping, so the transport still closes only
        # after stderr reaches EOF; only the reader is dropped.
        self.stderr = None
        _grow_pipe(transport.get_pipe_transport(2))  # type: ignore[attr-defined]

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 2:
            self._ring.feed(data)
            return
        super().pipe_data_received(fd, data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 2:
            self._ring.feed_eof()
        super().pipe_connection_lost(fd, exc)

    def process_exited(self) -> None:
        transport = self._subprocess_transport
        returncode = transport.get_returncode() if transport is not None else None
        super().process_exited()
        self._on_exited(returncode)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class AgentProcess:
    """One spawned agent. Created by `Supervisor.start`; `stdin`/`stdout` are the ACP byte streams."""

    def __init__(
        self,
        *,
        transport: asyncio.SubprocessTransport,
        protocol: _AgentProtocol,
        ring: StderrRing,
        spawn_time: float,
        on_exit: Callable[[ExitInfo], object] | None,
        track_interval: float,
    ) -> None:
        self._transport = transport
        self._proc = asyncio.subprocess.Process(transport, protocol, asyncio.get_running_loop())
        self.pid: int = self._proc.pid
        self.stdin: asyncio.StreamWriter = self._proc.stdin  # type: ignore[assignment]
        self.stdout: asyncio.StreamReader = self._proc.stdout  # type: ignore[assignment]
        self.stderr_ring = ring
        self._on_exit = on_exit
        self._track_interval = track_interval
        self._exit_info: ExitInfo | None = None
        self._exited = asyncio.Event()
        self._stop_requested = False
        self._stop_task: asyncio.Task[ExitInfo] | None = None
        self._stopped = False
        self._callback_tasks: set[asyncio.Task[Any]] = set()
        # Every descendant ever seen, by pid, as psutil handles (which refuse to signal a reused pid).
        # Collected while the agent runs because re-parenting erases the ancestry we sweep by.
        self._known: dict[int, psutil.Process] = {}
        self._scan_lock = asyncio.Lock()
        self._tracker_done = asyncio.Event()
        self._our_sid = os.getsid(0)
        self._ps: psutil.Process | None
        try:
            self._ps = psutil.Process(self.pid)
            self._start_ct = self._ps.create_time()
        except psutil.Error:
            # Already exited and reaped: anything newer than the spawn still counts as its tree.
            self._ps = None
            self._start_ct = spawn_time - 1.0
        register_own_child(self.pid)
        _live_agents.add(self)
        self._tracker = asyncio.get_running_loop().create_task(self._track(), name=f"agent-tracker-{self.pid}")

    # -- state ---------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._exit_info is None

    @property
    def exit_info(self) -> ExitInfo | None:
        return self._exit_info

    async def wait_exit(self) -> ExitInfo:
        await self._exited.wait()
        assert self._exit_info is not None
        return self._exit_info

    def stderr_snapshot(self) -> StderrWindow:
        return self.stderr_ring.snapshot()

    def _handle_exited(self, returncode: int | None) -> None:
        if self._exit_info is not None:
            return
        # asyncio's watcher has reaped the pid: it is no longer ours to protect.
        unregister_own_child(self.pid)
        info = exit_info_from_returncode(returncode, stopped=self._stop_requested)
        self._exit_info = info
        self._exited.set()
        log.info("agent pid %d %s", self.pid, info.reason)
        if self._on_exit is None:
            return
        try:
            result = self._on_exit(info)
        except Exception as exc:
            log_failure(log, "agent on_exit callback failed", exc)
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._callback_tasks.add(task)
            task.add_done_callback(self._callback_tasks.discard)

    # -- tree tracking -------------------------------------------------------------------------

    async def _track(self) -> None:
        # Ended through an event rather than cancellation: a cancelled await would release the scan
        # lock while the worker thread is still scanning.
        # A scan reads the whole process table (this kernel may lack /proc/PID/task/TID/children), so a
        # fleet of idle daemons would cost the square of its size: while the tree stays the same the
        # interval doubles up to TRACK_BACKOFF times the base, and any change brings it back. Nothing
        # escapes meanwhile: orphans are re-parented to us (subreaper) and stop() scans in full.
        interval, seen = self._track_interval, None
        while not self._tracker_done.is_set():
            try:
                members = frozenset(p.pid for p in await self._scan_async(False))
            except Exception:
                log.debug("agent tree scan failed", exc_info=True)
                members = None
            unchanged = members is not None and members == seen
            interval = min(interval * 2, self._track_interval * TRACK_BACKOFF) if unchanged else self._track_interval
            seen = members
            try:
                await asyncio.wait_for(self._tracker_done.wait(), interval)
            except asyncio.TimeoutError:
                pass

    def _is_adopted(self, child: psutil.Process) -> bool:
        """A child of ours we did not spawn: an orphan of the agent tree re-parented to us."""
        if child.pid in _own_children or child.pid == self.pid:
            return False
        for other in tuple(_live_agents):
            if other is not self and other._known.get(child.pid) == child:
                return False
        try:
            return os.getsid(child.pid) != self._our_sid and child.create_time() >= self._start_ct
        except (OSError, psutil.Error):
            return False

    def _group_is_ours(self) -> bool:
        # While the agent is unreaped its pid (= pgid = sid) cannot be reused. After that, Linux keeps
        # the number reserved while any group/session member lives; if some other process now holds
        # the pid, the group or session of that number may be a new one.
        if self._exit_info is None:
            return True
        return not psutil.pid_exists(self.pid)

    def _scan(self, full: bool) -> list[psutil.Process]:
        """Refresh `_known`; reap adopted zombies; return the members still alive (not the agent)."""
        # One pass over the process table per scan (psutil's children() re-reads it per call).
        by_pid: dict[int, psutil.Process] = {}
        by_parent: dict[int, list[psutil.Process]] = {}
        for proc in psutil.process_iter(["ppid"]):
            by_pid[proc.pid] = proc
            by_parent.setdefault(proc.info["ppid"], []).append(proc)
        me = os.getpid()
        our_children = by_parent.get(me, [])

        roots: list[psutil.Process] = []
        if self._exit_info is None and self._ps is not None:
            roots.append(self._ps)
        # A known pid now held by a different process (pid reuse) compares unequal and is not a root.
        roots += [p for pid, p in self._known.items() if by_pid.get(pid) == p]
        roots += [c for c in our_children if c.pid not in self._known and self._is_adopted(c)]
        found: dict[int, psutil.Process] = {}
        queue = list(roots)
        while queue:
            proc = queue.pop()
            if proc.pid in found:
                continue
            found[proc.pid] = proc
            queue.extend(by_parent.get(proc.pid, ()))
        if full and self._group_is_ours():
            # Session members whose ancestry we never saw (e.g. their parent died while we were not
            # a subreaper): the agent is session leader, and a session cannot be rejoined once left.
            for pid, proc in by_pid.items():
                if pid in found:
                    continue
                try:
                    if os.getsid(pid) == self.pid and proc.create_time() >= self._start_ct:
                        found[pid] = proc
                except (OSError, psutil.Error):
                    continue
        found.pop(self.pid, None)
        found.pop(me, None)
        for pid, proc in found.items():
            if pid not in _own_children and self._known.get(pid) != proc:
                self._known[pid] = proc
        self._reap_adopted(our_children)
        # Forget what is fully gone (zombies stay until reaped), so a long-lived agent that runs many
        # short tools does not grow this map.
        for pid, proc in list(self._known.items()):
            if not proc.is_running():
                del self._known[pid]
        return [p for p in self._known.values() if _alive(p)]

    def _reap_adopted(self, our_children: list[psutil.Process] | None = None) -> None:
        # Reap zombies of the agent tree re-parented to us, by specific pid: waitpid(-1) would also
        # take the exit status asyncio's child watcher is waiting for.
        if our_children is None:
            try:
                our_children = psutil.Process().children()
            except psutil.Error:
                return
        for child in our_children:
            if child.pid in _own_children:
                continue
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    continue
            except psutil.Error:
                continue
            if self._known.get(child.pid) == child or self._is_adopted(child):
                try:
                    os.waitpid(child.pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    async def _scan_async(self, full: bool) -> list[psutil.Process]:
        async with self._scan_lock:
            return await asyncio.to_thread(self._scan, full)

    def _signal_tree(self, sig: int, members: Iterable[psutil.Process]) -> None:
        if self._group_is_ours():
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in members:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass

    # -- stop ----------------------------------------------------------------------------------

    async def stop(self, grace: float = 2.0, term_timeout: float = 3.0, kill_timeout: float = 5.0) -> ExitInfo:
        """Close stdin, wait `grace`, SIGTERM the group and every known descendant, wait
        `term_timeout`, SIGKILL whatever is left (repeatedly, until a rescan finds nothing new),
        then reap. Safe to call more than once and after the agent exited on its own (its leftover
        descendants are still swept)."""
        if self._stop_task is None:
            self._stop_task = asyncio.get_running_loop().create_task(self._stop(grace, term_timeout, kill_timeout))
        return await asyncio.shield(self._stop_task)

    async def _stop(self, grace: float, term_timeout: float, kill_timeout: float) -> ExitInfo:
        loop = asyncio.get_running_loop()
        self._stop_requested = True
        await self._scan_async(True)
        try:
            self.stdin.close()
        except Exception:
            pass
        await self._wait_exited(loop.time() + grace)

        members = await self._scan_async(True)
        if self._exit_info is None or members:
            self._signal_tree(signal.SIGTERM, members)
            await self._wait_tree_gone(loop.time() + term_timeout)

        deadline = loop.time() + kill_timeout
        while True:
            members = await self._scan_async(True)
            if self._exit_info is None or members:
                self._signal_tree(_SIGKILL, members)
            if await self._wait_tree_gone(min(deadline, loop.time() + 0.2)):
                # A last full scan catches anything forked between the previous scan and the kill.
                if not await self._scan_async(True) and self._exit_info is not None:
                    break
            if loop.time() >= deadline:
                log.warning("agent pid %d: process tree not gone %.1fs after SIGKILL", self.pid, kill_timeout)
                break

        await self._finish()
        if self._exit_info is not None:
            return self._exit_info
        return ExitInfo(None, None, "still running after SIGKILL", True)

    async def _wait_exited(self, deadline: float) -> bool:
        remaining = deadline - asyncio.get_running_loop().time()
        if self._exit_info is None and remaining > 0:
            try:
                await asyncio.wait_for(self._exited.wait(), remaining)
            except asyncio.TimeoutError:
                pass
        return self._exit_info is not None

    async def _wait_tree_gone(self, deadline: float) -> bool:
        loop = asyncio.get_running_loop()
        while True:
            members = await self._scan_async(False)
            if not members and self._exit_info is not None:
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.02)

    async def _finish(self) -> None:
        self._tracker_done.set()
        await self._tracker
        # The last scan may have run between a member's death and its re-parenting to us.
        await asyncio.to_thread(self._reap_adopted)
        # Pipes close on their own once every holder is dead; anything still holding one after the
        # sweep is outside our reach, so stop waiting for it.
        try:
            await asyncio.wait_for(self._proc.wait(), 0.5)
        except asyncio.TimeoutError:
            self._transport.close()
        _live_agents.discard(self)
        self._stopped = True


_live_agents: set[AgentProcess] = set()


class Supervisor:
    """Spawns and stops the execution's agent.

    `secret_env_names` are the daemon's own secrets, never inherited by the agent. `on_exit` is
    called once per spawned agent with its ExitInfo (a coroutine function's result is scheduled).
    """

    def __init__(
        self,
        *,
        secret_env_names: Iterable[str] = (),
        on_exit: Callable[[ExitInfo], object] | None = None,
        stderr_max_lines: int = DEFAULT_MAX_LINES,
        stderr_max_bytes: int = DEFAULT_MAX_BYTES,
        stdout_limit: int = DEFAULT_STDOUT_LIMIT,
        track_interval: float = 1.0,
        subreaper: bool = True,
    ) -> None:
        self.secret_env_names = frozenset(secret_env_names)
        self.on_exit = on_exit
        self._stderr_max_lines = stderr_max_lines
        self._stderr_max_bytes = stderr_max_bytes
        self._stdout_limit = stdout_limit
        self._track_interval = track_interval
        self._subreaper = subreaper
        self.process: AgentProcess | None = None

    async def start(
        self,
        argv: list[str],
        *,
        cwd: str | None,
        env: Mapping[str, str],
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        """Spawn `argv` (no shell). `env` is the spec's env for the agent; `extra_env` is added on
        top (daemon-supplied values). Raises AgentStartError with a sanitized message."""
        if not argv:
            raise AgentStartError("empty agent command")
        if self.process is not None and not self.process._stopped:
            raise RuntimeError("the previous agent of this supervisor has not been stopped")
        if self._subreaper and not become_subreaper():
            log.warning("could not become a child subreaper; escaped agent descendants may be missed")
        loop = asyncio.get_running_loop()
        ring = StderrRing(self._stderr_max_lines, self._stderr_max_bytes)
        holder: list[AgentProcess] = []
        early_exit: list[int | None] = []

        def on_exited(returncode: int | None) -> None:
            if holder:
                holder[0]._handle_exited(returncode)
            else:
                early_exit.append(returncode)

        spawn_time = time.time()
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _AgentProtocol(self._stdout_limit, loop, ring, on_exited),
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env=build_agent_env(env, extra_env, secret_env_names=self.secret_env_names),
                start_new_session=True,
                preexec_fn=_pdeathsig_preexec(os.getpid()),
            )
        except FileNotFoundError as exc:
            what = "working directory" if cwd is not None and exc.filename == cwd else "executable"
            raise AgentStartError(f"cannot start agent: {what} not found") from None
        except PermissionError:
            raise AgentStartError("cannot start agent: permission denied") from None
        except OSError as exc:
            raise AgentStartError(f"cannot start agent: {exc.strerror or type(exc).__name__}") from None
        except Exception as exc:  # SubprocessError from the preexec hook
            raise AgentStartError(f"cannot start agent: {type(exc).__name__}") from None
        process = AgentProcess(
            transport=transport,  # type: ignore[arg-type]
            protocol=protocol,
            ring=ring,
            spawn_time=spawn_time,
            on_exit=self.on_exit,
            track_interval=self._track_interval,
        )
        holder.append(process)
        self.process = process
        if early_exit:
            process._handle_exited(early_exit[0])

    def _require(self) -> AgentProcess:
        if self.process is None:
            raise RuntimeError("no agent started")
        return self.process

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running

    @property
    def exit_info(self) -> ExitInfo | None:
        return self.process.exit_info if self.process is not None else None

    @property
    def stdin(self) -> asyncio.StreamWriter:
        return self._require().stdin

    @property
    def stdout(self) -> asyncio.StreamReader:
        return self._require().stdout

    async def wait_exit(self) -> ExitInfo:
        return await self._require().wait_exit()

    def stderr_snapshot(self) -> StderrWindow:
        if self.process is None:
            return StderrWindow(lines=[], truncated=False, total_bytes_seen=0, empty=True)
        return self.process.stderr_snapshot()

    async def stop(self, grace: float = 2.0, term_timeout: float = 3.0, kill_timeout: float = 5.0) -> ExitInfo:
        return await self._require().stop(grace, term_timeout, kill_timeout)


def _pdeathsig_preexec(parent_pid: int) -> Callable[[], None]:
    """The child-side hook that ties the agent's life to the daemon's.

    preexec_fn rather than a wrapper executable: a wrapper would cost an interpreter start per spawn
    and sit in the agent's argv/ancestry. The hook only makes syscalls through a ctypes function
    resolved before fork (no imports, no allocation-heavy work), which keeps the documented
    fork-with-threads hazard small. PR_SET_PDEATHSIG fires when the *thread* that forked exits, so
    agents must be started from the thread running the daemon's event loop for its whole life
    (asyncio's subprocess_exec forks in the loop thread). Without prctl (non-Linux) there is no
    parent-death signal and only the stop path protects against orphans.
    """
    prctl = _prctl

    def preexec() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
        # The daemon may have died between fork and prctl, in which case no signal will ever come.
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), _SIGKILL)

    return preexec
