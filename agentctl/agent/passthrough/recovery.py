"""What a killed daemon leaves behind, found and cleaned: merged workspace files undone (through the journal), private config directories removed.

A passthrough attempt writes its secret-bearing config files (claude's `--mcp-config`, opencode's
`OPENCODE_CONFIG`) into a private directory `agentctl-pt-*` (0700) in the system temp directory. Its
daemon holds an exclusive flock on the directory's `.agentctl-owner` file for the directory's whole life,
so a directory whose lock anyone can take belongs to a dead daemon and is removed. One without that file
(an older agentctl's) is removed only when empty: nothing proves its daemon is gone.

Recovery runs at every daemon start (agentctl/daemon/app.py), before a merge into a file a journal entry
names, and as `agentctl recover` (agentctl/cli.py), which any user can run for their state directory.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

from agentctl.agent.passthrough.base import MaterializeError
from agentctl.agent.passthrough.journal import Journal, Outcome
from agentctl.safe_files import open_nofollow, open_private

log = logging.getLogger(__name__)

PRIVATE_PREFIX = "agentctl-pt-"
OWNER_FILE = ".agentctl-owner"


class PrivateDir:
    """A private (0700) temp directory for one attempt's config files, locked by this process while it lives."""

    def __init__(self) -> None:
        for attempt in range(3):
            self.path = Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX))
            try:
                self._fd = self._lock(self.path)
                return
            except FileNotFoundError:
                # Another daemon's sweep took the new, still empty directory for a dead one: make another.
                if attempt == 2:
                    raise
            except BaseException:
                shutil.rmtree(self.path, ignore_errors=True)
                raise

    @staticmethod
    def _lock(path: Path) -> int:
        # Locked under a temporary name, then renamed: a sweep never finds the owner file unlocked.
        pending = path / (OWNER_FILE + ".new")
        fd = open_private(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(pending, path / OWNER_FILE)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def remove(self) -> None:
        """Remove the directory and everything in it, then let go of the lock. Idempotent."""
        if self._fd < 0:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._fd)
        self._fd = -1


def sweep_private_dirs(root: Path | None = None) -> list[Outcome]:
    """Remove the private directories of dead daemons (this user's only) from `root` (the temp dir)."""
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    outcomes: list[Outcome] = []
    try:
        names = sorted(n for n in os.listdir(base) if n.startswith(PRIVATE_PREFIX))
    except OSError:
        return outcomes
    for name in names:
        path = base / name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue  # a symlink, a file, or another user's: never ours to remove
        try:
            outcome = _sweep_one(path)
        except Exception as exc:  # noqa: BLE001 - one directory never stops the sweep of the others
            outcome = Outcome(str(path), False, f"cannot sweep this private directory ({type(exc).__name__})")
        if outcome is not None:
            outcomes.append(outcome)
    return outcomes


def _sweep_one(path: Path) -> Outcome | None:
    try:
        dir_fd = open_nofollow(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        try:
            fd = open_nofollow(OWNER_FILE, dir_fd=dir_fd)
        except FileNotFoundError:
            if os.listdir(dir_fd):
                return Outcome(str(path), False, "a private directory without an owner lock (an older agentctl's); "
                               "left alone: remove it once no agentctl daemon of that version runs")
            os.rmdir(path)
            return Outcome(str(path), True, "removed an empty private directory")
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None  # its daemon is alive
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)
    if os.path.lexists(path):
        return Outcome(str(path), False, "a dead daemon's private directory could not be removed")
    return Outcome(str(path), True, "removed a killed daemon's private config directory")


def recover(state_dir: Path, tmp_root: Path | None = None) -> list[Outcome]:
    """Undo the merges of dead daemons recorded in `state_dir`'s journal and remove their private dirs.

    Raises nothing: what cannot be dealt with is an Outcome that is not `done` (one line, the entry kept),
    so a daemon's start and `agentctl recover` always finish, whatever one leftover holds."""
    journal = Path(state_dir) / "journal"
    try:
        outcomes = Journal(state_dir).recover()
    except MaterializeError as exc:
        outcomes = [Outcome(str(journal), False, exc.summary)]
    except Exception as exc:  # noqa: BLE001 - each entry is isolated inside; this is the last line of defence
        outcomes = [Outcome(str(journal), False, f"cannot recover the journal ({type(exc).__name__})")]
    try:
        swept = sweep_private_dirs(tmp_root)
    except Exception as exc:  # noqa: BLE001 - as above
        swept = [Outcome(str(tmp_root or tempfile.gettempdir()), False,
                         f"cannot sweep the private directories ({type(exc).__name__})")]
    return outcomes + swept


def log_outcomes(outcomes: list[Outcome]) -> None:
    for outcome in outcomes:
        if outcome.done:
            log.info("recovered after a killed daemon: %s: %s", outcome.file, outcome.detail)
        else:
            log.warning("left after a killed daemon: %s: %s", outcome.file, outcome.detail)
