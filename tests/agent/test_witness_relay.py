"""The witness's byte relay in-process, on real pipes: the compiled copy (agentctl/agent/witness_copy.c) and the Relay
both its forms drive. The whole witness process is tested in test_witness_process.py, under both relays."""

from __future__ import annotations

import json
import os
import shutil
import threading

import pytest

from agentctl.agent import witness_relay
from agentctl.agent.witness_relay import Relay
from tests.conftest import poll

native = witness_relay.witness_copy  # the compiled module, or None where it was not built
needs_compiled = pytest.mark.skipif(not witness_relay.compiled(), reason="built without a C compiler")


def test_the_package_built_here_carries_the_compiled_relay_where_a_c_compiler_is():
    if shutil.which("cc") is None:
        pytest.skip("no C compiler here: the package was built without its compiled relay")
    assert witness_relay.compiled()


def _read_all(fd: int) -> bytes:
    out = bytearray()
    while chunk := os.read(fd, 1 << 16):
        out += chunk
    return bytes(out)


AGENT, SERVER = 0, 1  # agentctl/agent/witness_copy.c's sides


@needs_compiled
@pytest.mark.parametrize("side", [AGENT, SERVER], ids=["agent side", "server side"])
def test_the_compiled_copy_sends_every_byte_to_both_destination_and_tap_in_order(side):
    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    tap_r, tap_w = os.pipe()
    data = os.urandom(3 * 1024 * 1024 + 17)
    got: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda k=k, fd=fd: got.__setitem__(k, _read_all(fd)))
               for k, fd in (("dst", dst_r), ("tap", tap_r))]
    for t in readers:
        t.start()
    copier = threading.Thread(target=lambda: got.__setitem__("end", native.copy(
        src_r, dst_w, tap_w, side, 1 << 16, native.gate())))
    copier.start()
    os.write(src_w, data[:10])
    with os.fdopen(src_w, "wb") as w:
        w.write(data[10:])
    copier.join(30)
    os.close(dst_w)
    os.close(tap_w)
    for t in readers:
        t.join(30)
    assert got["end"] == (0, True)
    assert got["dst"] == data and got["tap"] == data


@needs_compiled
def test_a_tap_whose_reader_is_gone_is_dropped_and_the_copy_goes_on_to_the_end():
    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    tap_r, tap_w = os.pipe()
    os.close(tap_r)  # the witness's reader died: the tap refuses every write (EPIPE; Python ignores SIGPIPE)
    os.write(src_w, b"x" * 1000)
    os.close(src_w)
    assert native.copy(src_r, dst_w, tap_w, AGENT, 4096, native.gate()) == (0, False)
    os.close(dst_w)
    assert _read_all(dst_r) == b"x" * 1000


@needs_compiled
def test_the_compiled_copy_ends_with_2_when_the_destination_refuses_and_refuses_a_silly_chunk():
    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    os.close(dst_r)
    os.write(src_w, b"lost\n")
    gate = native.gate()
    assert native.copy(src_r, dst_w, -1, SERVER, 4096, gate) == (2, True)
    with pytest.raises(ValueError, match="chunk"):
        native.copy(src_r, dst_w, -1, SERVER, 0, gate)
    with pytest.raises(ValueError, match="side"):
        native.copy(src_r, dst_w, -1, 7, 4096, gate)
    with pytest.raises(ValueError):
        native.copy(src_r, dst_w, -1, SERVER, 4096, object())  # not a gate


@pytest.mark.parametrize("use_compiled", [True, False], ids=["compiled", "python"])
def test_every_answer_is_handed_on_after_the_request_it_answers_and_no_byte_changes(use_compiled):
    """A server (this test's thread) that answers each request the instant it reads it: the reader of the
    answers can never see one before the witness noted its request, whichever relay runs."""
    if use_compiled and not witness_relay.compiled():
        pytest.skip("built without a C compiler")
    agent_r, agent_w = os.pipe()  # agent -> witness
    server_in_r, server_in_w = os.pipe()  # witness -> server
    server_out_r, server_out_w = os.pipe()  # server -> witness
    back_r, back_w = os.pipe()  # witness -> agent
    order: list[tuple[str, int]] = []
    pending: set[int] = set()
    lock = threading.Lock()
    done = threading.Event()

    def from_agent(line: bytes) -> None:
        with lock:
            rid = json.loads(line)["id"]
            pending.add(rid)
            order.append(("request", rid))

    def from_server(line: bytes) -> None:
        with lock:
            rid = json.loads(line)["id"]
            pending.discard(rid)
            order.append(("answer", rid))

    relay = Relay(from_agent, from_server, lambda: bool(pending), done.set, use_compiled=use_compiled)
    relay.start(agent_r, server_in_w, server_out_r, back_w)
    count = 300
    sent = b"".join(json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call"}).encode() + b"\n"
                    for i in range(count))

    def server() -> None:
        with os.fdopen(server_in_r, "rb") as requests, os.fdopen(server_out_w, "wb", buffering=0) as answers:
            for line in requests:
                rid = json.loads(line)["id"]
                answers.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": {}}).encode() + b"\n")

    threading.Thread(target=server, daemon=True).start()
    received = bytearray()
    for i, line in enumerate(sent.splitlines(keepends=True)):  # one at a time, as an agent awaiting each answer
        os.write(agent_w, line)
        while received.count(b"\n") <= i:
            received += os.read(back_r, 1 << 16)
    os.close(agent_w)
    assert poll(done.is_set, timeout=10), "the agent's side ended"
    relay.join(10)
    assert bytes(received) == b"".join(
        json.dumps({"jsonrpc": "2.0", "id": i, "result": {}}).encode() + b"\n" for i in range(count))
    assert poll(lambda: len(order) == 2 * count, timeout=10)
    seen: set[int] = set()
    for kind, rid in order:
        if kind == "request":
            seen.add(rid)
        else:
            assert rid in seen, f"answer {rid} handed on before its request"


@pytest.mark.parametrize("use_compiled", [True, False], ids=["compiled", "python"])
def test_an_answer_that_ends_a_megabyte_of_unread_bulk_is_still_read_every_time(use_compiled):
    """The server streams a part line while nothing is awaited (the server's side goes untapped, or spliced),
    then gets a request, ends its line and answers: each answer is read, every byte arrives."""
    if use_compiled and not witness_relay.compiled():
        pytest.skip("built without a C compiler")
    agent_r, agent_w = os.pipe()
    server_in_r, server_in_w = os.pipe()
    server_out_r, server_out_w = os.pipe()
    back_r, back_w = os.pipe()
    pending: set[int] = set()
    answered: list[int] = []

    def from_agent(line: bytes) -> None:
        pending.add(json.loads(line)["id"])

    def from_server(line: bytes) -> None:
        rid = json.loads(line)["id"]
        if rid in pending:
            pending.discard(rid)
            answered.append(rid)

    relay = Relay(from_agent, from_server, lambda: bool(pending), lambda: None, use_compiled=use_compiled)
    relay.start(agent_r, server_in_w, server_out_r, back_w)
    bulk = b"x" * (1 << 20)  # a line under way, no newline yet
    count = 20

    def server() -> None:
        with os.fdopen(server_in_r, "rb") as requests, os.fdopen(server_out_w, "wb", buffering=0) as out:
            out.write(bulk)
            for line in requests:
                rid = json.loads(line)["id"]
                out.write(b"\n" + json.dumps({"jsonrpc": "2.0", "id": rid, "result": {}}).encode() + b"\n" + bulk)

    threading.Thread(target=server, daemon=True).start()
    received = bytearray()
    start = 0
    for i in range(count):
        os.write(agent_w, json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call"}).encode() + b"\n")
        answer = json.dumps({"jsonrpc": "2.0", "id": i, "result": {}}).encode()
        while (found := received.find(answer, start)) < 0:
            received += os.read(back_r, 1 << 20)
        start = found + len(answer)
    tail = threading.Thread(target=lambda: received.extend(_read_all(back_r)))
    tail.start()
    os.close(agent_w)  # the server's stdin ends, so does the server: the relay's server side ends
    relay.join(10)
    os.close(back_w)  # the witness's stdout, which its exit would close
    tail.join(10)
    expected = bulk + b"".join(b"\n" + json.dumps({"jsonrpc": "2.0", "id": i, "result": {}}).encode() + b"\n" + bulk
                               for i in range(count))
    assert len(received) == len(expected) and bytes(received) == expected
    assert poll(lambda: len(answered) == count, timeout=10, what="every answer read")
    assert answered == list(range(count))
