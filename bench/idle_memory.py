"""Idle memory: the daemon with an idle reference ACP agent, once settled, and what its resident memory is made of.

Run:  .venv/bin/python bench/idle_memory.py [--rounds 3] [--importtime] [--json PATH]

The daemon is a real `agentctl serve` whose [agent] is agentctl-reference-agent (ACP, initialized, no
session); beside it, the same daemon without an agent (MCP-only). After the ready line, RSS is sampled until it holds still for a second; then RSS, USS (pages
only it maps) and PSS (shared pages split among their users) of the daemon and, separately, of the agent
(psutil memory_full_info). The references, in the same run, are floor interpreters: the SDKs as the daemon
imports them (agentctl.mcp_endpoint's guards, then mcp.server and aiohttp.web; with acp.schema, the ACP
SDK's models, for the daemon with an agent), and the same imports without the guards (what the SDKs cost
as they ship).

The breakdown: fresh interpreters, each importing one more layer than the last (cumulative), report
their own VmRSS (read from /proc, so no measuring library is loaded); medians of --rounds. The last row,
"running daemon", is the settled daemon above: the difference is what running costs (event loop, HTTP
sites, the MCP endpoint, the ledger, buffers) over importing everything. --importtime adds the heaviest
imports of the daemon's modules from `python -X importtime`.

Not a test: numbers depend on the machine. The issue's target: daemon RSS <= 80 MB.
"""

from __future__ import annotations

import argparse
import re
import subprocess

import _common as c

# Cumulative: each stage imports everything before it plus its own line.
STAGES = [
    ("bare python", ""),
    ("+ pydantic", "from pydantic import BaseModel"),
    ("+ mcp_types (MCP's pydantic models)", "import mcp_types"),
    # As the daemon imports it: agentctl.mcp_endpoint's guards first (no MCP client, uvicorn or rich).
    ("+ mcp.server (as the daemon imports it)", "import agentctl.mcp_endpoint, mcp.server"),
    ("+ aiohttp.web", "import aiohttp.web"),
    ("+ acp (ACP SDK)", "import acp"),
    ("+ msgspec, psutil, sqlite3", "import msgspec, psutil, sqlite3"),
    ("+ agentctl.daemon.app", "import agentctl.daemon.app"),
    ("+ agentctl.cli, agent.manager", "import agentctl.cli, agentctl.agent.manager"),
]
RSS_OF_SELF = "\nimport re; print(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"


def stage_rss(upto: int) -> int:
    code = "\n".join(line for _, line in STAGES[: upto + 1] if line) + RSS_OF_SELF
    out = subprocess.run([c.PYTHON, "-c", code], check=True, capture_output=True, text=True, cwd=c.REPO)
    return int(out.stdout.split()[-1]) * 1024


# The floors: what no change in agentctl can go under without changing an SDK.
FLOORS = {
    "lean": "import agentctl.mcp_endpoint, mcp.server, aiohttp.web",
    "lean+acp": "import agentctl.mcp_endpoint, mcp.server, aiohttp.web, acp.schema",
    "as shipped": "import mcp.server, aiohttp.web",
}


def floor_rss(kind: str = "as shipped") -> int:
    code = FLOORS[kind] + RSS_OF_SELF
    out = subprocess.run([c.PYTHON, "-c", code], check=True, capture_output=True, text=True, cwd=c.REPO)
    return int(out.stdout.split()[-1]) * 1024


def idle_daemon(agent: bool = True) -> dict:
    with c.temp_dir("idlemem-") as d:
        daemon = c.start_daemon(d, agent=[c.REF_AGENT] if agent else None)
        try:
            if not agent:
                c.settled_rss(daemon.pid)
                return {"daemon": c.memory(daemon.pid)}
            c.wait_until(lambda: c.agent_ready(daemon), 60, "the agent to be ready")
            agent = c.wait_until(daemon.agent_pid, 10, "the agent's pid")
            c.settled_rss(daemon.pid)
            c.settled_rss(agent)
            return {"daemon": c.memory(daemon.pid), "agent": c.memory(agent)}
        finally:
            daemon.stop()


def importtime(top: int = 12) -> list[tuple[str, int]]:
    """(top-level package, microseconds) of the daemon's imports: every module's self time added up by the
    package it belongs to (mcp.server.lowlevel counts for mcp), heaviest first."""
    code = "import agentctl.cli, agentctl.daemon.app, agentctl.agent.manager"
    out = subprocess.run([c.PYTHON, "-X", "importtime", "-c", code], check=True, capture_output=True, text=True,
                         cwd=c.REPO)
    totals: dict[str, int] = {}
    for line in out.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \| \s*(\S+)", line)
        if m:
            root = m.group(2).split(".")[0]
            totals[root] = totals.get(root, 0) + int(m.group(1))
    return sorted(totals.items(), key=lambda kv: -kv[1])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--importtime", action="store_true", help="also list the heaviest imports")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    idle: list[dict] = []
    mcp_only: list[dict] = []
    floors: dict[str, list[int]] = {kind: [] for kind in FLOORS}
    stages: list[list[int]] = [[] for _ in STAGES]
    for r in range(args.rounds):
        idle.append(idle_daemon())
        mcp_only.append(idle_daemon(agent=False)["daemon"])
        for kind in FLOORS:
            floors[kind].append(floor_rss(kind))
        for i in range(len(STAGES)):
            stages[i].append(stage_rss(i))
    med = {who: {k: c.median(x[who][k] for x in idle) for k in ("rss", "uss", "pss")} for who in ("daemon", "agent")}
    breakdown = [(name, c.median(v)) for (name, _), v in zip(STAGES, stages)]
    breakdown.append(("running daemon (idle agent)", med["daemon"]["rss"]))
    print(f"# idle memory, {args.rounds} rounds, medians")
    print(f"#   daemon RSS {med['daemon']['rss'] / c.MB:.1f} MB, USS {med['daemon']['uss'] / c.MB:.1f} MB, "
          f"PSS {med['daemon']['pss'] / c.MB:.1f} MB; agent RSS {med['agent']['rss'] / c.MB:.1f} MB, "
          f"USS {med['agent']['uss'] / c.MB:.1f} MB, PSS {med['agent']['pss'] / c.MB:.1f} MB")
    print("# RSS breakdown (fresh interpreters, cumulative imports):")
    prev = 0.0
    for name, rss in breakdown:
        print(f"#   {name:<36} {rss / c.MB:7.1f} MB   {'+' if rss >= prev else ''}{(rss - prev) / c.MB:6.1f} MB")
        prev = rss
    result = {"bench": "idle_memory", "params": {"rounds": args.rounds}, "idle": idle, "mcp_only": mcp_only,
              "medians": med,
              "floor_rss_bytes": c.median(floors["as shipped"]),
              "floors_rss_bytes": {kind: c.median(v) for kind, v in floors.items()},
              "breakdown": [{"stage": n, "rss_bytes": v} for n, v in breakdown]}
    if args.importtime:
        rows = importtime()
        result["importtime"] = [{"package": pkg, "us": us} for pkg, us in rows]
        print("# import time by package (python -X importtime, self times added up per top-level package):")
        for pkg, us in rows:
            print(f"#   {pkg:<32} {us / 1000:7.1f} ms")
    floor = {kind: c.median(v) for kind, v in floors.items()}
    result["figures"] = [
        c.figure("idle daemon RSS (idle ACP agent)", med["daemon"]["rss"], floor["lean+acp"], unit="B",
                 reference_name="floor: " + FLOORS["lean+acp"], target=("value", "<=", 80 * c.MB)),
        c.figure("idle daemon PSS", med["daemon"]["pss"], unit="B"),
        c.figure("idle daemon RSS, MCP-only (no agent)", c.median(m["rss"] for m in mcp_only), floor["lean"],
                 unit="B", reference_name="floor: " + FLOORS["lean"]),
        c.figure("idle daemon PSS, MCP-only (no agent)", c.median(m["pss"] for m in mcp_only), unit="B"),
        c.figure("  the SDKs' floor against the same imports as they ship", floor["lean"], floor["as shipped"],
                 unit="B", reference_name=FLOORS["as shipped"]),
        c.figure("idle daemon USS", med["daemon"]["uss"], unit="B"),
        c.figure("idle reference agent RSS", med["agent"]["rss"], unit="B"),
    ]
    c.emit(result, args.json)


if __name__ == "__main__":
    main()
