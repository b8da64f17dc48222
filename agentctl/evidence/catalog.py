"""Owns the bounded tool catalog of the built-in server, its hash, and which text of each tool its o200k_base
token estimate counts (estimates.py gets the counts from a helper process)."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import msgspec

from agentctl.evidence.contract.report import (
    CATALOG_HASH_METHOD,
    MAX_CATALOG_SCHEMA_BYTES,
    MAX_CATALOG_TOOLS,
    MAX_DESCRIPTION_BYTES,
    MAX_SCHEMA_BYTES,
    TOKEN_ESTIMATE_METHOD,
    ToolCatalog,
    ToolSummary,
)
from agentctl.evidence.encoding import ENV_O200K_PATH, REASON_ENCODING_UNAVAILABLE, TokenEstimator, load_estimator

__all__ = [
    "ENV_O200K_PATH",
    "TokenEstimator",
    "build_catalog",
    "catalog_hash",
    "estimate_text",
    "estimated_tools",
    "load_estimator",
]

log = logging.getLogger(__name__)

_json = msgspec.json.Encoder()


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
    ordered = _ordered(tools)
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


def _ordered(tools: list[Any]) -> list[dict[str, Any]]:
    return sorted((t for t in tools if isinstance(t, dict)), key=_tool_name)


def estimated_tools(tools: list[Any]) -> list[dict[str, Any]]:
    """The tools of a tools/list result that the bounded catalog keeps, so the ones it estimates."""
    return _ordered(tools)[:MAX_CATALOG_TOOLS]


def estimate_text(tool: dict[str, Any]) -> str:
    """The text a tool's token estimate counts: its whole original definition as JSON, key order as given
    (that is what the agent's model is sent), taken before any of the catalog's bounds. Raises
    msgspec.EncodeError (or TypeError) for a definition that is not JSON."""
    return _json.encode(tool).decode("utf-8")


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
        return estimator.count(estimate_text(tool))
    except Exception:
        log.debug("token estimate failed for one tool", exc_info=True)
        return None
