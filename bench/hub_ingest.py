"""Hub ingest: evidence events per second from many publishers into `agentctl hub serve`, and its database size.

Run:  .venv/bin/python bench/hub_ingest.py [--publishers 50] [--events 2000] [--json PATH]

The hub is a real `agentctl hub serve` subprocess. The publishers are real Publishers on real Ledgers (the
daemon's own code, one per simulated daemon) in this process, each on its own Unix socket connection;
each records --events evidence events (tool calls, with a new attempt every 200). The clock starts when
the first event is recorded and stops when the hub's database holds every session's final history
exactly (checked read-only, like `agentctl hub status`), so the figure includes the hub's SQLite flushes.
Reported: events/s, the hub's CPU seconds, frames dropped by the publishers (a resync snapshot repairs
them: nothing is lost, but they were not sent one by one), and the database size after a clean stop.

The hub's CPU has a same-run reference, so a regression can be told from a slower machine: a fresh interpreter
decoding the same number of event frames (JSON, each the size of a tool-call event) and inserting each as a row
into a bare SQLite table in WAL mode, committing every 100 rows: the storage floor without the hub's logic.

Not a test: numbers depend on the machine. On a small machine the publishers share CPU with the hub;
the hub's CPU seconds per 1,000 events is the steadier number.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from agentctl.context import DaemonContext  # noqa: E402
from agentctl.evidence.contract.base import encode  # noqa: E402
from agentctl.evidence.contract.report import Identity  # noqa: E402
from agentctl.evidence.ledger import Ledger, ServerSeed  # noqa: E402
from agentctl.spec import parse_spec  # noqa: E402
from agentctl.hub.hub_store import HubStore  # noqa: E402
from agentctl.upstream.publisher import Publisher  # noqa: E402

SEEDS = [
    ServerSeed(name="kandev", source="builtin", transport="http", target="http://127.0.0.1:1"),
    ServerSeed(name="docs", source="profile", transport="http", target="https://docs.example"),
]
SPEC = parse_spec(b'[identity]\ntask_id="t"\nsession_id="s"\nagent_id="a"\nagent_profile_id="p"\n')


# The storage floor (see the docstring); argv: events, database path.
FLOOR = """
import json, sqlite3, sys
n, path = int(sys.argv[1]), sys.argv[2]
frame = json.dumps({"type": "event", "session_id": "session-007", "seq": 0, "event": {"kind": "tool_call_observed",
        "attempt_id": "a" * 26, "server": "kandev", "tool_name": "tool_7", "outcome": "ok",
        "at": "2026-12-01T16:00:00.000000Z"}})
db = sqlite3.connect(path)
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE events (session TEXT, seq INTEGER, body TEXT, PRIMARY KEY (session, seq))")
for i in range(n):
    msg = json.loads(frame)
    db.execute("INSERT INTO events VALUES (?, ?, ?)", (msg["session_id"], i, json.dumps(msg["event"])))
    if i % 100 == 99:
        db.commit()
db.commit()
"""


def storage_floor_cpu(events: int, tmp: Path) -> float:
    """CPU seconds of FLOOR for `events` events, less the same program's for none (the interpreter's start);
    medians of 3 interleaved fresh runs, each on a new database."""
    import _common as c

    runs: dict[int, list[float]] = {events: [], 0: []}
    for k, n in enumerate([events, 0] * 3):
        runs[n].append(c.run_cpu([sys.executable, "-c", FLOOR, str(n), str(tmp / f"floor-{k}.sqlite3")])[1])
    return max(c.median(runs[events]) - c.median(runs[0]), 0.0)


def _ctx(n: int, tmp: Path) -> DaemonContext:
    ident = Identity(task_id=f"task-{n % 10}", session_id=f"session-{n:03d}", execution_id=f"exec-{n:03d}",
                     instance_id=f"inst-{n:03d}", agent_id="agent", agent_profile_id="profile")
    return DaemonContext(spec=SPEC, ledger=Ledger(ident), state_dir=tmp, control_socket=tmp / "x.sock")


def _db_matches(db: Path, expected: dict[str, bytes]) -> bool:
    try:
        store = HubStore(db, readonly=True)
    except Exception:
        return False
    try:
        stored = store.load()
    finally:
        store.close()
    for sid, data in expected.items():
        found = stored.get(sid)
        if found is None or found.current.history is None or encode(found.current.history) != data:
            return False
    return True


async def run(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="hub-bench-", dir="/tmp"))
    db = tmp / "hub.sqlite3"
    hub = subprocess.Popen(
        [sys.executable, "-m", "agentctl.cli", "hub", "serve", "--socket", str(tmp / "hub.sock"), "--db", str(db),
         "--log-level", "warning"],
        stdout=subprocess.PIPE, cwd=REPO,
    )
    json.loads(hub.stdout.readline())
    hub_ps = psutil.Process(hub.pid)
    publishers: list[tuple[DaemonContext, Publisher]] = []
    try:
        for n in range(args.publishers):
            ctx = _ctx(n, tmp)
            pub = Publisher(ctx, tmp / "hub.sock")
            pub.start()
            publishers.append((ctx, pub))
        while not all(p.connected for _, p in publishers):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # hellos and first snapshots land before the clock starts

        cpu0 = sum(hub_ps.cpu_times()[:2])
        started = time.perf_counter()

        async def publish(ctx: DaemonContext) -> None:
            ledger = ctx.ledger
            attempt = None
            for k in range(args.events):
                if k % 200 == 0:
                    attempt, _ = ledger.begin_attempt("session_new", SEEDS)
                ledger.record("tool_call_observed", attempt, "kandev", tool_name=f"tool_{k % 13}", outcome="ok")
                if k % 20 == 0:
                    await asyncio.sleep(0)  # interleave publishers like concurrent daemons

        await asyncio.gather(*(publish(ctx) for ctx, _ in publishers))
        produced = time.perf_counter() - started
        expected = {ctx.ledger.identity.session_id: encode(ctx.ledger.history) for ctx, _ in publishers}
        while not _db_matches(db, expected):
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        cpu = sum(hub_ps.cpu_times()[:2]) - cpu0
        dropped = sum(p.dropped_events for _, p in publishers)
        resyncs = sum(p.resyncs for _, p in publishers)
    finally:
        for _, pub in publishers:
            await pub.stop()
        hub.send_signal(signal.SIGTERM)
        hub.wait(timeout=30)
    size = sum(p.stat().st_size for p in tmp.glob("hub.sqlite3*"))
    total = args.publishers * args.events
    floor = storage_floor_cpu(total, tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "publishers": args.publishers,
        "events": total,
        "seconds": round(elapsed, 3),
        "producer_seconds": round(produced, 3),
        "events_per_second": round(total / elapsed),
        "hub_cpu_seconds": round(cpu, 3),
        "hub_cpu_ms_per_1000_events": round(cpu / total * 1e6, 2),
        "floor_cpu_ms_per_1000_events": round(floor / total * 1e6, 2),
        "dropped_by_publishers": dropped,
        "resync_snapshots": resyncs,
        "db_bytes": size,
        "machine": f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
    }


def figures(r: dict) -> list[dict]:
    import _common as c

    n = r["publishers"]
    return [
        c.figure(f"hub ingest: events/s from {n} publishers", r["events_per_second"], unit="ev/s"),
        c.figure("hub ingest: hub CPU ms per 1,000 events", r["hub_cpu_ms_per_1000_events"],
                 r["floor_cpu_ms_per_1000_events"], unit="ms", reference_name="decode + INSERT into bare SQLite"),
        c.figure(f"hub ingest: database size after {r['events']:,} events", r["db_bytes"], unit="B"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--publishers", type=int, default=50)
    parser.add_argument("--events", type=int, default=2000, help="evidence events per publisher")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print(f"hub ingest: {result['publishers']} publishers x {args.events} events = {result['events']} events")
    print(f"  {result['events_per_second']:>10} events/s   ({result['seconds']} s until the database held every final state)")
    print(f"  {result['hub_cpu_ms_per_1000_events']:>10} hub CPU ms per 1,000 events "
          f"(storage floor: {result['floor_cpu_ms_per_1000_events']} ms)")
    print(f"  {result['dropped_by_publishers']:>10} frames dropped by publishers ({result['resync_snapshots']} resync snapshots)")
    print(f"  {result['db_bytes']:>10} database bytes after a clean stop")
    print(f"  machine: {result['machine']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"bench": "hub_ingest", **result, "figures": figures(result)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
