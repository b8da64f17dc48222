"""The frame codec: every frame round-trips, bad input is refused with a stable code and a value-free message."""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime

import pytest

from agentctl.evidence.contract.control import StderrView, TerminalView
from agentctl.evidence.contract.report import (
    CONTRACT_VERSION,
    AgentState,
    AttachmentHistory,
    EndpointTestResult,
    EvidenceEvent,
)
from agentctl.upstream import protocol as P
from agentctl.upstream.frames_io import STREAM_LIMIT, read_frame_line
from tests.upstream.support import identity

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
CANARY = "canary-7f3a9e"


def _daemon_frames():
    ident = identity()
    event = EvidenceEvent(kind="delivered", occurred_at=NOW, task_id="task-1", session_id="session-1",
                          execution_id="exec-1", instance_id="inst-1", attempt_id="att_1", seq=3, server="kandev")
    return [
        P.frame(P.HelloFrame, identity=ident, daemon_version="0.1.0", contract_version=CONTRACT_VERSION, heartbeat_ms=10_000),
        P.frame(P.SnapshotFrame, history=AttachmentHistory(version=1, identity=ident, updated_at=NOW), reason="resync"),
        P.frame(P.EvidenceFrame, event=event),
        P.frame(P.AgentFrame, agent=AgentState(protocol="acp", state="exited", exit_code=3)),
        P.frame(P.ToolCallFrame, id="tc_1", op="task.get", identity=ident, args={"a": [1, "x"]}, deadline_ms=5000, sent_at=NOW),
        P.frame(P.StderrResultFrame, id="rq_1", view=StderrView(warning="w", agent_state="running", lines=["l"],
                                                                truncated=False, total_bytes_seen=2, empty=False)),
        P.frame(P.TerminalResultFrame, id="rq_4", view=TerminalView(
            warning="w", agent_state="running", terminal=True, open=True, rows=24, cols=80,
            screen=b"\x1b[1mbold\x1b[0m \xe2\x94\x80 \r\n\x00\xff", truncated=False, total_bytes_seen=20)),
        P.frame(P.EndpointTestResultFrame, id="rq_2", server="kandev", result=EndpointTestResult(succeeded=True, tested_at=NOW)),
        P.frame(P.HeartbeatFrame),
        P.frame(P.ErrorFrame, code="not_supported", message="m", id="rq_3"),
    ]


def _upstream_frames():
    return [
        P.frame(P.ToolResultFrame, id="tc_1", ok=True, result={"task": {}}),
        P.frame(P.ToolResultFrame, id="tc_2", ok=False, error="nope"),
        P.frame(P.StderrReadFrame, id="rq_1"),
        P.frame(P.TerminalReadFrame, id="rq_4"),
        P.frame(P.EndpointTestFrame, id="rq_2", server="kandev"),
        P.frame(P.HeartbeatFrame),
        P.frame(P.ErrorFrame, code="stale_execution", message="m"),
    ]


@pytest.mark.parametrize("frame", _daemon_frames(), ids=lambda f: type(f).__name__)
def test_every_daemon_frame_round_trips_as_one_versioned_line(frame):
    line = P.encode_frame(frame)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert b'"v":1' in line
    assert P.decode_from_daemon(line[:-1]) == frame


@pytest.mark.parametrize("frame", _upstream_frames(), ids=lambda f: type(f).__name__)
def test_every_upstream_frame_round_trips(frame):
    assert P.decode_from_upstream(P.encode_frame(frame)[:-1]) == frame


@pytest.mark.parametrize(
    "raw",
    [
        b"not json " + CANARY.encode(),
        b"[1, 2]",
        b'{"v": 1}',
        b'{"v": 1, "type": "' + CANARY.encode() + b'"}',
        b'{"v": 1, "type": "hello", "identity": "' + CANARY.encode() + b'"}',
        b"",
    ],
)
def test_malformed_frames_are_refused_without_quoting_their_content(raw):
    with pytest.raises(P.ProtocolError) as info:
        P.decode_from_daemon(raw)
    assert info.value.code == "malformed_frame"
    assert CANARY not in str(info.value)
    assert "\n" not in str(info.value)


def test_a_frame_of_another_protocol_version_is_refused_as_such_even_when_its_shape_changed():
    for raw in (b'{"v": 2, "type": "heartbeat"}', b'{"v": 2, "type": "brand_new", "x": {}}'):
        with pytest.raises(P.ProtocolError) as info:
            P.decode_from_daemon(raw)
        assert info.value.code == "unsupported_version"
        assert "2" in str(info.value) and "1" in str(info.value)


def test_a_frame_from_the_wrong_direction_is_malformed():
    with pytest.raises(P.ProtocolError, match="malformed upstream frame"):
        P.decode_from_upstream(P.encode_frame(P.frame(P.HelloFrame, identity=identity(), daemon_version="x",
                                                       contract_version=1, heartbeat_ms=1))[:-1])


def test_unknown_frame_level_fields_are_ignored_for_forward_compatibility():
    assert P.decode_from_daemon(b'{"v": 1, "type": "heartbeat", "added_later": true}') == P.frame(P.HeartbeatFrame)


def test_the_one_mebibyte_limit_holds_on_both_encode_and_decode():
    big = P.frame(P.ToolCallFrame, id="x", op="task.message", identity=identity(),
                  args={"text": "a" * P.MAX_FRAME_BYTES}, deadline_ms=1, sent_at=NOW)
    with pytest.raises(P.ProtocolError) as info:
        P.encode_frame(big)
    assert info.value.code == "frame_too_large"
    with pytest.raises(P.ProtocolError) as info:
        P.decode_from_daemon(b" " * (P.MAX_FRAME_BYTES + 1))
    assert info.value.code == "frame_too_large"


async def _reader_for(payload: bytes) -> asyncio.StreamReader:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    reader, writer = await asyncio.open_unix_connection(sock=a, limit=STREAM_LIMIT)

    def feed() -> None:
        b.sendall(payload)
        b.close()

    await asyncio.to_thread(feed)
    return reader


async def test_the_line_reader_tells_a_clean_end_from_a_truncated_or_oversized_frame():
    reader = await _reader_for(b'{"v":1,"type":"heartbeat"}\n')
    assert await read_frame_line(reader) == b'{"v":1,"type":"heartbeat"}'
    assert await read_frame_line(reader) is None

    reader = await _reader_for(b'{"v":1,"type":"heart')
    with pytest.raises(P.ProtocolError) as info:
        await read_frame_line(reader)
    assert info.value.code == "truncated_frame"

    reader = await _reader_for(b"x" * (P.MAX_FRAME_BYTES + 10) + b"\n")
    with pytest.raises(P.ProtocolError) as info:
        await read_frame_line(reader)
    assert info.value.code == "frame_too_large"


def test_every_error_code_used_in_the_code_is_declared():
    import pathlib
    import re

    used = set()
    for path in pathlib.Path(P.__file__).parent.glob("*.py"):
        used |= set(re.findall(r'(?:ProtocolError|_refuse|_fatal|refuse|HubRequestError)\(\s*(?:conn,\s*)?"([a-z_]+)"', path.read_text()))
        used |= set(re.findall(r'code="([a-z_]+)"', path.read_text()))
    assert used, "the pattern found no codes"
    assert used <= set(P.ERROR_CODES), used - set(P.ERROR_CODES)
