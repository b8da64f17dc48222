"""Persistence of the report: the state directory, one daemon per execution, atomic replace, coalesced
writes, and reading it back.

Layout: `<state dir>/<execution id>/report.json`, one file per execution, the encoded AttachmentHistory,
and `<state dir>/<execution id>/daemon.lock`, flocked by the one daemon serving that execution.

The file is only ever replaced atomically (agentctl.safe_files `write_atomic`: temp file in the same
directory, fsync, rename, fsync of the directory), so a reader (or a daemon killed with SIGKILL mid-write)
sees a complete old or a complete new report, never a torn one. A killed writer may leave a temp file
(`.report.json.agentctl-<hex>.tmp`) behind; readers never look at temp files, and the next
`Persister.start()` for the same path removes them.

`Persister` follows the ledger: a change only sets a dirty flag (the MCP request path calls the ledger,
so the listener does no I/O), and one background task writes at most once per `delay`, from a worker
thread, so a burst of events is one fsync and the event loop never blocks on the disk. A failed write is
logged (path and errno name only, never report content), reported to `on_health` (reason code
`report_write_failed` and the errno name; None once a later write succeeds) so every surface can show it,
the live state keeps working, and the write is retried on the next change or after a backoff.
"""

from __future__ import annotations

import asyncio
import errno as errno_mod
import fcntl
import logging
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import msgspec
import platformdirs

from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import CONTRACT_VERSION, AttachmentHistory, decode_history
from agentctl.evidence.ledger import Ledger
from agentctl.logs import log_failure
from agentctl.safe_files import UnsafePath, ensure_private_dir, open_private, remove_stale_temps, write_atomic

log = logging.getLogger(__name__)

REPORT_NAME = "report.json"
# The reason code of a report that could not be written (disk full, read-only, ...): the live report is whole,
# the file on disk is the last good one, and the write is retried.
REPORT_WRITE_FAILED = "report_write_failed"

# (reason code, errno name) while writes fail; (None, None) once one succeeds again.
HealthListener = Callable[[str | None, str | None], None]


class StoreError(Exception):
    """Base of the store's errors; str() is a one-line message fit for the CLI."""


class StateDirError(StoreError):
    """The state directory (or the execution directory in it) cannot be created or used."""


class ReportNotFound(StoreError):
    """No persisted report for that execution in that state directory."""


class ReportCorrupt(StoreError):
    """A report file exists but is not a valid report."""


class ReportUnreadable(StoreError):
    """A report file exists but cannot be read (permissions, I/O error)."""


# ---------------------------------------------------------------------------------------------- paths


def resolve_state_dir(spec_dir: str | None) -> Path:
    """The spec's state dir, else the first of systemd's `$STATE_DIRECTORY` (':'-separated), else platformdirs."""
    if spec_dir:
        return Path(spec_dir).expanduser()
    env = os.environ.get("STATE_DIRECTORY", "")
    for candidate in env.split(":"):
        if candidate:
            return Path(candidate)
    return Path(platformdirs.user_state_dir("agentctl"))


def _check_execution_id(execution_id: str) -> None:
    if (
        not execution_id
        or execution_id in (".", "..")
        or "/" in execution_id
        or "\\" in execution_id
        or ".." in execution_id
        or "\x00" in execution_id
    ):
        raise ValueError(f"invalid execution id for a state path: {execution_id!r}")


def report_path(state_dir: Path, execution_id: str) -> Path:
    _check_execution_id(execution_id)
    return Path(state_dir) / execution_id / REPORT_NAME


def _reason(exc: OSError) -> str:
    if exc.errno:
        return os.strerror(exc.errno).lower()
    return str(exc) or type(exc).__name__


def _errno_name(exc: BaseException) -> str:
    code = getattr(exc, "errno", None)
    if code:
        return errno_mod.errorcode.get(code, f"errno {code}")
    return type(exc).__name__


def ensure_state_dir(state_dir: Path, execution_id: str) -> Path:
    """Check the state directory is safe (agentctl.safe_files: ours, writable by no other user, no link of
    theirs on the way), create `<state_dir>/<execution_id>` 0700 in it, and return that directory's real
    path. Raises StateDirError, one line naming the directory and the reason."""
    exec_dir = report_path(state_dir, execution_id).parent
    for d in (Path(state_dir), exec_dir):
        try:
            real = ensure_private_dir(d)
        except UnsafePath as exc:
            raise StateDirError(f"state dir {d}: {exc}") from None
        except OSError as exc:
            raise StateDirError(f"state dir {d}: {_reason(exc)}") from None
    try:
        if stat.S_IMODE(os.lstat(real).st_mode) & 0o077:
            os.chmod(real, 0o700)  # ours (just checked): the reports of one execution are nobody else's
    except OSError as exc:
        raise StateDirError(f"state dir {exec_dir}: {_reason(exc)}") from None
    return real


# --------------------------------------------------------------------------------------- one daemon

LOCK_NAME = "daemon.lock"


class ExecutionLocked(StateDirError):
    """Another daemon holds this execution's lock in this state directory."""


def lock_execution(exec_dir: Path, execution_id: str) -> int:
    """Hold `<exec_dir>/daemon.lock` (0600, O_NOFOLLOW) with an exclusive flock for the daemon's life; returns
    the fd (close it to release). The kernel releases it when the process dies, SIGKILL included, so the
    next daemon after a crash starts; a second daemon of the same execution meanwhile gets ExecutionLocked.
    The fd is close-on-exec: an agent or server started later never holds it. It is read-only (flock needs
    no write access), so holding it never keeps the directory's filesystem from being remounted read-only."""
    path = Path(exec_dir) / LOCK_NAME
    try:
        fd = open_private(path, os.O_RDONLY | os.O_CREAT)
    except UnsafePath as exc:
        raise StateDirError(f"state dir {exec_dir}: {exc}") from None
    except OSError as exc:
        raise StateDirError(f"state dir {exec_dir}: cannot open {LOCK_NAME}: {_reason(exc)}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _lock_holder(fd)
        os.close(fd)
        if exc.errno in (errno_mod.EWOULDBLOCK, errno_mod.EAGAIN):
            raise ExecutionLocked(
                f"another agentctl daemon{holder} is already running execution {execution_id} with state dir "
                f"{Path(exec_dir).parent}; stop it first, or give this one another execution id or state dir"
            ) from None
        raise StateDirError(f"state dir {exec_dir}: cannot lock {LOCK_NAME}: {_reason(exc)}") from None
    # Who holds it, for the next one's message (the pid is the only content; the lock is the flock).
    try:
        out = open_private(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(out, f"{os.getpid()}\n".encode())
        finally:
            os.close(out)
    except OSError:
        pass  # a read-only or full filesystem: the lock holds all the same, the next message names no pid
    return fd


def _lock_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (pid {text})" if text.isdigit() else ""


# ---------------------------------------------------------------------------------------------- reading


def read_report(state_dir: Path, execution_id: str) -> AttachmentHistory:
    path = report_path(state_dir, execution_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ReportNotFound(f"no report for execution {execution_id} in {state_dir} ({path} does not exist)") from None
    except NotADirectoryError:
        raise ReportNotFound(f"no report for execution {execution_id} in {state_dir} ({path} does not exist)") from None
    except OSError as exc:
        raise ReportUnreadable(f"report {path}: {_reason(exc)}") from None
    try:
        history = decode_history(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ReportCorrupt(f"report {path} is not a valid report: {exc}") from None
    if history.version > CONTRACT_VERSION:
        raise ReportCorrupt(
            f"report {path} has contract version {history.version}; this agentctl reads up to {CONTRACT_VERSION}"
        )
    if history.identity.execution_id != execution_id:
        raise ReportCorrupt(f"report {path} belongs to execution {history.identity.execution_id}, not {execution_id}")
    return history


def list_reports(state_dir: Path) -> list[str]:
    """Execution ids with a persisted report in `state_dir`, sorted. A missing state dir has none."""
    try:
        entries = list(os.scandir(state_dir))
    except OSError:
        return []
    ids: list[str] = []
    for entry in entries:
        try:
            _check_execution_id(entry.name)
        except ValueError:
            continue
        if entry.is_dir(follow_symlinks=False) and os.path.isfile(os.path.join(entry.path, REPORT_NAME)):
            ids.append(entry.name)
    return sorted(ids)


# -------------------------------------------------------------------------------------------- persister


class Persister:
    """Writes the ledger's history to `path` after changes, coalesced, serialized, off the event loop.

    - A ledger change only sets the dirty flag and wakes the task (O(1), no I/O).
    - The task waits `delay` after the first change, encodes the history once (on the loop, where the
      ledger lives) and writes it with `write_atomic` in a worker thread.
    - Writes never overlap: one asyncio lock around the write plus a thread lock inside the worker, and a
      generation check so an older snapshot can never overwrite a newer one.
    - On OSError: one WARNING (path and errno name) per outage, dirty stays set, retry on the next change
      or after a backoff (`backoff_initial` doubling up to `backoff_max`).
    """

    def __init__(
        self,
        ledger: Ledger,
        path: Path,
        delay: float = 0.2,
        *,
        backoff_initial: float = 1.0,
        backoff_max: float = 30.0,
        on_health: HealthListener | None = None,
    ) -> None:
        self.ledger = ledger
        self._on_health = on_health
        self.path = Path(path)
        self.delay = delay
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.writes = 0
        self.failures = 0
        self.last_error: str | None = None
        self._dirty = False
        self._wake: asyncio.Event | None = None
        self._stop_event: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._subscribed = False
        self._consecutive_failures = 0
        self._generation = 0
        self._thread_lock = threading.Lock()
        self._written_generation = 0

    # -- lifecycle

    def start(self) -> None:
        """Subscribe to the ledger and start the writer task. Needs a running event loop.

        Removes temp files a killed predecessor left for the same path, and marks the state dirty so the
        current history is persisted even if it changed before start.
        """
        if self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._wake = asyncio.Event()
        self._stop_event = asyncio.Event()
        self._lock = asyncio.Lock()
        self._stopping = False
        for stale in remove_stale_temps(self.path):
            log.info("removed stale report temp file %s", stale)
        if not self._subscribed:
            self.ledger.subscribe(self._on_change)
            self._subscribed = True
        self._dirty = True
        self._wake.set()
        self._task = asyncio.create_task(self._run(), name="agentctl-report-persister")

    async def stop(self) -> None:
        """Stop the task (without interrupting a write in progress) and write the final state if dirty."""
        task = self._task
        if task is None:
            return
        self._stopping = True
        assert self._wake is not None and self._stop_event is not None
        self._wake.set()
        self._stop_event.set()
        try:
            await task
        finally:
            self._task = None
        await self.flush()

    async def flush(self) -> bool:
        """Write now if dirty and wait for it. True when the file holds the state as of this call."""
        if self._lock is None:
            return False
        return await self._write_if_dirty()

    @property
    def dirty(self) -> bool:
        return self._dirty

    # -- the ledger listener (MCP request path: O(1), no I/O)

    def _on_change(self, _event: object) -> None:
        self._dirty = True
        wake = self._wake
        if wake is None or self._loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            wake.set()
        else:
            self._loop.call_soon_threadsafe(wake.set)

    # -- the writer task

    async def _run(self) -> None:
        assert self._wake is not None
        wake = self._wake
        while not self._stopping:
            await wake.wait()
            if self._stopping:
                break
            if self.delay > 0:
                # Coalesce: changes during the delay fold into this one write. stop() cuts the delay
                # short and flushes itself.
                await self._wait_stop_or(self.delay)
                if self._stopping:
                    break
            wake.clear()
            ok = await self._write_if_dirty()
            if ok or self._stopping:
                continue
            backoff = min(self.backoff_max, self.backoff_initial * (2 ** (self._consecutive_failures - 1)))
            # Retry on the next change (wake is set by the listener) or when the backoff ends.
            try:
                await asyncio.wait_for(wake.wait(), backoff)
            except TimeoutError:
                wake.set()

    async def _wait_stop_or(self, seconds: float) -> None:
        assert self._stop_event is not None
        try:
            await asyncio.wait_for(self._stop_event.wait(), seconds)
        except TimeoutError:
            pass

    async def _write_if_dirty(self) -> bool:
        assert self._lock is not None
        async with self._lock:
            if not self._dirty:
                return True
            self._dirty = False
            try:
                data = encode(self.ledger.history)
            except Exception as exc:
                self._dirty = True
                self._note_failure("encode", None)
                log_failure(log, f"report encode failed for {self.path}", exc)
                return False
            self._generation += 1
            generation = self._generation
            fut = asyncio.ensure_future(asyncio.to_thread(self._write_in_thread, data, generation))
            fut.add_done_callback(self._on_write_done)
            # Shielded: if our caller is cancelled the write still completes and its outcome is still
            # accounted for by the done callback; the thread lock keeps writes from overlapping anyway.
            try:
                await asyncio.shield(fut)
            except Exception:  # OSError or a bug; counted and logged by _on_write_done
                return False
            return True

    def _write_in_thread(self, data: bytes, generation: int) -> None:
        with self._thread_lock:
            if generation <= self._written_generation:
                return  # a newer snapshot is already on disk
            write_atomic(self.path, data)
            self._written_generation = generation

    def _on_write_done(self, fut: asyncio.Future[None]) -> None:
        if fut.cancelled():
            self._dirty = True
            return
        exc = fut.exception()
        if exc is None:
            self.writes += 1
            if self._consecutive_failures:
                log.info("report write to %s recovered after %d failed attempt(s)", self.path, self._consecutive_failures)
                self._health(None, None)
            self._consecutive_failures = 0
            return
        self._dirty = True
        if isinstance(exc, OSError):
            self._note_failure(_errno_name(exc), exc)
        else:
            self._note_failure(type(exc).__name__, exc)
            log_failure(log, f"report write to {self.path} raised an unexpected error", exc)

    def _note_failure(self, name: str, exc: BaseException | None) -> None:
        self.failures += 1
        self._consecutive_failures += 1
        repeated = self._consecutive_failures > 1 and name == self.last_error
        self.last_error = name
        # One WARNING per outage (and per change of cause); repeats of the same cause go to DEBUG.
        level = logging.DEBUG if repeated else logging.WARNING
        log.log(level, "report write failed: %s: %s (live state unaffected; will retry)", self.path, name)
        self._health(REPORT_WRITE_FAILED, name)

    def _health(self, code: str | None, errno_name: str | None) -> None:
        if self._on_health is None:
            return
        try:
            self._on_health(code, errno_name)
        except Exception as exc:  # a broken listener must not stop the writer
            log_failure(log, "report health listener failed", exc)
