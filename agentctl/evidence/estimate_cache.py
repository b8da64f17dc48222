"""Owns the host-wide cache of catalogs' token counts: the key of an entry, where the cache lives, how an entry is
written (atomically, 0600 in a 0700 directory) and what is trusted on reading it, and the per-key lock that
lets daemons starting together run one helper between them.

Key. sha256 over the estimate method, ESTIMATOR_VERSION, the sha256 of the encoding's ranks, and the sorted
sha256 digests of the texts counted (each tool's whole definition as JSON, catalog.estimate_text). That is
stricter than the catalog hash (which covers name, description and input schema only): the texts also carry
output schemas and annotations, which the model is sent and the estimate counts. An entry holds digests and
counts only, never a tool's text.

Where. `$AGENTCTL_ESTIMATE_CACHE_DIR`, else `$CACHE_DIRECTORY/token-estimates` (systemd), else
`<platformdirs user cache dir>/token-estimates` (e.g. `~/.cache/agentctl/token-estimates`). Deleting it is
always safe.

Trust. Files `<key>.json` are replaced atomically (safe_files), so a reader sees a whole entry or none, never
a torn file, whoever is killed when. An entry is trusted only when it is a regular file of ours under
MAX_ENTRY_BYTES whose version, key, method, encoding and digests are the ones asked for and whose counts are
possible (no text has more tokens than bytes); anything else is ignored and computed again. A directory
another user could write is never used (nothing read, nothing written, nothing locked).

Lock. Daemons that start together with an empty cache take turns on `<key>.lock` (flock): one runs the
helper, the others then read its entry (a 50-daemon host pays one ~100 MB helper, not fifty).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec

from agentctl import safe_files
from agentctl.evidence.contract.report import TOKEN_ESTIMATE_METHOD
from agentctl.evidence.encoding import ENV_O200K_PATH, PACKAGED_SHA256

log = logging.getLogger(__name__)

ENV_CACHE_DIR = "AGENTCTL_ESTIMATE_CACHE_DIR"
# Bumped whenever what is counted, or how, changes: older entries then simply stop matching.
ESTIMATOR_VERSION = 1
MAX_ENTRY_BYTES = 256 * 1024
MAX_ENCODING_FILE_BYTES = 64 * 1024 * 1024
LOCK_TIMEOUT = 100.0  # longer than a helper may run (estimates.HELPER_TIMEOUT)
LOCK_POLL = 0.05


class CacheEntry(msgspec.Struct, forbid_unknown_fields=True):
    """One cached catalog's counts (a private cache file, not evidence: never sent nor shown)."""

    v: int
    key: str
    method: str
    encoding_sha256: str
    digests: list[str]
    counts: list[int]


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def estimate_key(digests: Sequence[str], encoding_sha256: str) -> str:
    material = msgspec.json.encode([TOKEN_ESTIMATE_METHOD, ESTIMATOR_VERSION, encoding_sha256, sorted(digests)])
    return hashlib.sha256(material).hexdigest()


def default_cache_dir() -> Path:
    """$AGENTCTL_ESTIMATE_CACHE_DIR, else below the first of systemd's $CACHE_DIRECTORY (':'-separated: one
    directory for every instance of the unit, so host-wide), else below the platformdirs user cache dir."""
    configured = os.environ.get(ENV_CACHE_DIR)
    if configured:
        return Path(configured)
    systemd = os.environ.get("CACHE_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd) / "token-estimates"
    import platformdirs

    return Path(platformdirs.user_cache_dir("agentctl")) / "token-estimates"


def encoding_sha256() -> str | None:
    """The sha256 of the ranks the helper will load: the file named by $AGENTCTL_O200K_PATH (hashed here,
    without parsing it), else the pinned packaged file's. None when the named file cannot be read."""
    path = os.environ.get(ENV_O200K_PATH)
    if not path:
        return PACKAGED_SHA256
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            size = 0
            while chunk := f.read(1 << 20):
                size += len(chunk)
                if size > MAX_ENCODING_FILE_BYTES:
                    return None
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def possible(counts: Sequence[int], texts: Sequence[str]) -> bool:
    # Every o200k_base token stands for at least one byte, and a non-empty text has at least one token.
    return len(counts) == len(texts) and all(
        type(n) is int and (1 if t else 0) <= n <= len(t.encode("utf-8", "surrogatepass"))
        for n, t in zip(counts, texts)
    )


class EstimateCache:
    """The host-wide cache directory of catalogs' counts (see the module's rules)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory if directory is not None else default_cache_dir()
        self._refused = False
        self._lock_wait = threading.Event()  # never set: a wait with a timeout between two lock attempts

    def _dir_fd(self, create: bool) -> int | None:
        if self._refused:
            return None
        try:
            real = safe_files.ensure_private_dir(self.directory, create=create)
            return safe_files.open_own_dir(real)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._refused = True
            log.warning("token estimate cache %s not used: %s", self.directory, exc)
            return None

    def read(self, key: str, encoding: str, texts: dict[str, str]) -> dict[str, int] | None:
        """The counts by digest of `texts` (digest -> text), or None when there is no trustworthy entry."""
        dir_fd = self._dir_fd(create=False)
        if dir_fd is None:
            return None
        try:
            fd = safe_files.open_nofollow(f"{key}.json", dir_fd=dir_fd)
        except OSError:
            os.close(dir_fd)
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > MAX_ENTRY_BYTES:
                raise ValueError("not a regular file of ours within the size bound")
            data = os.read(fd, MAX_ENTRY_BYTES + 1)
            if len(data) > MAX_ENTRY_BYTES:
                raise ValueError("larger than the size bound")
            entry = msgspec.json.decode(data, type=CacheEntry)
            digests = sorted(texts)
            if (entry.v, entry.key, entry.method, entry.encoding_sha256, entry.digests) != (
                ESTIMATOR_VERSION, key, TOKEN_ESTIMATE_METHOD, encoding, digests
            ) or not possible(entry.counts, [texts[d] for d in digests]):
                raise ValueError("another key, version or encoding, or impossible counts")
            return dict(zip(digests, entry.counts))
        except (OSError, ValueError, msgspec.DecodeError) as exc:
            log.info("token estimate cache entry %s.json ignored (%s); computing it again", key[:12], exc)
            return None
        finally:
            os.close(fd)
            os.close(dir_fd)

    @contextlib.contextmanager
    def computing(self, key: str, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
        """Hold the host-wide lock of `key` (flock on `<key>.lock`) while computing it, so daemons that start
        together run one helper, not one each; the others wait, then find the entry. Waits at most
        `timeout` (the holder's helper is bounded too; a dead holder's lock is released by the kernel),
        then goes on without it; without a usable directory there is nothing to lock."""
        dir_fd = self._dir_fd(create=True)
        if dir_fd is None:
            yield
            return
        fd = None
        try:
            fd = os.open(f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         0o600, dir_fd=dir_fd)
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        log.info("token estimate cache lock %s.lock still held; counting anyway", key[:12])
                        break
                    self._lock_wait.wait(LOCK_POLL)
        except OSError as exc:
            log.info("token estimate cache lock not taken (%s); counting anyway", exc)
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)  # releases the flock
            os.close(dir_fd)

    def write(self, key: str, encoding: str, counts: dict[str, int]) -> None:
        digests = sorted(counts)
        entry = CacheEntry(v=ESTIMATOR_VERSION, key=key, method=TOKEN_ESTIMATE_METHOD, encoding_sha256=encoding,
                           digests=digests, counts=[counts[d] for d in digests])
        data = msgspec.json.encode(entry)
        if len(data) > MAX_ENTRY_BYTES:
            return  # a catalog this large is counted per daemon start, never cached
        dir_fd = self._dir_fd(create=True)
        if dir_fd is None:
            return
        try:
            safe_files.write_atomic_at(dir_fd, f"{key}.json", data, step="estimate-cache")
        except OSError as exc:
            log.warning("token estimate cache %s not written: %s", self.directory, exc)
        finally:
            os.close(dir_fd)
