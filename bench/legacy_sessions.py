"""Legacy MCP sessions: daemon memory per open session, and what abandoned sessions cost now that they are bounded.

Run:  .venv/bin/python bench/legacy_sessions.py [--rounds 3] [--abandon 2000] [--json PATH]

A real `agentctl serve` (MCP only). A legacy session is opened by hand the way a client opens one
(initialize, notifications/initialized over streamable HTTP) and never deleted: an abandoned session.

- RSS per open session: the daemon's settled RSS before and after opening as many sessions as the pool
  holds (its `total`, spread over two attempts so no per-attempt bound ends one), divided by that count;
  medians of --rounds fresh daemons.
- Abandoned sessions: one attempt opens --abandon sessions and leaves them all open (then a second one
  half as many, which fills the pool). The pool ends the least
  recently used idle ones, so the daemon's RSS growth stays at what the bound holds; the reference is what
  the same sessions would cost unbounded (the per-session figure times --abandon; the SDK alone keeps up
  to 10,000 for 30 minutes).
- The current attempt's own client with the pool full of another attempt's idle sessions: its legacy
  initialize latency (median of 40) against the same with an empty pool, in the same daemon.

Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import _common as c
import httpx2

from agentctl.mcp_endpoint.pool import PER_ATTEMPT, TOTAL

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
ACCEPT = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def new_attempt(daemon: c.Daemon) -> dict:
    code, body = daemon.control().post("/v1/session/new")
    assert code == 200, body
    code, config = daemon.control().get("/v1/mcp-config")
    assert code == 200, config
    return config


async def open_sessions(config: dict, n: int, concurrency: int = 8) -> list[float]:
    """Open `n` legacy sessions and leave them open; each one's initialize latency in seconds."""
    headers = {**config["headers"], **ACCEPT}
    latencies: list[float] = []
    queue = iter(range(n))

    async def worker(http: httpx2.AsyncClient) -> None:
        for _ in queue:
            t0 = time.perf_counter()
            response = await http.post(config["url"], json=INIT, headers=headers)
            latencies.append(time.perf_counter() - t0)
            assert response.status_code == 200, response.status_code
            sid = response.headers["mcp-session-id"]
            done = await http.post(config["url"], json=INITIALIZED,
                                   headers={**headers, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})
            assert done.status_code == 202, done.status_code

    async with httpx2.AsyncClient(timeout=60) as http:
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
    return latencies


def per_session_round() -> float:
    with c.temp_dir("sessions-") as d:
        daemon = c.start_daemon(d)
        try:
            first, second = new_attempt(daemon), None
            base = c.settled_rss(daemon.pid)
            asyncio.run(open_sessions(first, TOTAL // 2))
            second = new_attempt(daemon)
            asyncio.run(open_sessions(second, TOTAL - TOTAL // 2))
            return (c.settled_rss(daemon.pid) - base) / TOTAL
        finally:
            daemon.stop()


def abandoned(n: int) -> dict:
    with c.temp_dir("sessions-") as d:
        daemon = c.start_daemon(d)
        try:
            first = new_attempt(daemon)
            asyncio.run(open_sessions(first, 3, concurrency=1))  # warm the path
            base = c.settled_rss(daemon.pid)
            with c.PeakRss(daemon.pid, interval=0.05) as peak:
                asyncio.run(open_sessions(first, n))
                asyncio.run(open_sessions(new_attempt(daemon), n // 2))  # a second attempt: the pool is full
            settled = c.settled_rss(daemon.pid)
            # Both abandoning attempts are superseded now; the current one's client connects into the full pool.
            full = asyncio.run(open_sessions(new_attempt(daemon), 40, concurrency=1))
            _, report = daemon.control().get("/v1/report")
            refused = sum(r["count"] for r in report.get("http_refusals", []) if r["status"] == 503)
            for _ in range(3):  # every earlier attempt's token leaves history: their sessions end
                new_attempt(daemon)
            empty = asyncio.run(open_sessions(new_attempt(daemon), 40, concurrency=1))
            return {"base": base, "settled_growth": settled - base, "peak_growth": peak.peak - base,
                    "initialize_full_s": statistics.median(full), "initialize_empty_s": statistics.median(empty),
                    "refused_503": refused}
        finally:
            daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--abandon", type=int, default=2000)
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    print(f"# legacy sessions: {args.rounds} rounds of {TOTAL} open sessions; one attempt abandoning {args.abandon}")
    per = [per_session_round() for _ in range(args.rounds)]
    per_session = c.median(per)
    a = abandoned(args.abandon)
    unbounded = per_session * (args.abandon + args.abandon // 2)
    print(f"#   per session: {', '.join(f'{p / 1000:.1f} KB' for p in per)}; abandoned: settled growth "
          f"{a['settled_growth'] / c.MB:.1f} MB, peak {a['peak_growth'] / c.MB:.1f} MB; 503s {a['refused_503']}")
    print(f"#   unbounded, the same sessions would hold about {unbounded / c.MB:.0f} MB")
    result = {"bench": "legacy_sessions", "params": {"rounds": args.rounds, "abandon": args.abandon,
                                                     "per_attempt": PER_ATTEMPT, "total": TOTAL},
              "per_session_bytes": per, "abandoned": a}
    result["figures"] = [
        c.figure(f"daemon RSS per open legacy session ({TOTAL} open)", per_session / 1000, unit="KB"),
        c.figure(f"daemon RSS growth, two attempts abandon {args.abandon + args.abandon // 2} legacy sessions",
                 a["settled_growth"], unbounded, unit="B", reference_name="unbounded: that many x per session",
                 target=("value", "<=", 2 * TOTAL * per_session),
                 note=f"bounds: {PER_ATTEMPT} per attempt, {TOTAL} in all; target: twice what the pool holds"),
        c.figure("the same, peak while they were opened", a["peak_growth"], unit="B"),
        c.figure("current attempt: legacy initialize, pool full of a superseded attempt's sessions",
                 a["initialize_full_s"] * 1000, a["initialize_empty_s"] * 1000, unit="ms",
                 reference_name="pool empty", note="each admission ends a superseded session first"),
        c.figure("legacy session requests refused with 503", a["refused_503"], target=("value", "<=", 0)),
    ]
    c.emit(result, args.json)


if __name__ == "__main__":
    main()
