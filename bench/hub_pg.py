"""Hubs on one PostgreSQL against one hub on SQLite: ingest, fence propagation and cross-hub page latency.

Run:  .venv/bin/python bench/hub_pg.py [--publishers 50] [--events 2000] [--rounds 10] [--json PATH]

Side by side in one run, on one machine: the same load (--publishers real Publishers on real Ledgers, each
recording --events evidence events, a new attempt every 200) into
  - sqlite: one `agentctl hub serve` on a SQLite file (every publisher on its socket), and
  - postgresql: two `agentctl hub serve` processes (two sockets, half the publishers each) on one real
    PostgreSQL (Debian's server, started by tests/pg.py in a temporary directory, Unix socket only).
The clock stops when the database holds every session's final history exactly (read like `hub status`).
Reported per engine: events/s, the hubs' CPU per 1,000 events, and the database size after the load (the
SQLite file and its WAL; PostgreSQL's hub tables with their indexes and TOAST, and the whole database).

Then, on the two PostgreSQL hubs (--rounds times, the median and the worst reported):
  - fence: a new execution of a session followed by hub A says hello on hub B; the time until A's publisher
    is told `stale_execution`;
  - page: an attempt begun by a publisher on hub B; the time until hub A's page API (/api/status) shows it.

Not a test: numbers depend on the machine (2 shared CPUs here: the publishers, both hubs and the server
compete). Ratios from one run are the figures to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from agentctl.context import DaemonContext  # noqa: E402
from agentctl.dsn import parse_location  # noqa: E402
from agentctl.evidence.contract.base import encode  # noqa: E402
from agentctl.evidence.contract.report import Identity  # noqa: E402
from agentctl.evidence.ledger import Ledger  # noqa: E402
from agentctl.hub.stores import open_store  # noqa: E402
from agentctl.upstream.publisher import Publisher  # noqa: E402
from bench.hub_ingest import SEEDS, SPEC  # noqa: E402
from tests.pg import started_server  # noqa: E402


def _ctx(session: str, execution: str, tmp: Path) -> DaemonContext:
    ident = Identity(task_id="task-1", session_id=session, execution_id=execution, instance_id=f"inst-{execution}",
                     agent_id="agent", agent_profile_id="profile")
    return DaemonContext(spec=SPEC, ledger=Ledger(ident), state_dir=tmp, control_socket=tmp / "x.sock")


def _start_hub(tmp: Path, name: str, db_args: list[str], *, http: bool = False) -> tuple[subprocess.Popen, dict]:
    extra = ["--http", "0", "--token-file", str(tmp / f"{name}.token")] if http else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentctl.cli", "hub", "serve", "--socket", str(tmp / f"{name}.sock"), *db_args,
         "--log-level", "warning", *extra], stdout=subprocess.PIPE, cwd=REPO)
    return proc, json.loads(proc.stdout.readline())


def _matches(location: object, expected: dict[str, bytes]) -> bool:
    try:
        store = open_store(location, readonly=True)
    except Exception:
        return False
    try:
        stored = store.load()
    finally:
        store.close()
    return all((found := stored.get(sid)) is not None and found.current.history is not None
               and encode(found.current.history) == data for sid, data in expected.items())


async def _ingest(sockets: list[Path], location: object, hubs: list[subprocess.Popen], tmp: Path,
                  args: argparse.Namespace) -> dict:
    publishers = []
    for n in range(args.publishers):
        ctx = _ctx(f"session-{n:03d}", f"exec-{n:03d}", tmp)
        pub = Publisher(ctx, sockets[n % len(sockets)])
        pub.start()
        publishers.append((ctx, pub))
    try:
        while not all(p.connected for _, p in publishers):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # hellos and first snapshots land before the clock starts
        procs = [psutil.Process(h.pid) for h in hubs]
        cpu0 = sum(sum(p.cpu_times()[:2]) for p in procs)
        started = time.perf_counter()

        async def publish(ctx: DaemonContext) -> None:
            attempt = None
            for k in range(args.events):
                if k % 200 == 0:
                    attempt, _ = ctx.ledger.begin_attempt("session_new", SEEDS)
                ctx.ledger.record("tool_call_observed", attempt, "kandev", tool_name=f"tool_{k % 13}", outcome="ok")
                if k % 20 == 0:
                    await asyncio.sleep(0)

        await asyncio.gather(*(publish(ctx) for ctx, _ in publishers))
        expected = {ctx.ledger.identity.session_id: encode(ctx.ledger.history) for ctx, _ in publishers}
        while not await asyncio.to_thread(_matches, location, expected):
            await asyncio.sleep(0.1)
        elapsed = time.perf_counter() - started
        cpu = sum(sum(p.cpu_times()[:2]) for p in procs) - cpu0
    finally:
        for _, pub in publishers:
            await pub.stop()
    total = args.publishers * args.events
    return {"events": total, "seconds": round(elapsed, 2), "events_per_second": round(total / elapsed),
            "hub_cpu_ms_per_1000_events": round(cpu / total * 1e6, 1), "hubs": len(hubs)}


def _page_status(ready: dict, token_file: Path) -> dict:
    token = token_file.read_text().strip()
    request = urllib.request.Request(ready["http"] + "api/status", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


async def _fence_and_page(tmp: Path, a_ready: dict, rounds: int) -> dict:
    fences, pages = [], []
    for r in range(rounds):
        old_ctx = _ctx(f"fence-{r}", "exec-old", tmp)
        old = Publisher(old_ctx, tmp / "a.sock")
        old.start()
        # Taken by the database (its claim done), as hub A's page shows: only then is the next hello newer.
        while not [s for s in (await asyncio.to_thread(_page_status, a_ready, tmp / "a.token"))["sessions"]
                   if s["session_id"] == f"fence-{r}"]:
            await asyncio.sleep(0.005)
        new_ctx = _ctx(f"fence-{r}", "exec-new", tmp)
        new = Publisher(new_ctx, tmp / "b.sock")
        began = time.perf_counter()
        new.start()
        while old.superseded_reason != "stale_execution":
            await asyncio.sleep(0.002)
        fences.append(time.perf_counter() - began)
        attempt, _ = new_ctx.ledger.begin_attempt("session_new", SEEDS)
        began = time.perf_counter()
        while True:
            view = await asyncio.to_thread(_page_status, a_ready, tmp / "a.token")
            mine = [s for s in view["sessions"] if s["session_id"] == f"fence-{r}"]
            if mine and (mine[0]["attempt"] or {}).get("attempt_id") == attempt:
                break
        pages.append(time.perf_counter() - began)
        await old.stop()
        await new.stop()

    def summary(values: list[float]) -> dict:
        return {"median_ms": round(statistics.median(values) * 1000, 1), "max_ms": round(max(values) * 1000, 1)}

    return {"rounds": rounds, "fence": summary(fences), "page": summary(pages)}


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(timeout=30)


async def run(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="hubpg-", dir="/tmp"))
    results: dict = {"publishers": args.publishers}

    db = tmp / "hub.sqlite3"
    hub, _ = _start_hub(tmp, "s", ["--db", str(db)])
    try:
        results["sqlite"] = await _ingest([tmp / "s.sock"], db, [hub], tmp, args)
    finally:
        _stop([hub])
    results["sqlite"]["db_bytes"] = sum(p.stat().st_size for p in tmp.glob("hub.sqlite3*"))

    server = started_server(prefix="actl-hubpg-")
    try:
        pg = server.create_database("bench")
        dsn_file = tmp / "hub.dsn"
        dsn_file.write_text(pg.url)
        dsn_file.chmod(0o600)
        location = parse_location(pg.url)
        a, a_ready = _start_hub(tmp, "a", ["--db-file", str(dsn_file)], http=True)
        b, _ = _start_hub(tmp, "b", ["--db-file", str(dsn_file)])
        try:
            results["postgresql"] = await _ingest([tmp / "a.sock", tmp / "b.sock"], location, [a, b], tmp, args)
            import psycopg

            with psycopg.connect(pg.url) as conn:
                tables, whole = conn.execute(
                    "SELECT pg_total_relation_size('sessions') + pg_total_relation_size('executions'), "
                    "pg_database_size(current_database())").fetchone()
            results["postgresql"]["db_bytes"] = tables
            results["postgresql"]["database_bytes"] = whole
            results["cross_hub"] = await _fence_and_page(tmp, a_ready, args.rounds)
        finally:
            _stop([a, b])
    finally:
        server.stop()
        server.remove()
    s, p = results["sqlite"], results["postgresql"]
    results["ratios_postgresql_over_sqlite"] = {
        "events_per_second": round(p["events_per_second"] / s["events_per_second"], 2),
        "hub_cpu_per_1000_events": round(p["hub_cpu_ms_per_1000_events"] / s["hub_cpu_ms_per_1000_events"], 2),
        "db_bytes": round(p["db_bytes"] / s["db_bytes"], 2),
    }
    results["machine"] = f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--publishers", type=int, default=50)
    parser.add_argument("--events", type=int, default=2000, help="evidence events per publisher")
    parser.add_argument("--rounds", type=int, default=10, help="fence and page measurements")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    r = asyncio.run(run(args))
    print(f"hubs on PostgreSQL vs SQLite: {args.publishers} publishers x {args.events} events")
    print(f"{'':28}{'sqlite (1 hub)':>18}{'postgresql (2 hubs)':>22}{'ratio':>8}")
    rows = [("events/s", "events_per_second"), ("hub CPU ms / 1,000 events", "hub_cpu_ms_per_1000_events"),
            ("database bytes", "db_bytes")]
    ratio_keys = ["events_per_second", "hub_cpu_per_1000_events", "db_bytes"]
    for (label, key), rk in zip(rows, ratio_keys):
        print(f"{label:28}{r['sqlite'][key]:>18}{r['postgresql'][key]:>22}{r['ratios_postgresql_over_sqlite'][rk]:>8}")
    print(f"  (PostgreSQL's whole database: {r['postgresql']['database_bytes']} bytes)")
    x = r["cross_hub"]
    print(f"fence B -> A: median {x['fence']['median_ms']} ms, max {x['fence']['max_ms']} ms ({x['rounds']} rounds)")
    print(f"page  B -> A: median {x['page']['median_ms']} ms, max {x['page']['max_ms']} ms")
    print(f"machine: {r['machine']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"bench": "hub_pg", **r}, indent=2) + "\n")


if __name__ == "__main__":
    main()
