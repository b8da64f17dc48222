"""The witness's byte relay in-process, on real pipes: the compiled copy (agentctl/agent/witness_copy.c) and the Relay
both its forms drive. The whole witness process is tested in test_witness_process.py, under both relays."""

from __future__ import annotations

import json
import os
import shutil
import struct
import threading

import pytest

from agentctl.agent import witness_relay
from agentctl.agent.witness_relay import Relay
from agentctl.agent.witness_scan import Envelopes, Observation
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
FRAME = struct.Struct("=QII")  # its server-side tap frame header: horizon, length, flags


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
    assert got["dst"] == data
    if side == AGENT:
        assert got["tap"] == data
    else:  # in frames, each with the horizon (no agent bytes in this gate: 0) and no flag
        payload, tap = bytearray(), got["tap"]
        while tap:
            horizon, length, flags = FRAME.unpack_from(tap)
            assert (horizon, flags) == (0, 0)
            payload += tap[FRAME.size:FRAME.size + length]
            tap = tap[FRAME.size + length:]
        assert payload == data


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


def _link(use_compiled: bool, from_agent, from_server, waiting, agent_done=lambda: None):
    """A Relay between real pipes, started: it and the test's ends (the agent's write and read ends, the
    server's read and write ends, and the witness's stdout, which the witness's exit would close)."""
    if use_compiled and not witness_relay.compiled():
        pytest.skip("built without a C compiler")
    agent_r, agent_w = os.pipe()  # agent -> witness
    server_in_r, server_in_w = os.pipe()  # witness -> server
    server_out_r, server_out_w = os.pipe()  # server -> witness
    back_r, back_w = os.pipe()  # witness -> agent
    relay = Relay(from_agent, from_server, waiting, agent_done, use_compiled=use_compiled)
    relay.start(agent_r, server_in_w, server_out_r, back_w)
    return relay, (agent_w, server_in_r, server_out_w, back_r, back_w)


@pytest.mark.parametrize("use_compiled", [True, False], ids=["compiled", "python"])
def test_every_answer_is_handed_on_after_the_request_it_answers_and_no_byte_changes(use_compiled):
    """A server (this test's thread) that answers each request the instant it reads it: the reader of the
    answers can never see one before the witness noted its request, whichever relay runs."""
    order: list[tuple[str, int]] = []
    pending: set[int] = set()
    lock = threading.Lock()
    done = threading.Event()

    def from_agent(line: bytes, _end: int) -> None:
        with lock:
            rid = json.loads(line)["id"]
            pending.add(rid)
            order.append(("request", rid))

    def from_server(line: bytes, _horizon: int) -> None:
        with lock:
            rid = json.loads(line)["id"]
            pending.discard(rid)
            order.append(("answer", rid))

    relay, (agent_w, server_in_r, server_out_w, back_r, _) = _link(
        use_compiled, from_agent, from_server, lambda: bool(pending), done.set)
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
    pending: set[int] = set()
    answered: list[int] = []

    def from_agent(line: bytes, _end: int) -> None:
        pending.add(json.loads(line)["id"])

    def from_server(line: bytes, _horizon: int) -> None:
        rid = json.loads(line)["id"]
        if rid in pending:
            pending.discard(rid)
            answered.append(rid)

    relay, (agent_w, server_in_r, server_out_w, back_r, back_w) = _link(
        use_compiled, from_agent, from_server, lambda: bool(pending))
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


@pytest.mark.parametrize("use_compiled", [True, False], ids=["compiled", "python"])
def test_an_answer_written_ahead_for_an_id_the_agent_uses_later_is_not_taken_for_its_answer(use_compiled):
    """A hostile server writes a fake tools/list answer for id 1 beside its answer to initialize (id 0). The agent
    drops it (it asked nothing with id 1 yet), then asks tools/list with id 1 and gets the real one: the witness
    must report what the agent saw. The observer is held so that request 1 is noted before the fake is read (the
    interleaving a loaded machine makes by chance, made every time): the compiled relay's reader is held at the
    first request until the agent has the real answer; the Python relay's server side is held at the first line
    it reads (the fake) until request 1 is noted."""
    envelopes = Envelopes()
    seen: list[Observation] = []
    second_noted, real_seen = threading.Event(), threading.Event()
    held = {"agent": use_compiled, "server": not use_compiled}

    def from_agent(line: bytes, end: int) -> None:
        if held.pop("agent", False):
            real_seen.wait(10)
        envelopes.from_agent(line, end)
        if json.loads(line)["id"] == 1:
            second_noted.set()

    def from_server(line: bytes, horizon: int) -> None:
        if held.pop("server", False):
            second_noted.wait(10)
        if (observed := envelopes.from_server(line, horizon)) is not None:
            seen.append(observed)

    relay, (agent_w, server_in_r, server_out_w, back_r, _) = _link(
        use_compiled, from_agent, from_server, lambda: envelopes.waiting)

    def rpc(rid: int, payload: dict) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": rid, **payload}).encode() + b"\n"

    fake = rpc(1, {"result": {"tools": [{"name": "FAKE", "inputSchema": {}}]}})
    real = rpc(1, {"result": {"tools": [{"name": "real", "inputSchema": {}}]}})
    initialized = rpc(0, {"result": {"protocolVersion": "2025-11-25", "serverInfo": {"name": "s", "version": "1"}}})

    def server() -> None:
        with os.fdopen(server_in_r, "rb") as requests, os.fdopen(server_out_w, "wb", buffering=0) as out:
            requests.readline()
            out.write(fake + initialized)
            requests.readline()
            out.write(real)

    threading.Thread(target=server, daemon=True).start()
    received = bytearray()
    os.write(agent_w, rpc(0, {"method": "initialize", "params": {}}))
    while initialized not in received:
        received += os.read(back_r, 1 << 16)
    os.write(agent_w, rpc(1, {"method": "tools/list"}))
    while real not in received:
        received += os.read(back_r, 1 << 16)
    real_seen.set()
    os.close(agent_w)
    relay.join(10)
    assert bytes(received) == fake + initialized + real
    assert poll(lambda: len(seen) == 2, timeout=10, what="both answers read")
    [listed] = [o for o in seen if o.kind == "tools_list_observed"]
    assert listed.fields["tool_names"] == ["real"], "the witness reports the tools the agent saw"


@pytest.mark.parametrize("use_compiled", [True, False], ids=["compiled", "python"])
def test_a_request_whose_newline_comes_in_a_later_write_still_has_its_answer_read(use_compiled):
    """The agent writes a request and its newline apart; a server that answers once the object is complete
    answers before the newline reaches it. The server's side is read while the agent's line is under way, and the
    answer is held until the request it answers is whole."""
    envelopes = Envelopes()
    seen: list[Observation] = []
    relay, (agent_w, server_in_r, server_out_w, back_r, _) = _link(
        use_compiled, lambda line, end: seen.append(envelopes.from_agent(line, end)),
        lambda line, horizon: seen.append(envelopes.from_server(line, horizon)), lambda: envelopes.waiting)
    request = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}).encode()
    answer = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"tools": [{"name": "t"}]}}).encode() + b"\n"
    got_object = threading.Event()

    def server() -> None:
        with os.fdopen(server_out_w, "wb", buffering=0) as out:
            held = b""
            while len(held) < len(request):
                held += os.read(server_in_r, 1 << 16)
            got_object.set()
            out.write(answer)
            while os.read(server_in_r, 1 << 16):
                pass

    threading.Thread(target=server, daemon=True).start()
    os.write(agent_w, request)
    assert got_object.wait(10)
    received = bytearray()
    while answer not in received:
        received += os.read(back_r, 1 << 16)
    os.write(agent_w, b"\n")
    os.close(agent_w)
    relay.join(10)
    assert poll(lambda: [o for o in seen if o is not None], timeout=10, what="the answer read")
    assert [o.fields["tool_names"] for o in seen if o is not None] == [["t"]]


@pytest.mark.parametrize("use_compiled", [True, False], ids=["compiled", "python"])
def test_a_server_that_stopped_taking_input_is_not_the_agent_closing_its_side(use_compiled):
    """Only the agent's own end of its side is its shutdown: a server gone (its stdin refuses the write) still
    gets its exit reported by the witness."""
    done = threading.Event()
    relay, (agent_w, server_in_r, _server_out_w, _back_r, _) = _link(
        use_compiled, lambda line, end: None, lambda line, horizon: None, lambda: False, done.set)
    os.close(server_in_r)  # the server is gone: its stdin takes nothing
    os.write(agent_w, b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    upstream = relay._threads[0]  # the agent's side
    upstream.join(10)
    assert not upstream.is_alive(), "the agent's side ended on the refused write"
    assert not done.is_set(), "and that is not the agent closing its side"
    os.close(agent_w)
