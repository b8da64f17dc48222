"""Owns agentctl's safe file operations: trusting the directories private files live in, opening without
following symbolic links, creating private (0600/0700) files and directories, and durable writes (atomic
replace, exclusive create). Every other module that writes a file of agentctl's calls this one.

Trust. A directory is used for private files (the state directory, the hub's database directory) only when
- it is owned by us and writable by neither group nor others, sticky or not: anyone who can create entries
  in it can plant a file we would open (a task store made 0666, its WAL too) or a link that sends a
  database elsewhere;
- every symbolic link on its path, at any depth, is owned by us or by root (a link another user owns is
  theirs to point anywhere);
- no directory above it is owned by another user than us or root: that user could rename the directory
  below theirs at any time and put their own (or a link to anywhere) in its place, and every later write
  (a `report.json` replaced) would land where they chose; no deployment needs such a parent;
otherwise it is refused (UnsafePath, one line saying which entry and why). A directory above it that
is ours or root's but writable by group or others without the sticky bit (`/tmp` is sticky and fine) could
let any of them swap the whole directory later: that is logged once as a WARNING, not refused, because the
deployments that have one have nothing better to offer (a Kubernetes emptyDir is root-owned and
world-writable: a subdirectory the daemon creates in it is the best there is). "Us" is the effective uid;
as root that is root alone.

Private files are opened without following a final symbolic link (O_NOFOLLOW), created 0600 from the first
instant (O_CREAT|O_EXCL with mode 0600; the umask can only take bits away), and an existing one must be a
regular file we own; a group- or world-readable one of ours is tightened to 0600. ACLs are not inspected.

Walking below a root the caller chose (a workspace), every level is opened with O_NOFOLLOW, so a symbolic
link anywhere in the way is refused, never followed.

Durable writes. A file is replaced atomically: a temporary file beside it (`.<name>.agentctl-<hex>.tmp`,
O_EXCL|O_NOFOLLOW, the final mode set exactly), written and fsynced, renamed over the name, and the
directory fsynced, so a reader (or a writer killed with SIGKILL at any point) sees the complete old or the
complete new file, never a torn one; a killed writer may leave its temporary file, which `is_own_temp`
recognises. An exclusive create (a journal entry) is written and fsynced under a temporary name, then
hard-linked into place, which can never replace an existing entry, and the directory fsynced.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import secrets
import stat
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

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
    """Why other users could rename entries in this directory of ours or root's (so swap what is below
    it), or None."""
    if st.st_mode & _OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}) and not sticky"
    return None


def _check_ancestor(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise _not_a_directory(path)
    if not _trusted_owner(st.st_uid):
        raise UnsafePath(f"{path} is owned by uid {st.st_uid}, who could swap the private directory below it "
                         f"(and send its files anywhere); use a directory whose parents are yours or root's")
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


def make_private_dir(path: str | os.PathLike[str]) -> bool:
    """Create the directory `path` exactly 0700, whatever the umask. False: an entry of that name exists
    (made concurrently, or planted), left for the caller to check like any existing one. Raises OSError."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return False
    # mkdir's mode is filtered by the umask, which can only take bits away; set exactly 0700.
    os.chmod(path, 0o700, follow_symlinks=False)
    return True


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
            make_private_dir(candidate)
            st = os.lstat(candidate)
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
    return _checked(fd, Path(path), check_private_file, 0o600)


def _checked(fd: int, path: Path, check: Callable[[Path, os.stat_result], None], private_mode: int) -> int:
    """`fd` once `check` accepts what it is, tightened to `private_mode` when others could read it; closed
    when refused."""
    try:
        st = os.fstat(fd)
        check(path, st)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, private_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_nofollow(path: str | os.PathLike[str], flags: int = os.O_RDONLY, *, dir_fd: int | None = None) -> int:
    """An fd for reading `path` (relative to `dir_fd` when given) that is never a symbolic link (ELOOP, or
    ENOTDIR with O_DIRECTORY) and never hangs on a FIFO planted there (O_NONBLOCK)."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def read_secret_file(path: str | os.PathLike[str], max_bytes: int = 64 * 1024) -> str:
    """The text of a file holding a secret (a connection string with its password), whitespace around it
    stripped: a regular file of ours, opened without following a symbolic link, that no other user may read.
    A group- or world-readable one is refused, not tightened: what it holds may already have been read.
    Raises UnsafePath, OSError, or ValueError (too large, not UTF-8, empty), each one line."""
    try:
        fd = open_nofollow(path)
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


def open_own_dir(path: str | os.PathLike[str]) -> int:
    """An fd of the directory `path`, opened without following a symbolic link (OSError ELOOP or ENOTDIR:
    a link or a file is in the way), which must be ours (UnsafePath otherwise), tightened to 0700."""
    return _checked(open_nofollow(path, os.O_RDONLY | os.O_DIRECTORY), Path(path), _check_dir_owner, 0o700)


def _check_dir_owner(path: Path, st: os.stat_result) -> None:
    if st.st_uid != os.geteuid():
        raise UnsafePath(f"{path} belongs to uid {st.st_uid}, not to this user")


# -- walking below a root the caller chose ---------------------------------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class WalkError(OSError):
    """An OSError at one level below a root: `depth` is how many parts were reached, the failing one
    included (0: the root itself). A symbolic link in the way is always errno ELOOP."""

    def __init__(self, exc: OSError, depth: int) -> None:
        super().__init__(exc.errno, exc.strerror)
        self.depth = depth


def _walk_error(exc: OSError, depth: int, dir_fd: int, name: str) -> WalkError:
    if exc.errno == errno.ENOTDIR:
        # O_DIRECTORY|O_NOFOLLOW on a symbolic link fails with ENOTDIR, as for a file in the way.
        try:
            if stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
                exc = OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        except OSError:
            pass
    return WalkError(exc, depth)


def _open_root(root: str | os.PathLike[str]) -> int:
    try:
        return os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise WalkError(exc, 0) from None


def open_below(
    root: str | os.PathLike[str],
    parts: Sequence[str],
    *,
    create: bool = False,
    created: list[tuple[str, ...]] | None = None,
) -> int:
    """An fd of root/parts[0]/..., every level below `root` opened with O_NOFOLLOW (`root` itself is the
    caller's choice). With `create`, a missing level is made 0700 (umask applied) and, when `created` is
    given, appended to it. Raises WalkError."""
    fd = _open_root(root)
    try:
        for depth, part in enumerate(parts, 1):
            if create:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                    if created is not None:
                        created.append(tuple(parts[:depth]))
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise _walk_error(exc, depth, fd, part) from None
            try:
                nfd = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise _walk_error(exc, depth, fd, part) from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def existing_dirs(root: str | os.PathLike[str], parts: Sequence[str]) -> int:
    """How many leading `parts` exist below `root` as real directories (never through a symbolic link).
    Raises WalkError for anything but a missing level."""
    fd = _open_root(root)
    count = 0
    try:
        for part in parts:
            try:
                nfd = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                break
            except OSError as exc:
                raise _walk_error(exc, count + 1, fd, part) from None
            os.close(fd)
            fd = nfd
            count += 1
    finally:
        os.close(fd)
    return count


# -- durable writes ---------------------------------------------------------------------------------

# Test-only: with AGENTCTL_TEST_PAUSE_AT set to a step's name, a durable write given that step stops for
# good there and creates the file named by AGENTCTL_TEST_PAUSE_FILE, so a test can SIGKILL the process
# exactly at that point. A write of step S pauses at `S-temp` (its temporary file durable, not yet in
# place) and at `S` (in place, the directory durable). The workspace steps: journal, merge, restore.
ENV_PAUSE_AT = "AGENTCTL_TEST_PAUSE_AT"
ENV_PAUSE_FILE = "AGENTCTL_TEST_PAUSE_FILE"


def pause_point(step: str) -> None:
    if os.environ.get(ENV_PAUSE_AT) != step:
        return
    marker = os.environ.get(ENV_PAUSE_FILE)
    if marker:
        with open(marker + ".tmp", "w", encoding="ascii") as fh:
            fh.write(step)
        os.replace(marker + ".tmp", marker)
    threading.Event().wait()  # until the test kills the process


def fsync_dir(dir_fd: int) -> None:
    """Make a rename, link or unlink in the directory durable; a filesystem that cannot fsync a directory
    is fine (the change itself has happened)."""
    try:
        os.fsync(dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF):
            raise


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def temp_name(name: str) -> str:
    return f".{name}.agentctl-{secrets.token_hex(6)}.tmp"


def is_own_temp(name: str, target: str) -> bool:
    """Whether `name` is a temporary file a durable write of `target` makes (a killed writer may leave one)."""
    return name.startswith(f".{target}.agentctl-") and name.endswith(".tmp")


def remove_stale_temps(path: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files killed writers of `path` left beside it, and return them. For a file in
    a private directory only: every `.<name>.*.tmp` there is taken for one (`write_atomic`'s, and the
    `.<name>.<pid>.<hex>.tmp` an older agentctl made)."""
    path = Path(path)
    removed: list[Path] = []
    try:
        names = os.listdir(path.parent)
    except OSError:
        return removed
    for name in names:
        if name.startswith(f".{path.name}.") and name.endswith(".tmp"):
            try:
                os.unlink(path.parent / name)
            except OSError:
                continue
            removed.append(path.parent / name)
    return removed


def unlink_quietly(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _new_temp(dir_fd: int, name: str, mode: int) -> tuple[str, int]:
    tmp = temp_name(name)
    return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)


def write_atomic_at(
    dir_fd: int, name: str, data: bytes, *, mode: int = 0o600, replace_link: bool = False, step: str | None = None
) -> None:
    """Replace `name` in `dir_fd` with `data`, atomically and durably, its mode exactly `mode`. A symbolic
    link at `name` is refused (OSError ELOOP) unless `replace_link`: then the link itself is replaced, its
    target never written. `step` names the test pause points. On failure the temporary file is removed,
    `name` keeps its old content, and the OSError propagates."""
    tmp, fd = _new_temp(dir_fd, name, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask must not widen or narrow what the caller chose
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if step is not None:
            pause_point(f"{step}-temp")
        if not replace_link:
            try:
                if stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
            except FileNotFoundError:
                pass
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        unlink_quietly(tmp, dir_fd)
        raise
    fsync_dir(dir_fd)
    if step is not None:
        pause_point(step)


def write_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o600) -> None:
    """Replace the file at `path` with `data` atomically and durably (a symbolic link there is replaced,
    never followed). On failure the temporary file is removed and the OSError propagates; `path` keeps its
    old content."""
    path = Path(path)
    dir_fd = os.open(path.parent, _DIR_FLAGS)
    try:
        write_atomic_at(dir_fd, path.name, data, mode=mode, replace_link=True)
    finally:
        os.close(dir_fd)


def create_exclusive_at(dir_fd: int, name: str, data: bytes, *, step: str | None = None) -> int:
    """Create `name` in `dir_fd` holding `data`, durably, and only if no entry of that name exists
    (FileExistsError otherwise): written 0600 and fsynced under a temporary name, hard-linked into place
    (a link never replaces an entry), the directory fsynced. Returns an fd of the file holding an
    exclusive flock taken before its first byte was written: whoever can take that lock knows the writer
    is gone. `step` names the test pause points. On failure nothing is left and the error propagates."""
    tmp, fd = _new_temp(dir_fd, name, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a new file: nobody else holds it
        write_all(fd, data)
        os.fsync(fd)
        if step is not None:
            pause_point(f"{step}-temp")
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        finally:
            unlink_quietly(tmp, dir_fd)
        fsync_dir(dir_fd)
    except BaseException:
        os.close(fd)
        raise
    if step is not None:
        pause_point(step)
    return fd
