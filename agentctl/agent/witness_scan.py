"""Owns what the stdio witness reads of the bytes it relays: bounded line splitting and the few JSON-RPC
envelopes it keeps (pure: no I/O; agentctl/agent/mcp_witness.py feeds it and relays the bytes untouched).

Only answers to the agent's own `initialize`, `tools/list` and `tools/call` requests are read, and of them only:
the protocol version and the server's name and version; the tools' count, names and catalog hash; the called
tool's name and whether the call failed. Params, results, notifications and anything that is not JSON are
never kept. A line longer than `max_line` is relayed by the caller but never parsed.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from agentctl.evidence.catalog import catalog_hash

MAX_PARSED_LINE = 4 * 1024 * 1024
MAX_PENDING = 1024  # requests awaiting their answer; the oldest is forgotten beyond this
MAX_NAMES = 256  # tool names kept of one list (the count stays whole)
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_TEXT = re.compile(r"^[\x20-\x7e]{1,64}$")
_WATCHED = ("initialize", "tools/list", "tools/call")


class Lines:
    """Splits one direction's byte stream into complete lines, each at most `max_line` bytes; a longer
    line is skipped whole (counted in `skipped`), never cut into parts that might parse."""

    def __init__(self, max_line: int = MAX_PARSED_LINE) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._skipping = False
        self.skipped = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start, size = 0, len(chunk)
        while start < size:
            if not self._buf and not self._skipping and not _may_be_object(chunk, start):
                self._skipping = True  # not a JSON object: relayed, never copied or read
            end = chunk.find(b"\n", start)
            if end < 0:
                if not self._skipping:
                    if len(self._buf) + size - start > self.max_line:
                        self._buf.clear()
                        self._skipping = True
                        self.skipped += 1
                    else:
                        self._buf += chunk[start:]
                break
            if self._skipping:
                self._skipping = False
            elif len(self._buf) + end - start <= self.max_line:
                self._buf += chunk[start:end]
                lines.append(bytes(self._buf))
            else:
                self.skipped += 1
            self._buf.clear()
            start = end + 1
        return lines


def _may_be_object(chunk: bytes, start: int) -> bool:
    """Whether the line starting at `start` may be a JSON object (its first byte `{` or white space)."""
    return chunk[start:start + 1] in (b"{", b" ", b"\t", b"\r", b"\n")


@dataclass
class Observation:
    """One thing the witness saw, in the shape its report carries (no params, no results)."""

    kind: str  # initialize_observed | tools_list_observed | tool_call_observed
    fields: dict[str, Any] = field(default_factory=dict)


class Envelopes:
    """Pairs the agent's watched requests with the server's answers; both directions feed one instance."""

    def __init__(self) -> None:
        self._pending: OrderedDict[tuple[str, Any], tuple[str, str | None, bool]] = OrderedDict()
        self._names: list[str] = []
        self._tools: list[Any] = []
        self._count = 0

    @property
    def waiting(self) -> bool:
        """Whether a watched request awaits its answer (else the server's lines need no reading)."""
        return bool(self._pending)

    def from_agent(self, line: bytes) -> None:
        message = _message(line)
        if message is None or not isinstance(message.get("method"), str) or "id" not in message:
            return
        method = message["method"]
        key = _key(message["id"])
        if method not in _WATCHED or key is None:
            return
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        tool = params.get("name") if method == "tools/call" else None
        tool = tool if isinstance(tool, str) and _TOOL_NAME.fullmatch(tool) else ("?" if tool is not None else None)
        self._pending[key] = (method, tool, params.get("cursor") is not None)
        while len(self._pending) > MAX_PENDING:
            self._pending.popitem(last=False)

    def from_server(self, line: bytes) -> Observation | None:
        message = _message(line)
        if message is None or "method" in message or "id" not in message:
            return None
        key = _key(message["id"])
        if key is None or key not in self._pending:
            return None
        method, tool, continued = self._pending.pop(key)
        result = message.get("result")
        if method == "tools/call":
            failed = "error" in message or (isinstance(result, dict) and result.get("isError") is True)
            return Observation("tool_call_observed", {"tool_name": tool or "?", "outcome": "error" if failed else "ok"})
        if not isinstance(result, dict):
            return None  # an error answer to initialize or tools/list: the agent sees it; no contact claimed
        if method == "initialize":
            return Observation("initialize_observed", _initialize(result))
        tools = result.get("tools")
        if not isinstance(tools, list):
            return None
        if not continued:
            self._names, self._tools, self._count = [], [], 0
        self._count += len(tools)
        self._tools.extend(tools)
        for tool_def in tools:
            name = tool_def.get("name") if isinstance(tool_def, dict) else None
            if len(self._names) < MAX_NAMES and isinstance(name, str) and _TOOL_NAME.fullmatch(name):
                self._names.append(name)
        fields: dict[str, Any] = {"tool_count": self._count, "tool_names": list(self._names),
                                  "truncated": self._count > len(self._names)}
        digest = catalog_hash(self._tools)
        if digest is not None:
            fields["catalog_hash"] = digest
        if not result.get("nextCursor"):
            self._tools = []  # the hash is taken; the definitions are not kept beyond their page
        return Observation("tools_list_observed", fields)


def _initialize(result: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    version = result.get("protocolVersion")
    if isinstance(version, str) and _TEXT.fullmatch(version):
        fields["protocol_version"] = version
    info = result.get("serverInfo")
    if isinstance(info, dict):
        name, ver = info.get("name"), info.get("version")
        if isinstance(name, str) and _TEXT.fullmatch(name):
            fields["server_name"] = name
            if isinstance(ver, str) and _TEXT.fullmatch(ver):
                fields["server_version"] = ver
    return fields


def _message(line: bytes) -> dict[str, Any] | None:
    stripped = line.strip()
    if not stripped.startswith(b"{"):
        return None  # not a JSON-RPC object (a batch, a log line): relayed, never read
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _key(rid: Any) -> tuple[str, Any] | None:
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        return None
    return (type(rid).__name__, rid)
