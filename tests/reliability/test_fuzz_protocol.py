"""Fuzzing the untrusted line decoders: upstream frames (agentctl.upstream.protocol) and agent stdout
(agentctl.agent.transports). Any input is a frame or the protocol's error, never another exception, and an
error's text is one short line that quotes nothing from the input."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC
from typing import Any

import msgspec
from hypothesis import example, given
from hypothesis import strategies as st

from agentctl.agent.transports import AgentStdioTransport
from agentctl.evidence.contract.control import StderrView
from agentctl.evidence.contract.report import (
    EVIDENCE_KINDS,
    AgentState,
    AttachmentHistory,
    EndpointTestResult,
    EvidenceEvent,
    Identity,
)
from agentctl.upstream import protocol as P
from agentctl.upstream.frames_io import STREAM_LIMIT, read_frame_line
from tests.reliability.strategies import (
    FUZZ,
    MARK,
    assert_one_line_without_mark,
    canaries,
    json_values,
    mangled,
    mutated,
    nested,
)

# Version numbers are the one thing an error may echo; anything longer than this quotes content.
MAX_ERROR_CHARS = 300

# ---- valid frames -------------------------------------------------------------------------------------

text = st.text(max_size=16) | canaries
when = st.datetimes(timezones=st.just(UTC))
int64 = st.integers(-(2**63), 2**63 - 1)
plain_json = st.recursive(
    st.none() | st.booleans() | int64 | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
identities = st.builds(Identity, task_id=text, session_id=text, execution_id=text, instance_id=text,
                       agent_id=text, agent_profile_id=text)
events = st.builds(
    EvidenceEvent,
    kind=st.sampled_from(EVIDENCE_KINDS),
    occurred_at=when,
    task_id=text, session_id=text, execution_id=text, instance_id=text, attempt_id=text,
    seq=st.integers(0, 2**63 - 1),
    server=st.none() | text,
    summary=st.none() | text,
    tool_count=st.none() | st.integers(0, 2**31),
    outcome=st.none() | st.sampled_from(["ok", "error"]),
)
daemon_frames = st.one_of(
    st.builds(lambda i, v, c, h: P.frame(P.HelloFrame, identity=i, daemon_version=v, contract_version=c,
                                         heartbeat_ms=h), identities, text, int64, int64),
    st.builds(lambda i, t, r: P.frame(P.SnapshotFrame, history=AttachmentHistory(version=1, identity=i, updated_at=t),
                                      reason=r), identities, when, text),
    st.builds(lambda e: P.frame(P.EvidenceFrame, event=e), events),
    st.builds(lambda s, c: P.frame(P.AgentFrame, agent=AgentState(protocol="acp", state=s, exit_code=c)),
              st.sampled_from(["starting", "running", "exited"]), st.none() | int64),
    st.builds(lambda i, o, ident, a, d, t: P.frame(P.ToolCallFrame, id=i, op=o, identity=ident, args=a,
                                                   deadline_ms=d, sent_at=t),
              text, text, identities, st.dictionaries(text, plain_json, max_size=4), int64, when),
    st.builds(lambda i, lines: P.frame(P.StderrResultFrame, id=i, view=StderrView(
        warning="w", agent_state=None, lines=lines, truncated=False, total_bytes_seen=1, empty=False)),
        text, st.lists(text, max_size=3)),
    st.builds(lambda i, s, ok, t: P.frame(P.EndpointTestResultFrame, id=i, server=s,
                                          result=EndpointTestResult(succeeded=ok, tested_at=t)),
              text, text, st.booleans(), when),
)
both_ways = st.one_of(
    st.just(P.frame(P.HeartbeatFrame)),
    st.builds(lambda c, m, i, f: P.frame(P.ErrorFrame, code=c, message=m, id=i, fatal=f),
              text, text, st.none() | text, st.booleans()),
)
upstream_frames = st.one_of(
    st.builds(lambda i, ok, r, e: P.frame(P.ToolResultFrame, id=i, ok=ok, result=r, error=e),
              text, st.booleans(), st.none() | st.dictionaries(text, plain_json, max_size=4), st.none() | text),
    st.builds(lambda i, n, b: P.frame(P.StderrReadFrame, id=i, max_lines=n, max_bytes=b), text, int64, int64),
    st.builds(lambda i, s: P.frame(P.EndpointTestFrame, id=i, server=s), text, text),
)
DIRECTIONS = {"daemon": (P.decode_from_daemon, daemon_frames | both_ways),
              "upstream": (P.decode_from_upstream, upstream_frames | both_ways)}


@FUZZ
@given(data=st.data(), direction=st.sampled_from(sorted(DIRECTIONS)))
def test_every_generated_valid_frame_round_trips_as_one_line(data: st.DataObject, direction: str) -> None:
    decode, frames = DIRECTIONS[direction]
    frame = data.draw(frames)
    line = P.encode_frame(frame)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line[:-1]) == frame


# ---- anything else ------------------------------------------------------------------------------------


def _decode_or_error(decode: Any, line: bytes) -> Any:
    try:
        frame = decode(line)
    except P.ProtocolError as exc:
        assert exc.code in P.ERROR_CODES
        message = str(exc)
        assert_one_line_without_mark(message)
        assert len(message) <= MAX_ERROR_CHARS, message
        return exc
    assert frame.v == P.PROTOCOL_VERSION
    return frame


frame_values = st.one_of(
    json_values,
    canaries,
    st.integers(1, 60).map(nested),
    st.sampled_from(["hello", "snapshot", "evidence", "tool_result", "heartbeat", "error", 1, 2, "1", -1]),
    st.integers().map(lambda n: n * 10**30),
)


def _as_builtins(frames: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return frames.map(lambda f: json.loads(P.encode_frame(f)))


@FUZZ
@given(data=st.data(), direction=st.sampled_from(sorted(DIRECTIONS)))
def test_a_frame_with_mutated_fields_decodes_or_is_refused_without_quoting_a_value(
    data: st.DataObject, direction: str
) -> None:
    decode, frames = DIRECTIONS[direction]
    doc = data.draw(mutated(_as_builtins(frames), frame_values))
    _decode_or_error(decode, json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass"))


DEEP = b'{"v":1,"type":"heartbeat","x":' + b"[" * 5000 + b"]" * 5000 + b"}"
MIXED_QUOTES = b'{"v":1,"type":"a\'b\\"' + MARK.encode() + b'\'"}'


@FUZZ
@given(raw=st.binary(max_size=300) | mangled(_as_builtins(daemon_frames | upstream_frames).map(
    lambda d: json.dumps(d).encode())), direction=st.sampled_from(sorted(DIRECTIONS)))
@example(raw=DEEP, direction="daemon").via("deep nesting")
@example(raw=b"[" * 100_000, direction="upstream").via("deep unterminated nesting")
@example(raw=MIXED_QUOTES, direction="daemon").via("both quote characters in a value")
@example(raw=b'{"v":1,"type":"\'' + MARK.encode() + b'"}', direction="daemon").via("unescaped quote in a tag")
@example(raw=b'{"v":1,"type":"x - at `$' + MARK.encode() + b'`"}', direction="upstream").via("imitated path")
@example(raw=b'{"v":1,"type":"hello","identity":{"bo\\ngus":1}}', direction="daemon").via("newline key")
@example(raw=b'{"v":' + b"9" * 1000 + b',"type":"heartbeat"}', direction="upstream").via("huge version")
@example(raw=b'{"v":1e400,"type":"heartbeat"}', direction="daemon").via("version out of range")
def test_any_bytes_are_a_frame_or_a_short_one_line_protocol_error(raw: bytes, direction: str) -> None:
    _decode_or_error(DIRECTIONS[direction][0], raw)


@FUZZ
@given(frame=daemon_frames, pad=st.sampled_from([-1, 0, 1, 2]))
def test_the_one_mebibyte_cap_is_exact_for_any_frame(frame: Any, pad: int) -> None:
    body = P.encode_frame(frame)[:-1]
    # JSON allows whitespace after the object: grow a valid frame to just below, at and above the cap.
    line = body + b" " * (P.MAX_FRAME_BYTES - len(body) + pad)
    outcome = _decode_or_error(P.decode_from_daemon, line)
    if pad <= 0:
        assert outcome == frame
    else:
        assert isinstance(outcome, P.ProtocolError) and outcome.code == "frame_too_large"


# ---- the stream: lines, truncation, oversize ------------------------------------------------------------

lines = st.one_of(
    daemon_frames.map(lambda f: ("frame", P.encode_frame(f)[:-1])),
    st.binary(max_size=40).filter(lambda b: b"\n" not in b).map(lambda b: ("junk", b)),
    st.sampled_from([P.MAX_FRAME_BYTES + 1, P.MAX_FRAME_BYTES + 2, 3 * STREAM_LIMIT]).map(
        lambda n: ("big", b"x" * n)),
)


async def _pipeline(chunks: list[bytes]) -> list[Any]:
    """What the hub and the publisher do with a connection: read a line, decode it, stop at the first error."""
    reader = asyncio.StreamReader(limit=STREAM_LIMIT)
    for chunk in chunks:
        reader.feed_data(chunk)
    reader.feed_eof()
    seen: list[Any] = []
    while True:
        try:
            raw = await read_frame_line(reader)
            if raw is None:
                return seen
            seen.append(_decode_or_error(P.decode_from_daemon, raw))
        except P.ProtocolError as exc:
            assert_one_line_without_mark(str(exc))
            seen.append(exc)
        if isinstance(seen[-1], P.ProtocolError):
            return seen


@FUZZ
@given(sent=st.lists(lines, max_size=6), tail=st.binary(max_size=20).filter(lambda b: b"\n" not in b))
def test_a_stream_of_frames_yields_each_frame_in_order_until_the_first_bad_line(
    sent: list[tuple[str, bytes]], tail: bytes
) -> None:
    seen = asyncio.run(_pipeline([line + b"\n" for _, line in sent] + [tail]))
    for (kind, line), got in zip(sent, seen):
        if kind == "frame":
            assert got == P.decode_from_daemon(line)
        elif kind == "big":
            assert isinstance(got, P.ProtocolError) and got.code == "frame_too_large"
    if len(seen) > len(sent):  # every line was read: what is left is the tail
        assert tail and isinstance(seen[-1], P.ProtocolError) and seen[-1].code == "truncated_frame"
    elif not any(isinstance(s, P.ProtocolError) for s in seen):
        assert not tail and len(seen) == len(sent)


# ---- agent stdout (agentctl.agent.transports) ------------------------------------------------------------

AGENT_CAP = 256  # a small cap so that over-long lines are cheap to generate; the logic is the same


def _is_message(line: bytes) -> bool:
    """The JSON-RPC framing rules as the oracle: a JSON object; `id` a string, number or null; `method` a string."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return False
    if not isinstance(value, dict):
        return False
    if "id" in value and (isinstance(value["id"], bool) or not isinstance(value["id"], (str, int, float, type(None)))):
        return False
    return "method" not in value or isinstance(value["method"], str)


agent_lines = st.one_of(
    st.builds(lambda i, m, p: json.dumps({"jsonrpc": "2.0", "id": i, "method": m, "params": p}).encode(),
              st.none() | st.integers() | text, text, plain_json),
    plain_json.map(lambda v: json.dumps(v).encode()),
    mutated(st.just({"jsonrpc": "2.0", "id": 1, "method": "session/update", "params": {"x": "y"}}),
            frame_values).map(lambda d: json.dumps(d, allow_nan=True).encode("utf-8", "surrogatepass")),
    st.binary(max_size=60),
    st.integers(1, 3000).map(lambda depth: b"[" * depth),
    st.integers(AGENT_CAP - 2, AGENT_CAP + 40).map(lambda n: b'{"id":1,"method":"m","p":"' + b"x" * n + b'"}'),
    st.sampled_from([b"", b"   ", b"\r", b"\t \x0b"]),
).map(lambda b: b.replace(b"\n", b" "))


@FUZZ
@given(sent=st.lists(agent_lines, max_size=12), terminated=st.booleans(), limit=st.sampled_from([16, 64, 4096]))
def test_agent_stdout_yields_exactly_the_well_framed_messages_and_counts_every_other_line(
    sent: list[bytes], terminated: bool, limit: int
) -> None:
    async def run() -> tuple[list[Any], AgentStdioTransport]:
        # A real StreamReader with a small buffer limit, so long lines take the LimitOverrunError path.
        reader = asyncio.StreamReader(limit=limit)
        reader.feed_data(b"\n".join(sent) + (b"\n" if terminated else b""))
        reader.feed_eof()
        transport = AgentStdioTransport(reader, None, max_frame=AGENT_CAP)  # type: ignore[arg-type]  # never writes
        received = []
        while (message := await transport.receive()) is not None:
            received.append(message)
        assert await transport.receive() is None and transport.eof
        return received, transport

    received, transport = asyncio.run(run())
    counted = [line for line in sent if line.strip()]
    # A line's size includes its newline (the last line has none when the stream ends without one).
    sizes = [len(line) + (1 if terminated or n < len(sent) - 1 else 0) for n, line in enumerate(sent)]
    fits = {n for n, size in enumerate(sizes) if size <= AGENT_CAP}
    expected = [json.loads(line) for n, line in enumerate(sent) if n in fits and line.strip() and _is_message(line)]
    assert msgspec.json.encode(received) == msgspec.json.encode(expected)
    assert transport.skipped_lines == len(counted) - len(expected)
