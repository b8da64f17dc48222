"""A local user without a token, holding connections: the attacker process of the listener tests and benches,
and what it sends (`pipelined` requests, a `forged_hello`).

`Flood` runs Debian's own interpreter (/usr/bin/python3, readable by every user) as another uid through
`setpriv`, with its own descriptor limit raised through `prlimit`, so the connections are really another
user's. It opens N connections to a TCP `host:port` or a Unix socket path, paced so the kernel's accept queue
never overflows (a connection dropped there would only look open), and keeps N open: whenever the listener
closes one, it opens another (at most `reopen_rate` per second). Modes:

- `idle`: send nothing but `payload` (a daemon's hello, say), read whatever comes;
- `dribble`: send a request head one byte per second, never finishing it (slowloris);
- `noread`: send `payload` (pipelined requests, say) and never read a byte: each connection's answers wait in
  the listener's buffers. Such a connection is known closed by its TCP state, not by reading.

Every second it prints one JSON line of counts: open, opened, closed_by_peer, connect_errors, bytes_sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentctl.evidence.contract.report import CONTRACT_VERSION
from agentctl.upstream import protocol as P
from tests.conftest import identity, poll

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"

_FLOOD = r"""
import json, selectors, socket, struct, sys, time
target, n, mode, reopen_rate = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
payload = bytes.fromhex(sys.argv[5]) if len(sys.argv) > 5 else b""
HEAD = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"z" * 4000 + b"\r\n\r\n"
READS = mode != "noread"  # noread: never read a byte, so answers pile up in the listener's buffers
sel = selectors.DefaultSelector()
counts = {"open": 0, "opened": 0, "closed_by_peer": 0, "connect_errors": 0, "bytes_sent": 0}
serial = 0
if target.startswith("/"):
    family, address = socket.AF_UNIX, target
else:
    host, port = target.rsplit(":", 1)
    family, address = socket.AF_INET, (host, int(port))

def open_one():
    global serial
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setblocking(False)
    if not READS:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        s.connect(address)
    except (BlockingIOError, InterruptedError):
        pass
    except OSError:
        s.close()
        counts["connect_errors"] += 1
        return
    serial += 1
    # What to send once connected ({n} numbers the connection), and how far it got.
    todo = payload.replace(b"{n}", str(serial).encode())
    events = (selectors.EVENT_READ if READS else 0) | (selectors.EVENT_WRITE if todo else 0)
    sel.register(s, events or selectors.EVENT_READ, [0, todo])
    counts["open"] += 1
    counts["opened"] += 1

def lost(sock):
    sel.unregister(sock)
    sock.close()
    counts["open"] -= 1
    counts["closed_by_peer"] += 1

def drain(timeout):
    for key, events in sel.select(timeout):
        if events & selectors.EVENT_WRITE:
            try:
                sent = key.fileobj.send(key.data[1])
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                lost(key.fileobj)
                continue
            counts["bytes_sent"] += sent
            key.data[1] = key.data[1][sent:]
            if not key.data[1]:
                sel.modify(key.fileobj, selectors.EVENT_READ, key.data) if READS else sel.unregister(key.fileobj)
                if not READS:
                    quiet.append(key.fileobj)
            continue
        try:
            data = key.fileobj.recv(65536)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            data = b""
        if not data:
            lost(key.fileobj)

quiet = []  # noread connections, all sent: checked for a close by their TCP state, never read

def check_quiet():
    for sock in list(quiet):
        state = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
        if state != 1:  # not ESTABLISHED: the listener closed or reset it
            quiet.remove(sock)
            sock.close()
            counts["open"] -= 1
            counts["closed_by_peer"] += 1

for i in range(n):
    open_one()
    if i % 32 == 31:
        drain(0.02)
print(json.dumps({"phase": "opened", **counts}), flush=True)
last_report = last_dribble = last = last_check = time.monotonic()
budget = 0.0
while True:
    drain(0.05)
    now = time.monotonic()
    if quiet and now - last_check >= 0.2:
        last_check = now
        check_quiet()
    if mode == "dribble" and now - last_dribble >= 1.0:
        last_dribble = now
        for key in list(sel.get_map().values()):
            pos = key.data[0]
            if pos < len(HEAD):
                try:
                    key.fileobj.send(HEAD[pos:pos + 1])
                    key.data[0] = pos + 1
                    counts["bytes_sent"] += 1
                except OSError:
                    pass
    budget = min(budget + (now - last) * reopen_rate, float(n))
    last = now
    while counts["open"] < n and budget >= 1:
        budget -= 1
        open_one()
    if now - last_report >= 1.0:
        last_report = now
        print(json.dumps({"phase": "holding", **counts}), flush=True)
"""


@dataclass
class Flood:
    """The attacker: `start()`, read `latest`, `stop()` (also as a context manager)."""

    target: str  # "host:port" or a Unix socket path
    connections: int = 1100
    mode: str = "idle"
    reopen_rate: float = 200.0
    payload: bytes = b""  # sent once connected ({n}: the connection's number)
    uid: int = NOBODY
    nofile: int = 4096
    proc: subprocess.Popen[str] | None = None
    lines: list[dict[str, Any]] = field(default_factory=list)

    def argv(self) -> list[str]:
        drop = [] if self.uid == os.getuid() else [
            "setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups"]
        return ["prlimit", f"--nofile={self.nofile}", *drop, SYSTEM_PYTHON, "-I", "-c", _FLOOD,
                self.target, str(self.connections), self.mode, str(self.reopen_rate), self.payload.hex()]

    def start(self) -> Flood:
        assert Path(SYSTEM_PYTHON).exists(), "the attacker runs the system's python3"
        self.proc = subprocess.Popen(self.argv(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd="/")
        threading.Thread(target=self._read, daemon=True).start()
        poll(lambda: self.lines or self.proc.poll() is not None, timeout=60, what="the attacker to open its connections")
        assert self.proc.poll() is None, f"the attacker exited: {self.proc.stderr.read()}"
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    @property
    def latest(self) -> dict[str, Any]:
        return self.lines[-1] if self.lines else {}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def __enter__(self) -> Flood:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---- what the attacker sends ------------------------------------------------------------------------------


def pipelined(path: str, port: int, depth: int) -> bytes:
    """`depth` GETs of `path` in one write, as a client that pipelines and then reads nothing sends them."""
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode() * depth


def forged_hello(heartbeat_ms: int = 3_600_000) -> bytes:
    """A hello with a made-up identity per connection ({n}) asking for an hour between heartbeats."""
    ident = identity(session="forged-{n}", execution="forged-{n}", instance="forged-{n}")
    return P.encode_frame(P.frame(P.HelloFrame, identity=ident, daemon_version="9.9.9",
                                  contract_version=CONTRACT_VERSION, heartbeat_ms=heartbeat_ms))
