"""PostgreSQL drivers side by side, on a real server here: psycopg 3 (with psycopg_pool) against asyncpg.

Run:  .venv/bin/python bench/pg_driver.py [--rounds 7] [--ops 2000] [--json PATH]

The server is Debian's PostgreSQL started by tests/pg.py (initdb into a temporary directory, as the
`postgres` user when run as root), listening on its Unix socket and on 127.0.0.1 with SSL (a self-signed
certificate), one password-protected role (SCRAM). Both drivers run in one process and one event loop,
their rounds interleaved (every other round in reverse order), medians reported. The table puts psycopg in
the `agentctl` column and asyncpg in the `reference` column: a ratio below 1 means psycopg is faster or
smaller.

Measured: import cost in a fresh interpreter (time and RSS, then RSS after one connection and one query:
this lands in every hub, never in the daemon); connect time (Unix socket, SCRAM); a single-row upsert round
trip on an open connection and through each driver's pool; 1,000 event rows in one transaction
(`executemany`, and COPY); LISTEN/NOTIFY latency; how each reports a lost connection (backend terminated,
a listening connection terminated, the server restarted under a pool); and which libpq conventions each
honours (PGPASSWORD, PGPASSFILE, service files, sslmode, the key=value form, `options`), checked by
connecting, not by reading documentation.

Not a test: numbers depend on the machine. Nothing is asserted; a convention reads "no" when the
connection failed or did not do what the convention says.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import _common as c

from tests.pg import PgDatabase, PgServer, started_server

DRIVERS = ("psycopg", "asyncpg")
EVENT_ROWS = 1000
SCHEMA = [
    "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, current_execution_id TEXT NOT NULL,"
    " stale_rejected INTEGER NOT NULL DEFAULT 0, last_contact_at TEXT NOT NULL)",
    "CREATE TABLE events (session_id TEXT NOT NULL, execution_id TEXT NOT NULL, seq BIGINT NOT NULL,"
    " kind TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (session_id, execution_id, seq))",
]
UPSERT = ("INSERT INTO sessions(session_id, task_id, current_execution_id, stale_rejected, last_contact_at) "
          "VALUES ({0}, {1}, {2}, {3}, {4}) ON CONFLICT(session_id) DO UPDATE SET "
          "current_execution_id=excluded.current_execution_id, stale_rejected=excluded.stale_rejected, "
          "last_contact_at=excluded.last_contact_at")
INSERT_EVENT = "INSERT INTO events(session_id, execution_id, seq, kind, body) VALUES ({0}, {1}, {2}, {3}, {4})"
BODY = json.dumps({"kind": "tool_call_observed", "server": "kandev", "tool": "get_task", "outcome": "ok",
                   "occurred_at": "2026-12-01T10:00:00.000000+00:00"})


# ---- the two drivers behind one small face ---------------------------------------------------------------


class Psycopg:
    name = "psycopg"

    def __init__(self) -> None:
        import psycopg
        import psycopg_pool

        self.psycopg, self.pool_mod = psycopg, psycopg_pool
        self.upsert = UPSERT.format(*["%s"] * 5)
        self.insert = INSERT_EVENT.format(*["%s"] * 5)

    async def connect(self, url: str) -> Any:
        return await self.psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10)

    async def close(self, conn: Any) -> None:
        await conn.close()

    async def execute(self, conn: Any, sql: str, args: tuple = ()) -> None:
        await conn.execute(sql, args or None)

    async def fetchval(self, conn: Any, sql: str) -> Any:
        return (await (await conn.execute(sql)).fetchone())[0]

    async def batch(self, conn: Any, rows: list[tuple]) -> None:
        async with conn.transaction():
            async with conn.cursor() as cur:
                await cur.executemany(self.insert, rows)

    async def copy(self, conn: Any, rows: list[tuple]) -> None:
        async with conn.transaction():
            async with conn.cursor() as cur:
                async with cur.copy("COPY events (session_id, execution_id, seq, kind, body) FROM STDIN") as cp:
                    for row in rows:
                        await cp.write_row(row)

    def backend_pid(self, conn: Any) -> int:
        return conn.info.backend_pid

    def is_closed(self, conn: Any) -> bool:
        return conn.closed

    async def pool(self, url: str, *, check: bool = False) -> Any:
        kwargs: dict[str, Any] = {"check": self.pool_mod.AsyncConnectionPool.check_connection} if check else {}
        pool = self.pool_mod.AsyncConnectionPool(url, min_size=2, max_size=4, open=False,
                                                 kwargs={"autocommit": True}, **kwargs)
        await pool.open(wait=True, timeout=30)
        return pool

    @contextlib.asynccontextmanager
    async def pooled(self, pool: Any):
        async with pool.connection() as conn:
            yield conn

    async def close_pool(self, pool: Any) -> None:
        await pool.close()

    async def listen(self, conn: Any, channel: str, on_payload: Callable[[str], None],
                     on_lost: Callable[[BaseException | None], None]) -> asyncio.Task:
        await conn.execute(f"LISTEN {channel}")

        async def pump() -> None:
            try:
                async for note in conn.notifies():
                    on_payload(note.payload)
            except self.psycopg.Error as exc:
                on_lost(exc)
                return
            on_lost(None)

        return asyncio.create_task(pump())


class Asyncpg:
    name = "asyncpg"

    def __init__(self) -> None:
        import asyncpg

        self.asyncpg = asyncpg
        self.upsert = UPSERT.format(*[f"${i}" for i in range(1, 6)])
        self.insert = INSERT_EVENT.format(*[f"${i}" for i in range(1, 6)])

    async def connect(self, url: str) -> Any:
        return await self.asyncpg.connect(url, timeout=10)

    async def close(self, conn: Any) -> None:
        await conn.close()

    async def execute(self, conn: Any, sql: str, args: tuple = ()) -> None:
        await conn.execute(sql, *args)

    async def fetchval(self, conn: Any, sql: str) -> Any:
        return await conn.fetchval(sql)

    async def batch(self, conn: Any, rows: list[tuple]) -> None:
        async with conn.transaction():
            await conn.executemany(self.insert, rows)

    async def copy(self, conn: Any, rows: list[tuple]) -> None:
        async with conn.transaction():
            await conn.copy_records_to_table("events", records=rows,
                                             columns=["session_id", "execution_id", "seq", "kind", "body"])

    def backend_pid(self, conn: Any) -> int:
        return conn.get_server_pid()

    def is_closed(self, conn: Any) -> bool:
        return conn.is_closed()

    async def pool(self, url: str, *, check: bool = False) -> Any:
        return await self.asyncpg.create_pool(url, min_size=2, max_size=4)

    @contextlib.asynccontextmanager
    async def pooled(self, pool: Any):
        async with pool.acquire() as conn:
            yield conn

    async def close_pool(self, pool: Any) -> None:
        await pool.close()

    async def listen(self, conn: Any, channel: str, on_payload: Callable[[str], None],
                     on_lost: Callable[[BaseException | None], None]) -> asyncio.Task:
        await conn.add_listener(channel, lambda _c, _pid, _ch, payload: on_payload(payload))
        conn.add_termination_listener(lambda _c: on_lost(None))
        return asyncio.create_task(asyncio.Event().wait())  # asyncpg calls back; nothing to pump


async def _cancel(task: asyncio.Task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _error(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__module__.split('.')[0]}.{type(exc).__name__}: {first[:90]}"


# ---- import cost (fresh interpreters) --------------------------------------------------------------------

_IMPORT_PROBE = """
import json, sys, time
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) * 1024
before = rss()
t = time.perf_counter()
if sys.argv[1] == 'psycopg':
    import psycopg, psycopg_pool
else:
    import asyncpg
elapsed = time.perf_counter() - t
after = rss()
import asyncio
async def one():
    if sys.argv[1] == 'psycopg':
        conn = await psycopg.AsyncConnection.connect(sys.argv[2])
        await (await conn.execute('SELECT 1')).fetchone()
    else:
        conn = await asyncpg.connect(sys.argv[2])
        await conn.fetchval('SELECT 1')
    await conn.close()
asyncio.run(one())
print(json.dumps({'import_s': elapsed, 'rss_before': before, 'rss_import': after, 'rss_connected': rss()}))
"""


# psycopg-python: psycopg's pure-Python implementation over the system's libpq (Debian's libpq5), for the
# footprint without the binary wheel's bundled libraries.
IMPORT_VARIANTS = (*DRIVERS, "psycopg-python")


def import_costs(url: str, rounds: int) -> dict[str, dict[str, float]]:
    samples: dict[str, list[dict]] = {d: [] for d in IMPORT_VARIANTS}
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    for _, variant in c.interleaved(rounds, IMPORT_VARIANTS):
        env = {**base_env, "PSYCOPG_IMPL": "python"} if variant == "psycopg-python" else base_env
        out = subprocess.run([c.PYTHON, "-c", _IMPORT_PROBE, variant.split("-")[0], url], capture_output=True,
                             text=True, timeout=60, check=True, env=env)
        samples[variant].append(json.loads(out.stdout))
    result = {}
    for driver, rows in samples.items():
        result[driver] = {
            "import_s": c.median(r["import_s"] for r in rows),
            "import_rss": c.median(r["rss_import"] - r["rss_before"] for r in rows),
            "connected_rss": c.median(r["rss_connected"] - r["rss_before"] for r in rows),
        }
    return result


# ---- speed -----------------------------------------------------------------------------------------------


async def _timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t = time.perf_counter()
    await fn()
    return time.perf_counter() - t


async def speed(drivers: dict[str, Any], db: PgDatabase, rounds: int, ops: int) -> dict[str, dict[str, float]]:
    url = db.url
    out: dict[str, dict[str, list[float]]] = {d: {} for d in drivers}

    def add(driver: str, key: str, value: float | list[float]) -> None:
        out[driver].setdefault(key, []).extend(value if isinstance(value, list) else [value])

    conns = {d: await drv.connect(url) for d, drv in drivers.items()}
    pools = {d: await drv.pool(url) for d, drv in drivers.items()}
    for statement in SCHEMA:
        await drivers["psycopg"].execute(conns["psycopg"], statement)
    try:
        for r, d in c.interleaved(rounds, list(drivers)):
            drv, conn = drivers[d], conns[d]

            async def connect_once() -> None:
                await drv.close(await drv.connect(url))

            add(d, "connect", await _timed(connect_once))
            lat = []
            for i in range(ops // rounds):
                args = (f"s-{d}-{i % 50}", "t", f"e-{i}", i, "2026-12-01T10:00:00+00:00")
                t = time.perf_counter()
                await drv.execute(conn, drv.upsert, args)
                lat.append(time.perf_counter() - t)
            add(d, "upsert", lat)
            lat = []
            for i in range(ops // rounds // 2):
                args = (f"p-{d}-{i % 50}", "t", f"e-{i}", i, "2026-12-01T10:00:00+00:00")
                t = time.perf_counter()
                async with drv.pooled(pools[d]) as pooled:
                    await drv.execute(pooled, drv.upsert, args)
                lat.append(time.perf_counter() - t)
            add(d, "pool_upsert", lat)
            rows = [(f"s-{d}", f"e-{r}", n, "tool_call_observed", BODY) for n in range(EVENT_ROWS)]
            add(d, "batch", await _timed(lambda: drv.batch(conn, rows)))
            rows = [(f"c-{d}", f"e-{r}", n, "tool_call_observed", BODY) for n in range(EVENT_ROWS)]
            add(d, "copy", await _timed(lambda: drv.copy(conn, rows)))
            add(d, "notify", await _notify_latencies(drv, url, conn, max(50, ops // rounds // 4)))
    finally:
        for d, drv in drivers.items():
            await drv.close_pool(pools[d])
            await drv.close(conns[d])
    result: dict[str, dict[str, float]] = {}
    for d, series in out.items():
        result[d] = {f"{k}_median": c.median(v) for k, v in series.items()}
        for k in ("upsert", "pool_upsert", "notify"):
            result[d][f"{k}_p99"] = c.percentile(sorted(series[k]), 99)
    return result


async def _notify_latencies(drv: Any, url: str, sender: Any, count: int) -> list[float]:
    listener = await drv.connect(url)
    got: asyncio.Queue[float] = asyncio.Queue()
    task = await drv.listen(listener, "bench", lambda payload: got.put_nowait(time.perf_counter() - float(payload)),
                            lambda _exc: None)
    try:
        lat = []
        for _ in range(count):
            await drv.execute(sender, f"NOTIFY bench, '{time.perf_counter()!r}'")
            lat.append(await asyncio.wait_for(got.get(), 10))
        return lat
    finally:
        await _cancel(task)  # before the close: a pending wait would unregister a reused fd later
        await drv.close(listener)


# ---- a lost connection -------------------------------------------------------------------------------------


async def lost_connections(drivers: dict[str, Any], server: PgServer, db: PgDatabase) -> dict[str, dict[str, Any]]:
    admin = server.admin()
    out: dict[str, dict[str, Any]] = {}
    for d, drv in drivers.items():
        row: dict[str, Any] = {}
        conn = await drv.connect(db.url)
        admin.execute("SELECT pg_terminate_backend(%s)", (drv.backend_pid(conn),))
        try:
            await drv.fetchval(conn, "SELECT 1")
            row["terminated_query"] = "no error"
        except Exception as exc:  # noqa: BLE001 - recording what each driver raises is the point
            row["terminated_query"] = _error(exc)
        row["closed_after"] = drv.is_closed(conn)
        with contextlib.suppress(Exception):
            await drv.close(conn)

        listener = await drv.connect(db.url)
        lost = asyncio.Event()
        seen: list[str] = []

        def on_lost(exc: BaseException | None) -> None:
            seen.append(_error(exc) if exc else "termination callback")
            lost.set()

        task = await drv.listen(listener, "gone", lambda _p: None, on_lost)
        t = time.perf_counter()
        admin.execute("SELECT pg_terminate_backend(%s)", (drv.backend_pid(listener),))
        try:
            await asyncio.wait_for(lost.wait(), 10)
            row["listener_noticed_s"] = time.perf_counter() - t
            row["listener_signal"] = seen[0]
        except asyncio.TimeoutError:
            row["listener_noticed_s"] = None
            row["listener_signal"] = "not noticed within 10 s"
        await _cancel(task)
        with contextlib.suppress(Exception):
            await drv.close(listener)
        out[d] = row

    # The server restarted under an idle pool (two connections): which of the next three queries fail?
    for check in (False, True):
        for d, drv in drivers.items():
            if check and d == "asyncpg":
                continue  # asyncpg's pool has no health check on acquire
            pool = await drv.pool(db.url, check=check)
            server.restart()
            results = []
            for _ in range(3):
                try:
                    async with drv.pooled(pool) as conn:
                        await drv.fetchval(conn, "SELECT 1")
                    results.append("ok")
                except Exception as exc:  # noqa: BLE001
                    results.append(_error(exc))
            key = "restart_pool_checked" if check else "restart_pool"
            out[d][key] = results
            await drv.close_pool(pool)
    return out


# ---- libpq conventions -------------------------------------------------------------------------------------


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    saved = {k: v for k, v in os.environ.items() if k.startswith("PG")}
    for key in saved:
        del os.environ[key]
    os.environ["PGPASSFILE"] = "/nonexistent/pgpass"  # never root's ~/.pgpass by accident
    os.environ.update(values)
    try:
        yield
    finally:
        for key in [k for k in os.environ if k.startswith("PG")]:
            del os.environ[key]
        os.environ.update(saved)


def _pgpass_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:")


async def conventions(drivers: dict[str, Any], server: PgServer, db: PgDatabase,
                      work: Path) -> dict[str, dict[str, str]]:
    from urllib.parse import quote

    sock = quote(str(db.socket_dir), safe="")
    bare = f"postgresql://{db.user}@/{db.name}?host={sock}&port={db.port}"
    # The fixture's password has ':', '/', '@', '%' and a quote in it; a second role's is letters and digits,
    # so a "no" below says whether the convention or the unusual password failed.
    plain_user, plain_password = "plain", "Plain0Password1"
    admin = server.admin()
    admin.execute(f"CREATE ROLE {plain_user} LOGIN PASSWORD '{plain_password}'")
    admin.execute(f"GRANT ALL ON DATABASE {db.name} TO {plain_user}")
    plain_bare = f"postgresql://{plain_user}@/{db.name}?host={sock}&port={db.port}"
    passfile = work / "pgpass"
    passfile.write_text(f"*:*:{db.name}:{db.user}:{_pgpass_escape(db.password)}\n"
                        f"*:*:{db.name}:{plain_user}:{plain_password}\n")
    passfile.chmod(0o600)
    services = work / "pg_service.conf"
    services.write_text(f"[hub]\nhost={db.socket_dir}\nport={db.port}\ndbname={db.name}\nuser={db.user}\n"
                        f"password={db.password}\n"
                        f"[plain]\nhost={db.socket_dir}\nport={db.port}\ndbname={db.name}\nuser={plain_user}\n"
                        f"password={plain_password}\n")
    other = work / "other.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-keyout", str(work / "other.key"), "-out", str(other)], check=True, capture_output=True)
    cert = str(server.certificate)
    ssl_sql = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
    # (what, DSN, environment, SQL whose answer proves it, the answer expected)
    checks: list[tuple[str, str, dict[str, str], str, Any]] = [
        ("percent-encoded password in the URL's user info", db.url, {}, "SELECT current_user", db.user),
        ("libpq key=value form", db.conninfo, {}, "SELECT current_user", db.user),
        ("PGPASSWORD", bare, {"PGPASSWORD": db.password}, "SELECT current_user", db.user),
        ("PGPASSFILE (a ':' in the password, escaped)", bare, {"PGPASSFILE": str(passfile)}, "SELECT current_user",
         db.user),
        ("PGPASSFILE, a password of letters and digits", plain_bare, {"PGPASSFILE": str(passfile)},
         "SELECT current_user", plain_user),
        ("service file (PGSERVICEFILE, ?service=hub)", "postgresql:///?service=hub", {"PGSERVICEFILE": str(services)},
         "SELECT current_user", db.user),
        ("service file, a password of letters and digits", "postgresql:///?service=plain",
         {"PGSERVICEFILE": str(services)}, "SELECT current_user", plain_user),
        ("service file, key=value `service=hub`", "service=hub", {"PGSERVICEFILE": str(services)},
         "SELECT current_user", db.user),
        ("sslmode=require over TCP", db.tcp_url(sslmode="require"), {}, ssl_sql, True),
        ("PGSSLMODE=require from the environment", db.tcp_url(), {"PGSSLMODE": "require"}, ssl_sql, True),
        ("sslmode=verify-full, sslrootcert, host localhost", db.tcp_url("localhost", sslmode="verify-full",
                                                                        sslrootcert=cert), {}, ssl_sql, True),
        ("sslmode=verify-full against another CA refuses", db.tcp_url("localhost", sslmode="verify-full",
                                                                      sslrootcert=str(other)), {}, "refused", None),
        ("sslmode=disable over TCP: no SSL", db.tcp_url(sslmode="disable"), {}, ssl_sql, False),
        ("options=-c statement_timeout=4321", db.url + "&options=" + quote("-c statement_timeout=4321"), {},
         "SHOW statement_timeout", "4321ms"),
    ]
    out: dict[str, dict[str, str]] = {}
    for what, dsn, env, sql, expected in checks:
        out[what] = {}
        for d, drv in drivers.items():
            with environment(**env):
                try:
                    conn = await drv.connect(dsn)
                except Exception as exc:  # noqa: BLE001
                    out[what][d] = "yes (refused)" if sql == "refused" else f"no: {_error(exc)}"
                    continue
                try:
                    if sql == "refused":
                        out[what][d] = "NO: connected anyway"
                    else:
                        got = await drv.fetchval(conn, sql)
                        out[what][d] = "yes" if got == expected else f"no: got {got!r}"
                finally:
                    await drv.close(conn)
    return out


def libpq_builds() -> dict[str, str]:
    import asyncpg
    import psycopg

    version = psycopg.pq.version()
    return {
        "psycopg": f"psycopg {psycopg.__version__}, implementation {psycopg.pq.__impl__}, libpq "
                   f"{version // 10000}.{version % 100} (bundled by psycopg-binary: "
                   f"{'yes' if 'psycopg_binary' in psycopg.pq.__file__ or psycopg.pq.__impl__ == 'binary' else 'no'})",
        "asyncpg": f"asyncpg {asyncpg.__version__}: its own protocol implementation (no libpq)",
    }


# ---- report ----------------------------------------------------------------------------------------------


def figures(r: dict) -> list[dict]:
    imp, sp = r["imports"], r["speed"]
    ref = {"reference_name": "asyncpg"}

    def row(name: str, key: str, source: dict, unit: str, scale: float = 1.0) -> dict:
        return c.figure(name, source["psycopg"][key] * scale, source["asyncpg"][key] * scale, unit=unit, **ref)

    pure = imp["psycopg-python"]
    return [
        row("pg driver: import time (fresh interpreter)", "import_s", imp, "s"),
        c.figure("pg driver: import time, psycopg's pure-Python implementation (system libpq)", pure["import_s"],
                 imp["asyncpg"]["import_s"], unit="s", **ref),
        c.figure("pg driver: RSS added by import + 1 connection, pure-Python psycopg", pure["connected_rss"],
                 imp["asyncpg"]["connected_rss"], unit="B", **ref),
        row("pg driver: RSS added by the import", "import_rss", imp, "B"),
        row("pg driver: RSS added by import + 1 connection + 1 query", "connected_rss", imp, "B"),
        row("pg driver: connect (Unix socket, SCRAM)", "connect_median", sp, "ms", 1000),
        row("pg driver: single-row upsert round trip, median", "upsert_median", sp, "µs", 1e6),
        row("pg driver: single-row upsert round trip, p99", "upsert_p99", sp, "µs", 1e6),
        row("pg driver: upsert through the pool, median", "pool_upsert_median", sp, "µs", 1e6),
        row("pg driver: upsert through the pool, p99", "pool_upsert_p99", sp, "µs", 1e6),
        row(f"pg driver: {EVENT_ROWS:,} event rows, one transaction (executemany)", "batch_median", sp, "ms", 1000),
        row(f"pg driver: {EVENT_ROWS:,} event rows, one transaction (COPY)", "copy_median", sp, "ms", 1000),
        row("pg driver: LISTEN/NOTIFY latency, median", "notify_median", sp, "µs", 1e6),
        row("pg driver: LISTEN/NOTIFY latency, p99", "notify_p99", sp, "µs", 1e6),
    ]


def print_report(r: dict) -> None:
    print("psycopg 3 in the agentctl column, asyncpg in the reference column; ratio = psycopg / asyncpg")
    print(c.table(figures(r)))
    for d, text in r["builds"].items():
        print(f"  {d}: {text}")
    print("\nlibpq conventions (checked by connecting):")
    width = max(len(k) for k in r["conventions"])
    for what, by in r["conventions"].items():
        print(f"  {what.ljust(width)}  psycopg: {by['psycopg']:<12}  asyncpg: {by['asyncpg']}")
    print("\na lost connection:")
    for d, row in r["lost"].items():
        print(f"  {d}:")
        for key, value in row.items():
            shown = f"{value * 1000:.1f} ms" if key == "listener_noticed_s" and value is not None else value
            print(f"    {key}: {shown}")


async def measure(server: PgServer, args: argparse.Namespace, work: Path) -> dict:
    drivers = {"psycopg": Psycopg(), "asyncpg": Asyncpg()}
    result: dict[str, Any] = {"builds": libpq_builds()}
    result["imports"] = import_costs(server.create_database("imp").url, args.rounds)
    result["speed"] = await speed(drivers, server.create_database("speed"), args.rounds, args.ops)
    result["conventions"] = await conventions(drivers, server, server.create_database("conv"), work)
    result["lost"] = await lost_connections(drivers, server, server.create_database("lost"))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", type=int, default=2000, help="upserts per driver (spread over the rounds)")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    # The restart scenario makes psycopg_pool warn about each dead connection it discards: what the pool did is
    # in the report's own lines.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    server = started_server(tcp=True, ssl=True, prefix="actl-pgbench-")
    try:
        with c.temp_dir("actl-pgbench-work-") as work:
            result = asyncio.run(measure(server, args, work))
    finally:
        server.stop()
        server.remove()
    print_report(result)
    if args.json:
        Path(args.json).write_text(json.dumps({"bench": "pg_driver", **result, "figures": figures(result)},
                                              indent=2, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
