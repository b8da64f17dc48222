"""The contract's shared struct config (unknown fields refused) and its one JSON encoder."""

from __future__ import annotations

from typing import Any

import msgspec


class Base(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Common struct config: keyword-only, compact JSON, unknown fields refused on decode."""


_encoder = msgspec.json.Encoder()


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


def surface_schema(title: str, namespace: dict[str, Any], module: str) -> dict[str, Any]:
    """JSON Schema of one surface: every public struct its module defines is a root (`anyOf`); the types it
    borrows from another surface appear under `$defs` only as referenced, so the schema changes when, and
    only when, that module or what it uses does."""
    own = [
        value for name, value in namespace.items()
        if not name.startswith("_") and isinstance(value, type) and issubclass(value, msgspec.Struct)
        and value.__module__ == module
    ]
    roots, defs = msgspec.json.schema_components(own, ref_template="#/$defs/{name}")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        "anyOf": list(roots),
        "$defs": {name: defs[name] for name in sorted(defs)},
    }
