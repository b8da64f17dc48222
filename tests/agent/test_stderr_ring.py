"""StderrRing: output bounds (50 lines, 16 KiB), bounded memory for endless lines, UTF-8 boundaries."""

from __future__ import annotations

import gc
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from agentctl.agent.stderr_ring import StderrRing

KIB = 1024
MIB = 1024 * 1024


def window_bytes(lines: list[str]) -> int:
    return sum(len(line.encode("utf-8")) for line in lines)


def test_empty_ring() -> None:
    window = StderrRing().snapshot()
    assert window.lines == []
    assert window.empty
    assert not window.truncated
    assert window.total_bytes_seen == 0


def test_lines_and_partial_line() -> None:
    ring = StderrRing()
    ring.feed(b"first\nsec")
    ring.feed(b"ond\nthird without newline")
    window = ring.snapshot()
    assert window.lines == ["first", "second", "third without newline"]
    assert not window.truncated
    assert not window.empty
    assert window.total_bytes_seen == len(b"first\nsecond\nthird without newline")


def test_keeps_last_50_lines() -> None:
    ring = StderrRing()
    for i in range(200):
        ring.feed(f"line {i}\n".encode())
    window = ring.snapshot()
    assert window.lines == [f"line {i}" for i in range(150, 200)]
    assert window.truncated


def test_many_lines_in_one_chunk() -> None:
    ring = StderrRing()
    ring.feed(b"".join(f"l{i}\n".encode() for i in range(10_000)) + b"tail")
    window = ring.snapshot()
    assert len(window.lines) == 50
    assert window.lines[-1] == "tail"
    assert window.lines[0] == "l9951"
    assert window.truncated


def test_newline_flood_is_cheap_and_bounded() -> None:
    ring = StderrRing()
    chunk = b"\n" * MIB
    for _ in range(20):
        ring.feed(chunk)
    window = ring.snapshot()
    assert window.lines == [""] * 50
    assert window.total_bytes_seen == 20 * MIB


def test_byte_bound_cuts_oldest_line_head() -> None:
    ring = StderrRing()
    for i in range(40):
        ring.feed(bytes([ord("a") + i % 26]) * 999 + b"\n")
    window = ring.snapshot()
    assert window_bytes(window.lines) <= 16 * KIB
    assert window.truncated
    assert window.lines[-1] == chr(ord("a") + 39 % 26) * 999
    # The oldest kept line is the tail of a longer line, filling the budget exactly.
    assert window_bytes(window.lines) == 16 * KIB
    assert len(window.lines[0]) < 999


def test_single_long_line_keeps_only_tail() -> None:
    ring = StderrRing()
    ring.feed(b"a" * 20_000 + b"b" * 100 + b"\n")
    window = ring.snapshot()
    assert len(window.lines) == 1
    assert window.lines[0].endswith("b" * 100)
    assert len(window.lines[0]) == 16 * KIB
    assert window.truncated


def test_ten_megabyte_line_without_newline_in_chunks_stays_bounded() -> None:
    ring = StderrRing()
    chunk = b"y" * (64 * KIB)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(10 * MIB // len(chunk)):
            ring.feed(chunk)
            assert ring.stored_bytes <= 16 * KIB
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - base < 256 * KIB
    window = ring.snapshot()
    assert window.lines == ["y" * (16 * KIB)]
    assert window.truncated
    assert window.total_bytes_seen == 10 * MIB


def test_ten_megabyte_line_in_one_chunk_is_not_copied() -> None:
    ring = StderrRing()
    chunk = b"z" * (10 * MIB)
    mixed = chunk + b"\n" + chunk
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        ring.feed(chunk)
        ring.feed(mixed)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # A copy of either argument would show as megabytes here.
    assert peak - base < 256 * KIB
    assert current - base < 64 * KIB
    assert ring.stored_bytes <= 16 * KIB
    window = ring.snapshot()
    assert window_bytes(window.lines) <= 16 * KIB
    # The newest 16 KiB are all from the unfinished second line: the finished one is out of the window.
    assert window.lines == ["z" * (16 * KIB)]
    assert window.total_bytes_seen == 30 * MIB + 1


def test_multibyte_character_split_across_chunks() -> None:
    ring = StderrRing()
    data = "héllo €uro 😀\n".encode()
    for i in range(len(data)):
        ring.feed(data[i : i + 1])
    assert ring.snapshot().lines == ["héllo €uro 😀"]


def test_unfinished_character_held_back_until_eof() -> None:
    ring = StderrRing()
    euro = "€".encode()
    ring.feed(b"price " + euro[:2])
    assert ring.snapshot().lines == ["price "]
    ring.feed(euro[2:])
    assert ring.snapshot().lines == ["price €"]
    ring.feed(euro[:1])
    ring.feed_eof()
    assert ring.snapshot().lines == ["price €\ufffd"]


def test_head_cut_lands_on_character_boundary() -> None:
    ring = StderrRing()
    ring.feed(("€" * 10_000 + "\n").encode())
    (line,) = ring.snapshot().lines
    assert set(line) == {"€"}
    assert len(line.encode()) <= 16 * KIB
    ring2 = StderrRing()
    ring2.feed(("€" * 10_000).encode())  # partial line, no newline
    (line2,) = ring2.snapshot().lines
    assert set(line2) == {"€"}


def test_invalid_bytes_replaced_and_bound_counts_replacements() -> None:
    ring = StderrRing()
    ring.feed(b"\xff" * (16 * KIB) + b"\n")
    window = ring.snapshot()
    # Each invalid byte becomes U+FFFD (3 bytes): the handed-out text still fits 16 KiB.
    assert window_bytes(window.lines) <= 16 * KIB
    assert set(window.lines[0]) == {"\ufffd"}
    assert window.truncated


def test_custom_bounds() -> None:
    ring = StderrRing(max_lines=3, max_bytes=10)
    ring.feed(b"aaaa\nbbbb\ncccc\ndddd\n")
    window = ring.snapshot()
    assert window_bytes(window.lines) <= 10
    assert window.lines[-1] == "dddd"
    assert len(window.lines) <= 3


text_chunks = st.lists(
    st.text(alphabet=st.sampled_from(list("ab\n€😀é")), max_size=300).map(lambda s: s.encode()),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(chunks=text_chunks, max_lines=st.integers(1, 8), max_bytes=st.integers(4, 64))
def test_bounds_hold_and_chunking_does_not_matter(chunks: list[bytes], max_lines: int, max_bytes: int) -> None:
    stream = b"".join(chunks)
    ring = StderrRing(max_lines=max_lines, max_bytes=max_bytes)
    for chunk in chunks:
        ring.feed(chunk)
        assert ring.stored_bytes <= max_bytes
    ring.feed_eof()
    whole = StderrRing(max_lines=max_lines, max_bytes=max_bytes)
    whole.feed(stream)
    whole.feed_eof()
    window = ring.snapshot()
    assert window == whole.snapshot()
    assert len(window.lines) <= max_lines
    assert window_bytes(window.lines) <= max_bytes
    assert window.total_bytes_seen == len(stream)
    assert "\ufffd" not in "".join(window.lines)
    # Whatever is shown is the end of the stream.
    text = stream.decode()
    shown = "\n".join(window.lines) + ("\n" if text.endswith("\n") else "")
    assert text.endswith(shown)
    if len(stream) <= max_bytes and text.count("\n") < max_lines:
        expected = text.split("\n")
        if expected and expected[-1] == "":
            expected.pop()
        assert window.lines == expected
        assert not window.truncated


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.binary(max_size=200), max_size=30), max_lines=st.integers(1, 8), max_bytes=st.integers(1, 64))
def test_bounds_hold_for_arbitrary_bytes(chunks: list[bytes], max_lines: int, max_bytes: int) -> None:
    ring = StderrRing(max_lines=max_lines, max_bytes=max_bytes)
    for chunk in chunks:
        ring.feed(chunk)
        assert ring.stored_bytes <= max_bytes
        window = ring.snapshot()
        assert len(window.lines) <= max_lines
        assert window_bytes(window.lines) <= max_bytes
    assert ring.snapshot().total_bytes_seen == sum(map(len, chunks))
