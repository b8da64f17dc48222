"""The Unix-socket primitives every agentctl socket shares: the peer's credentials, a bind that is private from
the first instant, and whether anybody listens on a socket file. A leaf: no agentctl module is imported, so the
daemon's control server, the hub and the upstream link use these without importing one another.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from pathlib import Path

PROBE_TIMEOUT = 1.0

# The inode each bind_unix_socket made, so cleanup never removes a socket some other process put there since.
_bound: dict[Path, tuple[int, int]] = {}


class ControlSocketError(Exception):
    """The control socket cannot be placed or bound; the message is one line for the CLI."""


_UCRED = struct.Struct("3i")  # struct ucred { pid_t pid; uid_t uid; gid_t gid; }


def peer_cred(sock: socket.socket | None) -> tuple[int, int, int] | None:
    """(pid, uid, gid) of the process at the other end of a connected AF_UNIX socket, or None when unknown."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if sock is None or peercred is None:
        return None  # not Linux (or no socket): callers fail closed
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, peercred, _UCRED.size)
    except (OSError, AttributeError):
        return None
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid


def peer_allowed(uid: int | None) -> bool:
    """Whether a peer with this uid may use our sockets: our own user or root only (None: unknown, refused)."""
    return uid is not None and uid in (0, os.getuid(), os.geteuid())


def probe_live(path: Path) -> bool:
    """True when something accepts connections on `path`; False when nobody listens (stale file)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT)
    try:
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except (TimeoutError, BlockingIOError):
        # A full backlog times out (or would block): somebody is listening, just busy.
        return True
    except OSError as exc:
        raise ControlSocketError(
            f"cannot tell whether a daemon is serving {path} ({exc.strerror or exc}); remove it if none is"
        ) from None
    finally:
        probe.close()
    return True


def socket_state(path: Path) -> str:
    """"live" (something accepts, or is too busy to), "dead" (nobody listens), "gone", or "denied"."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT)
    try:
        probe.connect(os.fspath(path))
    except ConnectionRefusedError:
        return "dead"
    except (FileNotFoundError, NotADirectoryError):
        return "gone"
    except (TimeoutError, BlockingIOError):
        return "live"
    except OSError:
        return "denied"
    finally:
        probe.close()
    return "live"


def bind_unix_socket(path: Path) -> socket.socket:
    """A stream socket bound at `path` with mode 0600 from the start (umask 0o177 around bind only)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(os.fspath(path))
        # At once: between bind and listen a connect is refused, which is what discovery calls stale.
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ControlSocketError(f"another agentctl process is already serving {path}") from None
        raise ControlSocketError(f"cannot bind control socket {path}: {exc.strerror or exc}") from None
    finally:
        os.umask(old)
    try:
        st = os.lstat(path)
        _bound[Path(path)] = (st.st_dev, st.st_ino)
    except OSError:
        pass
    return sock


def forget_bound(path: Path) -> tuple[int, int] | None:
    """The (device, inode) `bind_unix_socket` made at `path`, forgotten; None when this process bound none."""
    return _bound.pop(Path(path), None)
