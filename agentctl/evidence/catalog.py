"""Owns the bounded tool catalog of the built-in server, its hash and its o200k_base token estimates (offline)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import types
from typing import Any, Callable

import msgspec

from agentctl.evidence.contract import (
    CATALOG_HASH_METHOD,
    MAX_CATALOG_SCHEMA_BYTES,
    MAX_CATALOG_TOOLS,
    MAX_DESCRIPTION_BYTES,
    MAX_SCHEMA_BYTES,
    TOKEN_ESTIMATE_METHOD,
    ToolCatalog,
    ToolSummary,
)

__all__ = [
    "ENV_O200K_PATH",
    "EstimatorLoader",
    "TokenEstimator",
    "build_catalog",
    "catalog_hash",
    "load_estimator",
]

log = logging.getLogger(__name__)

ENV_O200K_PATH = "AGENTCTL_O200K_PATH"
ENCODING_NAME = "o200k_base"
REASON_ENCODING_UNAVAILABLE = "encoding_unavailable"
REASON_ESTIMATOR_LOADING = "estimator_loading"

_json = msgspec.json.Encoder()


class TokenEstimator:
    """Counts o200k_base tokens of a text."""

    def __init__(self, encoding: Any) -> None:
        self._encoding = encoding

    def count(self, text: str) -> int:
        # Tool definitions are data, not prompts: a description containing "<|endoftext|>" must be
        # counted as ordinary text, not raise as a disallowed special token.
        return len(self._encoding.encode_ordinary(text))


# ---------------------------------------------------------------------------------------------------------
# Catalog


def build_catalog(
    tools: list[dict[str, Any]],
    estimator: TokenEstimator | None,
    *,
    unavailable_reason: str = REASON_ENCODING_UNAVAILABLE,
) -> tuple[int, ToolCatalog]:
    """Return (full tool count, bounded catalog) for a tools/list result's `tools`."""
    tool_count = len(tools)
    ordered = sorted((t for t in tools if isinstance(t, dict)), key=_tool_name)
    kept = ordered[:MAX_CATALOG_TOOLS]

    summaries: list[ToolSummary] = []
    schema_total = 0
    budget_exhausted = False
    for tool in kept:
        description, description_truncated = _cut_utf8(
            _as_str(tool.get("description")), MAX_DESCRIPTION_BYTES
        )
        schema, schema_size = _schema_of(tool)
        schema_truncated = False
        if schema is not None and schema_size > MAX_SCHEMA_BYTES:
            schema, schema_truncated = None, True
        if schema is not None:
            # Once the budget is hit, every later tool (by name) loses its schema too, so the kept set
            # is a prefix of the sorted catalog and does not depend on which small schemas happen to fit.
            if budget_exhausted or schema_total + schema_size > MAX_CATALOG_SCHEMA_BYTES:
                budget_exhausted = True
                schema, schema_truncated = None, True
            else:
                schema_total += schema_size
        summaries.append(
            ToolSummary(
                name=_tool_name(tool),
                description=description,
                description_truncated=description_truncated,
                input_schema=schema,
                schema_truncated=schema_truncated,
                token_estimate=_estimate(estimator, tool),
            )
        )

    catalog = ToolCatalog(
        tools=summaries,
        truncated=len(ordered) > MAX_CATALOG_TOOLS or len(ordered) < tool_count,
        schemas_truncated=budget_exhausted,
        estimator=TOKEN_ESTIMATE_METHOD if estimator is not None else None,
        estimator_unavailable_reason=None if estimator is not None else unavailable_reason,
        hash=catalog_hash(ordered),
    )
    return tool_count, catalog


def catalog_hash(tools: list[Any]) -> str | None:
    """`sha256:mcp-tools-v1:<hex>` of a tools/list result's tools, before any bound, so truncation never
    changes it and any change of a name, description or input schema does.

    Each tool (a JSON object) is the canonical JSON of `[name, description, inputSchema]` (a value of the
    wrong type is null); the tools are sorted by that text, and the hash is sha256 over the UTF-8 of their
    JSON array. Canonical JSON: keys sorted, no whitespace, non-ASCII as itself, an integral float as an
    integer (1.0 and 1 are one JSON number). Order, other fields (annotations, output schemas) and the
    estimator never change the hash. None when a schema is not JSON at all (NaN, too deep to encode).
    """
    entries: list[str] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        name, description, schema = tool.get("name"), tool.get("description"), tool.get("inputSchema")
        entry = [
            name if isinstance(name, str) else None,
            description if isinstance(description, str) else None,
            schema if isinstance(schema, dict) else None,
        ]
        try:
            entries.append(_canonical_json(entry))
        except (TypeError, ValueError, RecursionError):
            log.debug("a tool schema is not canonical JSON; the catalog has no hash")
            return None
    entries.sort()
    digest = hashlib.sha256(("[" + ",".join(entries) + "]").encode("utf-8", "surrogatepass")).hexdigest()
    return f"{CATALOG_HASH_METHOD}:{digest}"


def _canonical_json(value: Any) -> str:
    return json.dumps(_integral(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_integral(v) for v in value]
    return value


def _tool_name(tool: dict[str, Any]) -> str:
    return _as_str(tool.get("name"))


def _as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _cut_utf8(text: str, limit: int) -> tuple[str, bool]:
    # errors="replace" only matters for lone surrogates, which cannot be sent as JSON anyway.
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text, False
    # The input is valid UTF-8, so "ignore" can only drop the one character split by the cut.
    return data[:limit].decode("utf-8", errors="ignore"), True


def _schema_of(tool: dict[str, Any]) -> tuple[dict[str, Any] | None, int]:
    schema = tool.get("inputSchema")
    if not isinstance(schema, dict):
        return None, 0
    try:
        return schema, len(_json.encode(schema))
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError):
        log.debug("tool input schema is not JSON-encodable; dropped")
        return None, 0


def _estimate(estimator: TokenEstimator | None, tool: dict[str, Any]) -> int | None:
    if estimator is None:
        return None
    try:
        # The whole original definition, key order as given: that is what the agent's model is sent,
        # so the estimate is taken before any of the catalog bounds above.
        text = _json.encode(tool).decode("utf-8")
        return estimator.count(text)
    except Exception:
        log.debug("token estimate failed for one tool", exc_info=True)
        return None


# ---------------------------------------------------------------------------------------------------------
# Offline loading of o200k_base


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
    return clone()


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


def _load_from_file(path: str) -> Any:
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    def from_local_file(source: str, expected_hash: str | None = None) -> dict[bytes, int]:
        if not expected_hash:
            raise RuntimeError("refusing an unverified o200k_base file")
        return load_tiktoken_bpe(path, expected_hash=expected_hash)

    return tiktoken.Encoding(**_run_o200k_constructor(from_local_file))


def _load_from_cache() -> Any:
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
    return tiktoken.get_encoding(ENCODING_NAME)


def load_estimator(path: str | None = None) -> TokenEstimator | None:
    """Load o200k_base without network: from `path` / $AGENTCTL_O200K_PATH, else from tiktoken's cache.

    None when neither works; the caller then reports the estimator unavailable.
    """
    path = path or os.environ.get(ENV_O200K_PATH) or None
    try:
        encoding = _load_from_file(path) if path else _load_from_cache()
        return TokenEstimator(encoding)
    except Exception as exc:
        # Not an error of the execution: the catalog simply carries no estimates.
        log.debug("o200k_base estimator unavailable: %s", exc, exc_info=True)
        return None


class EstimatorLoader:
    """Loads the estimator once in a background thread, so start-up and MCP requests never wait on it."""

    def __init__(
        self,
        path: str | None = None,
        *,
        load: Callable[[str | None], TokenEstimator | None] = load_estimator,
    ) -> None:
        self._path = path
        self._load = load
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._estimator: TokenEstimator | None = None

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            # Daemon thread: a load still running must not hold up process exit.
            self._thread = threading.Thread(target=self._run, name="agentctl-o200k-loader", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._estimator = self._load(self._path)
        except Exception:
            log.debug("estimator loader failed", exc_info=True)
            self._estimator = None
        finally:
            self._done.set()

    @property
    def ready(self) -> bool:
        """True once loading has finished, whether or not an estimator came of it."""
        return self._done.is_set()

    def get(self) -> TokenEstimator | None:
        """The estimator if loaded, else None. Never blocks."""
        return self._estimator if self._done.is_set() else None

    @property
    def unavailable_reason(self) -> str | None:
        """Reason code for ToolCatalog.estimator_unavailable_reason, None when an estimator is available."""
        if not self._done.is_set():
            return REASON_ESTIMATOR_LOADING
        return None if self._estimator is not None else REASON_ENCODING_UNAVAILABLE

    def wait(self, timeout: float | None = None) -> bool:
        """Block up to `timeout` seconds for loading to finish; True if it has. For tests and the CLI."""
        return self._done.wait(timeout)
