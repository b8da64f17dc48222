"""Owns loading the o200k_base encoding with no network: the ranks shipped in the package (sha256-pinned),
an override file, or tiktoken's cache. Only the short-lived estimate helper (estimate_helper.py) loads it: a
daemon never holds the vocabulary (estimates.py asks the helper and caches its answers)."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import tempfile
import types
from importlib import resources
from typing import Any, Callable

import msgspec

__all__ = [
    "ENV_O200K_PATH",
    "PACKAGED_SHA256",
    "TokenEstimator",
    "load_estimator",
    "load_estimator_and_sha256",
    "packaged_ranks",
]

log = logging.getLogger(__name__)

ENV_O200K_PATH = "AGENTCTL_O200K_PATH"
ENCODING_NAME = "o200k_base"
REASON_ENCODING_UNAVAILABLE = "encoding_unavailable"
REASON_ESTIMATOR_LOADING = "estimator_loading"

# The sha256 of agentctl/evidence/data/o200k_base.tiktoken, which is also the hash tiktoken's own
# o200k_base() expects: pinned here too so a changed or truncated package file is refused even if a
# future tiktoken stops passing a hash.
PACKAGED_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
_PACKAGED_FILE = ("data", "o200k_base.tiktoken")


class TokenEstimator:
    """Counts o200k_base tokens of a text."""

    def __init__(self, encoding: Any) -> None:
        # The Rust core keeps its own copy of the ranks; tiktoken keeps the Python dict only for pickling,
        # which nothing here does. Dropping it returns ~28 MB of the helper's ~85 MB vocabulary cost.
        if hasattr(encoding, "_mergeable_ranks"):
            encoding._mergeable_ranks = {}
        self._encoding = encoding

    def count(self, text: str) -> int:
        # Tool definitions are data, not prompts: a description containing "<|endoftext|>" must be
        # counted as ordinary text, not raise as a disallowed special token.
        return len(self._encoding.encode_ordinary(text))


class _Recipe(msgspec.Struct):
    source: str  # where tiktoken would fetch the ranks from
    expected_hash: str
    pat_str: str
    special_tokens: dict[str, int]


def _run_o200k_constructor(load_ranks: Callable[..., dict[bytes, int]]) -> dict[str, Any]:
    """Run tiktoken's own o200k_base() with `load_tiktoken_bpe` swapped for `load_ranks`.

    The URL, hash, pattern and special tokens are local variables of that function, not module
    constants, so the only faithful way to read them is to run it. A copy of the function with its own
    globals does that without touching tiktoken's module (other threads may be using it) and without
    the download the real loader would start.
    """
    from tiktoken_ext import openai_public

    original = openai_public.o200k_base
    if "load_tiktoken_bpe" not in original.__code__.co_names:
        # A tiktoken that fetches ranks some other way would reach the network through the copy.
        raise RuntimeError("tiktoken o200k_base() no longer loads ranks via load_tiktoken_bpe")
    scoped = dict(original.__globals__, load_tiktoken_bpe=load_ranks)
    clone = types.FunctionType(
        original.__code__, scoped, original.__name__, original.__defaults__, original.__closure__
    )
    ranks: dict[str, Any] = clone()
    return ranks


def _o200k_recipe() -> _Recipe:
    seen: dict[str, Any] = {}

    def record(source: str, expected_hash: str | None = None) -> dict[bytes, int]:
        seen["source"], seen["expected_hash"] = source, expected_hash
        return {}

    params = _run_o200k_constructor(record)
    if not seen.get("expected_hash"):
        raise RuntimeError("tiktoken gives no expected hash for o200k_base")
    return _Recipe(
        source=seen["source"],
        expected_hash=seen["expected_hash"],
        pat_str=params["pat_str"],
        special_tokens=dict(params["special_tokens"]),
    )


def _o200k_cache_path(source: str) -> str | None:
    """Where tiktoken.load.read_file_cached keeps `source`, or None when caching is disabled."""
    # Mirrors read_file_cached: tiktoken exposes no function for this, and looking before loading is
    # the only way to be sure get_encoding() will not download.
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        cache_dir = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        cache_dir = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if cache_dir == "":
        return None
    return os.path.join(cache_dir, hashlib.sha1(source.encode()).hexdigest())


def _parse_ranks(contents: bytes) -> dict[bytes, int]:
    # tiktoken's load_tiktoken_bpe parses this format the same way, but only after read_file_cached has
    # copied the file into a cache directory (by default a shared one under /tmp): a daemon must not
    # write 3.6 MB there, so the already verified bytes are parsed here.
    return {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in contents.splitlines() if line)
    }


def _encoding_from_bytes(contents: bytes, what: str, pinned: str | None = None) -> tuple[Any, str]:
    import tiktoken

    def from_verified(source: str, expected_hash: str | None = None) -> dict[bytes, int]:
        if not expected_hash:
            raise RuntimeError(f"refusing an unverified o200k_base file ({what})")
        if pinned is not None and expected_hash != pinned:
            # Another revision of the encoding: its pattern and special tokens may not fit these ranks.
            raise RuntimeError(f"tiktoken expects another o200k_base than {what}")
        if hashlib.sha256(contents).hexdigest() != expected_hash:
            raise ValueError(f"{what} does not match the o200k_base sha256")
        return _parse_ranks(contents)

    return tiktoken.Encoding(**_run_o200k_constructor(from_verified)), hashlib.sha256(contents).hexdigest()


def packaged_ranks() -> bytes:
    """The bytes of the o200k_base file shipped inside the package (read from a wheel, zipapp or onedir)."""
    return resources.files("agentctl.evidence").joinpath(*_PACKAGED_FILE).read_bytes()


def _load_from_file(path: str) -> tuple[Any, str]:
    with open(path, "rb") as f:
        return _encoding_from_bytes(f.read(), "the file named by $" + ENV_O200K_PATH)


def _load_packaged() -> tuple[Any, str]:
    contents = packaged_ranks()
    if hashlib.sha256(contents).hexdigest() != PACKAGED_SHA256:
        raise ValueError("the packaged o200k_base file is damaged (sha256 mismatch)")
    return _encoding_from_bytes(contents, "the packaged file", pinned=PACKAGED_SHA256)


def _load_from_cache() -> tuple[Any, str]:
    import tiktoken
    from tiktoken.load import check_hash

    recipe = _o200k_recipe()
    cache_path = _o200k_cache_path(recipe.source)
    if cache_path is None or not os.path.isfile(cache_path):
        raise FileNotFoundError("o200k_base is not in the tiktoken cache")
    with open(cache_path, "rb") as f:
        # A cached file with the wrong hash makes tiktoken delete it and download again.
        if not check_hash(f.read(), recipe.expected_hash):
            raise ValueError("cached o200k_base does not match tiktoken's expected hash")
    return tiktoken.get_encoding(ENCODING_NAME), recipe.expected_hash


def load_estimator_and_sha256(path: str | None = None) -> tuple[TokenEstimator, str] | None:
    """Load o200k_base without network, with the sha256 of the ranks it was built from.

    From `path` / $AGENTCTL_O200K_PATH when one is given (and only from there: an operator who names a
    file wants that file); else from the file shipped in the package; else from tiktoken's cache. None
    when none of these works; the caller then reports the estimator unavailable.
    """
    path = path or os.environ.get(ENV_O200K_PATH) or None
    loaders: list[Callable[[], tuple[Any, str]]] = (
        [lambda: _load_from_file(path)] if path else [_load_packaged, _load_from_cache]
    )
    for load in loaders:
        try:
            encoding, sha256 = load()
            return TokenEstimator(encoding), sha256
        except Exception as exc:
            # Not an error of the execution: the catalog simply carries no estimates.
            log.debug("o200k_base estimator unavailable: %s", exc, exc_info=True)
    return None


def load_estimator(path: str | None = None) -> TokenEstimator | None:
    """`load_estimator_and_sha256` without the checksum."""
    loaded = load_estimator_and_sha256(path)
    return None if loaded is None else loaded[0]
