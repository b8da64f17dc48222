"""Shared bench helpers: real `agentctl serve` daemons on temporary specs, process cleanup, memory sampling,
interleaved rounds and medians, machine info, and the figures table every bench script and bench/run.py print.

Not a test module: nothing here asserts. A figure is one row of the table: agentctl's value, its reference
measured in the same run, their ratio, the target and whether it was met.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import platform
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# The interpreter running the bench is the venv's (`make bench` uses .venv/bin/python): its console scripts
# sit beside it. The console script is what an operator runs, so startup figures include its wrapper.
BIN = Path(sys.executable).parent
PYTHON = str(BIN / "python")
AGENTCTL = str(BIN / "agentctl")
REF_AGENT = str(BIN / "agentctl-reference-agent")
MB = 1_000_000
MIB = 1024 * 1024


# ---- processes ---------------------------------------------------------------------------------------

_live: set[subprocess.Popen] = set()
_cleanup_installed = False


def install_cleanup() -> None:
    """Every process spawned through `spawn` is ended on exit, on Ctrl-C and on SIGTERM (which becomes an
    exception, so `finally` blocks run first)."""
    global _cleanup_installed
    if _cleanup_installed:
        return
    _cleanup_installed = True
    atexit.register(cleanup_all)

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)


def _pdeathsig_preexec(parent_pid: int):
    """The child-side hook: SIGKILL when this process dies (prctl resolved before the fork)."""
    from agentctl.agent.shim import PR_SET_PDEATHSIG, load_prctl

    prctl = load_prctl()

    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # this process died between fork and prctl
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def spawn(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """Popen in a new session (its own process group, so it and its children can be ended together),
    killed by the kernel if this process dies first (the daemon's own parent-death hook for its agents:
    a daemon killed that way takes its agent with it)."""
    install_cleanup()
    proc = subprocess.Popen(list(argv), start_new_session=True, preexec_fn=_pdeathsig_preexec(os.getpid()), **kwargs)
    _live.add(proc)
    return proc


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def end(proc: subprocess.Popen, timeout: float = 20.0, sig: int = signal.SIGTERM) -> int | None:
    """Ask politely (`sig`), then SIGKILL the process group and every descendant seen before; always reaps.
    A daemon's agent runs in a session of its own, so it is found as a descendant, not by the group."""
    end_all([proc], timeout, sig)
    return proc.returncode


def end_all(procs: Sequence[subprocess.Popen], timeout: float = 20.0, sig: int = signal.SIGTERM) -> None:
    """`end` for many at once: every one is signalled first, so their shutdowns overlap."""
    families = {}
    for proc in procs:
        _live.discard(proc)
        families[proc.pid] = _descendants(proc.pid)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
    deadline = time.monotonic() + timeout
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for child in families[proc.pid]:
            with contextlib.suppress(psutil.Error):
                child.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def wait_cpu(proc: subprocess.Popen) -> float:
    """Reap the process and return the CPU seconds (user + system) it used over its whole life."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    _live.discard(proc)
    return usage.ru_utime + usage.ru_stime


def cleanup_all() -> None:
    end_all(list(_live), timeout=5.0)


def read_line(proc: subprocess.Popen, timeout: float) -> bytes:
    """One line of the process's stdout, or b"" if it closed it or the deadline passed."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return b""
        chunk = os.read(fd, 65536)
        if not chunk:
            return b""
        buf += chunk
    return buf


def timed_run(argv: Sequence[str], **kwargs: Any) -> float:
    """Wall seconds of one run to exit (spawned like the daemons, so both pay the same fork); fails loudly
    on a non-zero exit."""
    t0 = time.perf_counter()
    proc = spawn(argv, stdout=subprocess.DEVNULL, **kwargs)
    code = proc.wait()
    seconds = time.perf_counter() - t0
    _live.discard(proc)
    if code != 0:
        raise subprocess.CalledProcessError(code, list(argv))
    return seconds


def run_cpu(argv: Sequence[str], **kwargs: Any) -> tuple[float, float]:
    """(wall seconds, CPU seconds user + system) of one run to exit; fails loudly on a non-zero exit."""
    t0 = time.perf_counter()
    proc = spawn(argv, stdout=subprocess.DEVNULL, **kwargs)
    cpu = wait_cpu(proc)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, list(argv))
    return seconds, cpu


def timed_to_line(argv: Sequence[str], timeout: float = 60.0) -> float:
    """Wall seconds from the spawn to the first line the process prints (not to its exit: an interpreter's
    teardown is no part of "ready"); the process is then ended, untimed."""
    t0 = time.perf_counter()
    proc = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = read_line(proc, timeout)
        seconds = time.perf_counter() - t0
        if not line:
            raise RuntimeError(f"{argv[0]} printed no line")
        return seconds
    finally:
        end(proc)


# A fixed CPU-bound workload, run in a fresh interpreter in the same run as the figure it calibrates: a figure
# that grew while this did not is a regression, not a slower machine.
CALIBRATION = [PYTHON, "-c", "import json\nd={'kind':'tool_call_observed','server':'kandev','tool':'t','n':0}\n"
               "for i in range(200000):\n    d['n']=i; json.loads(json.dumps(d))"]


def calibration_cpu(rounds: int = 3) -> float:
    """CPU seconds of CALIBRATION (median of `rounds` fresh runs)."""
    return median(run_cpu(CALIBRATION)[1] for _ in range(rounds))


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    """A short directory under /tmp (AF_UNIX paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ---- daemons -----------------------------------------------------------------------------------------


def spec_text(state_dir: Path, *, execution_id: str = "bench-1", agent: Sequence[str] | None = None,
              protocol: str = "acp", extra: str = "") -> str:
    # A JSON string is a valid TOML basic string, so json.dumps quotes argv and paths safely.
    agent_block = f"[agent]\ncommand = {json.dumps(list(agent))}\nprotocol = \"{protocol}\"\n" if agent else ""
    if agent and protocol == "passthrough":
        agent_block += 'strategy = "none"\n'  # no MCP configuration: the stderr path alone
    return f"""
[identity]
task_id = "task-1"
session_id = "session-{execution_id}"
agent_id = "agent-1"
agent_profile_id = "profile-1"
execution_id = "{execution_id}"

[state]
dir = {json.dumps(str(state_dir))}

{agent_block}
{extra}
"""


@dataclass
class Daemon:
    proc: subprocess.Popen
    ready: dict[str, Any]
    dir: Path
    seconds_to_ready: float

    @property
    def pid(self) -> int:
        return self.proc.pid

    def shim_pid(self) -> int | None:
        """The agent's shim: the daemon's child, the agent's parent."""
        try:
            children = psutil.Process(self.pid).children()
        except psutil.Error:
            return None
        return children[0].pid if children else None

    def agent_pid(self) -> int | None:
        shim = self.shim_pid()
        try:
            children = psutil.Process(shim).children() if shim is not None else []
        except psutil.Error:
            return None
        return children[0].pid if children else None

    def control(self, timeout: float = 30.0) -> Any:
        from agentctl.control.client import ControlClient

        return ControlClient(Path(self.ready["control_socket"]), timeout=timeout)

    def stop(self) -> int | None:
        return end(self.proc)


def start_daemon(directory: Path, *, agent: Sequence[str] | None = None, protocol: str = "acp",
                 env: dict[str, str] | None = None, execution_id: str = "bench-1", timeout: float = 120.0,
                 wait: bool = True) -> Daemon:
    """`agentctl serve` (the console script) on a fresh spec in `directory`; returns after its ready line,
    with the seconds from spawn to that line. With wait=False it returns at once (ready is {}); finish
    with `await_ready`, so many daemons can start side by side."""
    directory.mkdir(parents=True, exist_ok=True)
    spec = directory / "spec.toml"
    spec.write_text(spec_text(directory / "state", execution_id=execution_id, agent=agent, protocol=protocol))
    with open(directory / "serve.log", "ab") as log:
        t0 = time.perf_counter()
        proc = spawn([AGENTCTL, "serve", str(spec), "--socket", str(directory / "c.sock")],
                     stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, cwd=REPO,
                     env={**os.environ, **(env or {})})
    daemon = Daemon(proc, {}, directory, -t0)
    if wait:
        await_ready(daemon, timeout)
    return daemon


def await_ready(daemon: Daemon, timeout: float = 120.0) -> Daemon:
    line = read_line(daemon.proc, timeout)
    if daemon.seconds_to_ready < 0:
        daemon.seconds_to_ready += time.perf_counter()
    if not line:
        end(daemon.proc, timeout=5)
        log = (daemon.dir / "serve.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"agentctl serve did not become ready (exit {daemon.proc.returncode}): {log}")
    daemon.ready = json.loads(line)
    return daemon


def wait_until(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> Any:
    """The predicate's first truthy value, polled until `timeout` seconds have passed; TimeoutError after."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
    return value


def agent_ready(daemon: Daemon) -> bool:
    """The daemon's readiness includes its agent (ACP initialize answered)."""
    _, status = daemon.control().get("/v1/status")
    return bool(status.get("ready"))


# ---- memory and CPU ----------------------------------------------------------------------------------


def memory(pid: int) -> dict[str, int]:
    """RSS, USS and PSS in bytes (PSS shares every shared page among the processes mapping it)."""
    info = psutil.Process(pid).memory_full_info()
    return {"rss": info.rss, "uss": info.uss, "pss": getattr(info, "pss", info.uss)}


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def settled_rss(pid: int, *, window: float = 1.0, tolerance: int = 256 * 1024, timeout: float = 20.0) -> int:
    """RSS once it has not moved by more than `tolerance` for `window` seconds (or at the timeout)."""
    ps = psutil.Process(pid)
    deadline = time.monotonic() + timeout
    last = ps.memory_info().rss
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = ps.memory_info().rss
        if abs(now - last) > tolerance:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since >= window:
            return now
    return ps.memory_info().rss


class PeakRss:
    """Samples a process's RSS in a thread (every `interval` s) while the `with` block runs; `.peak`."""

    def __init__(self, pid: int, interval: float = 0.01) -> None:
        self._ps = psutil.Process(pid)
        self._interval = interval
        self._stop = threading.Event()
        self.peak = self.start = self._ps.memory_info().rss
        self.samples = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.peak = max(self.peak, self._ps.memory_info().rss)
                self.samples += 1
            except psutil.Error:
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ---- rounds and statistics -------------------------------------------------------------------------------


def interleaved(rounds: int, names: Sequence[str]) -> Iterator[tuple[int, str]]:
    """(round, name) pairs; every other round runs the names in reverse, so drift hits each side alike."""
    for r in range(rounds):
        for name in names if r % 2 == 0 else tuple(reversed(names)):
            yield r, name


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def percentile(values: Sequence[float], q: int) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


# ---- figures and the table ---------------------------------------------------------------------------


def figure(name: str, value: float | None, reference: float | None = None, *, unit: str = "",
           reference_name: str = "", target: tuple[str, str, float] | None = None, note: str = "") -> dict[str, Any]:
    """One table row. `target` is (what, op, bound): what is "ratio" (value / reference) or "value";
    op is "<=" or ">=". `met` is None when there is no target or nothing to compare."""
    ratio = value / reference if value is not None and reference else None
    met = None
    target_text = ""
    if target is not None:
        what, op, bound = target
        subject = ratio if what == "ratio" else value
        target_text = f"ratio {op} {bound:g}" if what == "ratio" else f"{op} {fmt(bound, unit)}"
        if subject is not None:
            met = subject <= bound if op == "<=" else subject >= bound
    return {"figure": name, "agentctl": value, "reference": reference, "reference_name": reference_name,
            "unit": unit, "ratio": ratio, "target": target_text, "met": met, "note": note}


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "B":
        return f"{value / MB:.1f} MB"
    if unit == "s":
        return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"
    if unit == "ms":
        return f"{value:.2f} ms"
    if not unit:
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:,.1f} {unit}" if abs(value) < 1000 else f"{value:,.0f} {unit}"


def table(figures: Sequence[dict[str, Any]]) -> str:
    head = ("figure", "agentctl", "reference", "ratio", "target", "met?")
    rows = [head]
    for f in figures:
        met = {True: "yes", False: "NO", None: "-"}[f["met"]]
        ratio = "-" if f["ratio"] is None else f"{f['ratio']:.3f}"
        ref = fmt(f["reference"], f["unit"])
        if f.get("reference_name") and f["reference"] is not None:
            ref = f"{ref} ({f['reference_name']})"
        rows.append((f["figure"], fmt(f["agentctl"], f["unit"]), ref, ratio, f["target"] or "-", met))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for k, r in enumerate(rows):
        cells = [c.ljust(w) if i in (0, 2, 4) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---- machine and output --------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    model = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu_model": model,
        "nproc": os.cpu_count(),
        "ram_bytes": psutil.virtual_memory().total,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "kernel": f"{platform.system()} {platform.release()}",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def machine_line(info: dict[str, Any] | None = None) -> str:
    m = info or machine_info()
    load = " ".join(f"{x:.2f}" for x in m["load_average"])
    return (f"{m['cpu_model']}, {m['nproc']} CPUs, {m['ram_bytes'] / 2**30:.1f} GiB RAM, load {load}, "
            f"Python {m['python']}, {m['kernel']}")


def root_bench_args(parser: Any, name: str) -> Any:
    """The parsed arguments (plus --json) of a bench that needs root (setpriv to another uid, prlimit); None,
    with an empty result emitted, when not root."""
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    if os.geteuid() == 0:
        return args
    print(f"# {name}: needs root (setpriv to another uid, prlimit); skipped")
    emit({"bench": name, "skipped": "not root", "figures": []}, args.json)
    return None


def emit(result: dict[str, Any], json_path: str | None) -> None:
    """Print the figures table and, with --json, write the result (with its machine info) there."""
    result.setdefault("machine", machine_info())
    print(table(result["figures"]))
    print(f"# machine: {machine_line(result['machine'])}")
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n")
