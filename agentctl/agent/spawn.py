"""Spawning an agent: its command resolved, its environment, the shim that starts it, the stderr ring feed, and how its exit is described.

The daemon never forks the agent itself. It starts the shim (agentctl/agent/shim.py) in a session of its
own with the agent's stdio pipes, environment and working directory, and one end of a socketpair; the
shim forks and executes the agent and reports its pid (or why it could not run) and, later, its real
exit status over that socket. What the daemon reads there is described by `ExitInfo`, built only from
numbers, never from anything the agent wrote.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import shutil
import signal
import socket
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import msgspec

from agentctl.agent import shim as shim_module
from agentctl.agent.stderr_ring import StderrRing
from agentctl.agent.tree import register_own_child, unregister_own_child
from agentctl.bundled import bundled_command, self_command

# The daemon's service-manager variables are stripped from every agent environment.
from agentctl.runtime import SERVICE_MANAGER_ENV_PREFIXES

# The hidden `agentctl` subcommand that runs the shim where no shim.py file exists (a frozen build).
SHIM_SUBCOMMAND = "agent-shim"
# How long the shim may take to report the agent's pid: an interpreter start, measured at ~20 ms idle.
SHIM_START_TIMEOUT = 30.0


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


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_info_from_returncode(returncode: int | None, *, stopped: bool = False) -> ExitInfo:
    if returncode is None:
        return ExitInfo(None, None, "exit status unknown", stopped)
    if returncode < 0:
        signum = -returncode
        return ExitInfo(None, signum, f"killed by {_signal_name(signum)}", stopped)
    return ExitInfo(returncode, None, f"exited with code {returncode}", stopped)


def exit_info_shim_lost(shim_returncode: int | None, *, stopped: bool = False) -> ExitInfo:
    """The shim ended before reporting the agent's exit (someone killed it): the agent got its parent-death
    SIGKILL, but its exit status is nobody's to read any more. Said so rather than guessed."""
    if shim_returncode is not None and shim_returncode < 0:
        how = f"killed by {_signal_name(-shim_returncode)}"
    elif shim_returncode is not None:
        how = f"exited with code {shim_returncode}"
    else:
        how = "gone"
    return ExitInfo(None, None, f"exit status unknown: the agent's shim was {how}", stopped)


class AgentStartError(Exception):
    """The agent could not be spawned; the message is sanitized (no argv, no paths, no env)."""


def _exec_error(code: int) -> AgentStartError:
    if code == errno.ENOENT:
        return AgentStartError("cannot start agent: executable not found")
    if code in (errno.EACCES, errno.EPERM):
        return AgentStartError("cannot start agent: permission denied")
    why = os.strerror(code) if code else "exec failed"
    return AgentStartError(f"cannot start agent: {why}")


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


class AgentProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's stream protocol with two changes: stderr bypasses a StreamReader and goes
    straight into the ring (the pipe never fills and nothing buffers beyond the ring's bound,
    whatever the stdout limit), and the shim's exit is reported as soon as it is reaped.
    `Process.wait()` only returns once every pipe is closed too, which never happens while a
    grandchild holds stdout."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop, ring: StderrRing, on_exited: Callable[[int | None], None]) -> None:
        super().__init__(limit=limit, loop=loop)
        self._ring = ring
        self._on_exited = on_exited
        self._subprocess_transport: asyncio.SubprocessTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert isinstance(transport, asyncio.SubprocessTransport), "a subprocess protocol gets a subprocess transport"
        self._subprocess_transport = transport
        # fd 2 stays in the base class's open-pipe bookkeeping, so the transport still closes only
        # after stderr reaches EOF; only the reader is dropped.
        self.stderr = None
        _grow_pipe(transport.get_pipe_transport(2))

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        if fd == 2 and isinstance(data, bytes):  # a subprocess pipe's data is always bytes
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
        if transport is not None:
            # asyncio's watcher has reaped the shim: it is no longer ours to protect.
            unregister_own_child(transport.get_pid())
        super().process_exited()
        self._on_exited(returncode)


# Imported as a top-level module from its own directory, not run as a script: a script is compiled at every
# start, an import uses the bytecode cached when the daemon imported agentctl.agent.shim.
_SHIM_BOOT = "import sys; sys.path[0:0] = [{dir!r}]; from shim import main; sys.exit(main(sys.argv))"


def shim_command(ctl_fd: int, argv: list[str]) -> list[str]:
    """argv that runs the shim for `argv`: the shim module under this interpreter, isolated (-I: no
    PYTHON* variables of the agent's environment, no user site; -S: no site-packages), else the hidden
    subcommand of this agentctl (a frozen build has no file to import)."""
    path = shim_module.__file__
    tail = [str(ctl_fd), "--", *argv]
    if not getattr(sys, "frozen", False) and path and os.path.isfile(path) and path.endswith(".py"):
        return [sys.executable, "-I", "-S", "-c", _SHIM_BOOT.format(dir=os.path.dirname(path)), *tail]
    return [*self_command(), SHIM_SUBCOMMAND, *tail]



def resolve_command(argv: list[str]) -> list[str]:
    """Resolve a bare executable on PATH, then beside our own interpreter (the venv's bin directory).

    That lets a spec name `agentctl-reference-agent` without the venv on PATH.
    """
    first = argv[0]
    if os.sep in first:
        return list(argv)
    search = os.pathsep.join(filter(None, [os.environ.get("PATH", ""), os.path.dirname(sys.executable)]))
    found = shutil.which(first, path=search)
    if found is None and (bundled := bundled_command(first)) is not None:
        # A zipapp or frozen build has no console script for the reference agent: it is a subcommand.
        return [*bundled, *argv[1:]]
    return [found or first, *argv[1:]]


@dataclass
class Spawned:
    """A running shim and the agent it started."""

    transport: asyncio.SubprocessTransport
    protocol: AgentProtocol
    pid: int  # the agent's
    shim_pid: int
    control: tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def spawn_agent(
    argv: list[str],
    *,
    cwd: str | None,
    env: Mapping[str, str],
    protocol_factory: Callable[[], AgentProtocol],
    terminal: int | None = None,
) -> Spawned:
    """Start the shim and wait until it has executed `argv` (no shell). Raises AgentStartError with a
    sanitized message; nothing is left running then. `terminal`: a PTY slave to be the agent's stdio and
    controlling terminal instead of pipes (the caller keeps and closes its own copy)."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stdio = asyncio.subprocess.PIPE if terminal is None else terminal
    try:
        transport, protocol = await loop.subprocess_exec(
            protocol_factory,
            *shim_command(theirs.fileno(), argv),
            stdin=stdio,
            stdout=stdio,
            stderr=stdio,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            pass_fds=(theirs.fileno(),),
        )
    except FileNotFoundError as exc:
        ours.close()
        what = "working directory" if cwd is not None and exc.filename == cwd else "agent shim interpreter"
        raise AgentStartError(f"cannot start agent: {what} not found") from None
    except PermissionError:
        ours.close()
        raise AgentStartError("cannot start agent: permission denied") from None
    except OSError as exc:
        ours.close()
        raise AgentStartError(f"cannot start agent: {exc.strerror or type(exc).__name__}") from None
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    shim_pid = transport.get_pid()
    # No await between the spawn and this: another agent's tree scan must never take the shim for an orphan.
    register_own_child(shim_pid)
    kind = ""
    control: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    try:
        control = await asyncio.open_unix_connection(sock=ours)
        try:
            line = await asyncio.wait_for(control[0].readline(), SHIM_START_TIMEOUT)
        except TimeoutError:
            line = b"T"
        kind, _, value = line.decode("ascii", "replace").strip().partition(" ")
        if kind == "P" and value.isdigit():
            return Spawned(transport, protocol, int(value), shim_pid, control)
        if kind == "E":
            raise _exec_error(int(value) if value.isdigit() else 0)
        if kind == "T":
            raise AgentStartError(f"cannot start agent: its shim did not start it within {SHIM_START_TIMEOUT:g} s")
        raise AgentStartError("cannot start agent: its shim exited before starting it")
    except BaseException as exc:
        # Closing our end is the shim's cue to end whatever it started and exit (also when this start was
        # cancelled midway); SIGKILL would leave the agent's tree to us with nobody tracking it. Only a shim
        # that never reported is killed: it may be stuck before it reads anything.
        if control is not None:
            control[1].close()  # the transport owns the socket now
        else:
            ours.close()
        if kind == "T":
            transport.close()
        elif isinstance(exc, AgentStartError):
            await _close_after_exit(transport, protocol)  # it is exiting on its own (127): a moment
        else:
            closer = asyncio.ensure_future(_close_after_exit(transport, protocol))  # cancelled: not ours to wait
            _closers.add(closer)
            closer.add_done_callback(_closers.discard)
        raise


# Transports of shims that did not start an agent, closed once their shim has exited (kept referenced until then).
_closers: set[asyncio.Future[None]] = set()
SHIM_EXIT_BOUND = 15.0


async def _close_after_exit(transport: asyncio.SubprocessTransport, protocol: AgentProtocol) -> None:
    process = asyncio.subprocess.Process(transport, protocol, asyncio.get_running_loop())
    try:
        await asyncio.wait_for(process.wait(), SHIM_EXIT_BOUND)
    except TimeoutError:
        pass  # still running after ending its tree: the close below kills it
    transport.close()
