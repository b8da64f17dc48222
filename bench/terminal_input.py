"""Terminal input under pressure: a viewer flooding bad messages, and keys piped through `agentctl attach`.

Run:  .venv/bin/python bench/terminal_input.py [--messages 300000] [--mb 32] [--rounds 3] [--json PATH]

Flood: a real `agentctl serve` whose passthrough agent is on a terminal; one viewer opens the terminal WebSocket
over the control socket, sends --messages malformed text frames and reads nothing. Reported: the daemon's RSS
settled before, its peak during the flood, how many messages it took before it cut the viewer off, and the
growth against the bound of the per-viewer queues. Keys: --mb MiB piped through `agentctl attach` into an agent
that reads its terminal in raw mode, against the same bytes written to that agent on a bare PTY by this
process (the floor: what the kernel's terminal costs; the attach figure includes its interpreter start). Not a
test: compare side by side in one run.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import _common as c

READER = r"""
import os, sys, tty
tty.setraw(0)
want = int(sys.argv[1])
os.write(1, b"reader ready\r\n")
n = 0
while n < want:
    data = os.read(0, 65536)
    if not data:
        break
    n += len(data)
os.write(1, f"got {n}\r\n".encode())
while os.read(0, 65536):
    pass
"""
HANDSHAKE = (b"GET /v1/agent/terminal HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


def serve_reader(directory: Path, want: int) -> c.Daemon:
    directory.mkdir(parents=True, exist_ok=True)
    spec = directory / "spec.toml"
    spec.write_text(c.spec_text(directory / "state", agent=[sys.executable, "-c", READER, str(want)],
                                protocol="passthrough", extra="terminal = true\nstop_grace = 0.5\n"))
    proc = c.spawn([c.AGENTCTL, "serve", str(spec), "--socket", str(directory / "c.sock")], stdout=subprocess.PIPE,
                   stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, cwd=c.REPO)
    daemon = c.await_ready(c.Daemon(proc, {}, directory, 0.0))
    c.wait_until(lambda: (daemon.control().get("/v1/status")[1].get("agent") or {}).get("state") == "running", 60,
                 "the agent on its terminal")
    return daemon


def flood(directory: Path, messages: int) -> dict[str, float]:
    daemon = serve_reader(directory, 1 << 40)
    try:
        sock_path = directory / "c.sock"
        before = c.settled_rss(daemon.pid)
        attacker = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        attacker.connect(str(sock_path))
        attacker.sendall(HANDSHAKE)
        if not attacker.recv(4096).startswith(b"HTTP/1.1 101"):
            raise RuntimeError("the terminal WebSocket was refused")
        frame = b"\x81\x88\0\0\0\0not json"  # a client's masked text frame (an all-zero mask)
        sent = 0
        t0 = time.perf_counter()
        with c.PeakRss(daemon.pid) as peak:
            try:
                while sent < messages:
                    batch = min(1000, messages - sent)
                    attacker.sendall(frame * batch)
                    sent += batch
            except OSError:
                pass  # cut off
            seconds = time.perf_counter() - t0
        attacker.close()
        return {"before": before, "peak": peak.peak, "taken": sent, "seconds": seconds}
    finally:
        daemon.stop()


def keys_through_attach(directory: Path, data: bytes) -> float:
    daemon = serve_reader(directory, len(data))
    try:
        t0 = time.perf_counter()
        done = subprocess.run([c.AGENTCTL, "attach", "--socket", str(directory / "c.sock")], input=data,
                              capture_output=True, timeout=600)
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"attach exited {done.returncode}: {done.stderr.decode()[-500:]}")
        return seconds
    finally:
        daemon.stop()


def keys_on_bare_pty(data: bytes) -> float:
    master, slave = os.openpty()
    proc = subprocess.Popen([sys.executable, "-c", READER, str(len(data))], stdin=slave, stdout=slave,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    os.close(slave)
    seen = bytearray()
    done = threading.Event()

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            seen.extend(chunk)
            if b"got " in seen:
                done.set()

    threading.Thread(target=read, daemon=True).start()
    c.wait_until(lambda: b"reader ready" in seen, 30, "the reader")
    t0 = time.perf_counter()
    view = memoryview(data)
    while view:
        view = view[os.write(master, view[:65536]):]
    done.wait(600)
    seconds = time.perf_counter() - t0
    proc.kill()
    proc.wait()
    os.close(master)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--mb", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    c.install_cleanup()
    data = bytes(range(32, 127)) * (args.mb * 1024 * 1024 // 95)
    with c.temp_dir("bench-ti-") as tmp:
        floods = [flood(tmp / f"flood{r}", args.messages) for r in range(args.rounds)]
        attach_s, empty_s, bare_s = [], [], []
        for r, name in c.interleaved(args.rounds, ("attach", "empty", "bare")):
            if name == "attach":
                attach_s.append(keys_through_attach(tmp / f"keys{r}", data))
            elif name == "empty":
                empty_s.append(keys_through_attach(tmp / f"empty{r}", b""))
            else:
                bare_s.append(keys_on_bare_pty(data))
    growth = c.median(f["peak"] - f["before"] for f in floods)
    figures = [
        c.figure("daemon RSS before the flood", c.median(f["before"] for f in floods), unit="B"),
        c.figure("daemon RSS growth, peak", growth, target=("value", "<=", 8 * c.MB), unit="B",
                 note=f"{args.messages} bad messages sent, reading nothing"),
        c.figure("messages taken before the cut-off", c.median(f["taken"] for f in floods)),
        c.figure("seconds until the cut-off", c.median(f["seconds"] for f in floods), unit="s"),
        c.figure(f"{args.mb} MiB piped through attach", c.median(attach_s), c.median(empty_s), unit="s",
                 reference_name="attach with no input", note="the difference is the keys' own time"),
        c.figure(f"{args.mb} MiB: attach minus its start", c.median(attach_s) - c.median(empty_s), c.median(bare_s),
                 unit="s", reference_name="bare PTY"),
    ]
    c.emit({"bench": "terminal_input", "figures": figures}, args.json)


if __name__ == "__main__":
    main()
