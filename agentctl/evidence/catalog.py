"""Owns the bounded tool catalog of the built-in server and its o200k_base token estimates (encoding.py loads them)."""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from agentctl.evidence.contract import (
    MAX_CATALOG_SCHEMA_BYTES,
    MAX_CATALOG_TOOLS,
    MAX_DESCRIPTION_BYTES,
    MAX_SCHEMA_BYTES,
    TOKEN_ESTIMATE_METHOD,
    ToolCatalog,
    ToolSummary,
)
from agentctl.evidence.encoding import (
    ENV_O200K_PATH,
    REASON_ENCODING_UNAVAILABLE,
    EstimatorLoader,
    TokenEstimator,
    load_estimator,
)

__all__ = [
    "ENV_O200K_PATH",
    "EstimatorLoader",
    "TokenEstimator",
    "build_catalog",
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
    )
    return tool_count, catalog


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
