"""The workspace journal: a durable record, in the state directory, of every workspace file agentctl merged into, so that a killed daemon's merge is undone and never taken for the user's own file.

Layout: `<state dir>/journal/` (0700), one `ws-<key>.json` (0600) per merged file, `<key>` a digest of
the workdir and the file's path below it. An entry holds the user's original bytes (or "absent"), the
file's mode, the directories agentctl created, a SHA-256 of what agentctl wrote (never those bytes: they
carry the attempt's secrets) and the key paths it set. It is written before anything in the workspace
changes (agentctl.safe_files' exclusive create: temp file, fsync, hard link into place, fsync of the
directory) and deleted once the merge is undone; an undo that cannot finish keeps it, so the original is never lost.

The daemon that made a merge holds an exclusive flock on its entry for as long as the merge stands. A lock
anyone can take means its owner is dead, however it died, with no pid to be reused: `recover()` then
undoes the merge (agentctl/agent/passthrough/workspace.py `undo_merge`). An entry whose lock is held
belongs to a live daemon and is left alone; a second daemon that wants the same file is refused.

Entries hold the user's original bytes, which may hold the user's own secrets: 0600 files in a 0700
directory owned by this user, opened without following symlinks, gone once restored. Entries and the
directory must belong to this user; anything else is refused, never acted on.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from agentctl.agent.passthrough.base import MAX_WORKSPACE_FILE_BYTES, MaterializeError, Restore
from agentctl.agent.passthrough.workspace import undo_merge
from agentctl.safe_files import (
    UnsafePath,
    create_exclusive_at,
    fsync_dir,
    make_private_dir,
    open_nofollow,
    open_own_dir,
    read_all,
)

log = logging.getLogger(__name__)

JOURNAL_DIR = "journal"
_PREFIX = "ws-"
_SUFFIX = ".json"
_TMP_SUFFIX = ".tmp"
# An entry is the original (at most MAX_WORKSPACE_FILE_BYTES) in base64 plus a little: anything bigger is not ours.
_MAX_ENTRY_BYTES = MAX_WORKSPACE_FILE_BYTES * 2


class MergeRecord(msgspec.Struct, kw_only=True):
    version: int = 1
    workdir: str
    parts: list[str]
    original: bytes | None  # None: the file did not exist
    mode: int
    created_dirs: list[list[str]]
    written_sha256: str
    changed: list[list[str]]
    pid: int
    recorded_at: float


@dataclass(frozen=True)
class Outcome:
    """What recovery did with one leftover: `file` is where it was (a workspace file or a private dir)."""

    file: str
    done: bool  # undone, or removed; False: left in place (`detail` says why)
    detail: str


def entry_name(workdir: Path, parts: tuple[str, ...]) -> str:
    """The journal entry's file name for one workspace file: a digest, so no path is ever built from it."""
    key = hashlib.sha256(f"{workdir}\0{'/'.join(parts)}".encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return f"{_PREFIX}{key}{_SUFFIX}"


def _valid_parts(parts: list[str]) -> bool:
    return bool(parts) and all(p and p not in (".", "..") and "/" not in p and "\0" not in p for p in parts)


def _describe(record: MergeRecord) -> str:
    return os.path.join(record.workdir, *record.parts)


class Entry:
    """A journal entry this process holds (its lock) while its merge stands."""

    def __init__(self, dir_fd: int, name: str, fd: int, label: str) -> None:
        self._dir_fd = dir_fd
        self._name = name
        self._fd = fd
        self.label = label

    def complete(self) -> None:
        """The merge is undone: delete the entry (durably), then let go of its lock."""
        if self._fd < 0:
            return
        try:
            os.unlink(self._name, dir_fd=self._dir_fd)
            fsync_dir(self._dir_fd)
        except OSError as exc:
            log.warning("cannot delete the journal entry for %s: %s", self.label, exc.strerror or type(exc).__name__)
        self._release()

    def keep(self, problem: str) -> None:
        """The merge could not be undone: the entry stays (with the original) for `agentctl recover`."""
        log.warning("could not undo agentctl's merge into %s: %s; the original is kept in the journal "
                    "(run `agentctl recover` once that is fixed)", self.label, problem)
        self._release()

    def _release(self) -> None:
        for fd in (self._fd, self._dir_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fd = self._dir_fd = -1


class Journal:
    """The journal of one state directory (the agentctl/agent/passthrough/base.py WorkspaceJournal)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / JOURNAL_DIR

    # -- the directory -----------------------------------------------------------------------------

    def _open_dir(self, *, create: bool) -> int | None:
        """An fd of the journal directory (None: there is none and `create` is false). It must be a real
        directory of this user: one that is not is refused, never written to or read from."""
        if create:
            try:
                make_private_dir(self.path)
            except OSError as exc:
                raise MaterializeError(f"cannot create the journal directory in the state directory: "
                                       f"{exc.strerror or type(exc).__name__}") from None
        try:
            return open_own_dir(self.path)
        except FileNotFoundError:
            if create:
                raise MaterializeError("the journal directory vanished while it was being created") from None
            return None
        except UnsafePath as exc:
            raise MaterializeError(f"the journal directory {exc}") from None
        except OSError as exc:
            raise MaterializeError(f"cannot use the journal directory {self.path}: "
                                   f"{'a symlink is in the way' if exc.errno in (errno.ELOOP, errno.ENOTDIR) else exc.strerror}") from None

    # -- one merge (the WorkspaceJournal protocol) -------------------------------------------------

    def settle(self, workdir: Path, parts: tuple[str, ...]) -> None:
        """Before a merge: a dead daemon's merge of the same file is undone first; a live one's refuses."""
        dir_fd = self._open_dir(create=False)
        if dir_fd is None:
            return
        try:
            name = entry_name(workdir, parts)
            outcome = self._recover_entry(dir_fd, name)
        finally:
            os.close(dir_fd)
        label = "/".join(parts)
        if outcome is None or outcome.done:
            if outcome is not None:
                log.info("undid a killed agentctl daemon's merge into %s: %s", outcome.file, outcome.detail)
            return
        if outcome.detail == _IN_USE:
            raise MaterializeError(f"{label} holds the configuration of another running agentctl daemon; "
                                   f"two executions cannot share one workspace file")
        raise MaterializeError(f"an earlier merge into {label} could not be undone ({outcome.detail}); "
                               f"fix that and run `agentctl recover`")

    def record(self, restore: Restore) -> Entry:
        """Write the entry durably and hold its lock; nothing in the workspace has changed yet."""
        dir_fd = self._open_dir(create=True)
        assert dir_fd is not None
        name = entry_name(restore.workdir, restore.parts)
        data = msgspec.json.encode(MergeRecord(
            workdir=str(restore.workdir),
            parts=list(restore.parts),
            original=restore.original,
            mode=restore.mode,
            created_dirs=[list(d) for d in restore.created_dirs],
            written_sha256=restore.written_sha256,
            changed=[list(c) for c in restore.changed],
            pid=os.getpid(),
            recorded_at=time.time(),
        ))
        try:
            # Exclusive: two daemons cannot both think they own one file. The entry's lock is held from its
            # first byte until the merge is undone.
            fd = create_exclusive_at(dir_fd, name, data, step="journal")
        except BaseException as exc:
            os.close(dir_fd)
            if isinstance(exc, FileExistsError):
                raise MaterializeError(f"{'/'.join(restore.parts)} is being merged into by another agentctl "
                                       f"daemon at this moment") from None
            if isinstance(exc, OSError):
                raise MaterializeError(f"cannot write the workspace journal: {exc.strerror or type(exc).__name__}") from None
            raise
        return Entry(dir_fd, name, fd, os.path.join(restore.workdir, *restore.parts))

    def discard(self, entry: Entry | None) -> None:
        """The merge failed before the file changed: its entry goes."""
        if entry is not None:
            entry.complete()

    # -- recovery ----------------------------------------------------------------------------------

    def recover(self) -> list[Outcome]:
        """Undo every merge whose daemon is gone, and remove journal temp files killed writers left."""
        dir_fd = self._open_dir(create=False)
        if dir_fd is None:
            return []
        outcomes: list[Outcome] = []
        try:
            try:
                names = sorted(os.listdir(dir_fd))
            except OSError as exc:
                return [Outcome(str(self.path), False, f"cannot list the journal directory: {exc.strerror}")]
            for name in names:
                if name.startswith("." + _PREFIX) and name.endswith(_TMP_SUFFIX):
                    self._remove_stale_temp(dir_fd, name)
                elif name.startswith(_PREFIX) and name.endswith(_SUFFIX):
                    # Each entry on its own: whatever one holds or names, the others are still recovered.
                    outcome = self._recover_entry(dir_fd, name)
                    if outcome is not None and outcome.detail != _IN_USE:  # a live daemon's: not a leftover
                        outcomes.append(outcome)
        finally:
            os.close(dir_fd)
        return outcomes

    def _remove_stale_temp(self, dir_fd: int, name: str) -> None:
        # A temp file holds a copy of a user's original; a live writer holds its lock from the first byte.
        try:
            fd = open_nofollow(name, dir_fd=dir_fd)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def _recover_entry(self, dir_fd: int, name: str) -> Outcome | None:
        """Undo one entry if its owner is gone. None: there is no such entry (any more). Raises nothing:
        an entry that cannot be dealt with is kept and its one line says why, so it never blocks another
        entry's recovery nor a daemon's start."""
        try:
            return self._undo_entry(dir_fd, name)
        except Exception as exc:  # noqa: BLE001 - see above; the type names the cause, a message could hold a value
            return Outcome(str(self.path / name), False, f"cannot recover this journal entry ({type(exc).__name__}); "
                           "left in place")

    def _undo_entry(self, dir_fd: int, name: str) -> Outcome | None:
        try:
            fd = open_nofollow(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return Outcome(str(self.path / name), False, f"cannot open the journal entry: {exc.strerror}")
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return Outcome(str(self.path / name), False, _IN_USE)
            st = os.fstat(fd)
            try:
                named = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                return None  # undone by someone else while we waited for nothing
            if (named.st_dev, named.st_ino) != (st.st_dev, st.st_ino):
                return None  # completed and recorded anew since we opened it: a live owner's now
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > _MAX_ENTRY_BYTES:
                return Outcome(str(self.path / name), False, "not a journal entry of this user; left alone")
            try:
                record = msgspec.json.decode(read_all(fd), type=MergeRecord)
            except (msgspec.DecodeError, msgspec.ValidationError, OSError, RecursionError):
                # RecursionError: msgspec skips an unknown field nested thousands deep by recursing.
                return Outcome(str(self.path / name), False, "unreadable journal entry; left in place")
            if not _valid_parts(record.parts) or not os.path.isabs(record.workdir):
                return Outcome(str(self.path / name), False, "journal entry names no file below a workdir; left in place")
            restore = Restore(
                Path(record.workdir), tuple(record.parts), record.original, record.mode,
                [tuple(d) for d in record.created_dirs if _valid_parts(d)], record.written_sha256,
                [tuple(c) for c in record.changed],
            )
            problem, what = undo_merge(restore)
            if problem is not None:
                return Outcome(_describe(record), False, f"{problem}; its journal entry ({name}) is kept "
                               f"for a person to decide")
            os.unlink(name, dir_fd=dir_fd)
            fsync_dir(dir_fd)
            return Outcome(_describe(record), True, what)
        finally:
            os.close(fd)


_IN_USE = "in use by a running agentctl daemon"

