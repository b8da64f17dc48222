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
start-up for every interpreter of the venv, `python -c pass` included). Beside it, as an operator installs it:
- wheel:      agentctl health --ready --socket S from a temporary venv holding a wheel built from this tree
              (`pip wheel --no-deps`) and its dependencies pinned by constraints.txt (no editable finder)
- wheel-bare: that venv's own `python -c pass`
- wheel-stdlib, wheel-socket: that venv's `python -c "import pathlib, json, socket"` and `python -c "import json,
              socket"`: the floor of any probe in Python that opens a socket (the stdlib `socket` module imports
              `enum` and `selectors`), with and without the path rules' `pathlib`
both run from that venv's directory (the source tree is not importable there). --no-wheel leaves them out
(building the venv takes a minute or so).

Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import venv
from pathlib import Path

import _common as c

KINDS = ("fast", "full", "bare", "stdlib", "curl")
WHEEL_KINDS = ("wheel", "wheel-bare", "wheel-stdlib", "wheel-socket")


def installed_wheel(work: Path) -> Path:
    """A venv under `work` with agentctl installed from a freshly built wheel (packaging/build.py builds it,
    as `make dist` does) and its pinned dependencies; returns that venv."""
    spec = importlib.util.spec_from_file_location("agentctl_packaging_build", c.REPO / "packaging" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    wheel = build.build_wheel(work / "dist", work)
    env_dir = work / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    # pip's output (index warnings included) only when it fails: the table is what this prints.
    installed = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", "-c",
                                str(c.REPO / "constraints.txt"), str(wheel)], cwd=work, capture_output=True, text=True)
    if installed.returncode != 0:
        raise SystemExit(f"installing the wheel failed:\n{installed.stdout}{installed.stderr}")
    return env_dir


def argv_of(kind: str, sock: str, wheel_venv: Path | None = None) -> list[str]:
    if kind in WHEEL_KINDS:
        assert wheel_venv is not None
        bin_dir = wheel_venv / "bin"
        if kind == "wheel":
            return [str(bin_dir / "agentctl"), "health", "--ready", "--socket", sock]
        code = {"wheel-bare": "pass", "wheel-stdlib": "import pathlib, json, socket", "wheel-socket": "import json, socket"}
        return [str(bin_dir / "python"), "-c", code[kind]]
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
    parser.add_argument("--no-wheel", action="store_true", help="leave out the installed-wheel rows")
    args = parser.parse_args()
    kinds = KINDS if shutil.which("curl") else KINDS[:-1]
    with c.temp_dir("probe-") as d:
        wheel_venv = None
        if not args.no_wheel:
            wheel_venv = installed_wheel(d / "wheel")
            kinds = (*kinds, *WHEEL_KINDS)

        def run(kind: str) -> tuple[float, float]:
            cwd = wheel_venv if kind in WHEEL_KINDS else None
            return c.run_cpu(argv_of(kind, sock, wheel_venv), cwd=cwd)

        daemon = c.start_daemon(d / "daemon")
        try:
            sock = daemon.ready["control_socket"]
            c.wait_until(lambda: run("fast"), 30, "the daemon to be ready")
            for kind in kinds:
                run(kind)  # warm-up: page cache and .pyc files
            runs: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
            for _, kind in c.interleaved(args.rounds, kinds):
                runs[kind].append(run(kind))
        finally:
            daemon.stop()
    cpu = {k: c.median(cpu for _, cpu in v) * 1000 for k, v in runs.items()}
    wall = {k: c.median(w for w, _ in v) * 1000 for k, v in runs.items()}
    print(f"# exec probe, {args.rounds} interleaved rounds, medians: CPU ms (wall ms)")
    for kind in kinds:
        print(f"#   {kind:<10} {cpu[kind]:7.1f} ({wall[kind]:.1f})")
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
    if "wheel" in cpu:
        figures += [
            c.figure("exec probe CPU from an installed wheel", cpu["wheel"], cpu["wheel-bare"], unit="ms",
                     reference_name="that venv's python -c pass", target=("ratio", "<=", 2.0)),
            c.figure("  the same against its goal", cpu["wheel"], unit="ms", target=("value", "<=", 35.0)),
            c.figure("  the floor of a Python probe with a socket, from that venv", cpu["wheel-socket"],
                     cpu["wheel-bare"], unit="ms", reference_name="that venv's python -c pass"),
            c.figure("  the wheel's probe against its stdlib floor", cpu["wheel"], cpu["wheel-stdlib"], unit="ms",
                     reference_name="that venv's python -c 'import pathlib, json, socket'"),
        ]
    c.emit({"bench": "probe_cost", "params": {"rounds": args.rounds}, "runs": runs, "cpu_ms": cpu, "wall_ms": wall,
            "figures": figures}, args.json)


if __name__ == "__main__":
    main()
