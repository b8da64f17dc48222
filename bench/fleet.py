"""A fleet on one machine: --daemons `agentctl serve` daemons, each with an idle reference ACP agent: their
total memory, and the CPU an idle daemon burns per minute.

Run:  .venv/bin/python bench/fleet.py [--daemons 50] [--seconds 60] [--batch 8] [--json PATH]

Daemons start --batch at a time (each batch until every ready line; the ready line follows the agent's
ACP initialize), so a small machine does not push agents past their initialize timeout. Once all are
up and their RSS holds still: RSS and PSS summed over the daemons and, separately, over the agents
(PSS shares the interpreter's and libraries' pages among the processes that map them, so the PSS sum
is what the fleet really occupies), and over the agents' shims. Then CPU seconds (user + system, psutil) of every daemon and agent
over a --seconds window with nothing asking anything of them: the idle cost of supervision, tree
tracking and timers, given per process per minute. Its reference is the CPU a fixed workload
(_common.CALIBRATION) takes on the same machine in the same run, so the ratio tells a regression from a
slower or busier machine.

Every process is ended on exit, on failure and on Ctrl-C: each daemon runs in its own process group,
and the agents (in sessions of their own) are killed by pid after their daemons.

Not a test: numbers depend on the machine. The issue's target: PSS per daemon <= 60 MB.
"""

from __future__ import annotations

import argparse
import time

import _common as c


def start_fleet(args: argparse.Namespace, root) -> list[c.Daemon]:
    daemons: list[c.Daemon] = []
    for first in range(0, args.daemons, args.batch):
        batch = [c.start_daemon(root / f"d{n:03d}", agent=[c.REF_AGENT], execution_id=f"fleet-{n:03d}", wait=False)
                 for n in range(first, min(first + args.batch, args.daemons))]
        for daemon in batch:
            c.await_ready(daemon, timeout=180)
        daemons += batch
        print(f"#   {len(daemons)}/{args.daemons} ready", flush=True)
    return daemons


def measure(args: argparse.Namespace) -> dict:
    with c.temp_dir("fleet-") as root:
        daemons: list[c.Daemon] = []
        try:
            t0 = time.perf_counter()
            daemons = start_fleet(args, root)
            started = time.perf_counter() - t0
            for daemon in daemons:
                c.wait_until(lambda d=daemon: c.agent_ready(d), 60, "an agent to be ready")
            agents = [c.wait_until(d.agent_pid, 10, "an agent's pid") for d in daemons]
            shims = [c.wait_until(d.shim_pid, 10, "an agent shim's pid") for d in daemons]
            c.settled_rss(daemons[-1].pid)
            mem = {"daemons": [c.memory(d.pid) for d in daemons], "agents": [c.memory(a) for a in agents],
                   "shims": [c.memory(s) for s in shims]}
            cpu0 = ([c.cpu_seconds(d.pid) for d in daemons], [c.cpu_seconds(a) for a in agents])
            w0 = time.perf_counter()
            time.sleep(args.seconds)  # the measurement window itself: idle processes, nothing to wait for
            window = time.perf_counter() - w0
            cpu1 = ([c.cpu_seconds(d.pid) for d in daemons], [c.cpu_seconds(a) for a in agents])
        finally:
            c.end_all([d.proc for d in daemons])
    per_minute = 60.0 / window / len(daemons)
    return {
        "daemons": len(daemons),
        "start_seconds": started,
        "window_seconds": window,
        "memory": mem,
        "total": {who: {k: sum(m[k] for m in rows) for k in ("rss", "uss", "pss")} for who, rows in mem.items()},
        "cpu_seconds_per_minute": {
            "daemon": (sum(cpu1[0]) - sum(cpu0[0])) * per_minute,
            "agent": (sum(cpu1[1]) - sum(cpu0[1])) * per_minute,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daemons", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0, help="the CPU measurement window")
    parser.add_argument("--batch", type=int, default=8, help="daemons started side by side")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    print(f"# fleet: {args.daemons} daemons with idle reference agents, {args.seconds:g} s CPU window")
    r = measure(args)
    calibration = c.calibration_cpu()  # after the fleet: the same machine, the same run
    n = r["daemons"]
    t = r["total"]
    print(f"#   started in {r['start_seconds']:.1f} s; daemons RSS {t['daemons']['rss'] / c.MB:.0f} MB, "
          f"PSS {t['daemons']['pss'] / c.MB:.0f} MB; agents RSS {t['agents']['rss'] / c.MB:.0f} MB, "
          f"PSS {t['agents']['pss'] / c.MB:.0f} MB")
    cpu = r["cpu_seconds_per_minute"]
    r["calibration_cpu_seconds"] = calibration
    r.update({"bench": "fleet", "params": {"daemons": args.daemons, "seconds": args.seconds, "batch": args.batch}})
    r["figures"] = [
        c.figure(f"fleet of {n}: daemons total PSS", t["daemons"]["pss"], unit="B"),
        c.figure(f"fleet of {n}: daemons total RSS", t["daemons"]["rss"], unit="B"),
        c.figure(f"fleet of {n}: agents total PSS", t["agents"]["pss"], unit="B"),
        c.figure(f"fleet of {n}: agent shims total PSS", t["shims"]["pss"], unit="B"),
        c.figure(f"fleet of {n}: PSS per daemon", t["daemons"]["pss"] / n, unit="B", target=("value", "<=", 60 * c.MB)),
        c.figure(f"fleet of {n}: CPU s per idle daemon per minute", cpu["daemon"], calibration, unit="s",
                 reference_name="fixed workload's CPU, same run"),
        c.figure(f"fleet of {n}: CPU s per idle agent per minute", cpu["agent"], unit="s"),
    ]
    c.emit(r, args.json)


if __name__ == "__main__":
    main()
