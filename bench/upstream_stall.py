"""MCP latency with the upstream stalled against healthy, and healthy against no upstream at all: p50 and p99
ratios, daemon memory, and the repair after the stall.

Run:  .venv/bin/python bench/upstream_stall.py [--calls 2500] [--rounds 1] [--json PATH]

Real processes: `agentctl hub serve` and `agentctl serve` (MCP-only, profile "external", `[upstream]` on
the hub). The SDK client (legacy era) makes --calls sequential `tools/call describe_execution` calls; each
is evidence the daemon publishes (tool_call_observed), and the tool itself is a config op the daemon
answers locally, so the call measures the MCP path plus evidence publishing, not the orchestrator.
Phase 1: hub healthy. Phase 2: the hub is SIGSTOPped (it reads nothing; the daemon's socket buffers fill,
its queue overflows and drops, counted). Then SIGCONT, and the time until the hub's database equals the
daemon's report (the resync snapshot repairing the gap). Also the daemon's RSS before and after the stall.
Each round starts with a phase against a second daemon, the same spec without `[upstream]` (its evidence
goes nowhere): what publishing upstream costs a call, healthy against none.
With --rounds N the three phases alternate N times on the same processes; medians of the per-round figures.

Not a test: numbers depend on the machine. The issue's target: p99 stalled / healthy <= 1.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx2  # noqa: E402
import psutil  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from agentctl.control.client import ControlClient  # noqa: E402
from agentctl.evidence.contract.base import encode  # noqa: E402
from agentctl.hub.hub_store import HubStore  # noqa: E402


def _spec(tmp: Path, name: str, upstream: bool) -> Path:
    spec = tmp / f"{name}.toml"
    spec.write_text(f"""
[identity]
task_id = "task-1"
session_id = "session-{name}"
agent_id = "agent-1"
agent_profile_id = "profile-1"
execution_id = "exec-{name}"
[mcp]
profile = "external"
[state]
dir = "{tmp / 'state'}"
""" + (f"[upstream]\nsocket = \"{tmp / 'hub.sock'}\"\n" if upstream else ""))
    return spec


def _start(args: list[str]) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-m", "agentctl.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=REPO)
    return proc, json.loads(proc.stdout.readline())


def _hub_equals_daemon(db: Path, control: ControlClient) -> bool:
    status, report = control.get("/v1/report")
    try:
        store = HubStore(db, readonly=True)
    except Exception:
        return False
    try:
        session = store.load().get("session-1")
    finally:
        store.close()
    return bool(session and session.current.history and json.loads(encode(session.current.history)) == report)


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


@contextlib.asynccontextmanager
async def _client(control: ControlClient) -> AsyncIterator[Client]:
    """An SDK client (legacy era) on the daemon's MCP endpoint, for a session opened on its control socket."""
    control.post("/v1/session/new")
    _, config = control.get("/v1/mcp-config")
    async with httpx2.AsyncClient(headers=config["headers"], timeout=60) as http:
        async with Client(streamable_http_client(config["url"], http_client=http), mode="legacy") as client:
            yield client


async def _calls(client: Client, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        result = await client.call_tool("describe_execution", {})
        out.append((time.perf_counter() - t) * 1000)
        assert result.is_error is False
    return out


async def run(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="stall-bench-", dir="/tmp"))
    hub, _ = _start(["hub", "serve", "--socket", str(tmp / "hub.sock"), "--db", str(tmp / "hub.sqlite3"),
                     "--log-level", "warning"])
    daemon, ready = _start(["serve", str(_spec(tmp, "1", True)), "--socket", str(tmp / "c.sock"),
                            "--log-level", "warning"])
    alone, alone_ready = _start(["serve", str(_spec(tmp, "2", False)), "--socket", str(tmp / "c2.sock"),
                                 "--log-level", "warning"])
    control = ControlClient(Path(ready["control_socket"]), timeout=30)
    rounds: list[dict] = []
    try:
        async with _client(control) as client, _client(ControlClient(Path(alone_ready["control_socket"]))) as bare:
            await _calls(client, 100)  # warm-up
            await _calls(bare, 100)
            for _ in range(args.rounds):  # the phases alternate: drift hits them all alike
                no_upstream = await _calls(bare, args.calls)
                rounds.append({"none_p50_ms": statistics.median(no_upstream), "none_p99_ms": _pct(no_upstream, 99),
                               **await _round(args, client, hub, daemon, control, tmp)})
    finally:
        for proc in (alone, daemon, hub):
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)

    def med(key: str) -> float:
        return round(statistics.median(r[key] for r in rounds), 3)

    result = {
        "calls_per_phase": args.calls,
        "rounds": args.rounds,
        "none_p50_ms": med("none_p50_ms"),
        "none_p99_ms": med("none_p99_ms"),
        "healthy_p50_ms": med("healthy_p50_ms"),
        "healthy_p99_ms": med("healthy_p99_ms"),
        "stalled_p50_ms": med("stalled_p50_ms"),
        "stalled_p99_ms": med("stalled_p99_ms"),
        "p99_ratio_stalled_over_healthy": med("p99_ratio"),
        "daemon_rss_growth_bytes": max(r["daemon_rss_growth_bytes"] for r in rounds),
        "dropped_events": sum(r["dropped_events"] for r in rounds),
        "resyncs": rounds[-1]["resyncs"],
        "held_for_upstream_bytes": max(r["held_for_upstream_bytes"] for r in rounds),
        "repair_seconds_after_resume": med("repair_seconds_after_resume"),
        "per_round": rounds,
        "machine": f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
    }
    return result


async def _round(args: argparse.Namespace, client: Client, hub: subprocess.Popen, daemon: subprocess.Popen,
                 control: ControlClient, tmp: Path) -> dict:
    """One healthy phase, then one stalled phase, then the time until the hub is repaired."""
    _, before = control.get("/v1/status")
    healthy = await _calls(client, args.calls)
    rss_before = psutil.Process(daemon.pid).memory_info().rss
    os.kill(hub.pid, signal.SIGSTOP)
    try:
        stalled = await _calls(client, args.calls)
        rss_after = psutil.Process(daemon.pid).memory_info().rss
        _, status = control.get("/v1/status")
    finally:
        os.kill(hub.pid, signal.SIGCONT)
    resumed = time.perf_counter()
    while not _hub_equals_daemon(tmp / "hub.sqlite3", control):
        await asyncio.sleep(0.02)
    upstream = status["upstream"]
    return {
        "healthy_p50_ms": statistics.median(healthy),
        "healthy_p99_ms": _pct(healthy, 99),
        "stalled_p50_ms": statistics.median(stalled),
        "stalled_p99_ms": _pct(stalled, 99),
        "p99_ratio": _pct(stalled, 99) / _pct(healthy, 99),
        "daemon_rss_growth_bytes": rss_after - rss_before,
        "dropped_events": upstream["dropped_events"] - before["upstream"]["dropped_events"],
        "resyncs": upstream["resyncs"],
        "held_for_upstream_bytes": upstream["buffered_bytes"],
        "repair_seconds_after_resume": time.perf_counter() - resumed,
    }


def figures(r: dict) -> list[dict]:
    import _common as c

    return [
        c.figure("MCP tools/call p50, upstream healthy", r["healthy_p50_ms"], r["none_p50_ms"], unit="ms",
                 reference_name="no upstream"),
        c.figure("MCP tools/call p99, upstream healthy", r["healthy_p99_ms"], r["none_p99_ms"], unit="ms",
                 reference_name="no upstream"),
        c.figure("MCP p99, upstream stalled", r["stalled_p99_ms"], r["healthy_p99_ms"], unit="ms",
                 reference_name="upstream healthy", target=("ratio", "<=", 1.1)),
        c.figure("daemon RSS growth during the stall", r["daemon_rss_growth_bytes"], unit="B"),
        c.figure("hub repaired after SIGCONT", r["repair_seconds_after_resume"], unit="s"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2500, help="tools/call per phase")
    parser.add_argument("--rounds", type=int, default=1, help="healthy/stalled phase pairs (medians)")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    r = asyncio.run(run(args))
    rounds = f", medians of {r['rounds']} rounds" if r["rounds"] > 1 else ""
    print(f"MCP tools/call latency, {r['calls_per_phase']} sequential calls per phase{rounds}")
    print(f"  no upstream        p50 {r['none_p50_ms']:8.3f} ms   p99 {r['none_p99_ms']:8.3f} ms")
    print(f"  healthy upstream   p50 {r['healthy_p50_ms']:8.3f} ms   p99 {r['healthy_p99_ms']:8.3f} ms")
    print(f"  stalled upstream   p50 {r['stalled_p50_ms']:8.3f} ms   p99 {r['stalled_p99_ms']:8.3f} ms")
    print(f"  p99 ratio stalled/healthy: {r['p99_ratio_stalled_over_healthy']}  (target <= 1.1)")
    print(f"  during the stall: {r['dropped_events']} events dropped, {r['resyncs']} resync(s), "
          f"{r['held_for_upstream_bytes']} bytes held; daemon RSS grew {r['daemon_rss_growth_bytes'] / 1e6:.1f} MB")
    print(f"  hub equal to the daemon {r['repair_seconds_after_resume']} s after SIGCONT")
    print(f"  machine: {r['machine']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"bench": "upstream_stall", **r, "figures": figures(r)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
