"""The agent's shim (agentctl/agent/shim.py): what it adds to every agent start, and what it occupies while
the agent runs.

Run:  .venv/bin/python bench/shim.py [--rounds 15] [--json PATH]

In one process, interleaved rounds (medians), after one unmeasured warm-up of each:
- through the shim: `Supervisor.start([sleep, 60])`, which returns once the shim reports the agent's exec,
  until the agent's pid is known; then the agent stopped (untimed);
- direct:           asyncio.create_subprocess_exec of the same argv in a new session (what the daemon did
                    before the shim), until it returns.
Both to the first byte of output as well (`echo ready` as the agent, until its line is read).
The shim's memory (RSS, PSS, USS) is sampled once it holds still, with a `sleep` agent running, against a
bare `python -I -S -c` interpreter of the same build (the floor of any Python shim); then its CPU over
--idle seconds of an idle agent (it waits in poll(): nothing).

Not a test: numbers depend on the machine. Targets: none in the issue ("cheap: measure"); reported as measured.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import time

import _common as c

from agentctl.agent.supervisor import Supervisor

SLEEP = shutil.which("sleep") or "/bin/sleep"
ECHO = shutil.which("echo") or "/bin/echo"
KINDS = ("shim-exec", "direct-exec", "shim-output", "direct-output")


async def once(kind: str) -> float:
    argv = [ECHO, "ready"] if kind.endswith("output") else [SLEEP, "60"]
    if kind.startswith("shim"):
        supervisor = Supervisor(subreaper=True)
        t0 = time.perf_counter()
        await supervisor.start(argv, cwd=None, env={})
        if kind.endswith("output"):
            await supervisor.stdout.readline()
        seconds = time.perf_counter() - t0
        await supervisor.stop(grace=0.0, term_timeout=1.0)
        return seconds
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE, start_new_session=True)
    if kind.endswith("output"):
        await proc.stdout.readline()
    seconds = time.perf_counter() - t0
    if not kind.endswith("output"):
        proc.kill()  # sleep runs; echo ends by itself (a kill after its exit would reap it under asyncio)
    await proc.wait()
    return seconds


async def shim_memory(idle_seconds: float) -> dict[str, float]:
    supervisor = Supervisor()
    await supervisor.start([SLEEP, "60"], cwd=None, env={})
    try:
        shim = supervisor.process.shim_pid
        await asyncio.to_thread(c.settled_rss, shim, window=0.5)
        cpu0 = c.cpu_seconds(shim)
        await asyncio.sleep(idle_seconds)  # the measurement window: an idle agent, nothing asked of the shim
        return {**c.memory(shim), "idle_cpu": c.cpu_seconds(shim) - cpu0}
    finally:
        await supervisor.stop(grace=0.0, term_timeout=1.0)


def bare_interpreter_memory() -> dict[str, int]:
    proc = c.spawn([c.PYTHON, "-I", "-S", "-c", "import signal; signal.pause()"])
    try:
        c.settled_rss(proc.pid, window=0.5)
        return c.memory(proc.pid)
    finally:
        c.end(proc)


async def measure(rounds: int, idle_seconds: float) -> dict:
    for kind in KINDS:
        await once(kind)  # warm-up: page cache, .pyc files
    runs: dict[str, list[float]] = {k: [] for k in KINDS}
    for _, kind in c.interleaved(rounds, KINDS):
        runs[kind].append(await once(kind))
    return {"runs": runs, "shim": await shim_memory(idle_seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU measured on the shim")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    r = asyncio.run(measure(args.rounds, args.idle))
    bare = bare_interpreter_memory()
    med = {k: c.median(v) for k, v in r["runs"].items()}
    print(f"# agent start through the shim vs direct, {args.rounds} interleaved rounds, medians (seconds)")
    for kind in KINDS:
        print(f"#   {kind:<14} {' '.join(f'{x * 1000:.1f}' for x in r['runs'][kind])} ms")
    shim = r["shim"]
    print(f"# shim memory: RSS {shim['rss'] / c.MB:.1f} MB, PSS {shim['pss'] / c.MB:.1f} MB, USS {shim['uss'] / c.MB:.1f} MB"
          f" (bare python -I -S: RSS {bare['rss'] / c.MB:.1f} MB, PSS {bare['pss'] / c.MB:.1f} MB)")
    figures = [
        c.figure("agent start to exec: through the shim", med["shim-exec"], med["direct-exec"], unit="s",
                 reference_name="direct spawn (no shim)"),
        c.figure("agent start to its first output line: through the shim", med["shim-output"], med["direct-output"],
                 unit="s", reference_name="direct spawn (no shim)"),
        c.figure("agent shim PSS while the agent runs", shim["pss"], bare["pss"], unit="B",
                 reference_name="bare python -I -S"),
        c.figure("agent shim RSS / USS", shim["rss"], None, unit="B", note=f"USS {shim['uss'] / c.MB:.1f} MB"),
        c.figure(f"agent shim CPU while the agent idles ({args.idle:g} s)", shim["idle_cpu"], unit="s"),
    ]
    c.emit({"bench": "shim", "params": {"rounds": args.rounds}, "runs": r["runs"], "medians": med,
            "memory": {"shim": shim, "bare": bare}, "figures": figures}, args.json)


if __name__ == "__main__":
    main()
