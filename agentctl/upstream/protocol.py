"""The upstream wire protocol: newline-delimited JSON frames, their types, limits, encoding and decoding.

Every frame is one JSON object on one line, at most MAX_FRAME_BYTES before the newline, with the protocol
version `v` and a `type` tag. Payloads are the contract's own types (agentctl.evidence.contract): a frame
never defines a second shape for report data. docs/upstream-protocol.md documents the frames;
docs/upstream-protocol.schema.json is the JSON Schema `frames_schema()` generates (a test keeps them equal).

Reading frames off a live stream is `frames_io`'s; this module does no I/O.

Decoding errors are ProtocolError with a stable `code` and a one-line message that never quotes a value
from the frame (a garbage frame may carry anything, secrets included).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar, Union

import msgspec

from agentctl.evidence.contract.control import StderrView, TerminalView
from agentctl.evidence.contract.report import (
    AgentState,
    AttachmentHistory,
    EndpointTestResult,
    EvidenceEvent,
    Identity,
)
from agentctl.evidence.decode_errors import describe_decode_error

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 1024 * 1024  # JSON bytes of one frame, not counting the newline
# The on-demand agent output window (docs/design.md, "Release-safe report"): the smaller of 50 lines and
# 16 KiB, never persisted.
MAX_STDERR_LINES = 50
MAX_STDERR_BYTES = 16 * 1024
# The on-demand recent screen of the agent's terminal: the tail of what it printed (the daemon keeps 32 KiB
# for a viewer that attaches), never persisted.
MAX_TERMINAL_BYTES = 32 * 1024

# Stable error codes (error frames, ProtocolError.code). Documented in docs/upstream-protocol.md.
ERROR_CODES: tuple[str, ...] = (
    "malformed_frame",  # not JSON, not an object, unknown type, or a field of the wrong type
    "truncated_frame",  # the stream ended in the middle of a frame
    "frame_too_large",  # a frame over MAX_FRAME_BYTES
    "unsupported_version",  # a frame whose `v` is not PROTOCOL_VERSION
    "contract_mismatch",  # hello with a contract_version this side cannot read
    "expected_hello",  # the first frame of a connection was not hello
    "duplicate_hello",  # a second hello on one connection
    "identity_mismatch",  # a snapshot, event or tool call for another identity than the hello's
    "snapshot_required",  # evidence before the connection's first snapshot
    "stale_execution",  # a newer execution of the session said hello; this one's frames are rejected
    "stale_instance",  # a newer instance of this execution said hello; this one's frames are rejected
    "reconnect",  # the instance that superseded this one disconnected: reconnect (hello, snapshot) to be current
    "forbidden_peer",  # the peer runs as another user
    "idle_timeout",  # nothing received for three heartbeat intervals
    "not_supported",  # a request this side does not implement (yet)
    "unknown_server",  # endpoint_test for a name that is not a stored server
    "unavailable",  # a request that cannot be answered now (no agent, not connected, shutting down)
    "internal",  # an unexpected failure; details only in the local log
)


def loggable_code(code: str) -> str:
    """A peer's error code for a log line: one of ERROR_CODES, else "unknown" (never the peer's text)."""
    return code if code in ERROR_CODES else "unknown"


class ProtocolError(Exception):
    """A frame that cannot be accepted. `code` is one of ERROR_CODES; str() is one line without values."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Frame(msgspec.Struct, kw_only=True, tag_field="type"):
    """Every frame: protocol version `v` and a `type` tag. Unknown frame-level fields are ignored."""

    v: int


# ---- daemon -> upstream ---------------------------------------------------------------------------


class HelloFrame(_Frame, tag="hello"):
    """First frame of every connection: who this daemon is (one daemon instance = one execution generation)."""

    identity: Identity
    daemon_version: str
    contract_version: int
    heartbeat_ms: int  # the daemon sends a heartbeat this often; silence for 3x this closes the connection
    max_frame_bytes: int = MAX_FRAME_BYTES


class SnapshotFrame(_Frame, tag="snapshot"):
    """The daemon's whole history. It replaces what the receiver holds for this execution."""

    history: AttachmentHistory
    reason: str = "connect"  # connect | resync (after drops) | state (attempt or row-level change) | final


class EvidenceFrame(_Frame, tag="evidence"):
    """One observation, folded with the reducer. `event.seq` is monotonic per instance (gaps allowed)."""

    event: EvidenceEvent


class AgentFrame(_Frame, tag="agent"):
    """The supervised agent's lifecycle (started, running, exited with a code or a signal). Replaces `agent`."""

    agent: AgentState


class ToolCallFrame(_Frame, tag="tool_call"):
    """A built-in MCP tool call tunnelled to the backend. Carries the tool's arguments (the backend runs it).

    `identity` is the daemon's own, injected by the daemon; the agent never supplies it. The receiver
    answers with a tool_result of the same `id`; after `sent_at + deadline_ms` nobody waits for it.
    """

    id: str
    op: str
    identity: Identity
    args: dict[str, Any]
    deadline_ms: int
    sent_at: datetime


class StderrResultFrame(_Frame, tag="stderr_result"):
    """Answer to stderr_read: the bounded window of recent agent output. With terminal_result, the only frames
    carrying agent output."""

    id: str
    view: StderrView


class TerminalResultFrame(_Frame, tag="terminal_result"):
    """Answer to terminal_read: the agent terminal's recent screen (at most MAX_TERMINAL_BYTES as printed),
    its size, and whether the agent is on a terminal at all. With stderr_result, the only frames carrying
    agent output."""

    id: str
    view: TerminalView


class EndpointTestResultFrame(_Frame, tag="endpoint_test_result"):
    """Answer to endpoint_test: reachability of one stored server (never changes its status)."""

    id: str
    server: str
    result: EndpointTestResult


# ---- upstream -> daemon ---------------------------------------------------------------------------


class ToolResultFrame(_Frame, tag="tool_result"):
    """Answer to tool_call: the op's result object, or one plain sentence shown to the agent as a tool error."""

    id: str
    ok: bool
    result: dict[str, Any] | None = None
    error: str | None = None


class StderrReadFrame(_Frame, tag="stderr_read"):
    """Ask for recent agent output; the daemon answers at most the smaller of 50 lines and 16 KiB."""

    id: str
    max_lines: int = MAX_STDERR_LINES
    max_bytes: int = MAX_STDERR_BYTES


class TerminalReadFrame(_Frame, tag="terminal_read"):
    """Ask for the agent terminal's recent screen; the daemon answers at most MAX_TERMINAL_BYTES (32 KiB).

    Sent only to a daemon whose agent state says `terminal`: a daemon without terminals does not know this
    frame (and would close the connection as malformed)."""

    id: str
    max_bytes: int = MAX_TERMINAL_BYTES


class EndpointTestFrame(_Frame, tag="endpoint_test"):
    """Ask the daemon to test one server by its stored name (never a URL or command from upstream)."""

    id: str
    server: str


# ---- both directions -------------------------------------------------------------------------------


class HeartbeatFrame(_Frame, tag="heartbeat"):
    """Liveness. The daemon sends one every heartbeat_ms; the upstream answers each with one."""


class ErrorFrame(_Frame, tag="error"):
    """A refusal. With `id` it answers that request; `fatal` means the sender closes the connection next."""

    code: str
    message: str
    id: str | None = None
    fatal: bool = False


DaemonFrame = Union[  # noqa: UP007 - msgspec needs a Union object for the decoder and the schema
    HelloFrame,
    SnapshotFrame,
    EvidenceFrame,
    AgentFrame,
    ToolCallFrame,
    StderrResultFrame,
    TerminalResultFrame,
    EndpointTestResultFrame,
    HeartbeatFrame,
    ErrorFrame,
]
UpstreamFrame = Union[  # noqa: UP007
    ToolResultFrame,
    StderrReadFrame,
    TerminalReadFrame,
    EndpointTestFrame,
    HeartbeatFrame,
    ErrorFrame,
]

_encoder = msgspec.json.Encoder()
# What _decode returns: the decoder's own frame union (every member a _Frame, so it carries `v`).
_F = TypeVar("_F", bound=_Frame)

_from_daemon: msgspec.json.Decoder[DaemonFrame] = msgspec.json.Decoder(DaemonFrame)
_from_upstream: msgspec.json.Decoder[UpstreamFrame] = msgspec.json.Decoder(UpstreamFrame)


class _Envelope(msgspec.Struct):
    v: Any = None


_envelope = msgspec.json.Decoder(_Envelope)
_MAX_SHOWN_VERSION = 2**31  # a longer number is content, not a version worth quoting


def frame(cls: type, **fields: Any) -> Any:
    """Build a frame of this protocol version: `frame(HelloFrame, identity=...)`."""
    return cls(v=PROTOCOL_VERSION, **fields)


def encode_frame(obj: Any) -> bytes:
    """One frame as a line (JSON plus newline). Raises ProtocolError(frame_too_large) over the limit."""
    data = _encoder.encode(obj)
    if len(data) > MAX_FRAME_BYTES:
        raise ProtocolError("frame_too_large", f"a {_tag(obj)} frame of {len(data)} bytes is over {MAX_FRAME_BYTES}")
    return data + b"\n"


def _tag(obj: Any) -> str:
    return type(obj).__struct_config__.tag if hasattr(type(obj), "__struct_config__") else type(obj).__name__


def _decode(decoder: msgspec.json.Decoder[_F], line: bytes, direction: str) -> _F:
    if len(line) > MAX_FRAME_BYTES:
        raise ProtocolError("frame_too_large", f"frame of {len(line)} bytes is over {MAX_FRAME_BYTES}")
    try:
        result = decoder.decode(line)
    except RecursionError:
        raise ProtocolError("malformed_frame", f"malformed {direction} frame: nested too deeply") from None
    except msgspec.DecodeError as exc:
        # A frame of another version may fail typed decoding; its version is the clearer error.
        try:
            version = _envelope.decode(line).v
        except (msgspec.DecodeError, RecursionError):
            version = None
        if isinstance(version, int) and version != PROTOCOL_VERSION:
            raise _version_error(version) from None
        raise ProtocolError("malformed_frame", f"malformed {direction} frame: {describe_decode_error(exc).text()}") from None
    if result.v != PROTOCOL_VERSION:
        raise _version_error(result.v)
    return result


def _version_error(version: int) -> ProtocolError:
    shown = f"protocol version {version}" if abs(version) < _MAX_SHOWN_VERSION else "an unknown protocol version"
    return ProtocolError("unsupported_version", f"frame has {shown}; this side speaks {PROTOCOL_VERSION}")


def decode_from_daemon(line: bytes) -> DaemonFrame:
    """A frame the daemon sent (what an upstream reads)."""
    return _decode(_from_daemon, line, "daemon")


def decode_from_upstream(line: bytes) -> UpstreamFrame:
    """A frame the upstream sent (what the daemon reads)."""
    return _decode(_from_upstream, line, "upstream")


def frames_schema() -> dict[str, Any]:
    """JSON Schema of every frame, both directions (`make schema` writes it to docs/upstream-protocol.schema.json)."""
    (daemon, upstream), defs = msgspec.json.schema_components(
        [DaemonFrame, UpstreamFrame], ref_template="#/$defs/{name}"
    )
    defs = dict(defs)
    defs["DaemonFrame"] = daemon
    defs["UpstreamFrame"] = upstream
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"agentctl upstream frames, protocol version {PROTOCOL_VERSION}",
        "description": "One JSON object per line; DaemonFrame flows daemon -> upstream, UpstreamFrame the other way.",
        "anyOf": [{"$ref": "#/$defs/DaemonFrame"}, {"$ref": "#/$defs/UpstreamFrame"}],
        "$defs": {name: defs[name] for name in sorted(defs)},
    }
