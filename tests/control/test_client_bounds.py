"""A same-uid socket in the runtime dir that answers a byte at a time, or declares a body of 100 GB: every CLI call
to it (`ls`, `status`, `health --ready` on the fast path and the full one, `stop --wait`) ends within its timeout
with one line, never a hang, a MemoryError or a traceback."""

from __future__ import annotations

import os
import socket
import socketserver
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from agentctl.control.client import MAX_ANSWER, ControlClient, ControlProtocolError
from agentctl.evidence.contract.control import DaemonListing, StatusResponse
from agentctl.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_UNHEALTHY
from tests.conftest import REPO, agentctl_cmd

DRIP_EVERY = 1.5  # seconds between the bytes of the slow answer: longer than no timeout the client would accept
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n" + b'{"live": true}      '


class _Hostile(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False


def _drip(request: socket.socket) -> None:
    """Reads the request, then sends the answer one byte every DRIP_EVERY seconds (each recv gets a byte in time)."""
    request.recv(65536)
    for i in range(len(HEAD)):
        try:
            request.sendall(HEAD[i:i + 1])
        except OSError:
            return
        time.sleep(DRIP_EVERY)  # the attack itself: a peer that waits, not a test waiting for a result


def _huge(request: socket.socket, answer: bytes) -> None:
    request.recv(65536)
    try:
        request.sendall(answer)
        request.sendall(b"x" * 65536)  # the start of the body it promised
        request.recv(1)  # held until the client gives up
    except OSError:
        pass


HUGE_LENGTH = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000000000\r\n\r\n"
HUGE_CHUNK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n174876e800\r\n"


def _serve(path: Path, handle) -> _Hostile:
    path.parent.mkdir(mode=0o700, exist_ok=True)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            handle(self.request)

    server = _Hostile(str(path), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def hostile(short_tmp: Path) -> Iterator[dict[str, Path]]:
    runtime = short_tmp / "run"
    runtime.mkdir(mode=0o700)
    servers = [
        _serve(runtime / "exec-drip" / "control.sock", _drip),
        _serve(runtime / "exec-huge" / "control.sock", lambda r: _huge(r, HUGE_LENGTH)),
        _serve(runtime / "exec-chunk" / "control.sock", lambda r: _huge(r, HUGE_CHUNK)),
    ]
    try:
        yield {"runtime": runtime, "drip": runtime / "exec-drip" / "control.sock",
               "huge": runtime / "exec-huge" / "control.sock", "chunk": runtime / "exec-chunk" / "control.sock"}
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def _cli(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    base = {k: v for k, v in os.environ.items() if k not in ("AGENTCTL_SOCKET", "AGENTCTL_RUNTIME_DIR", "RUNTIME_DIRECTORY")}
    started = time.monotonic()
    # 60 s: without a total deadline the drip takes over 100 s (each byte comes within any per-recv timeout).
    done = subprocess.run(agentctl_cmd(*args), cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**base, "NO_COLOR": "1", **env}, stdin=subprocess.DEVNULL)
    return done, time.monotonic() - started


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentctl: "), done.stderr
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr
    return lines[0]


# Interpreter start and imports on a busy shared machine: the margin over the timeout, far below the drip's 100 s.
START_MARGIN = 8.0


def test_a_socket_that_answers_a_byte_every_one_and_a_half_seconds_cannot_hold_a_cli_call_past_its_timeout(hostile):
    drip = str(hostile["drip"])
    for args, code, limit in (
        (("status", "--socket", drip, "--timeout", "2"), EXIT_FAILED, 2),
        (("health", "--ready", "--socket", drip, "--timeout", "2"), EXIT_UNHEALTHY, 2),
        (("health", "--ready", "--socket", drip), EXIT_UNHEALTHY, 5),  # the exec probe's fast path
        (("health", "--json", "--socket", drip), EXIT_UNHEALTHY, 5),
        (("stop", "--wait", "1", "--socket", drip, "--timeout", "2"), EXIT_FAILED, 2),
    ):
        done, took = _cli({}, *args)
        assert done.returncode == code, (args, done.stderr)
        assert "did not answer" in _one_line(done) and f"within {limit:g} s" in done.stderr, args
        assert took < limit + START_MARGIN, f"{args}: {took:.1f} s"
    done, took = _cli({"AGENTCTL_RUNTIME_DIR": str(hostile["runtime"])}, "ls", "--json", "--timeout", "2")
    assert done.returncode == EXIT_OK, done.stderr
    states = {d.socket: d.state for d in msgspec.json.decode(done.stdout, type=DaemonListing).daemons}
    assert states[drip] == "unresponsive" and states[str(hostile["huge"])] == "unresponsive"
    assert took < 2 + START_MARGIN, f"ls: {took:.1f} s"


def test_an_answer_declaring_a_hundred_gigabytes_is_refused_unread_in_one_line(hostile):
    for name in ("huge", "chunk"):
        client = ControlClient(hostile[name], timeout=10)
        started = time.monotonic()
        with pytest.raises(ControlProtocolError, match=f"more than {MAX_ANSWER // (1 << 20)} MiB"):
            client.call("GET", "/v1/status", StatusResponse)
        assert time.monotonic() - started < 10, "refused on the declared size, not after the timeout"
    for args, code in ((("status", "--socket", str(hostile["huge"])), EXIT_FAILED),
                       (("health", "--ready", "--socket", str(hostile["huge"])), EXIT_UNHEALTHY),
                       (("status", "--json", "--socket", str(hostile["chunk"])), EXIT_FAILED)):
        done, _ = _cli({}, *args)
        assert done.returncode == code, (args, done.stderr)
        assert "MiB" in _one_line(done)


def test_ls_ends_within_its_timeout_however_many_sockets_hang(hostile):
    runtime = hostile["runtime"]
    hung = []
    try:
        for i in range(120):  # listening, never accepting: each connect lands in the backlog and waits
            path = runtime / f"exec-hung-{i}" / "control.sock"
            path.parent.mkdir(mode=0o700)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(path))
            listener.listen(4)
            hung.append(listener)
        done, took = _cli({"AGENTCTL_RUNTIME_DIR": str(runtime)}, "ls", "--json", "--timeout", "2")
    finally:
        for listener in hung:
            listener.close()
    assert done.returncode == EXIT_OK, done.stderr
    listing = msgspec.json.decode(done.stdout, type=DaemonListing)
    assert len(listing.daemons) == 123 and {d.state for d in listing.daemons} == {"unresponsive"}
    # Asked 16 at a time with 2 s each, 123 sockets took 16 s; one deadline for the listing bounds it.
    assert took < 2 + START_MARGIN, f"ls: {took:.1f} s"
