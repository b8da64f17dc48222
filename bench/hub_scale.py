"""The hub's scale curve: 1, 2 and 4 hubs on one PostgreSQL and one hub on SQLite, at 100, 500 and 2,000
connected publishers, side by side in one run.

Run:  .venv/bin/python bench/hub_scale.py [--quick] [--configs sqlite:1,pg:1,pg:2,pg:4] [--publishers 100,500,2000]
                                          [--profile pg:2:2000 --py-spy PATH] [--json PATH]

Every point starts fresh hubs (real `agentctl hub serve` processes with their page on, over a new database:
a SQLite file, or a database of one real PostgreSQL server from tests/pg.py shared by all the PostgreSQL
points), a load process of real Publishers (bench/hub_scale_worker.py: the daemon's own publisher code, the
publishers spread evenly over the hubs) and a probe process (two publishers per hub and one page stream,
`/api/events`, per hub). Then, per point:
  - admitted: seconds from the first connect until every hub's page lists every session connected (each
    hello on PostgreSQL is a claim in the database, and a daemon's frames wait for its claim);
  - connected: the hubs' RSS with every publisher connected, less before any: RSS per connected daemon;
  - paced (a realistic fleet: 4 in 10 publishers in bursts of 10 tool calls every 2 s, a new attempt every 150
    events; the rest idle, heartbeats and an attempt now and then): p50/p99 from a probe publisher opening an
    attempt to EVERY hub's page stream showing it (through the other hubs' LISTEN/NOTIFY on PostgreSQL), and
    the hubs' CPU per 1,000 events at that load;
  - flat-out (the busy publishers as fast as the hubs take it): ingest events/s, counted from the go until the
    database holds every load session's final history exactly (digests compared: nothing lost), hub CPU and
    PostgreSQL server CPU per 1,000 events, each hub's CPU use (1.0 = one core busy);
  - database growth over both phases, per million events (extrapolated from the measured bytes per event:
    the reducer bounds a session's history, so a long-lived fleet grows by sessions, not events).
With --profile CONFIG:N, py-spy records the first hub during that point's two phases and the functions
that hold the most samples are printed. Not a test: numbers depend on the machine, and on a shared 2-CPU
machine the publishers, the hubs and the server compete; run the curve twice to see the noise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

import _common as c  # noqa: E402
from agentctl.dsn import parse_location  # noqa: E402
from agentctl.evidence.contract.base import encode  # noqa: E402
from agentctl.hub.stores import open_store  # noqa: E402
from bench.hub_scale_worker import PROBES_PER_HUB  # noqa: E402
from tests.pg import started_server  # noqa: E402

WORKER = str(Path(__file__).with_name("hub_scale_worker.py"))
FULL = {"paced": 15.0, "flat": 15.0}
QUICK = {"paced": 6.0, "flat": 6.0}
VERIFY_TIMEOUT = 180.0
ADMIT_TIMEOUT = 240.0


def cpu(pids: list[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            out[pid] = t.user + t.system
        except psutil.Error:
            pass
    return out


def server_pids(server) -> list[int]:
    """The postmaster and every backend and worker of it (backends come and go: sampled at each reading)."""
    if server is None:
        return []
    main = psutil.Process(int((server.data / "postmaster.pid").read_text().split()[0]))
    return [main.pid] + [p.pid for p in main.children(recursive=True)]


class Cpu:
    """CPU seconds of a set of processes between two readings (processes born between them counted whole)."""

    def __init__(self, pids) -> None:
        self.pids = pids
        self.start = cpu(pids())

    def seconds(self) -> float:
        end = cpu(self.pids())
        return sum(v - self.start.get(pid, 0.0) for pid, v in end.items())


def rss(pids: list[int]) -> int:
    return sum(psutil.Process(pid).memory_info().rss for pid in pids)


class Point:
    """Hubs over one fresh database, with the load and probe processes attached."""

    def __init__(self, tmp: Path, engine: str, hubs: int, server, log_dir: str | None = None) -> None:
        self.tmp, self.engine, self.server = tmp, engine, server
        self.procs: list[subprocess.Popen] = []
        self.pages: list[str] = []
        if engine == "sqlite":
            self.location: object = tmp / "hub.sqlite3"
            db_args = ["--db", str(self.location)]
        else:
            db = server.create_database("scale")
            self.db_url = db.url
            dsn = tmp / "hub.dsn"
            dsn.write_text(db.url + "\n")
            dsn.chmod(0o600)
            self.location = parse_location(db.url)
            db_args = ["--db-file", str(dsn)]
        for i in range(hubs):
            proc = c.spawn([c.PYTHON, "-m", "agentctl.cli", "hub", "serve", "--socket", str(tmp / f"h{i}.sock"),
                            *db_args, "--tasks-db", str(tmp / f"h{i}.tasks.sqlite3"), "--http", "127.0.0.1:0",
                            "--token-file", str(tmp / f"h{i}.token"), "--log-level", "info" if log_dir else "warning"],
                           stdout=subprocess.PIPE, cwd=REPO,
                           stderr=open(Path(log_dir) / f"{engine}{hubs}-{i}.log", "ab") if log_dir else None)
            self.procs.append(proc)
            ready = json.loads(c.read_line(proc, timeout=120))
            self.pages.append(f"{ready['http']}|{tmp / f'h{i}.token'}")
        self.sockets = ",".join(str(tmp / f"h{i}.sock") for i in range(hubs))
        self.pids = [p.pid for p in self.procs]

    def db_bytes(self) -> int:
        if self.engine == "sqlite":
            return sum(p.stat().st_size for p in self.tmp.glob("hub.sqlite3*") if not p.name.endswith("-shm"))
        import psycopg

        with psycopg.connect(self.db_url) as conn:
            return conn.execute("SELECT pg_total_relation_size('sessions') + pg_total_relation_size('executions')"
                                " + pg_total_relation_size('tombstones')").fetchone()[0]

    def stored_digests(self) -> dict[str, str]:
        store = open_store(self.location, readonly=True)
        try:
            stored = store.load()
        finally:
            store.close()
        return {sid: hashlib.sha256(encode(s.current.history)).hexdigest() for sid, s in stored.items()
                if s.current.history is not None}

    def admitted(self, n: int, started: float) -> float:
        """Seconds from the first connect until every hub's page lists all n sessions connected (on PostgreSQL
        each hello is a claim in the database: a daemon's frames wait for it)."""
        deadline = time.monotonic() + ADMIT_TIMEOUT
        for page in self.pages:
            url, token_file = page.split("|")
            request = urllib.request.Request(url + "api/status", headers={
                "Authorization": "Bearer " + Path(token_file).read_text().strip()})
            while time.monotonic() < deadline:
                with urllib.request.urlopen(request, timeout=60) as resp:
                    if sum(s["connected"] for s in json.loads(resp.read())["sessions"]) >= n:
                        break
                time.sleep(0.25)
        return time.monotonic() - started

    def stop(self) -> None:
        c.end_all(self.procs, timeout=30)


def worker(mode: str, point: Point, n: int) -> subprocess.Popen:
    argv = [c.PYTHON, WORKER, mode, "--sockets", point.sockets]
    argv += ["--publishers", str(n)] if mode == "load" else ["--pages", ",".join(point.pages)]
    return c.spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO)


def tell(proc: subprocess.Popen, line: str) -> None:
    proc.stdin.write(line.encode() + b"\n")
    proc.stdin.flush()


def answer(proc: subprocess.Popen, timeout: float) -> dict:
    return json.loads(c.read_line(proc, timeout=timeout))


def pct(values: list[float], q: int) -> float | None:
    return round(c.percentile(sorted(values), q) * 1000, 1) if values else None


def profile_top(raw: Path, top: int = 14) -> dict:
    """From py-spy's collapsed stacks: the functions with the most samples on the stack (inclusive) and on top."""
    inclusive, own, total = Counter(), Counter(), 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  for f in stack.split(";")]
        total += int(count)
        own[frames[-1]] += int(count)
        for f in set(frames):
            inclusive[f] += int(count)
    share = lambda n: round(100 * n / max(total, 1), 1)  # noqa: E731
    return {"samples": total, "inclusive_pct": [(f, share(n)) for f, n in inclusive.most_common(top)],
            "own_pct": [(f, share(n)) for f, n in own.most_common(top)]}


def run_point(tmp: Path, engine: str, hubs: int, n: int, server, phases: dict, spy: str | None,
              log_dir: str | None = None) -> dict:
    point = Point(tmp, engine, hubs, server, log_dir)
    load = probes = None
    try:
        time.sleep(0.5)
        base_rss = rss(point.pids)
        started = time.monotonic()
        load = worker("load", point, n - PROBES_PER_HUB * hubs)  # the probes' publishers make up the count
        answer(load, 240)
        probes = worker("probe", point, 0)
        answer(probes, 60)
        admitted = point.admitted(n, started)
        time.sleep(1.0)
        connected_rss = sum(c.settled_rss(pid, timeout=10) for pid in point.pids)
        db0 = point.db_bytes()

        spy_proc = None
        if spy:  # both phases
            raw = tmp / "profile.txt"
            spy_proc = subprocess.Popen([spy, "record", "--pid", str(point.pids[0]), "--format", "raw", "--rate",
                                         "50", "--duration", str(int(phases["paced"] + phases["flat"])), "--output",
                                         str(raw), "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        hub_cpu, db_cpu = Cpu(lambda: point.pids), Cpu(lambda: server_pids(server))
        t0 = time.monotonic()
        tell(probes, "go")
        tell(load, f"go {phases['paced']} paced")
        paced = answer(load, phases["paced"] + 120)["done"]
        paced_wall = time.monotonic() - t0
        tell(probes, "stop")
        latencies = answer(probes, 60)["latencies"]
        paced_cpu, paced_db_cpu = hub_cpu.seconds(), db_cpu.seconds()

        hub_cpu, db_cpu = Cpu(lambda: point.pids), Cpu(lambda: server_pids(server))
        per_hub, load_cpu, machine = Cpu(lambda: point.pids[:1]), Cpu(lambda: [load.pid]), psutil.cpu_times()
        t0 = time.monotonic()
        tell(load, f"go {phases['flat']} flat-out")
        flat = answer(load, phases["flat"] + 120)["done"]
        deadline = time.monotonic() + VERIFY_TIMEOUT
        verified = False
        while time.monotonic() < deadline:
            checked_at = time.monotonic()
            stored = point.stored_digests()
            if all(stored.get(sid) == d for sid, d in flat["digests"].items()):
                verified = True
                break
            time.sleep(0.25)
        flat_wall = checked_at - t0
        flat_cpu, flat_db_cpu, hub0_cpu, loader_cpu = (hub_cpu.seconds(), db_cpu.seconds(), per_hub.seconds(),
                                                       load_cpu.seconds())
        machine_end = psutil.cpu_times()
        machine_busy = ((sum(machine_end) - machine_end.idle - machine_end.iowait)
                        - (sum(machine) - machine.idle - machine.iowait)) / flat_wall
        after_rss = rss(point.pids)
        growth = point.db_bytes() - db0
        profile = None
        if spy_proc is not None:
            spy_proc.wait(timeout=phases["flat"] + 60)
            profile = profile_top(raw) if raw.exists() else None
        tell(load, "stop")
        load.wait(timeout=60)
    finally:
        for proc in (load, probes):
            if proc is not None:
                c.end(proc)
        point.stop()
    views = [lat for _, lat in latencies]
    every = [max(x) for x in views if None not in x]
    events = paced["events"] + flat["events"]
    pg = engine != "sqlite"
    return {
        "engine": engine, "hubs": hubs, "publishers": n, "admitted_seconds": round(admitted, 1),
        "ingest_events_per_s": round(flat["events"] / flat_wall), "nothing_lost": verified,
        "flat_events": flat["events"], "flat_seconds": round(flat_wall, 2), "dropped": flat["dropped"],
        "hub_cpu_ms_per_1000": round(flat_cpu / flat["events"] * 1e6, 1),
        "db_server_cpu_ms_per_1000": round(flat_db_cpu / flat["events"] * 1e6, 1) if pg else None,
        "hub_cores_busy": round(flat_cpu / flat_wall, 2), "hub0_cores_busy": round(hub0_cpu / flat_wall, 2),
        "db_server_cores_busy": round(flat_db_cpu / flat_wall, 2) if pg else None,
        "load_cores_busy": round(loader_cpu / flat_wall, 2), "machine_cores_busy": round(machine_busy, 2),
        # Ingest if each hub had a core of its own (the hubs' CPU per event the only limit).
        "ingest_at_a_core_per_hub": round(hubs / (flat_cpu / flat["events"])),
        "paced_events_per_s": round(paced["events"] / paced_wall),
        "paced_hub_cpu_ms_per_1000": round(paced_cpu / max(paced["events"], 1) * 1e6, 1),
        "paced_db_server_cpu_ms_per_1000": round(paced_db_cpu / max(paced["events"], 1) * 1e6, 1) if pg else None,
        "probes": len(views), "probes_missing": len(views) - len(every),
        "p50_ms_every_view": pct(every, 50), "p99_ms_every_view": pct(every, 99),
        "p50_ms_own_hub": pct([lat[h] for h, lat in latencies if lat[h] is not None], 50),
        "rss_kb_per_daemon": round((connected_rss - base_rss) / n / 1000, 1),
        "rss_kb_per_daemon_after_load": round((after_rss - base_rss) / n / 1000, 1),
        "db_bytes_per_event": round(growth / events, 1),
        "db_mb_per_million_events": round(growth / events * 1e6 / c.MB, 1),
        "profile": profile,
    }


COLUMNS = [("engine", "engine"), ("hubs", "hubs"), ("publishers", "pubs"), ("admitted_seconds", "admit s"), ("ingest_events_per_s", "ingest ev/s"),
           ("nothing_lost", "lost 0"), ("hub_cpu_ms_per_1000", "hub ms/1k"), ("db_server_cpu_ms_per_1000", "pg ms/1k"),
           ("hub_cores_busy", "hub cores"), ("db_server_cores_busy", "pg cores"),
           ("load_cores_busy", "load cores"), ("machine_cores_busy", "all cores"),
           ("ingest_at_a_core_per_hub", "ev/s at 1 core/hub"), ("paced_events_per_s", "paced ev/s"),
           ("p50_ms_every_view", "p50 ms"), ("p99_ms_every_view", "p99 ms"), ("probes_missing", "miss"),
           ("rss_kb_per_daemon", "KB/daemon"), ("db_mb_per_million_events", "MB/1M ev")]


def table(results: list[dict]) -> str:
    lines = ["| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for r in results:
        lines.append("| " + " | ".join("" if r[k] is None else f"{r[k]:,}" if isinstance(r[k], (int, float))
                                       and not isinstance(r[k], bool) else str(r[k]) for k, _ in COLUMNS) + " |")
    return "\n".join(lines)


def scaling(results: list[dict]) -> list[dict]:
    """Ingest of 2 and 4 PostgreSQL hubs over one, at each publisher count."""
    by = {(r["engine"], r["hubs"], r["publishers"]): r["ingest_events_per_s"] for r in results}
    out = []
    for (engine, hubs, n), rate in sorted(by.items()):
        one = by.get(("pg", 1, n))
        if engine == "pg" and hubs > 1 and one:
            out.append({"hubs": hubs, "publishers": n, "over_one_hub": round(rate / one, 2)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="sqlite:1,pg:1,pg:2,pg:4", help="ENGINE:HUBS, comma-separated")
    parser.add_argument("--publishers", default="100,500,2000", help="connected publishers per point")
    parser.add_argument("--quick", action="store_true", help=f"phases of {QUICK['flat']:g} s, not {FULL['flat']:g} s")
    parser.add_argument("--seconds", type=float, help="each phase's length (overrides --quick)")
    parser.add_argument("--profile", metavar="ENGINE:HUBS:N", help="py-spy the first hub of that point")
    parser.add_argument("--py-spy", default="py-spy", help="the py-spy executable (--profile)")
    parser.add_argument("--hub-log", metavar="DIR", help="the hubs' logs, at info level, into DIR")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    phases = dict(QUICK if args.quick else FULL)
    if args.seconds:
        phases = {"paced": args.seconds, "flat": args.seconds}
    configs = [(e, int(h)) for e, h in (x.split(":") for x in args.configs.split(","))]
    counts = [int(x) for x in args.publishers.split(",")]
    c.install_cleanup()
    results = []
    server = started_server(prefix="actl-scale-") if any(e == "pg" for e, _ in configs) else None
    try:
        for engine, hubs in configs:
            for n in counts:
                spy = args.py_spy if args.profile == f"{engine}:{hubs}:{n}" else None
                with c.temp_dir("hubscale-") as tmp:
                    r = run_point(tmp, engine, hubs, n, server, phases, spy, args.hub_log)
                results.append(r)
                print(json.dumps({k: v for k, v in r.items() if k != "profile"}), flush=True)
    finally:
        if server is not None:
            server.stop()
            server.remove()
    print(table(results))
    for s in scaling(results):
        print(f"{s['hubs']} PostgreSQL hubs over one at {s['publishers']} publishers: {s['over_one_hub']}x ingest")
    for r in results:
        if r["profile"]:
            print(f"profile of hub 0, {r['engine']}:{r['hubs']} at {r['publishers']} ({r['profile']['samples']} "
                  "samples): inclusive %")
            for f, share in r["profile"]["inclusive_pct"]:
                print(f"  {share:5.1f}  {f}")
            print("  on top (own) %")
            for f, share in r["profile"]["own_pct"]:
                print(f"  {share:5.1f}  {f}")
    out = {"bench": "hub_scale", "phases": phases, "results": results, "scaling": scaling(results),
           "machine": c.machine_info()}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
