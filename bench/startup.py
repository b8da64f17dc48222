"""Start to ready: `agentctl serve` until its JSON ready line, against the floor of importing its two big
dependencies until a printed line; plus `agentctl --version` against a bare interpreter.

Run:  .venv/bin/python bench/startup.py [--rounds 7] [--json PATH]

Measured from just before the spawn to the moment the line is read (wall clock), in interleaved rounds
(medians), after one unmeasured warm-up of each (page cache):
- floor:         .venv/bin/python -c "import mcp.server, aiohttp.web; print(...)" until its line: timed to a
                 printed line like the daemon, not to the interpreter's exit (its teardown, ~0.3 s with these
                 modules loaded, is no part of being ready)
- serve:         .venv/bin/agentctl serve SPEC --socket ... with no [agent]: the daemon's own start
- serve + agent: the same with `[agent] command = ["agentctl-reference-agent"]`, protocol acp: the ready
                 line comes after the agent's ACP initialize was answered, so this includes a second
                 interpreter starting (the agent's own imports) and one ACP round trip; its reference is
                 the floor plus the agent alone (below), since the daemon starts the agent once it is up
- agent alone:   agentctl-reference-agent spawned directly until its answer to an ACP initialize
- --version:     .venv/bin/agentctl --version, against .venv/bin/python -c pass
The console script (.venv/bin/agentctl) is what an operator and a service unit run, so it is what is
timed; it is a three-line wrapper around agentctl.cli:main, the same work as `python -m agentctl.cli`
without runpy. Each daemon gets a fresh state directory and is stopped (untimed) after its ready line.

Not a test: numbers depend on the machine. The issue's target: serve / floor <= 1.3.
"""

from __future__ import annotations

import argparse
import subprocess
import time

import _common as c

FLOOR = [c.PYTHON, "-c", "import mcp.server, aiohttp.web; print('imported', flush=True)"]
BARE = [c.PYTHON, "-c", "pass"]
VERSION = [c.AGENTCTL, "--version"]
INITIALIZE = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}\n'
KINDS = ("floor", "serve", "serve+agent", "agent", "bare", "version")


def agent_alone() -> float:
    t0 = time.perf_counter()
    agent = c.spawn([c.REF_AGENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        agent.stdin.write(INITIALIZE)
        agent.stdin.flush()
        answer = c.read_line(agent, 60)
        seconds = time.perf_counter() - t0
        if b'"result"' not in answer:
            raise RuntimeError("the reference agent did not answer ACP initialize")
        return seconds
    finally:
        c.end(agent)


def once(kind: str) -> float:
    if kind == "floor":
        return c.timed_to_line(FLOOR)
    if kind == "bare":
        return c.timed_run(BARE)
    if kind == "version":
        return c.timed_run(VERSION)
    if kind == "agent":
        return agent_alone()
    with c.temp_dir("startup-") as d:
        daemon = c.start_daemon(d, agent=[c.REF_AGENT] if kind == "serve+agent" else None)
        try:
            return daemon.seconds_to_ready
        finally:
            daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    for kind in KINDS:
        once(kind)  # warm-up: page cache and .pyc files, not measured
    runs: dict[str, list[float]] = {k: [] for k in KINDS}
    for _, kind in c.interleaved(args.rounds, KINDS):
        runs[kind].append(once(kind))
    med = {k: c.median(v) for k, v in runs.items()}
    print(f"# start to ready, {args.rounds} interleaved rounds, medians (seconds per round below)")
    for kind in KINDS:
        print(f"#   {kind:<12} {' '.join(f'{x:.3f}' for x in runs[kind])}")
    floor = "import mcp.server, aiohttp.web, to a printed line"
    figures = [
        c.figure("start to ready: serve, no agent", med["serve"], med["floor"], unit="s", reference_name=floor,
                 target=("ratio", "<=", 1.3)),
        c.figure("start to ready: serve + reference ACP agent", med["serve+agent"], med["floor"] + med["agent"],
                 unit="s", reference_name="floor + agent alone to initialize", target=("ratio", "<=", 1.3)),
        # A figure, not a ratio: the agent's start has nothing to do with the daemon's floor.
        c.figure("  (the reference agent alone to initialize)", med["agent"], unit="s"),
        c.figure("agentctl --version", med["version"], med["bare"], unit="s", reference_name="python -c pass"),
    ]
    c.emit({"bench": "startup", "params": {"rounds": args.rounds}, "runs": runs, "medians": med,
            "figures": figures}, args.json)


if __name__ == "__main__":
    main()
