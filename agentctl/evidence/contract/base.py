"""The contract's shared struct config (unknown fields refused) and its one JSON encoder."""

from __future__ import annotations

from typing import Any

import msgspec


class Base(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Common struct config: keyword-only, compact JSON, unknown fields refused on decode."""


_encoder = msgspec.json.Encoder()


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)
