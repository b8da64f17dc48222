"""Token estimates without a vocabulary in the daemon: the helper process, the host-wide cache (and what it
refuses to trust), and the background service the MCP observer asks without ever blocking."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import msgspec
import pytest

from agentctl.evidence import estimate_cache as EC
from agentctl.evidence import estimates as E
from agentctl.evidence.catalog import estimate_text
from agentctl.evidence.contract.report import TOKEN_ESTIMATE_METHOD
from agentctl.evidence.encoding import PACKAGED_SHA256
from tests.conftest import poll

TOOLS = [
    {"name": "get_task", "description": "Get the task.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "post_message", "description": "Post a message <|endoftext|>", "inputSchema": {"type": "object"}},
]
TEXTS = {EC.text_digest(estimate_text(t)): estimate_text(t) for t in TOOLS}


@pytest.fixture(scope="module")
def helper_counts() -> tuple[list[int], str]:
    """The real helper process, run once for this module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("AGENTCTL_O200K_PATH", raising=False)
        return E.run_helper(["hello world", "<|endoftext|>", ""])


def _known_counts() -> dict[str, int]:
    return {d: max(1, len(t) // 4) for d, t in TEXTS.items()}


class CountingHelper:
    """Stands in for the helper where the test is about the service, not the counting; says how often it ran."""

    def __init__(self, gate: threading.Event | None = None, fail: E.EstimateUnavailable | None = None) -> None:
        self.calls: list[list[str]] = []
        self.gate = gate
        self.fail = fail

    def __call__(self, texts: list[str]) -> tuple[list[int], str]:
        self.calls.append(texts)
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        return [max(1, len(t) // 4) for t in texts], PACKAGED_SHA256


@pytest.fixture(autouse=True)
def _packaged_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTCTL_O200K_PATH", raising=False)


# --- the helper process -----------------------------------------------------------------------------------


def test_the_helper_counts_with_the_packaged_encoding_special_tokens_as_text(helper_counts) -> None:
    counts, sha256 = helper_counts
    # As the encoding counts in process (test_catalog): two tokens, and the special token's text as text.
    assert counts[0] == 2 and counts[1] > 1 and counts[2] == 0
    assert sha256 == PACKAGED_SHA256


def test_a_helper_without_a_usable_encoding_means_encoding_unavailable(tmp_path, monkeypatch) -> None:
    bogus = tmp_path / "o200k_base.tiktoken"
    bogus.write_bytes(b"not the encoding\n")
    monkeypatch.setenv("AGENTCTL_O200K_PATH", str(bogus))
    with pytest.raises(E.EstimateUnavailable) as failed:
        E.run_helper(["hello"])
    assert failed.value.unavailable_reason == "encoding_unavailable"


@pytest.mark.parametrize(
    ("command", "timeout"),
    [
        ([sys.executable, "-c", "import signal; signal.pause()"], 0.5),  # hangs: killed at the timeout
        ([sys.executable, "-c", "print('{\"v\": 1, \"counts\": [1]}')"], 10),  # answers nonsense
        ([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], 10),  # dies
        (["/nonexistent/agentctl"], 10),  # cannot start
    ],
    ids=["hangs", "nonsense", "killed", "missing"],
)
def test_a_helper_that_fails_in_any_way_means_estimator_failed_never_a_crash(command, timeout) -> None:
    with pytest.raises(E.EstimateUnavailable) as failed:
        E.run_helper(["hello"], command=command, timeout=timeout)
    assert failed.value.unavailable_reason == "estimator_failed"


def test_a_bad_request_makes_the_helper_exit_2_saying_nothing_of_what_it_was_sent() -> None:
    import subprocess

    canary = "CANARY-tool-text-5f1e"
    for request in (b'{"v": 1, "texts": ["%s", 7]}' % canary.encode(), b"%s not json" % canary.encode()):
        proc = subprocess.run([*E.helper_command()], input=request, capture_output=True, timeout=60)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, b"", b""), request


def test_a_helper_answering_more_tokens_than_bytes_is_not_believed() -> None:
    answer = '{"v": 1, "method": "%s", "encoding_sha256": "x", "counts": [99]}' % TOKEN_ESTIMATE_METHOD
    with pytest.raises(E.EstimateUnavailable):
        E.run_helper(["hi"], command=[sys.executable, "-c", f"print({answer!r})"])


# --- the cache --------------------------------------------------------------------------------------------


def _key() -> str:
    return EC.estimate_key(sorted(TEXTS), PACKAGED_SHA256)


def test_an_entry_written_is_read_back_private_and_keyed(tmp_path) -> None:
    cache = E.EstimateCache(tmp_path / "cache")
    cache.write(_key(), PACKAGED_SHA256, _known_counts())
    entry = tmp_path / "cache" / f"{_key()}.json"
    assert (entry.stat().st_mode & 0o777, (tmp_path / "cache").stat().st_mode & 0o777) == (0o600, 0o700)
    assert cache.read(_key(), PACKAGED_SHA256, TEXTS) == _known_counts()
    # Another encoding is another key, and an entry never answers for another key.
    assert cache.read(_key(), "0" * 64, TEXTS) is None
    os.rename(entry, tmp_path / "cache" / ("f" * 64 + ".json"))
    assert cache.read("f" * 64, PACKAGED_SHA256, TEXTS) is None


def _entry(**change) -> bytes:
    digests = sorted(TEXTS)
    fields = dict(v=EC.ESTIMATOR_VERSION, key=_key(), method=TOKEN_ESTIMATE_METHOD, encoding_sha256=PACKAGED_SHA256,
                  digests=digests, counts=[_known_counts()[d] for d in digests])
    fields.update(change)
    return msgspec.json.encode(fields)


@pytest.mark.parametrize(
    "content",
    [
        _entry()[:-7],  # torn
        b"\x00" * 100,
        _entry(counts=[10**9, 1]),  # more tokens than bytes
        _entry(counts=[0, 1]),  # a non-empty text with no token
        _entry(counts=[1]),
        _entry(digests=["0" * 64, "1" * 64]),
        _entry(v=EC.ESTIMATOR_VERSION + 1),
        _entry(key="0" * 64),
        _entry(method="cl100k_base:mcp-tool-json-v1"),
        _entry(extra="field"),
        _entry() + b" " * EC.MAX_ENTRY_BYTES,  # over the size bound
    ],
    ids=["torn", "garbage", "too-many", "zero", "short", "digests", "version", "key", "method", "unknown", "huge"],
)
def test_a_corrupt_or_hostile_entry_is_ignored_and_computed_again(tmp_path, content) -> None:
    directory = tmp_path / "cache"
    directory.mkdir(mode=0o700)
    (directory / f"{_key()}.json").write_bytes(content)
    helper = CountingHelper()
    service = E.CatalogEstimates(E.EstimateCache(directory), helper=helper)
    service.prime([TOOLS])
    assert service.wait(10)
    assert len(helper.calls) == 1, "an untrusted entry is recomputed"
    assert service.lookup(TOOLS).estimator is not None
    assert E.EstimateCache(directory).read(_key(), PACKAGED_SHA256, TEXTS) == _known_counts(), "and replaced"


def test_an_entry_that_is_a_symlink_is_not_followed(tmp_path) -> None:
    directory = tmp_path / "cache"
    directory.mkdir(mode=0o700)
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_bytes(_entry())
    (directory / f"{_key()}.json").symlink_to(elsewhere)
    assert E.EstimateCache(directory).read(_key(), PACKAGED_SHA256, TEXTS) is None


def test_a_cache_directory_others_can_write_is_never_used(tmp_path) -> None:
    directory = tmp_path / "cache"
    directory.mkdir()
    directory.chmod(0o777)
    (directory / f"{_key()}.json").write_bytes(_entry())
    cache = E.EstimateCache(directory)
    assert cache.read(_key(), PACKAGED_SHA256, TEXTS) is None, "a planted entry is not read"
    helper = CountingHelper()
    service = E.CatalogEstimates(cache, helper=helper)
    service.prime([TOOLS])
    assert service.wait(10) and service.lookup(TOOLS).estimator is not None, "still counted, per daemon"
    assert sorted(os.listdir(directory)) == [f"{_key()}.json"], "and nothing written there"


def test_the_cache_directory_is_the_env_var_else_systemds_cache_directory_else_the_user_cache_dir(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(EC.ENV_CACHE_DIR, str(tmp_path / "x"))
    assert EC.default_cache_dir() == tmp_path / "x"
    monkeypatch.delenv(EC.ENV_CACHE_DIR)
    monkeypatch.setenv("CACHE_DIRECTORY", f"{tmp_path / 'unit'}:{tmp_path / 'second'}")
    assert EC.default_cache_dir() == tmp_path / "unit" / "token-estimates"
    monkeypatch.delenv("CACHE_DIRECTORY")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert EC.default_cache_dir() == tmp_path / "xdg" / "agentctl" / "token-estimates"


def test_daemons_starting_together_with_an_empty_cache_run_one_helper_and_share_its_entry(tmp_path) -> None:
    gate = threading.Event()
    helper = CountingHelper(gate)  # the first holds the lock until every other daemon is waiting on it
    directory = tmp_path / "cache"
    services = [E.CatalogEstimates(E.EstimateCache(directory), helper=helper) for _ in range(3)]
    for service in services:
        service.prime([TOOLS])
    poll(lambda: len(helper.calls) == 1, 10, what="the first helper")
    gate.set()
    assert all(service.wait(10) for service in services)
    assert len(helper.calls) == 1, "one helper for the host"
    assert all(service.lookup(TOOLS).estimator is not None for service in services)
    assert sorted(p.name for p in directory.iterdir()) == [f"{_key()}.json", f"{_key()}.lock"], "no temp left"
    assert E.EstimateCache(directory).read(_key(), PACKAGED_SHA256, TEXTS) == _known_counts()


def test_a_lock_held_too_long_is_waited_for_a_bounded_time_then_counted_anyway(tmp_path) -> None:
    import fcntl

    directory = tmp_path / "cache"
    directory.mkdir(mode=0o700)
    holder = os.open(directory / f"{_key()}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)  # a stuck daemon's
    entered = threading.Event()
    try:
        with E.EstimateCache(directory).computing(_key(), timeout=0.2):
            entered.set()
    finally:
        os.close(holder)
    assert entered.is_set(), "went on without the lock"


# --- the service ------------------------------------------------------------------------------------------


def test_lookup_never_waits_for_the_counts_and_who_waits_is_told_once_they_are_known(tmp_path) -> None:
    gate = threading.Event()
    service = E.CatalogEstimates(E.EstimateCache(tmp_path / "c"), helper=CountingHelper(gate))
    first = service.lookup(TOOLS)
    assert first.estimator is None and first.unavailable_reason == "estimator_loading" and not service.ready
    told = threading.Event()
    service.when_ready(first.key, told.set)
    gate.set()
    assert told.wait(10) and service.wait(10)
    estimator = service.lookup(TOOLS).estimator
    assert estimator is not None
    assert [estimator.count(estimate_text(t)) for t in TOOLS] == [max(1, len(estimate_text(t)) // 4) for t in TOOLS]


def test_a_primed_catalog_is_counted_once_for_every_list_it_covers(tmp_path) -> None:
    helper = CountingHelper()
    service = E.CatalogEstimates(E.EstimateCache(tmp_path / "c"), helper=helper)
    service.prime([TOOLS[:1], TOOLS])
    assert service.wait(10)
    assert service.lookup(TOOLS[1:]).estimator is not None and service.lookup(TOOLS).estimator is not None
    assert len(helper.calls) == 1
    again = E.CatalogEstimates(E.EstimateCache(tmp_path / "c"), helper=helper)
    again.prime([TOOLS[:1], TOOLS])
    assert again.wait(10) and again.lookup(TOOLS).estimator is not None
    assert len(helper.calls) == 1, "a second daemon on the host reads the cache"


def test_failed_counts_give_the_helpers_reason_and_the_daemon_goes_on(tmp_path) -> None:
    failing = CountingHelper(fail=E.EstimateUnavailable("estimator_failed", "out of memory"))
    service = E.CatalogEstimates(E.EstimateCache(tmp_path / "c"), helper=failing)
    service.prime([TOOLS])
    assert service.wait(10)
    looked = service.lookup(TOOLS)
    assert (looked.estimator, looked.unavailable_reason) == (None, "estimator_failed")
    assert len(failing.calls) == 1, "a failure is not retried on every listing"
    assert not list((tmp_path / "c").glob("*.json")), "and nothing is cached"


def test_an_unreadable_encoding_file_means_encoding_unavailable_without_a_helper(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTCTL_O200K_PATH", str(tmp_path / "missing"))
    helper = CountingHelper()
    service = E.CatalogEstimates(E.EstimateCache(tmp_path / "c"), helper=helper)
    service.prime([TOOLS])
    assert service.wait(10)
    assert service.lookup(TOOLS).unavailable_reason == "encoding_unavailable" and helper.calls == []


def test_an_encoding_file_named_by_the_env_var_is_part_of_the_key(tmp_path, monkeypatch) -> None:
    copy = tmp_path / "o200k.tiktoken"
    copy.write_bytes(b"some other ranks\n")
    monkeypatch.setenv("AGENTCTL_O200K_PATH", str(copy))
    other = EC.encoding_sha256()
    assert other is not None and other != PACKAGED_SHA256
    assert EC.estimate_key(sorted(TEXTS), other) != _key()


_WRITER = """
import sys
from pathlib import Path
from agentctl.evidence import estimate_cache as EC
from agentctl.evidence import estimates as E
from tests.evidence.test_estimates import TEXTS, _key, _known_counts
from agentctl.evidence.encoding import PACKAGED_SHA256
E.EstimateCache(Path(sys.argv[1])).write(_key(), PACKAGED_SHA256, _known_counts())
"""


@pytest.mark.parametrize("step", ["estimate-cache-temp", "estimate-cache"])
def test_a_writer_killed_at_any_step_leaves_no_torn_entry_and_the_next_daemon_counts_again(tmp_path, step) -> None:
    import signal
    import subprocess

    from tests.conftest import REPO, poll

    directory, marker = tmp_path / "cache", tmp_path / "paused"
    env = {**os.environ, "AGENTCTL_TEST_PAUSE_AT": step, "AGENTCTL_TEST_PAUSE_FILE": str(marker)}
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(directory)], cwd=REPO, env=env)
    try:
        poll(marker.exists, 30, what="the writer to pause")
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(10)
    found = E.EstimateCache(directory).read(_key(), PACKAGED_SHA256, TEXTS)
    assert found == (None if step.endswith("-temp") else _known_counts()), "absent or whole, never torn"
    helper = CountingHelper()
    service = E.CatalogEstimates(E.EstimateCache(directory), helper=helper)
    service.prime([TOOLS])
    assert service.wait(10) and service.lookup(TOOLS).estimator is not None
    assert len(helper.calls) == (1 if step.endswith("-temp") else 0)


def test_counts_dropped_for_newer_ones_are_counted_again_not_reported_failed(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(E, "MAX_KNOWN_TEXTS", 2)
    helper = CountingHelper()
    service = E.CatalogEstimates(E.EstimateCache(tmp_path / "c"), helper=helper)
    other = [{"name": f"t{i}", "description": "x" * (i + 1)} for i in range(2)]
    for tools in (TOOLS, other, TOOLS):
        service.lookup(tools)
        assert service.wait(10)
    again = service.lookup(TOOLS)
    assert again.estimator is not None and again.unavailable_reason is None
