"""A hub restarted over a large database: the time until it is ready and its memory, SQLite and PostgreSQL.

Run:  .venv/bin/python bench/hub_restart.py [--sessions 100000] [--events 20] [--json PATH]

The database is filled through the hub store (`write`, as the hub's flush does) with --sessions sessions,
each one execution whose history is a real Ledger's after --events tool calls, all last in contact long ago
and kept (`--retention forever`). Then a real `agentctl hub serve` starts over it: reported are the seconds
from spawn to its ready line (what a supervisor waits for), its RSS once settled, and that RSS per session.
A hub holds only hot sessions in memory (a daemon said hello) and none at start: the page's list and the
metrics' counts come from the database (agentctl.hub.listing), so both figures should stay at the empty
database's. The reference is the same hub started over an empty database. Not a test: numbers depend on the
machine. (Before hub schema 4 a restart hydrated every session: 40-55 s and 2.3 GB RSS at 100,000 here.)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import _common as c  # noqa: E402
from agentctl.dsn import parse_location  # noqa: E402
from agentctl.hub.stores import open_store  # noqa: E402
from bench.hub_db_size import write  # noqa: E402
from tests.pg import started_server  # noqa: E402


def start_and_measure(tmp: Path, name: str, db_args: list[str]) -> tuple[float, int]:
    """Seconds from spawn to the ready line, and the settled RSS, of a hub over `db_args`; stopped after."""
    argv = [c.PYTHON, "-m", "agentctl.cli", "hub", "serve", "--socket", str(tmp / f"{name}.sock"), *db_args,
            "--tasks-db", str(tmp / f"{name}.tasks.sqlite3"), "--retention", "forever", "--log-level", "warning"]
    t0 = time.perf_counter()
    proc = c.spawn(argv, stdout=subprocess.PIPE, cwd=c.REPO)
    try:
        c.read_line(proc, timeout=600)
        ready = time.perf_counter() - t0
        return ready, c.settled_rss(proc.pid)
    finally:
        c.end(proc)


def fill(location: object, sessions: int, events: int) -> None:
    store = open_store(location, hub_id="bench-fill")
    try:
        write(store, "s", sessions, "exec-1", 1, events)
    finally:
        store.close()


def run_engine(name: str, tmp: Path, full: tuple[object, list[str]], empty: tuple[object, list[str]],
               args: argparse.Namespace) -> dict:
    """`full` and `empty`: (location, the hub's arguments naming it)."""
    fill(empty[0], 0, 0)
    empty_ready, empty_rss = start_and_measure(tmp, f"{name}-empty", empty[1])
    fill(full[0], args.sessions, args.events)
    ready, rss = start_and_measure(tmp, name, full[1])
    return {"engine": name, "sessions": args.sessions, "ready_seconds": round(ready, 2),
            "empty_ready_seconds": round(empty_ready, 2), "rss_mb": round(rss / c.MB, 1),
            "empty_rss_mb": round(empty_rss / c.MB, 1),
            "rss_bytes_per_session": round((rss - empty_rss) / args.sessions)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=20, help="tool-call events in each session's history")
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    c.install_cleanup()
    results = []
    with c.temp_dir("hubrestart-") as tmp:
        if "sqlite" in args.engines:
            full_db, empty_db = tmp / "hub.sqlite3", tmp / "empty.sqlite3"
            results.append(run_engine("sqlite", tmp, (full_db, ["--db", str(full_db)]),
                                      (empty_db, ["--db", str(empty_db)]), args))
        if "postgresql" in args.engines:
            server = started_server(prefix="actl-restart-")
            try:
                named = []
                for label in ("full", "empty"):
                    db = server.create_database(label)
                    path = tmp / f"{label}.dsn"
                    path.write_text(db.url + "\n")
                    path.chmod(0o600)
                    named.append((parse_location(db.url), ["--db-file", str(path)]))
                results.append(run_engine("postgresql", tmp, named[0], named[1], args))
            finally:
                server.stop()
                server.remove()
    for r in results:
        print(f"{r['engine']}: {r['sessions']:,} sessions: ready in {r['ready_seconds']} s "
              f"(empty: {r['empty_ready_seconds']} s), RSS {r['rss_mb']} MB (empty: {r['empty_rss_mb']} MB), "
              f"{r['rss_bytes_per_session']} B per session")
    figures = []
    for r in results:
        figures += [
            c.figure(f"hub restart over {r['sessions']:,} sessions ({r['engine']}): ready", r["ready_seconds"],
                     r["empty_ready_seconds"], unit="s", reference_name="over an empty database"),
            c.figure(f"hub restart over {r['sessions']:,} sessions ({r['engine']}): RSS", r["rss_mb"] * c.MB,
                     r["empty_rss_mb"] * c.MB, unit="B", reference_name="over an empty database"),
        ]
    c.emit({"bench": "hub_restart", "results": results, "figures": figures}, args.json)


if __name__ == "__main__":
    main()
