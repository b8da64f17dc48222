"""Owns the shape of a server as configured for an attempt (ServerSeed): what the ledger seeds an attempt's
rows with, already sanitized where it is derived (agentctl.daemon.servers). Pure."""

from __future__ import annotations

import msgspec

from agentctl.evidence.contract.report import Source, Transport


class ServerSeed(msgspec.Struct, frozen=True, kw_only=True):
    """A server as configured for an attempt, already sanitized (target is scheme://host[:port] or a basename)."""

    name: str
    source: Source
    transport: Transport | None
    target: str | None
