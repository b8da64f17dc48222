"""Where the control socket lives and how it is created: 0600, inside a 0700 directory, never stolen.

- Path: `--socket` (the full socket path), else `$AGENTCTL_SOCKET` (the full socket path too, as
  `SSH_AUTH_SOCK` names a socket), else `<runtime dir>/<execution_id>/control.sock`. The runtime dir, the
  directory of daemons, is `$AGENTCTL_RUNTIME_DIR`, else `$RUNTIME_DIRECTORY` (systemd), else the
  platformdirs user runtime dir.
- `web.UnixSite` sets no file mode, so the socket is bound here under umask 0o177 (mode 0600 from the
  first instant, no chmod race) and served, already bound, through a listener guard (a connection cap and
  an idle deadline: the agent runs as the same user and could otherwise hold every connection).
- asyncio would silently unlink an existing socket file at bind; `prepare_socket_path` probes it first and
  refuses to start when a live daemon answers. A stale file with nobody listening is removed.
- Discovery (`discover`): the sockets under the base dir that answer, and the stale ones of daemons that
  died without removing theirs (SIGKILL); `remove_stale` deletes one once it is certainly dead.

Client commands import this module for `resolve_socket_path`, so aiohttp is imported lazily.
"""

from __future__ import annotations

import os
import stat
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from agentctl.unix_socket import ControlSocketError, bind_unix_socket, forget_bound, probe_live, socket_state

if TYPE_CHECKING:  # pragma: no cover
    from aiohttp import web

    from agentctl.listener_guard import ListenerGuard

ENV_SOCKET = "AGENTCTL_SOCKET"  # one daemon's socket
ENV_RUNTIME_DIR = "AGENTCTL_RUNTIME_DIR"  # the directory of daemons, one <execution_id>/control.sock each
ENV_RUNTIME_DIRECTORY = "RUNTIME_DIRECTORY"  # systemd's RuntimeDirectory=
SOCKET_NAME = "control.sock"
# sun_path is 108 bytes including the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107
CONTROL_CONNECTIONS = 64  # one CLI call per connection; same-uid peers only
# A socket file younger than this that refuses connections may be a daemon between bind() and listen():
# discovery does not count it, and does not remove it either.
STALE_AFTER = 5.0

# Directories prepare_socket_path created (removed again by cleanup when empty).
_created_dirs: set[Path] = set()


def _check_execution_id(execution_id: str) -> None:
    if (
        not execution_id
        or execution_id in (".", "..")
        or "/" in execution_id
        or "\0" in execution_id
        or execution_id != execution_id.strip()
    ):
        raise ControlSocketError(f"execution id {execution_id!r} cannot name a socket directory")


def env_socket() -> Path | None:
    """The socket $AGENTCTL_SOCKET names (made absolute), or None when unset. A directory there is refused
    with one line: it names one daemon's socket, and the directory of daemons is $AGENTCTL_RUNTIME_DIR."""
    value = os.environ.get(ENV_SOCKET)
    if not value:
        return None
    path = Path(value).expanduser().absolute()
    if path.is_dir():
        raise ControlSocketError(f"${ENV_SOCKET} names a directory; it names one daemon's socket (the directory "
                                 f"of daemons is ${ENV_RUNTIME_DIR})")
    return path


def socket_base_dir() -> Path:
    """The runtime dir: the directory holding one `<execution_id>/control.sock` per daemon (and the hub's)."""
    env = os.environ.get(ENV_RUNTIME_DIR)
    if env:
        return Path(env).expanduser().absolute()
    runtime = os.environ.get(ENV_RUNTIME_DIRECTORY)
    if runtime:
        # systemd joins several RuntimeDirectory= entries with ':'; the first is ours.
        first = runtime.split(":", 1)[0]
        if first:
            return Path(first).absolute()
    import platformdirs

    try:
        with warnings.catch_warnings():
            # "XDG_RUNTIME_DIR is not set, falling back to ..." is expected on servers; not worth a line.
            warnings.simplefilter("ignore")
            base = platformdirs.user_runtime_dir("agentctl")
    except (PermissionError, OSError) as exc:
        raise ControlSocketError(
            f"no usable runtime directory ({exc}); pass --socket or set {ENV_SOCKET} or {ENV_RUNTIME_DIR}"
        ) from None
    return Path(base).absolute()


def execution_socket_path(execution_id: str) -> Path:
    """`<runtime dir>/<execution_id>/control.sock`; the id may not leave the runtime dir."""
    _check_execution_id(execution_id)
    return socket_base_dir() / execution_id / SOCKET_NAME


def resolve_socket_path(cli_value: str | None, execution_id: str) -> Path:
    """Where a daemon binds: `--socket` verbatim (made absolute), else $AGENTCTL_SOCKET (the executor names
    the socket it will talk to), else `<runtime dir>/<execution_id>/control.sock`."""
    if cli_value:
        return Path(cli_value).expanduser().absolute()
    _check_execution_id(execution_id)
    return env_socket() or execution_socket_path(execution_id)


def named_socket(socket_arg: str | None, execution_id: str | None) -> Path | None:
    """The socket a client command is pointed at: `--socket`, else `--execution` under the runtime dir, else
    $AGENTCTL_SOCKET (an option on the command line wins over the environment); None when nothing names one
    (the command then looks for the one live daemon). Its length is checked."""
    if socket_arg:
        path: Path | None = Path(socket_arg).expanduser().absolute()
    elif execution_id:
        path = execution_socket_path(execution_id)
    else:
        path = env_socket()
    if path is not None:
        check_path_length(path)
    return path


def check_path_length(path: Path) -> None:
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH_BYTES:
        raise ControlSocketError(
            f"control socket path is {size} bytes, over the {MAX_SOCKET_PATH_BYTES}-byte limit of Unix sockets: "
            f"{path}; pass a shorter --socket, or set {ENV_SOCKET} to a shorter path or {ENV_RUNTIME_DIR} to a "
            "shorter directory"
        )


def _ensure_private_dir(directory: Path) -> None:
    """Create `directory` (and missing parents) 0700, or verify an existing one is ours and tighten it."""
    from agentctl.safe_files import make_private_dir  # here: the CLI's fast path imports this module

    missing: list[Path] = []
    probe = directory
    while not os.path.lexists(probe):
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for new in reversed(missing):
        try:
            made = make_private_dir(new)  # False: created concurrently; checked below like any existing one
        except OSError as exc:
            raise ControlSocketError(f"cannot create socket directory {new}: {exc.strerror or exc}") from None
        if made and new == directory:
            _created_dirs.add(directory)

    try:
        st = os.stat(directory)
    except OSError as exc:
        raise ControlSocketError(f"cannot use socket directory {directory}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ControlSocketError(f"socket directory {directory} is not a directory")
    if st.st_uid != os.geteuid():
        raise ControlSocketError(
            f"socket directory {directory} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_ISVTX:
        # A sticky directory (like /tmp) is shared by design: tightening it would break everyone else.
        raise ControlSocketError(
            f"refusing to put the control socket directly in the shared directory {directory} "
            f"(mode {mode:04o}); use a private subdirectory, e.g. {directory / 'agentctl' / SOCKET_NAME}"
        )
    if mode & 0o077:
        try:
            os.chmod(directory, 0o700)
        except OSError as exc:
            raise ControlSocketError(f"cannot make {directory} private (0700): {exc.strerror or exc}") from None


def discover(base: Path) -> tuple[list[Path], list[Path]]:
    """(live, stale): the `<base>/*/control.sock` sockets that answer, and those nobody listens on any more
    (their daemon died without removing them, e.g. killed with SIGKILL). A socket this user may not use,
    or one bound a moment ago and not yet listening, is in neither list."""
    try:
        candidates = sorted(base.glob(f"*/{SOCKET_NAME}"))
    except OSError:
        return [], []
    live: list[Path] = []
    stale: list[Path] = []
    for path in candidates:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISSOCK(st.st_mode):
            continue
        state = socket_state(path)
        if state == "live":
            live.append(path)
        elif state == "dead" and st.st_uid == os.geteuid() and _age(st) >= STALE_AFTER:
            stale.append(path)
    return live, stale


def _age(st: os.stat_result) -> float:
    return time.time() - st.st_mtime


def remove_stale(path: Path) -> bool:
    """Remove a dead daemon's socket (still a socket of ours, still refusing) and its directory when empty."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid() or socket_state(path) != "dead":
        return False
    try:
        os.unlink(path)
    except OSError:
        return False
    try:
        os.rmdir(path.parent)
    except OSError:
        pass  # not empty, or not ours to remove
    return True


def prepare_socket_path(path: Path) -> None:
    """Everything before bind: length, the private directory, and the existing-file check.

    Raises ControlSocketError when the path is too long, the directory is not ours, the path is taken by
    something that is not a socket, or another daemon already answers on it.
    """
    path = Path(path)
    check_path_length(path)
    _ensure_private_dir(path.parent)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ControlSocketError(f"cannot inspect {path}: {exc.strerror or exc}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise ControlSocketError(f"{path} exists and is not a socket; refusing to replace it")
    if probe_live(path):
        raise ControlSocketError(f"another agentctl process is already serving {path}")
    try:
        os.unlink(path)  # stale: a daemon that died without cleaning up
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ControlSocketError(f"cannot remove stale socket {path}: {exc.strerror or exc}") from None


async def start_unix_site(runner: web.AppRunner, path: Path, guard: ListenerGuard | None = None) -> web.BaseSite:
    """Bind `path` (call prepare_socket_path first) and serve `runner`'s app on it through `guard` (its own
    listener guard, capped at CONTROL_CONNECTIONS, when none is given)."""
    from agentctl.listener_guard import HTTP_REFUSAL, GuardedSite, ListenerGuard

    path = Path(path)
    check_path_length(path)
    sock = bind_unix_socket(path)
    guard = guard or ListenerGuard("control", CONTROL_CONNECTIONS, refusal=HTTP_REFUSAL, write_timeout=None)
    site = GuardedSite(runner, guard, sock=sock)
    try:
        await site.start()
    except BaseException:
        sock.close()
        cleanup_socket_path(path)
        raise
    return site


def cleanup_socket_path(path: Path) -> None:
    """Remove the socket file (if it is still the one we bound) and the directory we created, if empty."""
    path = Path(path)
    expected = forget_bound(path)
    try:
        st = os.lstat(path)
    except OSError:
        st = None
    if st is not None and stat.S_ISSOCK(st.st_mode):
        if expected is None or expected == (st.st_dev, st.st_ino):
            try:
                os.unlink(path)
            except OSError:
                pass
    if path.parent in _created_dirs:
        _created_dirs.discard(path.parent)
        try:
            os.rmdir(path.parent)
        except OSError:
            pass  # not empty, or already gone
