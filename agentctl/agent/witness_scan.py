"""Owns what the stdio witness reads of the bytes it relays: bounded line splitting and the few JSON-RPC
envelopes it keeps (pure: no I/O; agentctl/agent/mcp_witness.py feeds it and relays the bytes untouched).

Only answers to the agent's own `initialize`, `tools/list` and `tools/call` requests are read, and of them only:
the protocol version and the server's name and version; the tools' count, names and catalog hash; the called
tool's name and whether the call failed. Params, results, notifications and anything that is not JSON are
never kept. A line longer than `max_line` is relayed by the caller but never parsed.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET

from agentctl.evidence.catalog import catalog_hash

MAX_PARSED_LINE = 4 * 1024 * 1024
MAX_PENDING = 1024  # requests awaiting their answer; the oldest is forgotten beyond this
MAX_NAMES = 256  # tool names kept of one list (the count stays whole)
# Answers to no request the witness knows yet, held for the one whose line is still under way (a server may answer
# an object before its newline arrives): the last few, each at most this long, never kept beyond that request.
MAX_EARLY = 4
MAX_EARLY_LINE = 1024 * 1024
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_TEXT = re.compile(r"^[\x20-\x7e]{1,64}$")
_WATCHED = ("initialize", "tools/list", "tools/call")


# A line that may be a JSON object starts with `{` or white space; every other line is passed over whole.
_OBJECT_BYTES = b"{ \t\r"
_NEXT_OBJECT = re.compile(rb"\n[{ \t\r]")
_AT_START, _COLLECT, _SKIP = 0, 1, 2


class Lines:
    """Splits one direction's byte stream into complete lines that may be JSON objects, each at most `max_line`
    bytes; a longer line is skipped whole (counted in `skipped`), never cut into parts that might parse.

    Bulk data costs one C-level search per chunk, not Python work per line: the lines that cannot be objects
    (their first byte is not `{` or white space) are jumped over by a regular expression and never copied.
    """

    def __init__(self, max_line: int = MAX_PARSED_LINE) -> None:
        self.max_line = max_line
        self.offset = 0  # bytes of the stream fed so far
        self._buf = bytearray()
        self._state = _AT_START
        self.skipped = 0

    @property
    def collecting(self) -> bool:
        """Whether a line that may be an object is part read (its bytes must go through `feed`)."""
        return self._state == _COLLECT

    def resync(self, last: bytes) -> None:
        """Bytes before `last` went by unseen (none of them an awaited answer): the next line starts after
        the next newline, or right after `last` if it is one."""
        self._buf.clear()
        self._state = _AT_START if last == b"\n" else _SKIP

    def feed(self, chunk: bytes | bytearray, size: int | None = None) -> list[bytes]:
        """The complete object lines that end in `chunk[:size]` (a reused buffer is never kept: what is held
        across chunks is copied)."""
        return [line for line, _ in self.feed_ends(chunk, size)]

    def feed_ends(self, chunk: bytes | bytearray, size: int | None = None) -> list[tuple[bytes, int]]:
        """`feed`, each line with the stream offset just past its last byte (where its newline is: a reader that
        takes an object once it is complete may answer before the newline reaches it)."""
        lines: list[tuple[bytes, int]] = []
        start, size = 0, len(chunk) if size is None else size
        base = self.offset
        self.offset += size
        while start < size:
            if self._state == _SKIP:
                found = _NEXT_OBJECT.search(chunk, start, size)
                if found is None:
                    if chunk[size - 1] == 10:  # the skipped line ends with this chunk
                        self._state = _AT_START
                    return lines
                start, self._state = found.start() + 1, _COLLECT
            elif self._state == _AT_START:
                self._state = _COLLECT if chunk[start] in _OBJECT_BYTES else _SKIP
            else:
                end = chunk.find(b"\n", start, size)
                if end < 0:
                    if len(self._buf) + size - start > self.max_line:
                        self._buf.clear()
                        self._state = _SKIP
                        self.skipped += 1
                    else:
                        self._buf += chunk[start:size]
                    return lines
                if len(self._buf) + end - start <= self.max_line:
                    lines.append((bytes(self._buf + chunk[start:end]), base + end))
                else:
                    self.skipped += 1
                self._buf.clear()
                start, self._state = end + 1, _AT_START
        return lines


@dataclass
class Observation:
    """One thing the witness saw, in the shape its report carries (no params, no results)."""

    kind: str  # initialize_observed | tools_list_observed | tool_call_observed
    fields: dict[str, Any] = field(default_factory=dict)


class Envelopes:
    """Pairs the agent's watched requests with the server's answers; both directions feed one instance."""

    def __init__(self) -> None:
        # id -> (method, tool, a continued list, where the request's line ended in the agent's stream)
        self._pending: OrderedDict[tuple[str, Any], tuple[str, str | None, bool, int]] = OrderedDict()
        self._early: OrderedDict[tuple[str, Any], tuple[bytes, int]] = OrderedDict()  # id -> (line, its horizon)
        self._names: list[str] = []
        self._tools: list[Any] = []
        self._count = 0

    @property
    def waiting(self) -> bool:
        """Whether a watched request awaits its answer (else the server's lines need no reading)."""
        return bool(self._pending)

    def from_agent(self, line: bytes, end: int = 0) -> Observation | None:
        """A line of the agent's, which ended at offset `end` of its stream; what an answer the server gave
        before the line was whole says, if it gave one."""
        message = _decode(line, _Request)
        if message is None or not isinstance(message.method, str) or message.id is UNSET:
            return None
        method = message.method
        key = _key(message.id)
        if method not in _WATCHED or key is None:
            return None
        params = _decode(message.params, _Params) if method != "initialize" else None
        tool = params.name if params is not None and method == "tools/call" else None
        tool = tool if isinstance(tool, str) and _TOOL_NAME.fullmatch(tool) else ("?" if tool is not None else None)
        self._pending[key] = (method, tool, params is not None and params.cursor is not None, end)
        while len(self._pending) > MAX_PENDING:
            self._pending.popitem(last=False)
        early = self._early.pop(key, None)
        return self.from_server(*early) if early is not None else None

    def from_server(self, line: bytes, horizon: int | None = None) -> Observation | None:
        """A line of the server's, read when the agent's stream had reached `horizon` bytes at the most: a request
        that ended past it had not reached the server, so this line is not its answer (a server that writes an
        answer ahead, to an id the agent has yet to use, is not taken at its word)."""
        message = _decode(line, _Answer)
        if message is None or message.method is not UNSET or message.id is UNSET:
            return None
        key = _key(message.id)
        if key is None:
            return None
        if key not in self._pending:
            if horizon is not None and len(line) <= MAX_EARLY_LINE:
                self._early[key] = (line, horizon)
                self._early.move_to_end(key)
                while len(self._early) > MAX_EARLY:
                    self._early.popitem(last=False)
            return None
        if horizon is not None and self._pending[key][3] > horizon:
            return None
        method, tool, continued, _end = self._pending.pop(key)
        if method == "tools/call":
            # Only `isError` is read of a call's result: its content is skipped by the decoder, never built.
            outcome = _decode(message.result, _CallResult)
            failed = len(message.error) > 0 or (outcome is not None and outcome.isError is True)
            return Observation("tool_call_observed", {"tool_name": tool or "?", "outcome": "error" if failed else "ok"})
        result = _decode(message.result, dict)
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


class _Request(msgspec.Struct):
    """What is read of a line from the agent; `params` stays raw until the method says it is needed."""

    id: Any = UNSET
    method: Any = None
    params: msgspec.Raw = msgspec.Raw(b"null")


class _Params(msgspec.Struct):
    name: Any = None
    cursor: Any = None


class _Answer(msgspec.Struct):
    """What is read of a line from the server; `result` stays raw until its request's method is known."""

    id: Any = UNSET
    method: Any = UNSET
    result: msgspec.Raw = msgspec.Raw(b"null")
    error: msgspec.Raw = msgspec.Raw()  # empty when absent; never decoded


class _CallResult(msgspec.Struct):
    isError: Any = None  # noqa: N815 - the protocol's name


_T = TypeVar("_T")


def _decode(data: bytes | msgspec.Raw, shape: type[_T]) -> _T | None:
    """`data` decoded into `shape`, skipping every field `shape` does not name (never built), or None when it
    is not JSON or not an object. A line that does not start with `{` is not a JSON-RPC object (a batch, a
    log line): relayed, never read."""
    if isinstance(data, bytes):
        data = data.strip()
        if not data.startswith(b"{"):
            return None
    try:
        return msgspec.json.decode(data, type=shape)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


def _key(rid: Any) -> tuple[str, Any] | None:
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        return None
    return (type(rid).__name__, rid)
