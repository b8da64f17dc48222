"""Health probes and MCP calls while another local user holds 1,100 idle connections to the daemon's port.

Run:  .venv/bin/python bench/listener_flood.py [--rounds 3] [--seconds 15] [--probes 150] [--calls 100] [--json PATH]

A real `agentctl serve` (MCP only) under `prlimit --nofile=1024`. The attacker is another uid (nobody,
through setpriv, running the system's python3: tests/reliability/hostile.py): it opens 1,100 connections to
the MCP port, sends nothing, and opens a new one whenever the daemon closes one (up to 200 a second), so the
listener stays at its cap and the daemon keeps displacing idle connections. Quiet and flooded phases
alternate on the same daemon (--rounds each); in each phase, once the flood holds its connections:

- /readyz latency: --probes probes spread over --seconds (past the daemon's 10 s idle deadline, so timed-out
  connections are reopened too), each on a fresh connection as a kubelet or a load balancer probes; p50, p99;
- tools/call latency of a token holder (the MCP SDK's client, legacy era), --calls sequential calls, p50;
- the daemon's open descriptors (the highest seen) and how many bytes its log grew by, from the flood's
  start to the phase's end.

Needs root (setpriv, prlimit); without it the script says so and reports nothing. Not a test: numbers
depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import subprocess
import time
from pathlib import Path

import _common as c
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.reliability.hostile import Flood

NOFILE = 1024
FLOOD = 1100


def start_limited(directory: Path) -> c.Daemon:
    directory.mkdir(parents=True, exist_ok=True)
    spec = directory / "spec.toml"
    spec.write_text(c.spec_text(directory / "state"))
    with open(directory / "serve.log", "ab") as log:
        t0 = time.perf_counter()
        proc = c.spawn(["prlimit", f"--nofile={NOFILE}", c.AGENTCTL, "serve", str(spec), "--socket",
                        str(directory / "c.sock")], stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                       cwd=c.REPO)
    return c.await_ready(c.Daemon(proc, {}, directory, -t0))


def probe(host: str, port: int) -> float:
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", "/readyz")
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
    finally:
        conn.close()
    return time.perf_counter() - t0


async def tool_calls(config: dict, n: int) -> list[float]:
    out = []
    async with httpx2.AsyncClient(headers=config["headers"], timeout=60) as http:
        async with Client(streamable_http_client(config["url"], http_client=http), mode="legacy") as client:
            for _ in range(n):
                t0 = time.perf_counter()
                result = await client.call_tool("get_task", {})
                out.append(time.perf_counter() - t0)
                assert not result.is_error
    return out


def phase(daemon: c.Daemon, config: dict, flooded: bool, args: argparse.Namespace) -> dict:
    host, port = config["url"].split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    log = daemon.dir / "serve.log"
    flood = Flood(f"{host}:{port}", FLOOD, "idle", reopen_rate=200) if flooded else None
    fds: list[int] = []
    log_before = log.stat().st_size
    began = time.monotonic()
    try:
        if flood is not None:
            flood.start()
            c.wait_until(lambda: flood.latest.get("opened", 0) >= FLOOD, 60, "the flood to open its connections")
        probes = []
        interval = args.seconds / args.probes
        for n in range(args.probes):
            probes.append(probe(host, int(port)))
            fds.append(len(os.listdir(f"/proc/{daemon.pid}/fd")))
            pause = began + (n + 1) * interval - time.monotonic()
            if pause > 0:
                time.sleep(pause)  # the probes' pace, not a wait for an outcome
        calls = asyncio.run(tool_calls(config, args.calls))
        held = flood.latest if flood is not None else {}
        return {"probe_s": probes, "call_s": calls, "max_fds": max(fds), "log_bytes": log.stat().st_size - log_before,
                "seconds": time.monotonic() - began, "flood": held}
    finally:
        if flood is not None:
            flood.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0, help="how long each phase probes")
    parser.add_argument("--probes", type=int, default=150)
    parser.add_argument("--calls", type=int, default=100)
    args = c.root_bench_args(parser, "listener_flood")
    if args is None:
        return
    print(f"# listener flood: nobody holds {FLOOD} idle connections (reopening up to 200/s) against a daemon "
          f"under RLIMIT_NOFILE {NOFILE}; {args.rounds} rounds per phase")
    phases: dict[str, list[dict]] = {"quiet": [], "flood": []}
    with c.temp_dir("flood-") as d:
        daemon = start_limited(d)
        try:
            daemon.control().post("/v1/session/new")
            _, config = daemon.control().get("/v1/mcp-config")
            for _, name in c.interleaved(args.rounds, ("quiet", "flood")):
                phases[name].append(phase(daemon, config, name == "flood", args))
        finally:
            daemon.stop()

    def stat(name: str, key: str, q: int | None) -> float:
        values = [v for p in phases[name] for v in p[key]]
        return (c.median(values) if q is None else c.percentile(values, q)) * 1000

    flood = phases["flood"]
    seconds = sum(p["seconds"] for p in flood)
    log_per_min = sum(p["log_bytes"] for p in flood) / seconds * 60
    displaced = flood[-1]["flood"].get("closed_by_peer", 0)
    print(f"#   flood: the attacker's connections closed by the daemon in the last round: {displaced}; "
          f"log growth {sum(p['log_bytes'] for p in flood)} bytes over {seconds:.0f} s of flooded phases")
    result = {"bench": "listener_flood", "params": vars(args) | {"nofile": NOFILE, "flood": FLOOD},
              "phases": phases}
    result["figures"] = [
        c.figure("/readyz p50, another uid holding 1,100 idle connections", stat("flood", "probe_s", None),
                 stat("quiet", "probe_s", None), unit="ms", reference_name="no flood"),
        c.figure("/readyz p99, the same", stat("flood", "probe_s", 99), stat("quiet", "probe_s", 99), unit="ms",
                 reference_name="no flood", target=("value", "<=", 1000.0)),
        c.figure("tools/call p50 of a token holder, the same", stat("flood", "call_s", None),
                 stat("quiet", "call_s", None), unit="ms", reference_name="no flood"),
        c.figure("daemon descriptors open during the flood (highest)", max(p["max_fds"] for p in flood),
                 target=("value", "<=", NOFILE - 256)),
        c.figure("daemon log growth during the flood, bytes per minute", log_per_min,
                 target=("value", "<=", 4096)),
    ]
    c.emit(result, args.json)


if __name__ == "__main__":
    main()
