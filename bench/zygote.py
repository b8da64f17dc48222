"""The fork-server question: would `agentctl zygote` + `serve --zygote SOCKET` (a thin proxy per execution, the
daemon forked from a warm parent) beat one plain daemon per execution by enough to carry the design?

Run:  .venv/bin/python bench/zygote.py [--daemons 8] [--rounds 2] [--json PATH]

Side by side in one run, each round interleaved:
- plain: N `agentctl serve` daemons (MCP only), the default today;
- forked: one parent that imports what `serve` imports, runs `gc.freeze()`, and forks one child per daemon;
  each child runs the real `serve` code path (`agentctl.cli.main(["serve", ...])`), so it is the daemon;
- proxy: the thin proxy each execution would need in front of a forked daemon (what the executor starts
  and waits on): a minimal Python process that connects a Unix socket, relays stdio and signals, and waits.
  Its own RSS/PSS and its start to ready (its first line) are measured alone, N side by side.

Per daemon: PSS (shared pages split among the processes mapping them: the figure for a fleet's memory),
RSS, and start to ready (spawn or fork to the daemon's ready line). "forked + proxy" is the cost a fleet
would pay per execution. The decision threshold and the reasons are written in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import _common as c
import psutil

# A thin proxy of the least a production one must do: a socket to the fork-server, stdio passed on, signals
# relayed, the exit status waited for. It imports only what that needs.
PROXY = r"""
import os, select, signal, socket, sys
a, b = socket.socketpair()  # stands in for the fork-server's socket: the bench measures the proxy alone
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
signal.signal(signal.SIGINT, lambda *_: os._exit(0))
sys.stdout.write('{"ready": true}\n'); sys.stdout.flush()
while True:
    r, _, _ = select.select([a, sys.stdin], [], [])
    for f in r:
        data = f.recv(65536) if f is a else os.read(0, 65536)
        if not data:
            os._exit(0)
"""


def _zygote_parent(specs: list[Path], ready_pipe_w: int) -> None:
    """In a forked bench child: import the daemon's world, freeze it, fork one daemon per spec."""
    from agentctl.cli import main  # the console script's module, and through serve what it imports
    import agentctl.daemon.app  # noqa: F401
    import agentctl.mcp_endpoint.server  # noqa: F401
    import agentctl.mcp_endpoint.tools  # noqa: F401

    gc.collect()
    gc.freeze()
    children = []
    for spec in specs:
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.dup2(os.open(spec.parent / "serve.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND), 2)
            os.dup2(ready_pipe_w, 1)  # the daemon's ready line reaches the bench (one short, atomic write)
            code = main(["serve", str(spec), "--socket", str(spec.parent / "c.sock")])
            os._exit(int(code or 0))
        children.append((pid, t0))
    os.write(ready_pipe_w, (json.dumps({"forked": [[p, t] for p, t in children]}) + "\n").encode())
    for pid, _ in children:
        os.waitpid(pid, 0)
    os._exit(0)


def forked(root: Path, n: int) -> dict:
    specs = []
    for i in range(n):
        d = root / f"forked-{i}"
        d.mkdir(parents=True)
        spec = d / "spec.toml"
        spec.write_text(c.spec_text(d / "state", execution_id=f"forked-{i}"))
        specs.append(spec)
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.perf_counter()
    parent = os.fork()
    if parent == 0:
        os.close(r)
        _zygote_parent(specs, w)
    os.close(w)
    t_imported = None
    ready_at: list[float] = []
    forked_at: dict[int, float] = {}
    buf = b""
    deadline = time.monotonic() + 180
    while len(ready_at) < n and time.monotonic() < deadline:
        select.select([r], [], [], 1)
        chunk = os.read(r, 65536)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            msg = json.loads(line)
            if "forked" in msg:
                forked_at = {p: t for p, t in msg["forked"]}
                t_imported = min(forked_at.values())
            else:
                ready_at.append(time.perf_counter())
    children = [p.pid for p in psutil.Process(parent).children()]
    c.settled_rss(children[-1])
    mem = [c.memory(pid) for pid in children]
    parent_mem = c.memory(parent)
    for pid in children:
        os.kill(pid, signal.SIGTERM)
    os.waitpid(parent, 0)
    os.close(r)
    firsts = sorted(ready_at)
    return {
        "pss": c.median(m["pss"] for m in mem), "rss": c.median(m["rss"] for m in mem),
        "parent_pss": parent_pss_share(parent_mem, n),
        "import_seconds": (t_imported - t0) if t_imported else None,
        # From the fork of each daemon to its ready line: the i-th ready line against the i-th fork.
        "ready_seconds": c.median(t - f for t, f in zip(firsts, sorted(forked_at.values()))) if forked_at else None,
    }


def parent_pss_share(mem: dict, n: int) -> float:
    return mem["pss"] / n  # the warm parent's own share, spread over the daemons it serves


def plain(root: Path, n: int) -> dict:
    daemons = [c.start_daemon(root / f"plain-{i}", agent=None, execution_id=f"plain-{i}", wait=False)
               for i in range(n)]
    try:
        for d in daemons:
            c.await_ready(d, 180)
        c.settled_rss(daemons[-1].pid)
        mem = [c.memory(d.pid) for d in daemons]
    finally:
        c.end_all([d.proc for d in daemons])
    return {"pss": c.median(m["pss"] for m in mem), "rss": c.median(m["rss"] for m in mem),
            "ready_seconds": c.median(d.seconds_to_ready for d in daemons)}


def proxies(n: int) -> dict:
    procs, starts = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        procs.append(subprocess.Popen([sys.executable, "-c", PROXY], stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        starts.append(t0)
    ready = []
    for p, t0 in zip(procs, starts):
        p.stdout.readline()
        ready.append(time.perf_counter() - t0)
    c.settled_rss(procs[-1].pid)
    mem = [c.memory(p.pid) for p in procs]
    for p in procs:
        p.terminate()
        p.wait(10)
    return {"pss": c.median(m["pss"] for m in mem), "rss": c.median(m["rss"] for m in mem),
            "ready_seconds": c.median(ready)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daemons", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"plain": [], "forked": [], "proxy": []}
    with c.temp_dir("zygote-") as root:
        for r, name in c.interleaved(args.rounds, ("plain", "forked", "proxy")):
            d = root / f"r{r}"
            d.mkdir(exist_ok=True)
            runs[name].append({"plain": lambda: plain(d, args.daemons), "forked": lambda: forked(d, args.daemons),
                               "proxy": lambda: proxies(args.daemons)}[name]())
            print(f"#   round {r} {name}: {runs[name][-1]}", flush=True)
    med = {k: {f: c.median(x[f] for x in v if x.get(f) is not None) for f in v[0]} for k, v in runs.items()}
    p, f, x = med["plain"], med["forked"], med["proxy"]
    fleet = f["pss"] + f["parent_pss"] + x["pss"]
    result = {"bench": "zygote", "params": vars(args), "runs": runs, "figures": [
        c.figure("PSS per daemon: plain", p["pss"], unit="B"),
        c.figure("PSS per daemon: forked child", f["pss"], p["pss"], unit="B", reference_name="plain"),
        c.figure("PSS per execution: thin proxy alone", x["pss"], p["pss"], unit="B", reference_name="plain"),
        c.figure("PSS per execution: forked + proxy + parent share", fleet, p["pss"], unit="B",
                 reference_name="plain", target=("ratio", "<=", 0.6)),
        c.figure("start to ready: plain daemon", p["ready_seconds"], unit="s"),
        c.figure("start to ready: forked daemon (fork to ready line)", f["ready_seconds"], p["ready_seconds"],
                 unit="s", reference_name="plain"),
        c.figure("start to ready: thin proxy", x["ready_seconds"], p["ready_seconds"], unit="s",
                 reference_name="plain"),
        c.figure("the fork-server's imports (once per host)", f["import_seconds"], unit="s"),
    ]}
    c.emit(result, args.json)


if __name__ == "__main__":
    main()
