"""Exec probe cost: CPU of one `agentctl health --ready` against a live daemon, beside `python -c pass`, curl and the
full CLI.

Run:  .venv/bin/python bench/probe_cost.py [--rounds 15] [--json PATH]

One real MCP-only `agentctl serve`; then, in interleaved rounds (medians), each of these run to exit, its CPU
(user + system, from wait4) and wall time:
- fast:  .venv/bin/agentctl health --ready --socket S   (what the Kubernetes example's probes run: the fast path)
- full:  the same with `--timeout 5` (the default value: any extra flag takes the full CLI: argparse's parser
         tree, http.client, the contract), which is what every probe cost before the fast path
- bare:  .venv/bin/python -c pass   (the interpreter's floor; the goal is fast <= 2x this and <= 35 ms)
- curl:  curl -sf --unix-socket S http://localhost/v1/health   (what a probe in C costs)
- stdlib: .venv/bin/python -c "import pathlib, json, socket"   (the standard modules the fast path cannot do
         without: the socket location rules work on paths; the remaining floor of a probe in Python)
The console script from this venv is timed (an editable install: its finder imports pathlib and re at
start-up for every interpreter of the venv, `python -c pass` included).

Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import shutil

import _common as c

KINDS = ("fast", "full", "bare", "stdlib", "curl")


def argv_of(kind: str, sock: str) -> list[str]:
    return {
        "fast": [c.AGENTCTL, "health", "--ready", "--socket", sock],
        "full": [c.AGENTCTL, "health", "--ready", "--socket", sock, "--timeout", "5"],
        "bare": [c.PYTHON, "-c", "pass"],
        "stdlib": [c.PYTHON, "-c", "import pathlib, json, socket"],
        "curl": ["curl", "-sf", "-o", "/dev/null", "--unix-socket", sock, "http://localhost/v1/health"],
    }[kind]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    kinds = KINDS if shutil.which("curl") else KINDS[:-1]
    with c.temp_dir("probe-") as d:
        daemon = c.start_daemon(d)
        try:
            sock = daemon.ready["control_socket"]
            c.wait_until(lambda: c.run_cpu(argv_of("fast", sock)), 30, "the daemon to be ready")
            for kind in kinds:
                c.run_cpu(argv_of(kind, sock))  # warm-up: page cache and .pyc files
            runs: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
            for _, kind in c.interleaved(args.rounds, kinds):
                runs[kind].append(c.run_cpu(argv_of(kind, sock)))
        finally:
            daemon.stop()
    cpu = {k: c.median(cpu for _, cpu in v) * 1000 for k, v in runs.items()}
    wall = {k: c.median(w for w, _ in v) * 1000 for k, v in runs.items()}
    print(f"# exec probe, {args.rounds} interleaved rounds, medians: CPU ms (wall ms)")
    for kind in kinds:
        print(f"#   {kind:<5} {cpu[kind]:7.1f} ({wall[kind]:.1f})")
    figures = [
        c.figure("exec probe CPU: agentctl health --ready", cpu["fast"], cpu["bare"], unit="ms",
                 reference_name="python -c pass", target=("ratio", "<=", 2.0)),
        c.figure("  the same against its goal", cpu["fast"], unit="ms", target=("value", "<=", 35.0)),
        c.figure("  the same through the full CLI (as before the fast path)", cpu["full"], cpu["fast"], unit="ms",
                 reference_name="fast path"),
    ]
    figures.append(c.figure("  the fast path against its stdlib floor", cpu["fast"], cpu["stdlib"], unit="ms",
                            reference_name="python -c 'import pathlib, json, socket'"))
    if "curl" in cpu:
        figures.append(c.figure("  the fast path against curl", cpu["fast"], cpu["curl"], unit="ms",
                                reference_name="curl --unix-socket"))
    c.emit({"bench": "probe_cost", "params": {"rounds": args.rounds}, "runs": runs, "cpu_ms": cpu, "wall_ms": wall,
            "figures": figures}, args.json)


if __name__ == "__main__":
    main()
