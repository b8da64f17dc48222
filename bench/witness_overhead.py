"""The stdio witness's overhead: a third-party stdio MCP server spawned through `agentctl mcp-witness` against the
same server spawned directly, side by side in one run (interleaved rounds, medians).

Run:  .venv/bin/python bench/witness_overhead.py [--calls 300] [--rounds 3] [--stream-mb 200] [--json PATH]

- tools/call round trip: a real MCP server (tests/diagnostics/fixtures/stdio_server.py, the MCP SDK's MCPServer)
  once per kind (the witness as shipped, the same witness made to relay in Python with AGENTCTL_WITNESS_RELAY=python,
  a direct spawn, and the relay floors below), all initialized, then `--calls` x
  `--rounds` `add` calls, one to each kind in a new random order per call (paired: whatever the machine does
  meanwhile falls on every kind alike), each timed from the write of the request to the read of its answer; p50
  and p99. The witness reports to a loopback HTTP listener in a process of its own, standing in for the
  daemon's /witness route, so its reporting is in the figure.
- the relay floors, for scale: the same server behind a relay that only copies (two threads, read then write),
  in Python, and in C (bench/relay_floor.c, built with the machine's `cc` when it has one). Their ratios are
  what the two extra pipe hops cost with no work of the witness's.
- `--compare-tree DIR`: also the witness of another checkout (say, main before a change), as one more kind.
- streaming throughput: `--stream-mb` MiB of 64 KiB newline-terminated lines through a server that echoes its
  stdin (a server streaming large results is bytes on the same pipe), written and read concurrently, timed from
  after one line went there and back (both processes up: the start is the figure below, not part of this one).
- a server streaming out: `--stream-mb` MiB of 64 KiB lines written by the server after one line in (the
  bulk direction alone: a large result), timed from the first byte the agent reads.
- spawn to tools listed: from the spawn to the answer of the first tools/list (the witness's own start added).
- the witness idle: its RSS, and its CPU seconds over `--idle` seconds with an initialized server doing nothing.

The issue's target: within 1.05x of direct at p50. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import psutil

import _common as c

SERVER = str(c.REPO / "tests" / "diagnostics" / "fixtures" / "stdio_server.py")
ECHO = "import os\nwhile True:\n    b = os.read(0, 65536)\n    if not b: break\n    os.write(1, b)\n"
# A server streaming a large result: one line in, then N MiB of 64 KiB lines out (the bulk direction alone).
SOURCE = ("import os, sys\nsys.stdin.buffer.readline()\nline = b's' * 65535 + b'\\n'\n"
          "for _ in range(int(sys.argv[1])):\n    os.write(1, line)\n")
KINDS = ("witness", "witness (Python relay)", "direct")
# The floor in Python: what the witness's two relay threads would cost if they read nothing.
FLOOR_PY = ("import os, subprocess, sys, threading\n"
            "server = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)\n"
            "def copy(src, dst):\n"
            "    buf = bytearray(1 << 20); view = memoryview(buf)\n"
            "    while (n := os.readv(src, [buf])):\n"
            "        out = view[:n]\n"
            "        while out: out = out[os.write(dst, out):]\n"
            "    os.close(dst)\n"
            "threading.Thread(target=copy, args=(0, server.stdin.fileno()), daemon=True).start()\n"
            "threading.Thread(target=copy, args=(server.stdout.fileno(), 1), daemon=True).start()\n"
            "os._exit(server.wait())\n")


class _Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept-alive connections, as the daemon's

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


WITNESS = [c.PYTHON, "-m", "agentctl.cli", "mcp-witness", "bench", "--"]
# The witness as shipped (its compiled relay where it was built), the same witness made to relay in Python, and the
# server alone.
PREFIX = {"witness": WITNESS, "witness (Python relay)": ["env", "AGENTCTL_WITNESS_RELAY=python", *WITNESS],
          "direct": []}
SINK = ("import sys; sys.path.insert(0, sys.argv[1]); import witness_overhead as w\n"
        "from http.server import ThreadingHTTPServer\n"
        "s = ThreadingHTTPServer(('127.0.0.1', 0), w._Sink); print(s.server_address[1], flush=True)\n"
        "s.serve_forever()\n")


def _relay_floor_c(workdir: Path) -> str | None:
    """bench/relay_floor.c built into `workdir`, or None where the machine has no C compiler."""
    binary = workdir / "relay_floor"
    try:
        subprocess.run(["cc", "-O2", "-pthread", "-o", str(binary), str(Path(__file__).with_name("relay_floor.c"))],
                       check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return str(binary)


def _argvs(relay_c: str | None, compare: str | None) -> dict[str, list[str]]:
    """Each kind's command before the server's own."""
    kinds = {**PREFIX, "relay floor (Python)": [c.PYTHON, "-c", FLOOR_PY]}
    if relay_c:
        kinds["relay floor (C)"] = [relay_c]
    if compare:
        kinds[f"witness of {compare}"] = ["env", f"PYTHONPATH={compare}", c.PYTHON, "-m", "agentctl.cli",
                                          "mcp-witness", "bench", "--"]
    return kinds


def _spawn(prefix: list[str], command: list[str], url: str) -> subprocess.Popen:
    env = {**os.environ, "AGENTCTL_WITNESS_URL": url, "AGENTCTL_WITNESS_TOKEN": "bench-token"}
    return c.spawn([*prefix, *command], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                   env=env, bufsize=0)


def _rpc(proc: subprocess.Popen, message: dict) -> dict:
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    while True:
        answer = json.loads(proc.stdout.readline())
        if answer.get("id") == message.get("id"):
            return answer


def _initialize(proc: subprocess.Popen) -> None:
    _rpc(proc, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
    proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})


def round_trips(argvs: dict[str, list[str]], calls: int, url: str) -> dict[str, list[float]]:
    """Every kind up at once; each call goes to every kind, in a new random order each time."""
    procs = {kind: _spawn(prefix, [c.PYTHON, SERVER], url) for kind, prefix in argvs.items()}
    try:
        for proc in procs.values():
            _initialize(proc)
        times: dict[str, list[float]] = {kind: [] for kind in procs}
        order = list(procs)
        for i in range(calls):
            random.shuffle(order)
            for kind in order:
                began = time.perf_counter()
                _rpc(procs[kind], {"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                                   "params": {"name": "add", "arguments": {"a": i, "b": 1}}})
                times[kind].append(time.perf_counter() - began)
        return times
    finally:
        for proc in procs.values():
            c.end(proc)


def start(kind: str, url: str) -> float:
    """From the spawn to the answer of the first tools/list."""
    began = time.perf_counter()
    proc = _spawn(PREFIX[kind], [c.PYTHON, SERVER], url)
    try:
        _initialize(proc)
        return time.perf_counter() - began
    finally:
        c.end(proc)


def stream(kind: str, mb: float, url: str) -> float:
    proc = _spawn(PREFIX[kind], [c.PYTHON, "-c", ECHO], url)
    line = b"s" * (64 * 1024 - 1) + b"\n"
    count = int(mb * 16)

    def write() -> None:
        for _ in range(count):
            proc.stdin.write(line)
        proc.stdin.close()

    # One line there and back first: the witness's own Python start is in "spawn to tools listed", not here.
    proc.stdin.write(b"ready\n")
    while proc.stdout.readline() != b"ready\n":
        pass
    began = time.perf_counter()
    writer = threading.Thread(target=write)
    writer.start()
    got = 0
    while chunk := proc.stdout.read(1 << 20):
        got += len(chunk)
    writer.join()
    seconds = time.perf_counter() - began
    proc.wait(timeout=60)
    if got != count * len(line):
        raise SystemExit(f"{kind}: {got} bytes back of {count * len(line)}")
    return (got / c.MB) / seconds


def download(kind: str, mb: float, url: str) -> float:
    count = int(mb * 16)
    proc = _spawn(PREFIX[kind], [c.PYTHON, "-c", SOURCE, str(count)], url)
    proc.stdin.write(b"go\n")  # the clock starts at the first byte: both processes are up by then
    got = len(proc.stdout.read(1))
    began = time.perf_counter()
    while chunk := proc.stdout.read(1 << 20):
        got += len(chunk)
    seconds = time.perf_counter() - began
    proc.wait(timeout=60)
    if got != count * 65536:
        raise SystemExit(f"{kind}: {got} bytes back of {count * 65536}")
    return (got / c.MB) / seconds


def idle(seconds: float, url: str) -> dict[str, float]:
    proc = _spawn(PREFIX["witness"], [c.PYTHON, SERVER], url)
    try:
        _initialize(proc)
        witness = psutil.Process(proc.pid)
        before = sum(witness.cpu_times()[:2])
        time.sleep(seconds)
        cpu = sum(witness.cpu_times()[:2]) - before
        return {"rss": witness.memory_info().rss, "cpu": cpu}
    finally:
        c.end(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stream-mb", type=float, default=200.0)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    parser.add_argument("--compare-tree", metavar="DIR", help="also the witness of this checkout (its agentctl/)")
    args = parser.parse_args()
    c.install_cleanup()
    # The listener standing in for the daemon runs in a process of its own, as the daemon does.
    sink = c.spawn([c.PYTHON, "-c", SINK, str(Path(__file__).parent)], stdout=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{sink.stdout.readline().strip()}/witness"
    with tempfile.TemporaryDirectory() as workdir:
        relay_c = _relay_floor_c(Path(workdir))
        argvs = _argvs(relay_c, args.compare_tree)
        trips: dict[str, list[float]] = {k: [] for k in argvs}
        # Each kind's p50 over direct's, round by round (each round a new placement on the CPUs).
        per_round: dict[str, list[float]] = {k: [] for k in argvs if k != "direct"}
        for _ in range(args.rounds):
            times = round_trips(argvs, args.calls, url)
            for kind, ratios in per_round.items():
                ratios.append(c.percentile(times[kind], 50) / c.percentile(times["direct"], 50))
            for kind, kept in times.items():
                trips[kind] += kept
    rates: dict[str, list[float]] = {k: [] for k in KINDS}
    downs: dict[str, list[float]] = {k: [] for k in KINDS}
    starts: dict[str, list[float]] = {k: [] for k in KINDS if k != "witness (Python relay)"}
    for _, kind in c.interleaved(args.rounds, KINDS):
        if kind in starts:
            starts[kind].append(start(kind, url))
        rates[kind].append(stream(kind, args.stream_mb, url))
        downs[kind].append(download(kind, args.stream_mb, url))
    quiet = idle(args.idle, url)
    ms = {k: [t * 1000 for t in v] for k, v in trips.items()}
    figures = [
        c.figure("witness: tools/call round trip p50", c.percentile(ms["witness"], 50), c.percentile(ms["direct"], 50),
                 unit="ms", reference_name="direct spawn", target=("ratio", "<=", 1.05)),
        c.figure("witness: tools/call round trip p99", c.percentile(ms["witness"], 99), c.percentile(ms["direct"], 99),
                 unit="ms", reference_name="direct spawn"),
    ]
    for kind in argvs:
        if kind not in ("witness", "direct"):
            figures.append(c.figure(f"{kind}: tools/call round trip p50", c.percentile(ms[kind], 50),
                                    c.percentile(ms["direct"], 50), unit="ms", reference_name="direct spawn"))
    figures.append(c.figure("witness: p50 ratio, median of the rounds' own", c.median(per_round["witness"]), 1.0,
                            reference_name="parity", target=("value", "<=", 1.05)))
    for kind, ratios in per_round.items():
        if kind != "witness":
            figures.append(c.figure(f"{kind}: p50 ratio, median of the rounds' own", c.median(ratios), 1.0,
                                    reference_name="parity"))
        print(f"# {kind}: p50 / direct p50 by round: {', '.join(f'{r:.3f}' for r in ratios)}")
    if relay_c is None:
        print("# no C compiler (cc): the C relay floor is not measured")
    figures += [
        c.figure("witness: spawn to tools listed", c.median(starts["witness"]), c.median(starts["direct"]), unit="s",
                 reference_name="direct spawn"),
        c.figure(f"witness: streaming {args.stream_mb:g} MiB, MiB/s", c.median(rates["witness"]),
                 c.median(rates["direct"]), unit="MiB/s", reference_name="direct spawn"),
        c.figure(f"witness: server streams {args.stream_mb:g} MiB out, MiB/s", c.median(downs["witness"]),
                 c.median(downs["direct"]), unit="MiB/s", reference_name="direct spawn"),
        c.figure(f"witness (Python relay): streaming {args.stream_mb:g} MiB, MiB/s",
                 c.median(rates["witness (Python relay)"]), c.median(rates["direct"]), unit="MiB/s",
                 reference_name="direct spawn"),
        c.figure(f"witness (Python relay): server streams {args.stream_mb:g} MiB out, MiB/s",
                 c.median(downs["witness (Python relay)"]), c.median(downs["direct"]), unit="MiB/s",
                 reference_name="direct spawn"),
        c.figure("witness: RSS per idle server", quiet["rss"], unit="B"),
        c.figure(f"witness: CPU while its server idles ({args.idle:g} s)", quiet["cpu"], unit="s"),
    ]
    print(f"# witness overhead: {args.calls} calls x {args.rounds} rounds, each call to every kind in random order")
    c.emit({"bench": "witness_overhead", "params": vars(args), "figures": figures}, args.json)
    c.end(sink)


if __name__ == "__main__":
    main()
