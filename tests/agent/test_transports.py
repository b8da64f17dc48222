"""AgentStdioTransport: the agent's stdout is untrusted input; frames are bounded, junk is counted, EOF is news."""

from __future__ import annotations

import asyncio
import json
import os
import tracemalloc

import pytest

from agentctl.agent.transports import AgentStdioTransport

MIB = 1024 * 1024
FRAME = {"jsonrpc": "2.0", "id": 7, "result": {"ok": True}}


class _NullWriter:
    """Receive-only tests never write; a StreamWriter needs a transport, so this stands in for stdin."""

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def _reader(limit: int = 64 * 1024) -> asyncio.StreamReader:
    return asyncio.StreamReader(limit=limit)


def _line(obj: object) -> bytes:
    return json.dumps(obj).encode() + b"\n"


async def test_json_values_that_are_not_objects_and_non_json_lines_are_skipped_and_counted() -> None:
    reader = _reader()
    transport = AgentStdioTransport(reader, _NullWriter())  # type: ignore[arg-type]
    junk = [
        b"[1, 2]\n",
        b'"a string"\n',
        b"42\n",
        b"null\n",
        b"not json at all\n",
        b"{broken json\n",
        b"\xff\xfe binary \x01\n",
        b"[" * 100_000 + b"\n",  # deeper than the JSON parser recurses: must be skipped, not crash the loop
        b"\n",  # blank lines are not frames and not junk
        b"   \r\n",
    ]
    for chunk in junk:
        reader.feed_data(chunk)
    reader.feed_data(_line(FRAME))
    assert await asyncio.wait_for(transport.receive(), 5) == FRAME
    assert transport.skipped_lines == 8


async def test_an_oversized_line_is_dropped_without_accumulating_and_the_next_frame_arrives() -> None:
    reader = _reader(limit=64 * 1024)
    transport = AgentStdioTransport(reader, _NullWriter(), max_frame=1 * MIB)  # type: ignore[arg-type]
    chunk = b"x" * (256 * 1024)
    total = 40 * MIB

    async def produce() -> None:
        sent = 0
        while sent < total:
            reader.feed_data(chunk)
            sent += len(chunk)
            await asyncio.sleep(0)  # let the transport drain, as a pipe with flow control would
        reader.feed_data(b"\n" + _line(FRAME))

    tracemalloc.start()
    try:
        producer = asyncio.create_task(produce())
        message = await asyncio.wait_for(transport.receive(), 30)
        await producer
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert message == FRAME
    assert transport.skipped_lines == 1
    assert peak < 4 * MIB, f"a 40 MiB line cost {peak / MIB:.1f} MiB: it was accumulated"


async def test_a_frame_at_the_cap_is_accepted_and_one_byte_more_is_dropped() -> None:
    reader = _reader(limit=16 * 1024)
    small = {"jsonrpc": "2.0", "method": "x", "params": {"pad": ""}}
    base = len(_line(small))
    cap = 200_000
    fits = {**small, "params": {"pad": "p" * (cap - base)}}
    too_big = {**small, "params": {"pad": "p" * (cap - base + 1)}}
    assert len(_line(fits)) == cap
    transport = AgentStdioTransport(reader, _NullWriter(), max_frame=cap)  # type: ignore[arg-type]
    reader.feed_data(_line(too_big) + _line(fits))
    assert await asyncio.wait_for(transport.receive(), 5) == fits
    assert transport.skipped_lines == 1


async def test_eof_returns_none_once_marks_eof_and_keeps_a_final_unterminated_frame() -> None:
    reader = _reader()
    eofs: list[int] = []
    transport = AgentStdioTransport(reader, _NullWriter(), on_eof=lambda: eofs.append(1))  # type: ignore[arg-type]
    reader.feed_data(_line(FRAME) + json.dumps({"id": 8, "result": None}).encode())  # no trailing newline
    reader.feed_eof()
    assert await transport.receive() == FRAME
    assert await transport.receive() == {"id": 8, "result": None}
    assert not transport.eof
    assert await transport.receive() is None
    assert await transport.receive() is None
    assert transport.eof and eofs == [1]


async def test_an_oversized_line_cut_off_by_eof_is_still_counted() -> None:
    reader = _reader(limit=1024)
    transport = AgentStdioTransport(reader, _NullWriter(), max_frame=4096)  # type: ignore[arg-type]
    reader.feed_data(b"y" * 10_000)
    reader.feed_eof()
    assert await transport.receive() is None
    assert transport.skipped_lines == 1


async def test_send_writes_one_compact_line_reports_it_sent_and_refuses_after_close() -> None:
    loop = asyncio.get_running_loop()
    rfd, wfd = os.pipe()
    wpipe = os.fdopen(wfd, "wb", buffering=0)
    transport_w, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, wpipe)
    writer = asyncio.StreamWriter(transport_w, protocol, None, loop)
    sent: list[dict] = []
    transport = AgentStdioTransport(_reader(), writer, on_sent=sent.append)
    try:
        message = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "text": "é\n"}}
        await transport.send(message)
        data = os.read(rfd, 65536)
        assert data.endswith(b"\n") and data.count(b"\n") == 1, "one frame is one line (newlines inside are escaped)"
        assert json.loads(data) == message
        assert sent == [message]
        await transport.close()
        assert transport.closed
        with pytest.raises(ConnectionError):
            await transport.send(message)
        assert sent == [message], "a frame that was not written is not reported as sent"
    finally:
        os.close(rfd)
        transport_w.close()
