"""Owns trusting the directories agentctl keeps private files in (the state directory, the hub's database
directory) and opening files in them: what no other local user can read, replace or redirect.

A directory is used only when
- it is owned by us and writable by neither group nor others, sticky or not: anyone who can create entries
  in it can plant a file we would open (a task store made 0666, its WAL too) or a link that sends a
  database elsewhere;
- every symbolic link on its path, at any depth, is owned by us or by root (a link another user owns is
  theirs to point anywhere);
otherwise it is refused (UnsafePath, one line saying which entry and why). A directory above it that
another user could rename entries in (owned by someone else than us or root, or writable by group or
others without the sticky bit; `/tmp` is sticky and fine) could let them swap the whole directory later:
that is logged once as a WARNING, not refused, because the deployments that have one have nothing better
to offer (a Kubernetes emptyDir is root-owned and world-writable: a subdirectory the daemon creates in it
is the best there is). "Us" is the effective uid; as root that is root alone.

Files are opened without following a final symbolic link (O_NOFOLLOW), created 0600 from the first instant
(O_CREAT|O_EXCL with mode 0600; the umask can only take bits away), and an existing one must be a regular
file we own; a group- or world-readable one of ours is tightened to 0600. ACLs are not inspected.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

__all__ = ["MAX_SYMLINKS", "UnsafePath", "check_private_file", "ensure_private_dir", "open_private", "read_secret_file"]

MAX_SYMLINKS = 40  # as the kernel's own limit: a loop is refused, not followed forever
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
log = logging.getLogger("agentctl.files")
_warned: set[Path] = set()


class UnsafePath(OSError):
    """A directory or file another local user could read, replace or redirect; str() is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _trusted_owner(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _not_a_directory(path: Path) -> OSError:
    return NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))


def ancestor_weakness(st: os.stat_result) -> str | None:
    """Why another user could rename entries in this directory (so swap what is below it), or None."""
    if not _trusted_owner(st.st_uid):
        return f"is owned by uid {st.st_uid}"
    if st.st_mode & _OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}) and not sticky"
    return None


def _check_ancestor(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise _not_a_directory(path)
    why = ancestor_weakness(st)
    if why is not None and path not in _warned:
        _warned.add(path)
        log.warning("%s %s: another user could swap the private directory below it; prefer a parent only you "
                    "(or root) can write", path, why)


def _check_own_dir(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise _not_a_directory(path)
    if st.st_uid != os.geteuid():
        raise UnsafePath(f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})")
    if st.st_mode & _OTHERS_WRITE:
        raise UnsafePath(f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}): they could "
                         f"plant or replace its files; use a directory only you can write (chmod go-w)")


def _mkdir_private(path: Path) -> os.stat_result:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass  # created concurrently (or a link planted since): checked like any existing entry
    else:
        # mkdir's mode is filtered by the umask, which can only take bits away; set exactly 0700.
        os.chmod(path, 0o700, follow_symlinks=False)
    return os.lstat(path)


def ensure_private_dir(path: str | os.PathLike[str], *, create: bool = True) -> Path:
    """Check `path` and every directory above it (see the module's rules), creating what is missing (0700)
    when `create`. Returns the directory's real path, which callers use from then on, so no symbolic link
    on the way is ever followed again. Raises UnsafePath, NotADirectoryError, or OSError when a directory
    cannot be made."""
    pending = list(Path(os.path.abspath(path)).parts[1:])
    current = Path("/")
    _check_ancestor(current, os.lstat(current))
    hops = 0
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = current.parent
            continue
        candidate = current / name
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            if not create:
                raise
            st = _mkdir_private(candidate)
        if stat.S_ISLNK(st.st_mode):
            if not _trusted_owner(st.st_uid):
                raise UnsafePath(f"{candidate} is a symbolic link owned by uid {st.st_uid}, who could point it "
                                 "anywhere")
            hops += 1
            if hops > MAX_SYMLINKS:
                raise UnsafePath(f"{path}: too many levels of symbolic links")
            target = Path(os.readlink(candidate))
            if target.is_absolute():
                current = Path("/")
            pending = [*target.parts[1 if target.is_absolute() else 0 :], *pending]
            continue
        (_check_ancestor if pending else _check_own_dir)(candidate, st)
        current = candidate
    if current == Path("/"):
        _check_own_dir(current, os.lstat(current))
    return current


def check_private_file(path: Path, st: os.stat_result) -> None:
    """An existing entry we are about to use as a private file: a regular file of ours, not a link."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{path} is a symbolic link; refusing to follow it")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{path} is not a regular file")
    if st.st_uid != os.geteuid():
        raise UnsafePath(f"{path} is owned by uid {st.st_uid}, not by this user: it may have been planted")


def open_private(path: str | os.PathLike[str], flags: int = os.O_RDWR) -> int:
    """An fd on `path` (created 0600 when `flags` has O_CREAT), never through a final symbolic link, checked
    to be a regular file we own and tightened to 0600 when it was readable by others."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(f"{path} is a symbolic link; refusing to follow it") from None
        raise
    try:
        st = os.fstat(fd)
        check_private_file(Path(path), st)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_secret_file(path: str | os.PathLike[str], max_bytes: int = 64 * 1024) -> str:
    """The text of a file holding a secret (a connection string with its password), whitespace around it
    stripped: a regular file of ours, opened without following a symbolic link, that no other user may read.
    A group- or world-readable one is refused, not tightened: what it holds may already have been read.
    Raises UnsafePath, OSError, or ValueError (too large, not UTF-8, empty), each one line."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(f"{path} is a symbolic link; refusing to follow it") from None
        raise
    with os.fdopen(fd, "rb") as src:
        st = os.fstat(src.fileno())
        check_private_file(Path(path), st)
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise UnsafePath(f"{path} is readable by other users (mode {stat.S_IMODE(st.st_mode):04o}): chmod 600 "
                             "it, and change the secret it holds if others could have read it")
        data = src.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{path} is larger than {max_bytes} bytes")
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None
    if not text:
        raise ValueError(f"{path} is empty")
    return text
