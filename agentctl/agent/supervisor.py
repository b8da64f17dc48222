"""Agent process supervision: start the agent under its shim, drain its stderr into the bounded ring, report its real exit, and stop its whole process tree (stdin close or terminal hang-up, SIGTERM, SIGKILL, sweep, reaping).

Spawning (and the shim) live in agentctl/agent/spawn.py and shim.py, the tree's bookkeeping (its periodic
scans included) in tree.py; this module owns one agent's life and the stop escalation.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import psutil

from agentctl.agent.spawn import (
    AgentProtocol,
    AgentStartError,
    ExitInfo,
    Spawned,
    build_agent_env,
    exit_info_from_returncode,
    exit_info_shim_lost,
    spawn_agent,
)
from agentctl.agent.pty_host import PtyHost, WindowSize, open_pty
from agentctl.agent.stderr_ring import DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES, StderrRing, StderrWindow
from agentctl.agent.tree import AgentTree, TreeTracker, become_subreaper, register_own_child, unregister_own_child
from agentctl.logs import TRANSITIONS, log_failure

__all__ = [
    "AgentProcess",
    "AgentStartError",
    "ExitInfo",
    "Supervisor",
    "become_subreaper",
    "build_agent_env",
    "exit_info_from_returncode",
    "register_own_child",
    "unregister_own_child",
]

log = logging.getLogger(__name__)

# The ACP SDK's own frame limit (acp.core.DEFAULT_STDIO_BUFFER_LIMIT_BYTES): a frame larger than the
# StreamReader limit makes readline() fail, so stdout must allow what the SDK allows.
DEFAULT_STDOUT_LIMIT = 50 * 1024 * 1024
# After the stop: how long the shim may take to notice the tree is gone and exit.
SHIM_EXIT_WAIT = 1.0
SHIM_REPORT_WAIT = 10.0  # reading what an exited shim wrote (its channel holds it whole)
# A shim killed under its tree: how long the leftovers get to leave on SIGTERM (the shim's own grace when
# the daemon dies), then how long SIGKILL keeps trying.
ORPHAN_TERM_GRACE = 1.0
ORPHAN_KILL_TIMEOUT = 5.0
_SIGKILL = int(signal.SIGKILL)


class AgentProcess:
    """One spawned agent. Created by `Supervisor.start`; `stdin`/`stdout` are the ACP byte streams.

    `pid` is the agent's own; its parent is the shim (`shim_pid`), the daemon's child."""

    def __init__(
        self,
        *,
        spawned: Spawned,
        ring: StderrRing,
        spawn_time: float,
        on_exit: Callable[[ExitInfo], object] | None,
        track_interval: float,
        terminal: PtyHost | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()
        self._transport = spawned.transport
        self._proc = asyncio.subprocess.Process(spawned.transport, spawned.protocol, loop)
        self.pid: int = spawned.pid
        self.shim_pid: int = spawned.shim_pid
        self.stdin: asyncio.StreamWriter = self._proc.stdin  # type: ignore[assignment]
        self.stdout: asyncio.StreamReader = self._proc.stdout  # type: ignore[assignment]
        self.stderr_ring = ring
        # On a PTY (a passthrough CLI with `terminal = true`): stdin and stdout are None, the output goes
        # through the terminal into the ring.
        self.terminal = terminal
        self._control_reader, self._control_writer = spawned.control
        self._on_exit = on_exit
        self._exit_info: ExitInfo | None = None
        self._exited = asyncio.Event()
        self._shim_returncode: int | None = None
        self._shim_exited = asyncio.Event()
        self._stop_requested = False
        self._stop_task: asyncio.Task[ExitInfo] | None = None
        self._stopped = False
        self._callback_tasks: set[asyncio.Task[Any]] = set()
        self.tree = AgentTree(self.pid, self.shim_pid, spawn_time)
        # A lambda rather than the bound method: `_scan` is looked up at each scan, so a wrapper set on
        # this object later (a test counting scans) still sees every one.
        self._tracker = TreeTracker(lambda full: self._scan(full), track_interval, name=f"agent-tracker-{self.pid}")
        self._watcher = loop.create_task(self._watch_shim(), name=f"agent-shim-{self.pid}")

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

    def _on_shim_exited(self, returncode: int | None) -> None:
        self._shim_returncode = returncode
        self._shim_exited.set()

    async def _watch_shim(self) -> None:
        """The shim's reports: the agent's exit status as the shim reaped it, then end-of-file."""
        reader = self._control_reader
        while True:
            try:
                line = await reader.readline()
            except (OSError, ValueError, asyncio.LimitOverrunError):
                line = b""
            if not line:
                break
            kind, _, value = line.decode("ascii", "replace").strip().partition(" ")
            if kind == "X" and value.lstrip("-").isdigit():
                self._handle_exited(exit_info_from_returncode(int(value), stopped=self._stop_requested))
        if self._exit_info is None or not self._stop_requested:
            # The shim is gone (without a word about the agent, or before its tree was): its exit status says how.
            try:
                await asyncio.wait_for(self._shim_exited.wait(), SHIM_EXIT_WAIT)
            except TimeoutError:
                pass
        if self._exit_info is None:
            self._handle_exited(exit_info_shim_lost(self._shim_returncode, stopped=self._stop_requested))
        if not self._stop_requested and self._shim_returncode != 0:
            # The shim exits 0 only once its tree is gone. Killed, it left the agent's descendants to us
            # (a subreaper): nothing else ends them now, so they are ended here rather than at the stop.
            task = asyncio.get_running_loop().create_task(self._end_orphans(), name=f"agent-orphans-{self.pid}")
            self._callback_tasks.add(task)
            task.add_done_callback(self._callback_tasks.discard)

    def _handle_exited(self, info: ExitInfo) -> None:
        if self._exit_info is not None:
            return
        self._exit_info = info
        self._exited.set()
        transitions = logging.getLogger(TRANSITIONS)
        if info.stopped or info.returncode == 0:
            transitions.info("agent pid %d %s", self.pid, info.reason)
        else:
            # The one line about the agent's own end (the ACP manager adds none): news at the default level.
            transitions.warning("agent pid %d %s, not stopped by agentctl", self.pid, info.reason)
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

    def _tell_shim(self, message: bytes) -> None:
        try:
            self._control_writer.write(message)
        except (OSError, RuntimeError):
            pass  # the shim is gone already

    # -- tree tracking -------------------------------------------------------------------------

    def _scan(self, full: bool) -> list[psutil.Process]:
        return self.tree.scan(full, agent_running=self._exit_info is None)

    async def _scan_async(self, full: bool) -> list[psutil.Process]:
        return await self._tracker.scan(full)

    # -- stop ----------------------------------------------------------------------------------

    async def stop(self, grace: float = 2.0, term_timeout: float = 3.0, kill_timeout: float = 5.0) -> ExitInfo:
        """Close stdin, wait `grace`, SIGTERM the group and every known descendant, wait
        `term_timeout`, SIGKILL whatever is left (repeatedly, until a rescan finds nothing new),
        then reap. Safe to call more than once and after the agent exited on its own (its leftover
        descendants are still swept)."""
        if self._stop_task is None:
            self._stop_task = asyncio.get_running_loop().create_task(self._stop(grace, term_timeout, kill_timeout))
        return await asyncio.shield(self._stop_task)

    def kill_now(self) -> None:
        """The fast end (a forced exit): SIGKILL the tree at once, without waiting. The shim keeps killing
        what it finds after we are gone."""
        self._stop_requested = True
        self.tree.signal(_SIGKILL, list(self.tree.known.values()))
        self._tell_shim(b"K\n")

    async def _stop(self, grace: float, term_timeout: float, kill_timeout: float) -> ExitInfo:
        loop = asyncio.get_running_loop()
        self._stop_requested = True
        await self._scan_async(True)
        try:
            self.stdin.close()
        except Exception:
            pass
        if self.terminal is not None:
            # On a terminal, the end of input is a hang-up: SIGHUP to the agent, as when a person closes the window.
            self.terminal.close()
        await self._wait_exited(loop.time() + grace)

        members = await self._scan_async(True)
        if self._exit_info is None or members:
            self.tree.signal(signal.SIGTERM, members)
            await self._wait_tree_gone(loop.time() + term_timeout)

        left = [] if await self._kill_tree(kill_timeout) else await self._scan_async(True)
        await self._finish()
        if self._exit_info is None and not left:
            # The tree is gone, but the shim's word on how the agent ended was not read in time (a loaded
            # host): what is known is recorded (stopped, status unknown), never a report still "starting".
            self._handle_exited(exit_info_shim_lost(self._shim_returncode, stopped=True))
        if self._exit_info is not None:
            return self._exit_info
        return ExitInfo(None, None, "still running after SIGKILL", True)

    async def _kill_tree(self, kill_timeout: float) -> bool:
        """SIGKILL the tree, rescanning, until a full scan finds nothing and the agent has exited, or
        `kill_timeout`; whether the tree is gone."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + kill_timeout
        while True:
            members = await self._scan_async(True)
            if self._exit_info is None or members:
                self.tree.signal(_SIGKILL, members)
                if not self._shim_exited.is_set():
                    # The shim sees every orphan as its child: it kills what a scan of ours may have missed.
                    self._tell_shim(b"K\n")
            if await self._wait_tree_gone(min(deadline, loop.time() + 0.2)):
                # A last full scan catches anything forked between the previous scan and the kill.
                if not await self._scan_async(True) and self._exit_info is not None:
                    return True
            if loop.time() >= deadline:
                log.warning("agent pid %d: process tree not gone %.1fs after SIGKILL", self.pid, kill_timeout)
                return False

    async def _end_orphans(self) -> None:
        """The shim was killed under its tree: SIGTERM what is left of it, a grace, then SIGKILL, as the
        shim itself would have when the daemon went away."""
        try:
            members = await self._scan_async(True)
            if not members or self._stop_requested:
                return
            log.warning("agent pid %d: its shim was killed; ending %d leftover processes of its tree",
                        self.pid, len(members))
            self.tree.signal(signal.SIGTERM, members)
            loop = asyncio.get_running_loop()
            if not await self._wait_tree_gone(loop.time() + ORPHAN_TERM_GRACE):
                await self._kill_tree(ORPHAN_KILL_TIMEOUT)
            await asyncio.to_thread(self.tree.reap_adopted)
        except Exception as exc:  # never an unretrieved task exception; the stop sweeps again anyway
            log_failure(log, "ending the agent's leftover processes failed", exc)

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
        await self._tracker.close()
        # The last scan may have run between a member's death and its re-parenting to us.
        await asyncio.to_thread(self.tree.reap_adopted)
        # Letting go of the shim's channel is its cue to exit (the tree is gone; anything left it kills).
        self._control_writer.close()
        # Pipes close on their own once every holder is dead; anything still holding one after the
        # sweep is outside our reach, so stop waiting for it.
        shim_gone = True
        try:
            await asyncio.wait_for(self._proc.wait(), SHIM_EXIT_WAIT)
        except asyncio.TimeoutError:
            shim_gone = False
            self._transport.close()
        try:
            # Once the shim has exited, its last words are all in the channel: reading them waits only for the
            # loop's turn, which a loaded host may take long to give. Without it the agent's end is unknown.
            await asyncio.wait_for(self._watcher, SHIM_REPORT_WAIT if shim_gone else SHIM_EXIT_WAIT)
        except asyncio.TimeoutError:
            pass
        self.tree.close()
        if self.terminal is not None:
            self.terminal.close()
        self._stopped = True


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
        terminal: WindowSize | None = None,
    ) -> None:
        """Spawn `argv` (no shell) under its shim. `env` is the spec's env for the agent; `extra_env` is
        added on top (daemon-supplied values). `terminal`: run it on a new PTY of that size rather than on
        pipes. Raises AgentStartError with a sanitized message."""
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
                holder[0]._on_shim_exited(returncode)
            else:
                early_exit.append(returncode)

        spawn_time = time.time()
        master = slave = None
        if terminal is not None:
            try:
                master, slave = open_pty(terminal)
            except OSError as exc:
                raise AgentStartError(f"cannot start agent: no pseudo-terminal ({exc.strerror})") from None
        try:
            spawned = await spawn_agent(
                argv,
                cwd=cwd,
                env=build_agent_env(env, extra_env, secret_env_names=self.secret_env_names),
                protocol_factory=lambda: AgentProtocol(self._stdout_limit, loop, ring, on_exited),
                terminal=slave,
            )
        except BaseException:
            if master is not None:
                os.close(master)
            raise
        finally:
            # The agent holds the slave now: ours must go, or the master would never see the agent's end.
            if slave is not None:
                os.close(slave)
        host = PtyHost(master, ring, terminal) if master is not None and terminal is not None else None
        process = AgentProcess(
            spawned=spawned,
            ring=ring,
            spawn_time=spawn_time,
            on_exit=self.on_exit,
            track_interval=self._track_interval,
            terminal=host,
        )
        holder.append(process)
        self.process = process
        if early_exit:
            process._on_shim_exited(early_exit[0])

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

    def kill_now(self) -> None:
        """SIGKILL the agent's tree without waiting (a forced exit); nothing if no agent runs."""
        if self.process is not None and not self.process._stopped:
            self.process.kill_now()
