"""The daemons on this host: `agentctl ls` (alias `ps`) lists them, and `stop --wait` waits until one is gone
(their parsers: agentctl.commands.daemon_commands; this module is loaded only when one of them runs).

A listing asks each daemon for its status in parallel with a short timeout of its own, so one hung daemon
costs its own entry (`unresponsive`), never the whole listing; the listing as a whole ends within that timeout
too (plus the socket checks): a daemon not asked by then is `unresponsive`, however many sockets hang. A socket nobody listens on is shown as
`dead` and left where it is; another user's is shown as `not_yours` and never asked.
"""

from __future__ import annotations

import argparse
import os
import select
import stat
import time
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor

from agentctl.cli_support import (
    EXIT_OK,
    EXIT_STILL_RUNNING,
    UsageError,
    command,
    fail,
    out,
    print_json,
)
from agentctl.evidence.contract.control import DaemonEntry, DaemonListing, StatusResponse, StopResult

from agentctl.control.client import ControlClient, ControlClientError, ControlRefused, ControlUnavailable
from agentctl.control.socket import SOCKET_NAME, STALE_AFTER, env_socket, socket_base_dir
from agentctl.safetext import neutralize
from agentctl.unix_socket import ControlSocketError, socket_state

MAX_PARALLEL = 64
_STATE_TEXT = {"not_ready": "not ready", "not_yours": "not yours"}


# ---- ls -----------------------------------------------------------------------------------------------


def candidate_sockets(base: Path) -> list[Path]:
    """`<base>/*/control.sock` that exist (or cannot be looked at: another user's private directory)."""

    try:
        children = sorted(base.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise UsageError(f"cannot list the runtime dir {base}: {exc.strerror or exc}") from None
    found = []
    for child in children:
        path = child / SOCKET_NAME
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                found.append(path)
        except PermissionError:
            found.append(path)
        except OSError:
            continue  # not a daemon's directory (the hub's, a file, a socket gone meanwhile)
    return found


def probe_daemon(path: Path, timeout: float) -> DaemonEntry | None:
    """What `path` says within `timeout`; None when it went away meanwhile (a daemon that stopped cleanly)."""

    entry = DaemonEntry(socket=str(path), state="unresponsive")
    try:
        st = os.lstat(path)
    except PermissionError:
        entry.state = "not_yours"
        return entry
    except OSError:
        return None
    if st.st_uid != os.geteuid():
        entry.state = "not_yours"
        return entry
    state = socket_state(path)
    if state == "gone":
        return None
    if state == "denied":
        entry.state = "not_yours"
        return entry
    if state == "dead":
        entry.state = "starting" if _still_bound(path, st) else "dead"
        return entry
    client = ControlClient(path, timeout=timeout)
    try:
        status = client.call("GET", "/v1/status", StatusResponse)
    except ControlRefused as exc:
        entry.state = "not_yours" if exc.error.status == 403 else "unresponsive"
        return entry
    except ControlUnavailable:
        return None if not os.path.lexists(path) else entry
    except ControlClientError:
        entry.pid = client.peer_pid
        return entry  # connected, but no sensible answer in time
    identity = status.identity
    agent = status.agent
    entry.state = "ready" if status.ready else "not_ready"
    entry.pid = client.peer_pid
    entry.execution_id, entry.task_id, entry.session_id = identity.execution_id, identity.task_id, identity.session_id
    entry.agent_id = identity.agent_id
    entry.acp_session_id = status.current.acp_session_id if status.current else None
    if agent is not None:
        entry.agent, entry.agent_state = agent.name, agent.state
    return entry


def bound_unix_paths(table: str = "/proc/net/unix") -> set[str] | None:
    """The paths of the Unix sockets some live process holds bound in this network namespace (the kernel's
    table), or None when the table cannot be read (not Linux)."""
    try:
        with open(table, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return None
    # Num RefCount Protocol Flags Type St Inode Path: the path is the rest of the line (it may hold spaces).
    return {fields[7] for fields in (line.split(None, 7) for line in lines) if len(fields) == 8}


def _still_bound(path: Path, st: os.stat_result) -> bool:
    """A socket that refuses connections is a daemon starting (bound, not listening yet) only while a live
    process holds it bound: one killed with SIGKILL holds nothing, so it is dead at once. Where the kernel's
    table cannot be read, a socket younger than STALE_AFTER is given the benefit of the doubt."""
    bound = bound_unix_paths()
    if bound is None:

        return time.time() - st.st_mtime < STALE_AFTER
    return str(path) in bound


def list_daemons(timeout: float) -> DaemonListing:

    try:
        base = socket_base_dir()
        named = env_socket()
    except ControlSocketError as exc:
        raise UsageError(str(exc)) from None
    paths = candidate_sockets(base)
    if named is not None and named not in paths:
        paths.insert(0, named)
    entries: list[DaemonEntry] = []
    if paths:

        deadline = time.monotonic() + timeout

        def probe(path: Path) -> DaemonEntry | None:
            # What waits behind hung sockets gets what is left (a dead or foreign socket is still told apart).
            return probe_daemon(path, max(deadline - time.monotonic(), 0.001))

        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(paths))) as pool:
            entries = [e for e in pool.map(probe, paths) if e is not None]
    return DaemonListing(runtime_dir=str(base), daemons=entries)


def render_listing(listing: DaemonListing) -> str:

    if not listing.daemons:
        return f"no agentctl daemon under {listing.runtime_dir}\n"
    header = ("EXECUTION", "TASK", "SESSION", "AGENT", "STATE", "PID", "SOCKET")
    rows: list[tuple[str, ...]] = [header]
    for d in listing.daemons:
        agent = d.agent or d.agent_id or ""
        if d.agent_state:
            agent += f" ({d.agent_state})"
        session = d.session_id or ""
        if d.acp_session_id:
            session += f" / {d.acp_session_id}"
        rows.append(tuple(neutralize(v) for v in (
            d.execution_id or "-", d.task_id or "-", session or "-", agent or "-",
            _STATE_TEXT.get(d.state, d.state), str(d.pid) if d.pid else "-", d.socket)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] + "\n" for row in rows)


@command
def cmd_ls(args: argparse.Namespace) -> int:
    listing = list_daemons(args.timeout)
    if args.json:
        print_json(listing)
    else:
        out(render_listing(listing))
    return EXIT_OK


# ---- stop --wait --------------------------------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), None when it has exited (or is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == b"Z" else fields[19].decode()


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def wait_gone(path: Path, pid: int | None, seconds: float) -> bool:
    """True once the daemon has exited (`pid`, when known) and its socket is gone or dead, within `seconds`."""

    deadline = time.monotonic() + seconds
    started = _start_time(pid) if pid else None
    bound = _inode(path)
    if pid and started:
        try:
            # Woken by the kernel when the process exits (pidfd); then the socket is checked below.
            fd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            fd = None
        if fd is not None:
            try:
                while _start_time(pid) == started and (left := deadline - time.monotonic()) > 0:
                    select.select([fd], [], [], min(left, 0.5))  # a zombie stays readable: re-read its state
            finally:
                os.close(fd)
    while True:
        process_gone = pid is None or not started or _start_time(pid) != started
        # A socket file bound since (another daemon on the same path) is not this daemon's.
        socket_gone = _inode(path) != bound or socket_state(path) in ("gone", "dead")
        if process_gone and socket_gone:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        select.select([], [], [], min(left, 0.05))  # no pid to wait on: poll the socket


def stop_and_wait(args: argparse.Namespace, client: ControlClient, result: StopResult) -> int:
    """After POST /v1/stop was accepted: `--wait` until the daemon is gone, else say it is stopping."""
    if args.wait is None:
        if args.json:
            print_json(result)
        else:
            out("stopping: the daemon drains and exits\n")
        return EXIT_OK
    pid = client.peer_pid
    if not wait_gone(client.path, pid, args.wait):
        who = f"pid {pid}" if pid else f"its socket {client.path}"
        return fail(f"the daemon did not stop within {args.wait:g} s ({who} still there); it is still draining, or "
                    "hung: `kill` it, then `agentctl recover`", EXIT_STILL_RUNNING)
    if args.json:
        print_json(result)
    else:
        out("stopped: the daemon has exited\n")
    return EXIT_OK
