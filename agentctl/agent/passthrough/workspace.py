"""Passthrough strategies' files: private config files, merging into a workspace file and undoing that merge.

The file operations are agentctl.safe_files': files are written 0600, atomically (temporary file + fsync +
rename in the same directory + fsync of the directory), never through a symlink: every directory below
the workdir is opened with O_NOFOLLOW and a symlink anywhere in the way is refused. Nothing is written
outside the workdir and the private temporary directory, so the user's global configuration is never
touched. Errors name a path relative to the workdir, never a value.

A merge into a user's workspace file is recorded in the journal (agentctl/agent/passthrough/journal.py)
before anything in the workspace changes, so a daemon killed at any step leaves enough on disk for the
next one (or `agentctl recover`) to put the user's file back; it is never mistaken for the user's own.
"""

from __future__ import annotations

import copy
import errno
import hashlib
import logging
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentctl.agent.bounded_json import Unparseable, loads_object
from agentctl.agent.passthrough.base import (
    MAX_WORKSPACE_FILE_BYTES,
    Materialization,
    MaterializeError,
    Restore,
    WorkspaceJournal,
    dump_json,
)
from agentctl.safe_files import (
    WalkError,
    existing_dirs,
    fsync_dir,
    is_own_temp,
    open_below,
    open_nofollow,
    unlink_quietly,
    write_atomic_at,
)

log = logging.getLogger(__name__)

# -- file operations (agentctl.safe_files), errors naming a path relative to the workdir -----------


def _fs_summary(exc: OSError, where: str) -> str:
    code = exc.errno
    if code == errno.ELOOP:
        return f"symlink in the way at {where}; refusing to write through it"
    if code == errno.ENOTDIR and isinstance(exc, WalkError) and exc.depth > 0:
        return f"{where} is in the way and is not a directory"
    if code == errno.ENOSPC:
        return f"no space left on device writing {where}"
    if code == errno.EDQUOT:
        return f"disk quota exceeded writing {where}"
    if code in (errno.EACCES, errno.EPERM):
        return f"permission denied writing {where}"
    if code == errno.EROFS:
        return f"read-only file system at {where}"
    if code == errno.ENOENT:
        return f"{where} does not exist"
    return f"cannot write {where}: {exc.strerror or type(exc).__name__}"


def _label(parts: Sequence[str]) -> str:
    return "/".join(parts) if parts else "the working directory"


def _open_dirs(root: Path, parts: Sequence[str], *, create: bool, created: list[tuple[str, ...]] | None = None) -> int:
    """An fd of root/parts[0]/..., each level opened with O_NOFOLLOW (the root itself is the user's choice)."""
    try:
        return open_below(root, parts, create=create, created=created)
    except WalkError as exc:
        raise MaterializeError(_fs_summary(exc, _label(parts[: exc.depth]))) from None


def _existing_dirs(root: Path, parts: Sequence[str]) -> int:
    try:
        return existing_dirs(root, parts)
    except WalkError as exc:
        raise MaterializeError(_fs_summary(exc, _label(parts[: exc.depth]))) from None


def _read_existing(dir_fd: int, name: str, where: str) -> tuple[bytes | None, int]:
    try:
        fd = open_nofollow(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None, 0o600
    except OSError as exc:
        raise MaterializeError(_fs_summary(exc, where)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise MaterializeError(f"{where} is not a regular file")
        data = _read_bounded(fd, MAX_WORKSPACE_FILE_BYTES) if st.st_size <= MAX_WORKSPACE_FILE_BYTES else None
        if data is None:
            raise MaterializeError(f"{where} is larger than {MAX_WORKSPACE_FILE_BYTES} bytes; left untouched")
        return data, stat.S_IMODE(st.st_mode)
    except OSError as exc:
        raise MaterializeError(_fs_summary(exc, where)) from None
    finally:
        os.close(fd)


def _read_bounded(fd: int, limit: int) -> bytes | None:
    """At most `limit` bytes; None when there are more (the file grew past its size at fstat while read)."""
    chunks, total = [], 0
    while chunk := os.read(fd, min(1 << 16, limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            return None
    return b"".join(chunks)


def _atomic_write(dir_fd: int, name: str, data: bytes, mode: int, where: str, step: str | None = None) -> None:
    """`name` replaced atomically, never through a symlink. `step` names the test pause points around the
    rename (`<step>-temp`, `<step>`: agentctl.safe_files)."""
    try:
        write_atomic_at(dir_fd, name, data, mode=mode, step=step)
    except OSError as exc:
        raise MaterializeError(_fs_summary(exc, where)) from None


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_private(directory: Path, name: str, data: bytes) -> Path:
    """Write `directory/name` 0600 and atomically (the directory is ours: the attempt's 0700 tmpdir)."""
    fd = _open_dirs(directory, (), create=False)
    try:
        _atomic_write(fd, name, data, 0o600, name)
    finally:
        os.close(fd)
    return directory / name


def merge_workspace_json(
    workdir: Path,
    parts: tuple[str, ...],
    mutate: Callable[[dict[str, Any]], None],
    *,
    journal: WorkspaceJournal | None = None,
) -> Restore:
    """Read <workdir>/parts (JSON or JSON with comments), let `mutate` change it, write it back 0600.

    Returns what is needed to undo it at stop (`undo_merge`). With a journal, a killed predecessor's
    merge of the same file is undone first, and this merge is recorded durably before anything in the
    workspace changes (directories included). A file we cannot parse is left untouched and refused.
    """
    where = _label(parts)
    if journal is not None:
        journal.settle(workdir, parts)
    present = _existing_dirs(workdir, parts[:-1])
    original, mode = None, 0o600
    if present == len(parts) - 1:
        fd = _open_dirs(workdir, parts[:-1], create=False)
        try:
            original, mode = _read_existing(fd, parts[-1], where)
        finally:
            os.close(fd)
    doc = _parse_json_object(original, where) if original is not None else {}
    before = copy.deepcopy(doc)
    mutate(doc)
    data = dump_json(doc)
    created = [tuple(parts[: i + 1]) for i in range(present, len(parts) - 1)]
    restore = Restore(workdir, parts, original, mode, created, sha256(data), _changed_paths(before, doc))
    if journal is not None:
        restore.journal = journal.record(restore)
    try:
        fd = _open_dirs(workdir, parts[:-1], create=True)
        try:
            _atomic_write(fd, parts[-1], data, 0o600, where, step="merge")
        finally:
            os.close(fd)
    except BaseException:
        # The file itself is untouched (the write is atomic and comes last): only undo our directories.
        _remove_created_dirs(restore)
        if journal is not None:
            journal.discard(restore.journal)
        raise
    return restore


def _changed_paths(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, ...]]:
    """The top-level keys, or (key, subkey) inside objects, that `after` sets differently from `before`."""
    paths: list[tuple[str, ...]] = []
    for key, value in after.items():
        old = before.get(key)
        if key in before and old == value:
            continue
        if isinstance(value, dict) and (old is None or isinstance(old, dict)):
            old = old or {}
            paths += [(key, sub) for sub, item in value.items() if sub not in old or old[sub] != item]
        else:
            paths.append((key,))
    return paths


def _take_out(doc: dict[str, Any], original: dict[str, Any], paths: list[tuple[str, ...]]) -> None:
    """Undo our key paths in `doc`: the original value where there was one, else no key at all."""
    for path in paths:
        key = path[0]
        if len(path) == 1:
            if key in original:
                doc[key] = original[key]
            else:
                doc.pop(key, None)
            continue
        section = doc.get(key)
        if not isinstance(section, dict):
            continue
        kept = original.get(key)
        old = kept if isinstance(kept, dict) else {}
        if path[1] in old:
            section[path[1]] = old[path[1]]
        else:
            section.pop(path[1], None)
        if not section and key not in original:
            del doc[key]


def _parse_json_object(raw: bytes, where: str) -> dict[str, Any]:
    """The file as a JSON object (comments tolerated, empty is {}), parsed within agentctl.agent.bounded_json's
    size, depth and number bounds: anything else is the user's (or the agent's) and is refused, never guessed at."""
    try:
        return loads_object(raw, max_bytes=MAX_WORKSPACE_FILE_BYTES)
    except Unparseable as exc:
        raise MaterializeError(f"{where} {exc.reason}; left untouched") from None


# -- cleanup ---------------------------------------------------------------------------------------


# What undo_merge did, for logs and `agentctl recover` (the constants are its vocabulary).
RESTORED = "restored the original"
REMOVED = "removed the file agentctl had created"
ENTRIES_REMOVED = "took agentctl's entries out of the file the user edited since"
NOTHING_LEFT = "nothing of agentctl's was left in it"


def undo_merge(restore: Restore) -> tuple[str | None, str]:
    """Undo a merge: the original back (byte for byte, original mode; or no file) when the file still
    holds exactly what agentctl wrote; when the user edited it since, only agentctl's entries taken out
    (the originals of same-named entries put back); a file removed since stays removed. Temp files a
    killed writer left beside it are removed, then the directories we created, if empty. What is in the
    file's place and cannot be read as a bounded JSON object (a symlink, a FIFO, a directory, a huge,
    deep or binary file) is the user's: left exactly as it is.

    Returns (None, what was done), or (why not, "") in one line naming a relative path: the caller keeps
    the journal then, so the user's original is not lost. Raises nothing: whatever goes wrong is that line.
    """
    where = _label(restore.parts)
    try:
        return _undo(restore, where)
    except MaterializeError as exc:
        return exc.summary, ""
    except OSError as exc:
        return _fs_summary(exc, where), ""
    except Exception as exc:  # noqa: BLE001 - one file's undo must never take its caller (a stop, a start) down
        return f"cannot undo agentctl's merge into {where} ({type(exc).__name__})", ""


def _undo(restore: Restore, where: str) -> tuple[str | None, str]:
    name = restore.parts[-1]
    present = _existing_dirs(restore.workdir, restore.parts[:-1])
    if present < len(restore.parts) - 1:
        _remove_created_dirs(restore)
        return None, NOTHING_LEFT  # the directory is gone, and our file with it
    fd = _open_dirs(restore.workdir, restore.parts[:-1], create=False)
    try:
        for leftover in os.listdir(fd):
            if is_own_temp(leftover, name):
                unlink_quietly(leftover, fd)
        try:
            current, current_mode = _read_existing(fd, name, where)
        except MaterializeError as exc:
            return f"{exc.summary.removesuffix('; left untouched')}: left as it is", ""
        if current is None or current == restore.original:
            # Removed since, never replaced (killed before the rename), or already restored.
            what = NOTHING_LEFT
        elif sha256(current) == restore.written_sha256:
            if restore.original is None:
                os.unlink(name, dir_fd=fd)
                fsync_dir(fd)
                what = REMOVED
            else:
                _atomic_write(fd, name, restore.original, restore.mode, where, step="restore")
                what = RESTORED
        elif not current.strip():
            # Emptied since: nothing says whose that is, and the original is worth more than an empty file.
            return f"{where} was emptied since agentctl merged into it: left as it is", ""
        else:
            try:
                doc = _parse_json_object(current, where)
            except MaterializeError as exc:
                why = exc.summary.removeprefix(f"{where} ").removesuffix("; left untouched")
                return (f"{where} was edited since agentctl merged into it and is no longer a JSON object "
                        f"agentctl reads ({why}): left as it is"), ""
            original = _parse_json_object(restore.original, where) if restore.original is not None else {}
            before = dump_json(doc)
            _take_out(doc, original, restore.changed)
            after = dump_json(doc)
            if after == before:
                what = NOTHING_LEFT  # the user's file as it is: never rewritten (reformatted) for nothing
            else:
                _atomic_write(fd, name, after, current_mode, where, step="restore")
                what = ENTRIES_REMOVED
    finally:
        os.close(fd)
    _remove_created_dirs(restore)
    return None, what


def restore_workspace(restore: Restore) -> None:
    """Undo a merge at stop and, once undone, delete its journal entry. Best effort: raises nothing; an
    undo that cannot finish keeps the journal (the user's original stays recoverable)."""
    problem, _what = undo_merge(restore)
    if restore.journal is None:
        if problem is not None:
            log.warning("could not undo agentctl's merge into %s: %s", _label(restore.parts), problem)
        return
    if problem is None:
        restore.journal.complete()
    else:
        restore.journal.keep(problem)


def _remove_created_dirs(restore: Restore) -> None:
    for rel in reversed(restore.created_dirs):
        path = restore.workdir.joinpath(*rel)
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                os.rmdir(path)
        except OSError:
            pass  # not empty (the user or the agent put something there), or already gone


def cleanup(mat: Materialization) -> None:
    """Remove the temporary files and restore the merged workspace files. Idempotent."""
    for path in mat.files:
        try:
            os.unlink(path)
        except OSError:
            pass
    for restore in mat.restores:
        restore_workspace(restore)  # raises nothing: one file's trouble never keeps another's restore from running
    mat.files.clear()
    mat.restores.clear()
