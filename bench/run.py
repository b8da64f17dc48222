"""`make bench`: run every benchmark, print one table of figures against their references, and write
bench/results.json (every script's results plus the machine: CPU model, nproc, RAM, load, Python, kernel).

Run:  .venv/bin/python bench/run.py [--quick] [--only NAME,NAME] [--out bench/results.json]

Each script runs as its own process (its own output passes through) and hands its figures back as JSON
(`--json PATH`). --quick shortens every run (fewer rounds, less data, a smaller fleet) for a smoke check;
its numbers are not the ones to quote. The load average is recorded before and after: on a shared
machine, figures taken under load are noisy, and the JSON says so. Exit status 1 if a script failed;
a missed target is a figure, not a failure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as c

HERE = Path(__file__).resolve().parent

# name -> (full arguments, --quick arguments)
BENCHES: dict[str, tuple[list[str], list[str]]] = {
    "startup": ([], ["--rounds", "3"]),
    "probe_cost": ([], ["--rounds", "3", "--no-wheel"]),
    "shim": ([], ["--rounds", "3", "--idle", "2"]),
    "idle_memory": (["--importtime"], ["--rounds", "1", "--importtime"]),
    "estimates_memory": ([], ["--rounds", "1"]),
    "mcp_throughput": ([], ["--seconds", "1", "--rounds", "1"]),
    "upstream_stall": (["--rounds", "3"], ["--calls", "300"]),
    "stderr_flood": ([], ["--mb", "100", "--rounds", "2"]),
    "witness_overhead": ([], ["--calls", "100", "--rounds", "2", "--stream-mb", "50", "--idle", "3"]),
    "hub_db_size": ([], ["--sessions", "300"]),
    "hub_restart": ([], ["--sessions", "2000"]),
    "fleet": ([], ["--daemons", "10", "--seconds", "10"]),
    "hub_ingest": ([], ["--publishers", "10", "--events", "500"]),
    "redact_fragments": ([], ["--rounds", "300", "--repeat", "1"]),
    "legacy_sessions": ([], ["--rounds", "1", "--abandon", "300"]),
    "listener_flood": ([], ["--rounds", "1", "--seconds", "12", "--probes", "60", "--calls", "30"]),
    "bounded_json": ([], ["--rounds", "1"]),
    "busy_listeners": ([], ["--rounds", "1", "--seconds", "12", "--probes", "40"]),
}


def run_one(name: str, extra: list[str]) -> dict:
    with tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".json", delete=False) as tmp:
        out = Path(tmp.name)
    argv = [sys.executable, str(HERE / f"{name}.py"), *extra, "--json", str(out)]
    print(f"\n== {name}: {' '.join(['bench/' + name + '.py', *extra])}", flush=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(argv, cwd=c.REPO)
        try:
            proc.wait()
        except KeyboardInterrupt:
            # Ctrl-C reached the script too: let it end its daemons rather than kill it mid-cleanup.
            proc.wait(timeout=120)
            raise
        if proc.returncode != 0 or not out.stat().st_size:
            return {"bench": name, "error": f"exit status {proc.returncode}", "figures": []}
        result = json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)
    result["wall_seconds"] = round(time.perf_counter() - t0, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs: a smoke check, not figures to quote")
    parser.add_argument("--only", help="comma list of benchmarks (default: all): " + ",".join(BENCHES))
    parser.add_argument("--out", default=str(HERE / "results.json"))
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    machine = c.machine_info()
    print(f"# machine: {c.machine_line(machine)}")
    if machine["load_average"][0] >= 1.5:
        print("# warning: the machine is busy (load >= 1.5): timings will be noisy")
    results = {}
    for name in names:
        full, quick = BENCHES[name]
        results[name] = run_one(name, quick if args.quick else full)
    figures = [f for r in results.values() for f in r["figures"]]
    failed = [n for n, r in results.items() if "error" in r]
    after = c.machine_info()
    command = "make bench" if not args.quick else "bench/run.py --quick"
    print(f"\n== results ({command}; {'QUICK runs, not figures to quote; ' if args.quick else ''}"
          f"load before {machine['load_average'][0]:.2f}, after {after['load_average'][0]:.2f})")
    print(c.table(figures))
    for name in failed:
        print(f"# {name} FAILED: {results[name]['error']}")
    print(f"# machine: {c.machine_line(machine)}")
    payload = {"command": command, "quick": args.quick, "machine": machine,
               "load_average_after": after["load_average"], "figures": figures, "benches": results}
    Path(args.out).write_text(json.dumps(payload, indent=2) + "\n")
    print(f"# written: {args.out}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
