"""Process-tree bookkeeping for one agent: which processes are its tree, which are the daemon's own, keeping that knowledge fresh, reaping, and signalling the tree.

The agent's shim (agentctl/agent/shim.py) is a child subreaper, so every descendant of the agent stays
below the shim however it daemonizes: the shim is the root the tree is found from. The daemon is a child
subreaper too, as the fallback for a shim that was killed: its orphans come to the daemon, are recognised
as adopted (a new session, started after the agent), ended at once (agentctl/agent/supervisor.py) and
reaped like any member, the agent's own zombie included.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable

import psutil

from agentctl.agent.shim import PR_SET_CHILD_SUBREAPER, load_prctl

log = logging.getLogger(__name__)

# The tree tracker slows to at most this many times its interval while the agent tree does not change.
TRACK_BACKOFF = 8

# Resolved once: prctl through ctypes costs a library lookup.
_prctl = load_prctl()
_subreaper_pid: int | None = None


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux), so agent descendants that escape with setsid
    and lose their parent are re-parented to us instead of init, and stay sweepable and reapable.

    Idempotent. The flag is not inherited across fork, hence the per-pid memo.
    """
    global _subreaper_pid
    if _subreaper_pid == os.getpid():
        return True
    if _prctl is None or _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return False
    _subreaper_pid = os.getpid()
    return True


# Children of this process that are not agent-tree orphans and must never be swept or reaped by
# us. Shims register themselves (asyncio's child watcher reaps them). Other daemon code that spawns
# children with a new session after an agent started must register them too; children that share
# the daemon's session are never mistaken for agent descendants (an agent tree cannot rejoin it).
_own_children: set[int] = set()


def register_own_child(pid: int) -> None:
    _own_children.add(pid)


def unregister_own_child(pid: int) -> None:
    _own_children.discard(pid)


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class AgentTree:
    """The agent (`pid`, its session and group leader), the shim above it, and every descendant seen.

    `known` holds psutil handles (which refuse to signal a reused pid), collected while the agent runs
    because re-parenting erases the ancestry the tree is found by.
    """

    def __init__(self, pid: int, shim_pid: int, spawn_time: float) -> None:
        self.pid = pid
        self.shim_pid = shim_pid
        self.known: dict[int, psutil.Process] = {}
        self._our_sid = os.getsid(0)
        self.shim: psutil.Process | None
        try:
            self.shim = psutil.Process(shim_pid)
            self.start_ct = self.shim.create_time()
        except psutil.Error:
            self.shim = None
            self.start_ct = spawn_time - 1.0
        self.agent: psutil.Process | None
        try:
            agent = psutil.Process(pid)
            # The shim reports the pid after the exec; a process older than the shim is not that agent.
            self.agent = agent if agent.create_time() >= self.start_ct else None
        except psutil.Error:
            self.agent = None  # already exited and reaped by the shim
        _live_trees.add(self)

    def close(self) -> None:
        _live_trees.discard(self)

    def _is_adopted(self, child: psutil.Process) -> bool:
        """A child of ours we did not spawn: an orphan of the agent tree re-parented to us."""
        if child.pid in _own_children or child.pid in (self.pid, self.shim_pid):
            return False
        for other in tuple(_live_trees):
            if other is not self and other.known.get(child.pid) == child:
                return False
        try:
            return os.getsid(child.pid) != self._our_sid and child.create_time() >= self.start_ct
        except (OSError, psutil.Error):
            return False

    def group_is_ours(self) -> bool:
        """Whether the agent's pid still names its group. Linux keeps a pid reserved while its process is
        unreaped or any member of the group or session it leads lives; if another process now holds the
        number, the group of that number may be a new one."""
        if self.agent is not None:
            try:
                if self.agent.is_running():  # the same process (create time checked), zombie or not
                    return True
            except psutil.Error:
                pass
        return not psutil.pid_exists(self.pid)

    def scan(self, full: bool, agent_running: bool) -> list[psutil.Process]:
        """Refresh `known`; reap adopted zombies; return the members still alive (not the agent)."""
        # One pass over the process table per scan (psutil's children() re-reads it per call).
        by_pid: dict[int, psutil.Process] = {}
        by_parent: dict[int, list[psutil.Process]] = {}
        for proc in psutil.process_iter(["ppid"]):
            by_pid[proc.pid] = proc
            by_parent.setdefault(proc.info["ppid"], []).append(proc)
        me = os.getpid()
        our_children = by_parent.get(me, [])

        roots: list[psutil.Process] = []
        if self.shim is not None and by_pid.get(self.shim_pid) == self.shim:
            roots.append(self.shim)
        if agent_running and self.agent is not None:
            roots.append(self.agent)
        # A known pid now held by a different process (pid reuse) compares unequal and is not a root.
        roots += [p for pid, p in self.known.items() if by_pid.get(pid) == p]
        roots += [c for c in our_children if c.pid not in self.known and self._is_adopted(c)]
        found: dict[int, psutil.Process] = {}
        queue = list(roots)
        while queue:
            proc = queue.pop()
            if proc.pid in found:
                continue
            found[proc.pid] = proc
            queue.extend(by_parent.get(proc.pid, ()))
        if full and self.group_is_ours():
            # Session members whose ancestry we never saw (e.g. their parent died while no subreaper
            # held them): the agent is session leader, and a session cannot be rejoined once left.
            for pid, proc in by_pid.items():
                if pid in found:
                    continue
                try:
                    if os.getsid(pid) == self.pid and proc.create_time() >= self.start_ct:
                        found[pid] = proc
                except (OSError, psutil.Error):
                    continue
        for pid in (self.pid, self.shim_pid, me):
            found.pop(pid, None)
        for pid, proc in found.items():
            if pid not in _own_children and self.known.get(pid) != proc:
                self.known[pid] = proc
        self.reap_adopted(our_children)
        # Forget what is fully gone (zombies stay until reaped), so a long-lived agent that runs many
        # short tools does not grow this map.
        for pid, proc in list(self.known.items()):
            if not proc.is_running():
                del self.known[pid]
        return [p for p in self.known.values() if alive(p)]

    def reap_adopted(self, our_children: list[psutil.Process] | None = None) -> None:
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
            # The agent itself is our child only once its shim was killed (it was re-parented to us): nobody
            # else will read its status.
            agent = child.pid == self.pid and self.agent == child
            if agent or self.known.get(child.pid) == child or self._is_adopted(child):
                try:
                    os.waitpid(child.pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def signal(self, sig: int, members: Iterable[psutil.Process]) -> None:
        """`sig` to the agent's group (while that number is still its group) and to every member."""
        if self.group_is_ours():
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in members:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass


_live_trees: set[AgentTree] = set()


class TreeTracker:
    """Keeps a tree's `known` members fresh while its agent lives: `scan` runs every `interval` seconds in a
    worker thread, one scan at a time (a stop's full scans share the lock), until `close()`.

    A scan reads the whole process table (this kernel may lack /proc/PID/task/TID/children), so a fleet of
    idle daemons would cost the square of its size: while the tree stays the same the interval doubles up
    to TRACK_BACKOFF times the base, and any change brings it back. Nothing escapes meanwhile: orphans are
    re-parented to the shim (a subreaper) and a stop scans in full.
    """

    def __init__(self, scan: Callable[[bool], list[psutil.Process]], interval: float, *, name: str) -> None:
        self._scan = scan
        self._interval = interval
        self._lock = asyncio.Lock()
        # Ended through an event rather than cancellation: a cancelled await would release the scan lock
        # while the worker thread is still scanning.
        self._done = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=name)

    async def scan(self, full: bool) -> list[psutil.Process]:
        async with self._lock:
            return await asyncio.to_thread(self._scan, full)

    async def close(self) -> None:
        self._done.set()
        await self._task

    async def _run(self) -> None:
        interval, seen = self._interval, None
        while not self._done.is_set():
            try:
                members = frozenset(p.pid for p in await self.scan(False))
            except Exception:
                log.debug("agent tree scan failed", exc_info=True)
                members = None
            unchanged = members is not None and members == seen
            interval = min(interval * 2, self._interval * TRACK_BACKOFF) if unchanged else self._interval
            seen = members
            try:
                await asyncio.wait_for(self._done.wait(), interval)
            except asyncio.TimeoutError:
                pass
