"""The stderr flood's agent: writes --mb MiB to its stderr in --write-size byte writes and times itself.

Run by bench/stderr_flood.py, once as a daemon's agent (passthrough protocol: no ACP, so nothing but the
stderr path is exercised) and once with stderr to /dev/null or to a pipe drained by `cat` (the references).
With --go FIFO it blocks opening the FIFO until the bench opens it, so the daemon's baseline memory is
taken before the first byte. The seconds (first write to last write returned) and this process's CPU
seconds go to --result as JSON. Stdlib only, so its start costs the same everywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, required=True, help="MiB to write")
    parser.add_argument("--write-size", type=int, default=128, help="bytes per write() (128 = one log line)")
    parser.add_argument("--go", help="a FIFO to open before writing (the start signal)")
    parser.add_argument("--result", required=True)
    args = parser.parse_args()
    line = b"bench stderr flood " + b"x" * 108 + b"\n"  # 128 bytes, like the reference agent's flood
    size = args.write_size
    block = (line * (size // len(line) + 1))[:size]
    total = int(args.mb * 1024 * 1024)
    count, rest = divmod(total, size)
    if args.go:
        with open(args.go, "rb"):
            pass
    write = os.write
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    for _ in range(count):
        write(2, block)  # a pipe is blocking here: os.write returns once every byte is in it
    if rest:
        write(2, block[:rest])
    seconds = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    with open(args.result + ".tmp", "w") as out:
        json.dump({"seconds": seconds, "bytes": total, "writer_cpu_seconds": cpu}, out)
    os.replace(args.result + ".tmp", args.result)  # the bench waits for the file: it appears whole


if __name__ == "__main__":
    main()
