"""An agent's output through its terminal against the same output through the headless stderr pipe.

Run:  .venv/bin/python bench/pty_flood.py [--mb 64] [--rounds 3] [--write-size 65536]

A writer agent (python, under the real shim and supervisor) writes --mb MiB in --write-size writes, to stderr
(headless: the pipe protocol feeding the StderrRing) or to its PTY (terminal = true: the PtyHost reading the
master into the same ring, the replay tail and its viewers). Three runs per round, interleaved: headless,
terminal with no viewer, terminal with one viewer that keeps what it is shown (as a WebSocket viewer queues).
A fourth run is the floor: the same writer on a bare PTY whose master this process reads in a tight loop (what
the kernel's terminal layer costs, which no reader removes). Reported per run (medians): the writer's wall time, the daemon's CPU seconds for the flood, and ratios against
headless. Not a test: the numbers depend on the machine; compare side by side in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import time

from agentctl.agent.pty_host import Viewer, WindowSize
from agentctl.agent.supervisor import Supervisor

WRITER = """
import os, sys, time
fd = int(sys.argv[1]); size = int(sys.argv[2]); total = int(sys.argv[3]) * 1024 * 1024
chunk = (b"x" * (size - 1) + b"\\n")
os.write(fd, b"")  # touch
sent = 0
while sent < total:
    sent += os.write(fd, chunk)
"""


class Counter(Viewer):
    def __init__(self) -> None:
        self.bytes = 0

    def output(self, data: bytes) -> None:
        self.bytes += len(data)


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def one(mode: str, mb: int, size: int) -> tuple[float, float]:
    sup = Supervisor()
    fd = "2" if mode == "headless" else "1"
    argv = [sys.executable, "-c", WRITER, fd, str(size), str(mb)]
    start_cpu, start = cpu(), time.monotonic()
    await sup.start(argv, cwd=None, env={}, terminal=None if mode == "headless" else WindowSize())
    process = sup.process
    assert process is not None
    if mode == "terminal+viewer":
        assert process.terminal is not None
        viewer = Counter()
        process.terminal.attach(viewer)
    await process.wait_exit()
    total = mb * 1024 * 1024
    while process.stderr_ring.total_bytes_seen < total:  # the last reads after the exit
        await asyncio.sleep(0.01)
    wall, used = time.monotonic() - start, cpu() - start_cpu
    await sup.stop(grace=0.1)
    return wall, used


def floor(mb: int, size: int) -> tuple[float, float]:
    """The kernel's own PTY: the writer on a bare PTY, its master read in a tight loop by this process."""
    import os
    import subprocess

    master, slave = os.openpty()
    start_cpu, start = cpu(), time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, "1", str(size), str(mb)], stdout=slave)
    os.close(slave)
    got = 0
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        got += len(data)
    proc.wait()
    os.close(master)
    return time.monotonic() - start, cpu() - start_cpu


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write-size", type=int, default=65536)
    args = parser.parse_args()
    modes = ("headless", "terminal", "terminal+viewer")
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    results["bare pty floor"] = []
    for _ in range(args.rounds):
        for mode in modes:
            results[mode].append(await one(mode, args.mb, args.write_size))
        results["bare pty floor"].append(floor(args.mb, args.write_size))
    base_wall = statistics.median(w for w, _ in results["headless"])
    base_cpu = statistics.median(c for _, c in results["headless"])
    print(f"{args.mb} MiB in {args.write_size}-byte writes, {args.rounds} rounds (medians)")
    for mode in results:
        wall = statistics.median(w for w, _ in results[mode])
        used = statistics.median(c for _, c in results[mode])
        print(f"  {mode:16} wall {wall:6.2f} s ({wall / base_wall:4.2f}x)   daemon cpu {used:6.2f} s ({used / base_cpu:4.2f}x)")


if __name__ == "__main__":
    asyncio.run(main())
