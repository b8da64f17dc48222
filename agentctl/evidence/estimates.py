"""Owns a daemon's token estimates without its own vocabulary: the helper process that counts a catalog, and the
background service the MCP observer asks (never blocking) that takes counts from the host-wide cache
(estimate_cache.py) or, when missing, from the helper.

The o200k_base vocabulary costs ~76 MB per process that loads it; fifty daemons on a host would hold fifty
copies of the same ranks to count the same catalog. Here the counts of a catalog are computed once per host
by a short-lived helper (`agentctl estimate-tokens`, estimate_helper.py) and cached; a daemon only ever holds
a table from text digest to count.

Which listings. A daemon observes one server's listings, its built-in one, whose catalog is known when the
endpoint starts (`prime`, with the list as each protocol version's surface shapes it, as one entry): its
counts are usually ready before an agent's first tools/list. Texts not counted yet (another profile applied
at run time) are counted on demand by the same helper, one helper at a time; at most MAX_CATALOGS jobs and
MAX_KNOWN_TEXTS counts are kept per daemon. Third-party servers' listings never reach a daemon (the agent
talks to them directly), so nothing else is ever estimated.
"""

from __future__ import annotations

import logging
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agentctl.evidence.catalog import TokenEstimator, estimate_text, estimated_tools
from agentctl.evidence.contract.report import TOKEN_ESTIMATE_METHOD
from agentctl.evidence.encoding import ENV_O200K_PATH, REASON_ENCODING_UNAVAILABLE, REASON_ESTIMATOR_LOADING
from agentctl.evidence.estimate_cache import (
    ENV_CACHE_DIR,
    EstimateCache,
    encoding_sha256,
    estimate_key,
    possible,
    text_digest,
)
from agentctl.evidence.estimate_helper import EXIT_UNAVAILABLE, HELPER_PROTOCOL, Response

log = logging.getLogger(__name__)

__all__ = ["ENV_CACHE_DIR", "CatalogEstimates", "EstimateCache", "EstimateUnavailable", "Lookup", "run_helper"]

MAX_CATALOGS = 8
MAX_KNOWN_TEXTS = 4 * 128  # four catalogs of MAX_CATALOG_TOOLS tools
HELPER_TIMEOUT = 90.0
REASON_ESTIMATOR_FAILED = "estimator_failed"

HelperRun = Callable[[list[str]], tuple[list[int], str]]


class EstimateUnavailable(Exception):
    """The helper gave no counts; `unavailable_reason` is the catalog's estimator_unavailable_reason."""

    def __init__(self, unavailable_reason: str, detail: str) -> None:
        super().__init__(detail)
        self.unavailable_reason = unavailable_reason


def helper_command() -> list[str]:
    from agentctl.bundled import self_command

    return [*self_command(), "estimate-tokens"]


def run_helper(texts: list[str], *, command: list[str] | None = None, timeout: float = HELPER_TIMEOUT
               ) -> tuple[list[int], str]:
    """(one count per text, the sha256 of the encoding used), computed by a helper process."""
    request = msgspec.json.encode({"v": HELPER_PROTOCOL, "texts": texts})
    try:
        # stderr discarded: the helper writes nothing there on purpose, and nothing of it may reach a log.
        proc = subprocess.run(command or helper_command(), input=request, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=timeout, cwd="/", check=False)
    except subprocess.TimeoutExpired:
        raise EstimateUnavailable(REASON_ESTIMATOR_FAILED, f"the helper took longer than {timeout:g} s") from None
    except OSError as exc:
        raise EstimateUnavailable(REASON_ESTIMATOR_FAILED, f"the helper did not start: {exc.strerror}") from None
    if proc.returncode == EXIT_UNAVAILABLE:
        raise EstimateUnavailable(REASON_ENCODING_UNAVAILABLE, "the helper found no usable o200k_base")
    try:
        response = msgspec.json.decode(proc.stdout, type=Response) if proc.returncode == 0 else None
    except msgspec.DecodeError:
        response = None
    if (response is None or response.v != HELPER_PROTOCOL or response.method != TOKEN_ESTIMATE_METHOD
            or response.counts is None or not response.encoding_sha256 or not possible(response.counts, texts)):
        raise EstimateUnavailable(REASON_ESTIMATOR_FAILED, f"the helper failed (exit status {proc.returncode})")
    return response.counts, response.encoding_sha256


class TableEstimator(TokenEstimator):
    """Counts from a table computed elsewhere; a text not in it raises KeyError (its tool gets no estimate)."""

    def __init__(self, counts: dict[str, int]) -> None:
        self._counts = counts

    def count(self, text: str) -> int:
        return self._counts[text_digest(text)]


@dataclass
class Lookup:
    """What the service knows of one tool list's estimates right now."""

    key: tuple[str, ...]  # the digests of its texts: what `when_ready` waits on
    estimator: TokenEstimator | None
    unavailable_reason: str | None  # None when `estimator` is set


@dataclass
class _Job:
    texts: dict[str, str]  # digest -> text
    done: threading.Event = field(default_factory=threading.Event)
    unavailable_reason: str | None = None  # set when it failed
    waiters: list[Callable[[], None]] = field(default_factory=list)


class CatalogEstimates:
    """The daemon's source of token estimates: `lookup` never blocks; counts are computed in the background
    (cache, else helper), and whoever waits on a tool list is told once they are known."""

    def __init__(self, cache: EstimateCache | None = None, *, helper: HelperRun = run_helper) -> None:
        self._cache = cache if cache is not None else EstimateCache()
        self._helper = helper
        self._lock = threading.Lock()
        self._helper_slot = threading.Lock()  # one helper process at a time
        self._counts: dict[str, int] = {}  # digest -> count, for every text counted so far
        self._jobs: OrderedDict[tuple[str, ...], _Job] = OrderedDict()

    @staticmethod
    def _texts(tools: list[Any]) -> dict[str, str]:
        texts: dict[str, str] = {}
        for tool in estimated_tools(tools):
            try:
                text = estimate_text(tool)
            except (msgspec.EncodeError, TypeError, ValueError, OverflowError):
                continue  # not JSON: that tool has no estimate, as build_catalog decides too
            texts[text_digest(text)] = text
        return texts

    def prime(self, tool_lists: Sequence[list[Any]]) -> None:
        """Start counting, as one catalog, the tool lists a server will serve (the built-in server's, one
        per protocol surface, at start), so a first tools/list of any era finds its counts ready."""
        texts: dict[str, str] = {}
        for tools in tool_lists:
            texts.update(self._texts(tools))
        with self._lock:
            self._start(texts)

    def _start(self, texts: dict[str, str]) -> _Job | None:
        """A job counting those of `texts` not known yet (None when all are); call with the lock held."""
        missing = {d: t for d, t in texts.items() if d not in self._counts}
        if not missing:
            return None
        for job in reversed(self._jobs.values()):
            # One still counting, or one that failed (not retried per listing); a job that succeeded and
            # still leaves texts missing had its counts dropped for newer ones: count them again.
            if missing.keys() <= job.texts.keys() and (not job.done.is_set() or job.unavailable_reason):
                return job
        job = _Job(missing)
        self._jobs[tuple(sorted(missing))] = job
        while len(self._jobs) > MAX_CATALOGS:
            self._jobs.popitem(last=False)
        # Daemon thread: a helper still running must not hold up the daemon's exit.
        threading.Thread(target=self._run, args=(job,), name="agentctl-estimates", daemon=True).start()
        return job

    def lookup(self, tools: list[Any]) -> Lookup:
        texts = self._texts(tools)
        key = tuple(sorted(texts))
        with self._lock:
            job = self._start(texts)
            if job is None:
                return Lookup(key, TableEstimator({d: self._counts[d] for d in key}), unavailable_reason=None)
            if job.done.is_set():
                # Failed (a done job that succeeded left no text missing): as failed as it said.
                return Lookup(key, None, unavailable_reason=job.unavailable_reason or REASON_ESTIMATOR_FAILED)
        return Lookup(key, None, unavailable_reason=REASON_ESTIMATOR_LOADING)

    def _run(self, job: _Job) -> None:
        counts: dict[str, int] = {}
        try:
            counts = self._compute(job.texts)
        except EstimateUnavailable as exc:
            log.info("no token estimates for the built-in server's tools: %s", exc)
            job.unavailable_reason = exc.unavailable_reason
        except Exception:
            log.warning("token estimates failed", exc_info=True)
            job.unavailable_reason = REASON_ESTIMATOR_FAILED
        finally:
            with self._lock:
                if len(self._counts) + len(counts) <= MAX_KNOWN_TEXTS:
                    self._counts.update(counts)
                elif counts:
                    self._counts = dict(counts)  # a daemon whose tools keep changing keeps the newest
                job.done.set()
                waiters, job.waiters = job.waiters, []
            for callback in waiters:
                _notify(callback)

    def _compute(self, texts: dict[str, str]) -> dict[str, int]:
        encoding = encoding_sha256()
        if encoding is None:
            raise EstimateUnavailable(REASON_ENCODING_UNAVAILABLE, f"${ENV_O200K_PATH} names no readable file")
        digests = sorted(texts)
        key = estimate_key(digests, encoding)
        cached = self._cache.read(key, encoding, texts)
        if cached is not None:
            return cached
        with self._cache.computing(key):
            cached = self._cache.read(key, encoding, texts)  # another daemon's, computed while we waited
            if cached is not None:
                return cached
            with self._helper_slot:
                counts, used = self._helper([texts[d] for d in digests])
            result = dict(zip(digests, counts))
            if used == encoding:
                self._cache.write(key, encoding, result)
            else:  # the helper fell back to another copy of the encoding: right for now, not worth keeping
                log.info("token estimates computed with encoding %s, not the expected one: not cached", used[:12])
        return result

    def when_ready(self, key: tuple[str, ...], callback: Callable[[], None]) -> None:
        """Call `callback` once the counts of `key` (a Lookup's) are known or have failed, from whichever
        thread learns it; at once when that has already happened."""
        with self._lock:
            for job in reversed(self._jobs.values()):
                if not job.done.is_set() and not set(key).isdisjoint(job.texts):
                    job.waiters.append(callback)
                    return
        _notify(callback)

    @property
    def ready(self) -> bool:
        """True when nothing is being computed."""
        with self._lock:
            return all(job.done.is_set() for job in self._jobs.values())

    def wait(self, timeout: float | None = None) -> bool:
        """Block up to `timeout` seconds until nothing is being computed; True if so. For tests and benches."""
        with self._lock:
            pending = [job.done for job in self._jobs.values()]
        return all(done.wait(timeout) for done in pending)


def _notify(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        log.debug("estimate ready callback failed", exc_info=True)
