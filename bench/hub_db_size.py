"""Hub database sizing and retention: bytes per session and per event, on SQLite and PostgreSQL side by side, and
what pruning costs (a batch's time, a tombstone's bytes).

Run:  .venv/bin/python bench/hub_db_size.py [--sessions 2000] [--json PATH]

Histories are built by the daemon's own Ledger (the reducer, its bounds: 3 attempts of 64 events each) and
written through each engine's hub store (`write`, as the hub's flush does, 200 sessions per transaction):
  - empty: --sessions sessions, each one execution with a snapshot and no evidence (an attempt opened);
  - full: as many with 200 tool-call events each, an attempt every 100: the reducer keeps its bound,
    so this is what a long-lived session costs at most;
  - executions: a second execution for every full session (a restart or a new run of the session).
bytes per session = growth / sessions; bytes per kept event = (full - empty) / events kept by the reducer.
Then every session is pruned by the store's `prune` (the hub's batch, PRUNE_BATCH sessions per transaction): the median and worst batch time
(what the hub's flush and page can wait behind) and the tombstones' bytes per pruned execution.

SQLite: the file and its WAL after a checkpoint; PostgreSQL (a real server from tests/pg.py): the hub's tables
with indexes and TOAST after VACUUM. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import _common as c  # noqa: E402
from agentctl.dsn import parse_location  # noqa: E402
from agentctl.evidence.contract.base import encode  # noqa: E402
from agentctl.evidence.contract.report import Identity  # noqa: E402
from agentctl.evidence.ledger import Ledger  # noqa: E402
from agentctl.hub.hub_store import ExecutionRecord, SessionRecord  # noqa: E402
from agentctl.hub.retention import PRUNE_BATCH as BATCH  # noqa: E402
from agentctl.hub.state import ExecutionState  # noqa: E402
from agentctl.hub.stores import open_store  # noqa: E402
from bench.hub_ingest import SEEDS  # noqa: E402
from tests.pg import started_server  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHUNK = 200


def history(session: str, execution: str, events: int) -> tuple[bytes, int]:
    """A real Ledger's encoded history after `events` tool calls (a new attempt every 100); the events it kept."""
    ident = Identity(task_id="task-0001", session_id=session, execution_id=execution,
                     instance_id=f"inst-{execution}", agent_id="agent", agent_profile_id="profile")
    ledger = Ledger(ident)
    attempt, _ = ledger.begin_attempt("session_new", SEEDS)
    for k in range(events):
        if k and k % 100 == 0:
            attempt, _ = ledger.begin_attempt("session_new", SEEDS)
        ledger.record("tool_call_observed", attempt, "kandev", tool_name=f"tool_{k % 13}", outcome="ok")
    h = ledger.history
    kept = sum(len(a.evidence) for a in ([h.current] if h.current else []) + list(h.previous))
    return encode(h), kept


def write(store, prefix: str, n: int, execution: str, order: int, events: int) -> int:
    """n sessions `prefix-i`, each with `execution` (its history after `events` events); the events kept in all."""
    blob, kept = history(f"{prefix}-0", execution, events)
    for start in range(0, n, CHUNK):
        sessions, executions = [], []
        for i in range(start, min(n, start + CHUNK)):
            sid = f"{prefix}-{i:06d}"
            ident = Identity(task_id="task-0001", session_id=sid, execution_id=execution,
                             instance_id=f"inst-{execution}", agent_id="agent", agent_profile_id="profile")
            state = ExecutionState(identity=ident, daemon_version="0.1.0", hello_order=order, first_hello_at=T0,
                                   last_contact_at=T0, connected=False)
            sessions.append(SessionRecord(sid, "task-0001", execution, 0, T0))
            executions.append(ExecutionRecord.of(sid, state, blob))
        store.write(sessions, executions)
    return kept * n


class Engine:
    def __init__(self, name: str, location, measure) -> None:
        self.name, self.location, self.measure = name, location, measure


def run_engine(engine: Engine, n: int) -> dict:
    store = open_store(engine.location, hub_id="bench")
    try:
        base = engine.measure()
        write(store, "empty", n, "exec-1", 1, 0)
        after_empty = engine.measure()
        kept = write(store, "full", n, "exec-1", 1, 200)
        after_full = engine.measure()
        write(store, "full", n, "exec-2", 2, 200)
        after_exec = engine.measure()
        times = []
        cutoff, now = T0 + timedelta(days=31), T0 + timedelta(days=31)
        while True:
            t0 = time.perf_counter()
            ids = store.prune(cutoff, set(), BATCH, now)
            times.append(time.perf_counter() - t0)
            if len(ids) < BATCH:
                break
        after_prune = engine.measure()
    finally:
        store.close()
    per_empty = (after_empty - base) / n
    per_full = (after_full - after_empty) / n
    return {
        "engine": engine.name,
        "sessions": n,
        "bytes_per_session_empty": round(per_empty),
        "bytes_per_session_full": round(per_full),
        "bytes_per_extra_execution": round((after_exec - after_full) / n),
        "bytes_per_kept_event": round((after_full - after_empty - (after_empty - base)) / kept, 1),
        "events_kept_per_session": kept // n,
        "prune_batches": len(times),
        "prune_batch_ms_median": round(statistics.median(times) * 1000, 1),
        "prune_batch_ms_max": round(max(times) * 1000, 1),
        "tombstone_bytes_per_execution": round((after_prune - base) / (3 * n), 1),
    }


def sqlite_engine(tmp: Path) -> Engine:
    import sqlite3

    path = tmp / "hub.sqlite3"

    def measure() -> int:
        if not path.exists():
            return 0
        conn = sqlite3.connect(path)
        try:
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        return sum(p.stat().st_size for p in tmp.glob("hub.sqlite3*") if not p.name.endswith("-shm"))

    return Engine("sqlite", path, measure)


def pg_engine(url: str) -> Engine:
    import psycopg

    def measure() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            tables = [t for (t,) in conn.execute("SELECT tablename FROM pg_tables WHERE tablename IN "
                                                 "('sessions', 'executions', 'tombstones')")]
            for table in tables:
                conn.execute(f"VACUUM FULL {table}")
            return sum(conn.execute("SELECT pg_total_relation_size(%s)", (t,)).fetchone()[0] for t in tables)

    return Engine("postgresql", parse_location(url), measure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-dbsize-") as tmp:
        results.append(run_engine(sqlite_engine(Path(tmp)), args.sessions))
    server = started_server(prefix="actl-dbsize-")
    try:
        pg = server.create_database("bench")
        results.append(run_engine(pg_engine(pg.url), args.sessions))
    finally:
        server.stop()
        server.remove()
    keys = [k for k in results[0] if k != "engine"]
    print(f"{'':34}" + "".join(f"{r['engine']:>14}" for r in results))
    for key in keys:
        print(f"{key:34}" + "".join(f"{r[key]:>14}" for r in results))
    figures = []
    for r in results:
        e = r["engine"]
        figures += [
            c.figure(f"hub db ({e}): bytes per session, full history", r["bytes_per_session_full"], unit="bytes"),
            c.figure(f"hub db ({e}): bytes per session, no evidence", r["bytes_per_session_empty"], unit="bytes"),
            c.figure(f"hub db ({e}): prune batch of {BATCH}, worst", r["prune_batch_ms_max"], unit="ms"),
            c.figure(f"hub db ({e}): tombstone bytes per pruned execution", r["tombstone_bytes_per_execution"],
                     unit="bytes"),
        ]
    c.emit({"bench": "hub_db_size", "results": results, "figures": figures, "machine": c.machine_info()}, args.json)


if __name__ == "__main__":
    main()
