"""The agent's shim: a tiny process between the daemon and the agent that takes the whole agent tree down with the daemon.

The daemon runs `python -I -S -c 'import shim ...' FD -- ARGV...` (agentctl.agent.spawn builds that command,
importing this file as a top-level module so its cached bytecode is used). The shim
makes itself a child subreaper, forks the agent (in a session of its own, with a parent-death signal
toward the shim), and stays until the agent and every descendant it ever had are gone. Because it is a
subreaper, nothing of the tree can escape it: a process that calls setsid and loses its parent is
re-parented here, not to init. When the daemon goes away, however it goes (SIGKILL included), the shim
sees end-of-file on FD and ends the tree: SIGTERM to all of it, then SIGKILL to whatever is left, until
nothing is. A parent-death signal alone cannot do that: it reaches only the process that asked for it.

The agent gets the shim's stdin, stdout and stderr unchanged (the shim points its own at /dev/null once
the agent runs, so end-of-file on the agent's pipes means what it meant without the shim; when stdin is a
terminal, which only the daemon's PTY slave ever is, it becomes the agent's controlling terminal), the shim's
environment unchanged (the daemon already built the agent's), and the default disposition of every
signal (Python ignores SIGPIPE and SIGXFSZ; the agent must not inherit that).

FD is one end of a stream socket the daemon holds the other end of; one ASCII line per message:

- shim to daemon: `P <pid>` the agent runs; `E <errno>` it could not be executed (the shim then exits
  127); `X <code>` the agent exited, with its return code as subprocess reports it (negative: the
  signal that killed it), taken from the agent's real wait status.
- daemon to shim: `K` kill the whole tree now (SIGKILL, no grace).
- end-of-file from the daemon: the daemon died or let go; the tree is ended as above.

SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to the shim are forwarded to the agent's process
group (after the agent is gone, to every remaining descendant). The shim exits 0 once the agent has
exited and it has no child left.

Only the standard library, and little of it: the shim starts once per agent and its start-up time and
memory are paid every time (bench/shim.py measures both). It never imports agentctl (it runs isolated,
-I -S, without site-packages); the daemon imports it for `load_prctl`.
"""

import os
import select
import sys
import time

# Not typing.TYPE_CHECKING: importing typing would cost this process's start-up; a type checker takes any
# variable of that name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    import signal as _sig  # the C module's names, as typeshed (which has no stub for _signal) types them
else:
    try:
        # The C module itself: `signal` wraps it in enums, about a quarter of this process's start-up time.
        import _signal as _sig
    except ImportError:  # pragma: no cover - not CPython
        import signal as _sig

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
SIGKILL = int(_sig.SIGKILL)
SIGTERM = int(_sig.SIGTERM)
SIGCHLD = int(_sig.SIGCHLD)
FORWARDED = tuple(int(s) for s in (_sig.SIGTERM, _sig.SIGINT, _sig.SIGHUP, _sig.SIGQUIT, _sig.SIGUSR1, _sig.SIGUSR2))
# What Python's start-up ignores and subprocess restores for a child it executes.
RESTORED = tuple(int(getattr(_sig, name)) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(_sig, name))
# After the daemon is gone: how long the tree gets to leave on SIGTERM, and how long SIGKILL keeps trying.
TERM_GRACE = 1.0
KILL_DEADLINE = 10.0
EXEC_FAILED = 127


def load_prctl() -> "Callable[..., int] | None":
    """libc's prctl through ctypes, or None (not Linux, or no ctypes). The daemon uses it too."""
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


def _send(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode("ascii") + b"\n")
    except OSError:
        pass  # the daemon is gone: the end-of-file on FD says so, and is handled there


def _children_by_parent() -> dict[int, list[int]]:
    """ppid -> pids, from /proc (this kernel may lack /proc/PID/task/TID/children)."""
    table: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # The command name (in parentheses) may hold spaces and parentheses: fields follow the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            table.setdefault(int(fields[1]), []).append(int(name))
    return table


class Shim:
    def __init__(self, ctl: int, argv: list[str]) -> None:
        self.ctl = ctl
        self.argv = argv
        self.me = os.getpid()
        self.agent: int | None = None  # the agent's pid until it is reaped
        self.children = True  # whether waitpid may still find a child
        self.prctl = load_prctl()
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        # Signals arrive as bytes on the wake pipe, so one poll() waits for them and for the daemon alike.
        _sig.set_wakeup_fd(wake_w)
        for signum in (*FORWARDED, SIGCHLD):
            _sig.signal(signum, self._noop)

    @staticmethod
    def _noop(signum: int, frame: object) -> None:
        pass

    # -- start ---------------------------------------------------------------------------------------

    def start(self) -> bool:
        if self.prctl is not None:
            self.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        err_r, err_w = os.pipe()  # close-on-exec: end-of-file without a byte means the exec succeeded
        pid = os.fork()
        if pid == 0:
            os.close(err_r)
            self._exec_agent(err_w)
        os.close(err_w)
        with os.fdopen(err_r, "rb") as fh:
            failure = fh.read()
        if failure:
            os.waitpid(pid, 0)
            _send(self.ctl, f"E {int(failure or b'0')}")
            return False
        self.agent = pid
        _send(self.ctl, f"P {pid}")
        # The agent holds the pipes now; the shim must not keep them open (EOF would wait for it).
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        return True

    def _exec_agent(self, err_w: int) -> None:
        code = 0
        try:
            _sig.set_wakeup_fd(-1)
            for signum in (*FORWARDED, SIGCHLD, *RESTORED):
                _sig.signal(signum, _sig.SIG_DFL)
            # The mask is inherited across fork and exec from whichever thread spawned the daemon's child:
            # an agent must start with nothing blocked, or it would never see the signals it is sent.
            _sig.pthread_sigmask(_sig.SIG_SETMASK, ())
            os.setsid()
            if os.isatty(0):
                # Only a PTY agentctl owns is ever the agent's stdin: make it the new session's controlling
                # terminal, so its keys (Ctrl-C) and window changes (SIGWINCH) reach the agent's group.
                import fcntl
                import termios

                fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            if self.prctl is not None:
                self.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
            # The shim may have died between fork and prctl, in which case no signal will ever come.
            if os.getppid() != self.me:
                os._exit(EXEC_FAILED)
            os.execvp(self.argv[0], self.argv)
        except OSError as exc:
            code = exc.errno or 0
        except BaseException:
            pass
        try:
            os.write(err_w, str(code).encode("ascii"))
        finally:
            os._exit(EXEC_FAILED)

    # -- the tree ------------------------------------------------------------------------------------

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children = False
                return
            if pid == 0:
                return
            if pid == self.agent:
                self.agent = None
                _send(self.ctl, f"X {os.waitstatus_to_exitcode(status)}")

    def descendants(self) -> list[int]:
        table = _children_by_parent()
        found: list[int] = []
        queue = list(table.get(self.me, ()))
        while queue:
            pid = queue.pop()
            found.append(pid)
            queue.extend(table.get(pid, ()))
        return found

    def signal_tree(self, signum: int) -> None:
        if self.agent is not None:
            # The agent is unreaped, so its pid (= its group's id) cannot belong to anyone else.
            try:
                os.killpg(self.agent, signum)
            except OSError:
                pass
        for pid in self.descendants():
            try:
                os.kill(pid, signum)
            except OSError:
                pass

    def forward(self, signum: int) -> None:
        if self.agent is not None:
            try:
                os.killpg(self.agent, signum)
                return
            except OSError:
                pass
        self.signal_tree(signum)

    def end_tree(self, grace: float) -> None:
        """SIGTERM and `grace` seconds to leave, then SIGKILL until no child is left (or KILL_DEADLINE)."""
        if grace > 0:
            self.signal_tree(SIGTERM)
            deadline = time.monotonic() + grace
            while self.children and time.monotonic() < deadline:
                self.wait_signals(0.05)
                self.reap()
        deadline = time.monotonic() + KILL_DEADLINE
        while self.children and time.monotonic() < deadline:
            self.signal_tree(SIGKILL)
            self.wait_signals(0.05)
            self.reap()

    def wait_signals(self, timeout: float) -> list[int]:
        ready, _, _ = select.select([self.wake_r], [], [], timeout)
        return list(os.read(self.wake_r, 512)) if ready else []

    # -- the loop ------------------------------------------------------------------------------------

    def run(self) -> int:
        poller = select.poll()
        poller.register(self.ctl, select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        while True:
            self.reap()
            if self.agent is None and not self.children:
                return 0
            for fd, _events in poller.poll():
                if fd == self.wake_r:
                    for signum in os.read(self.wake_r, 512):
                        if signum != SIGCHLD:
                            self.forward(signum)
                    continue
                try:
                    data = os.read(self.ctl, 512)
                except BlockingIOError:
                    continue  # woken for nothing: not the daemon's end
                except OSError:
                    data = b""
                if not data:
                    # The daemon is gone (or let go): nothing of the agent may outlive it.
                    self.end_tree(TERM_GRACE)
                    return 0
                if b"K" in data:
                    self.end_tree(0)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--" or not argv[1].isdigit():
        sys.stderr.write("usage: shim FD -- ARGV...   (started by the agentctl daemon, not by hand)\n")
        return 2
    ctl = int(argv[1])
    os.set_inheritable(ctl, False)  # the agent must not hold the daemon's channel
    os.set_blocking(ctl, True)  # whatever the daemon's socket was: a report must never fail with EAGAIN
    shim = Shim(ctl, argv[3:])
    if not shim.start():
        return EXEC_FAILED
    return shim.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
