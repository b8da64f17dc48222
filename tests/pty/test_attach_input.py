"""Keys through `agentctl attach` are never cut silently: a 400 KiB paste into a real terminal reaches an agent that
reads slowly whole and in order (back-pressure, not holes); piped and redirected stdin are typed whole, then it
detaches; input that did not reach the agent is counted in one line and the exit code is 1; and a viewer flooding
the daemon with bad messages while reading nothing costs it a small bounded amount of memory."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import agentctl_cmd, poll, write_spec

# An agent that reads its terminal slowly (raw mode, 4 KiB every 20 ms: a 400 KiB paste takes it 2 s, far longer
# than the daemon's input bound lasts) and says how much it read and its SHA-256 once it has `want` bytes.
SLOW_READER = r"""
import hashlib, os, signal, sys, time, tty
tty.setraw(0)
want = int(sys.argv[1])
os.write(1, b"slow reader ready\r\n")
h, n = hashlib.sha256(), 0
while n < want:
    data = os.read(0, 4096)
    if not data:
        break
    h.update(data)
    n += len(data)
    time.sleep(0.02)  # the pace under test (an agent that reads slowly), not a wait for a result
os.write(1, f"got {n} {h.hexdigest()}\r\n".encode())
if len(sys.argv) > 2 and sys.argv[2] == "exit":
    sys.exit(0)  # reads no more: what is still in its terminal never reaches it
if len(sys.argv) > 2:
    signal.pause()  # hung: reads nothing more, ever, until killed
while os.read(0, 65536):
    pass
"""


def _paste(size: int) -> bytes:
    """`size` bytes of printable text, different everywhere (a hole or a swap changes the hash), no detach key."""
    line = bytearray()
    i = 0
    while len(line) < size:
        line += f"{i:08d} the quick brown fox jumps over the lazy dog\r".encode()
        i += 1
    return bytes(line[:size])


def _serve_slow_reader(serve, short_dir: Path, want: int, *, then: str | None = None):
    argv = [sys.executable, "-c", SLOW_READER, str(want), *([then] if then else [])]
    spec = write_spec(short_dir, (
        f"[agent]\ncommand = {json.dumps(argv)}\nprotocol = \"passthrough\"\nstrategy = \"none\"\n"
        "terminal = true\nstop_grace = 0.5\n"), name="slow.toml")
    sock = short_dir / "slow.sock"
    return serve(spec, sock), sock


def _screen_of(sock: Path) -> str:
    """What the agent's terminal shows now (its replayed tail), read by a second `attach` with nothing to type."""
    done = subprocess.run(agentctl_cmd("attach", "--socket", str(sock)), capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    return done.stdout.decode("utf-8", "replace")


def test_a_400_kib_paste_reaches_an_agent_that_reads_slowly_whole_and_in_order(serve, short_dir, on_pty):
    data = _paste(400 * 1024)
    _, sock = _serve_slow_reader(serve, short_dir, len(data))
    term = on_pty(agentctl_cmd("attach", "--socket", str(sock)))
    term.wait_for("you hold the keyboard")
    term.wait_for("slow reader ready")
    # The paste goes into the person's terminal as a terminal emulator writes it: blocking when full.
    writer = threading.Thread(target=lambda: term.send(data), daemon=True)
    writer.start()
    term.wait_for(f"got {len(data)} {hashlib.sha256(data).hexdigest()}", timeout=90)
    writer.join(30)
    term.send(b"\x1d")
    assert term.wait() == 0, term.screen()
    assert "detached; the agent keeps running" in term.output().decode()
    assert "did not reach the agent" not in term.output().decode()


def test_the_detach_key_behind_a_paste_an_agent_never_reads_detaches_and_counts_what_was_not_sent(
        serve, short_dir, on_pty):
    _, sock = _serve_slow_reader(serve, short_dir, 0, then="hang")  # reads nothing at all
    term = on_pty(agentctl_cmd("attach", "--socket", str(sock)))
    term.wait_for("you hold the keyboard")
    term.wait_for("got 0 ")
    data = _paste(400 * 1024)
    writer = threading.Thread(target=lambda: term.send(data + b"\x1d"), daemon=True)
    writer.start()
    assert term.wait(timeout=90) == 1, term.screen()
    out = term.output().decode()
    assert "detached; the agent keeps running" in out
    line = next(line for line in out.splitlines() if "did not reach the agent" in line)
    assert f"of the {len(data)} bytes of your input did not reach the agent: the agent read none of its input" in line
    lost = int(line.split("agentctl: ", 1)[1].split()[0])
    assert 0 < lost <= len(data), "the daemon counted what it refused and what it dropped at the detach"


@pytest.mark.parametrize("how", ["pipe", "file"])
def test_piped_and_redirected_input_is_typed_whole_then_attach_detaches_with_exit_0(serve, short_dir, how):
    data = _paste(100 * 1024)
    _, sock = _serve_slow_reader(serve, short_dir, len(data))
    poll(lambda: "slow reader ready" in _screen_of(sock), timeout=60, what="the agent started")
    argv = agentctl_cmd("attach", "--socket", str(sock))
    if how == "pipe":
        done = subprocess.run(argv, input=data, capture_output=True, timeout=120)
    else:
        source = short_dir / "keys.txt"
        source.write_bytes(data)
        with source.open("rb") as stdin:
            done = subprocess.run(argv, stdin=stdin, capture_output=True, timeout=120)
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert "Traceback" not in err and "detached; the agent keeps running" in err and "did not reach" not in err
    expected = f"got {len(data)} {hashlib.sha256(data).hexdigest()}"
    poll(lambda: expected in _screen_of(sock), timeout=60, what=expected)


def test_input_that_does_not_reach_the_agent_is_counted_in_one_line_and_the_exit_code_is_1(serve, short_dir):
    data = _paste(100 * 1024)
    _, sock = _serve_slow_reader(serve, short_dir, 1000, then="exit")  # reads 1000 bytes, then exits
    done = subprocess.run(agentctl_cmd("attach", "--socket", str(sock)), input=data, capture_output=True, timeout=120)
    err = done.stderr.decode()
    assert done.returncode == 1 and "Traceback" not in err, err
    line = next(line for line in err.splitlines() if "did not reach the agent" in line)
    lost = int(line.split("agentctl: ", 1)[1].split()[0])
    assert 0 < lost < len(data) and f"of the {len(data)} bytes of your input" in line
    assert "the agent exited before reading them" in line or "the daemon did not say what it delivered" in line


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _ws_frames(count: int, payload: bytes) -> bytes:
    """`count` masked text frames (a client's), the mask all zero so the payload goes as it is."""
    return (bytes([0x81, 0x80 | len(payload)]) + b"\0\0\0\0" + payload) * count


def test_a_viewer_that_sends_300000_bad_messages_and_reads_nothing_costs_the_daemon_a_bounded_amount(serve, short_dir):
    daemon, sock = _serve_slow_reader(serve, short_dir, 1 << 30)
    pid = daemon.proc.pid
    poll(lambda: "slow reader ready" in _screen_of(sock), timeout=60, what="the agent started")
    before = _rss_kib(pid)
    attacker = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    attacker.connect(str(sock))
    attacker.sendall(b"GET /v1/agent/terminal HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     b"Sec-WebSocket-Version: 13\r\n\r\n")
    assert attacker.recv(4096).startswith(b"HTTP/1.1 101")
    attacker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and never reads again
    sent = [0]

    def flood() -> None:
        blob = _ws_frames(1000, b"not json")
        try:
            for _ in range(300):
                attacker.sendall(blob)
                sent[0] += 1000
        except OSError:
            pass  # cut off by the daemon

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    peak = [before]

    def watch() -> bool:
        peak[0] = max(peak[0], _rss_kib(pid))
        return not flooder.is_alive()

    # Either all 300,000 messages went in (each read only as the viewer's notices drained) or it was cut off.
    poll(watch, timeout=120, interval=0.05, what="the flood to end")
    attacker.close()
    growth = (peak[0] - before) / 1024
    print(f"daemon RSS {before / 1024:.1f} MB before, peak {peak[0] / 1024:.1f} MB during the flood of "
          f"{sent[0]} messages: +{growth:.1f} MB")
    assert growth < 8, f"the daemon grew by {growth:.1f} MB"
    # The daemon, and the agent's terminal, still serve the next viewer.
    assert "slow reader ready" in _screen_of(sock)
