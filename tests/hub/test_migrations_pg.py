"""The same migration runner on a real PostgreSQL server: the hub's schema, once; concurrent starters
serialized by the advisory lock (seen waiting in pg_locks); a failed version rolled back whole; two
families in one database; a newer or foreign database refused."""

from __future__ import annotations

import threading

import psycopg
import pytest

from agentctl.dsn import parse_location
from agentctl.evidence.contract.base import encode
from agentctl.hub.migrations import HUB
from agentctl.migrations import ADVISORY_LOCK_KEY, MigrationError, PostgresDialect, SchemaTooNew, migrate
from agentctl.postgres import PostgresUnavailable, migrate_postgres
from tests.conftest import poll
from tests.hub.families import DEMO, broken_demo, gated
from tests.pg import PgDatabase, PgServer


def _connect(db: PgDatabase) -> psycopg.Connection:
    return psycopg.connect(db.url, autocommit=True)


def _columns(db: PgDatabase) -> dict[str, list[str]]:
    with _connect(db) as conn:
        rows = conn.execute("SELECT table_name, column_name FROM information_schema.columns "
                            "WHERE table_schema = 'public' ORDER BY table_name, ordinal_position").fetchall()
    out: dict[str, list[str]] = {}
    for table, column in rows:
        out.setdefault(table, []).append(column)
    return out


def _versions(db: PgDatabase, family: str) -> list[int]:
    with _connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT version FROM schema_version WHERE family = %s ORDER BY version",
                                           (family,))]


def test_the_hub_schema_is_created_once_and_a_second_run_applies_nothing(pg_db: PgDatabase):
    dsn = parse_location(pg_db.url)
    first = migrate_postgres(dsn, HUB)
    assert (first.before, first.after) == (0, HUB.latest) and len(first.applied) == HUB.latest
    columns = _columns(pg_db)
    assert columns["sessions"] == list(HUB.adopt[1]["sessions"])
    assert columns["executions"] == [*HUB.adopt[1]["executions"], "hub"]  # version 2 adds the holding hub
    second = migrate_postgres(dsn, HUB)
    assert second.applied == [] and second.before == HUB.latest
    assert _versions(pg_db, "hub") == list(range(1, HUB.latest + 1))


def test_version_1_rows_reach_the_latest_and_new_hellos_are_ordered_after_every_stored_one(pg_db: PgDatabase):
    from datetime import UTC, datetime

    from agentctl.hub.stores import open_store
    from tests.upstream.support import identity

    dsn = parse_location(pg_db.url)
    migrate_postgres(dsn, HUB, target=1)
    with _connect(pg_db) as conn:
        conn.execute("INSERT INTO sessions VALUES ('session-1', 'task-1', 'exec-1', 0, '2026-12-01T10:00:00+00:00')")
        conn.execute("INSERT INTO executions VALUES ('session-1', 'exec-1', 7, %s, '0.1.0', "
                     "'2026-12-01T09:00:00+00:00', '2026-12-01T10:00:00+00:00', 0, 0, NULL)",
                     (encode(identity(execution="exec-1")).decode(),))
    store = open_store(dsn, hub_id="host-a")  # a hub starting on the old database migrates it
    try:
        assert [v for v, _ in store.migration.applied] == list(range(2, HUB.latest + 1))
        claimed = store.claim(identity(execution="exec-2"), "0.1.0", datetime.now(UTC))
        assert claimed.current_execution_id == "exec-2", "the sequence starts past every stored order"
        assert claimed.executions["exec-2"].hello_order > 7 and claimed.executions["exec-1"].hello_order == 7
    finally:
        store.close()


def test_a_second_starter_waits_on_the_advisory_lock_and_then_finds_the_work_done(pg_db: PgDatabase,
                                                                                     pg_server: PgServer):
    admin = pg_server.admin()
    holder = psycopg.connect(pg_server.admin_conninfo(pg_db.name), autocommit=True)
    holder.execute("CREATE SCHEMA ctl; CREATE TABLE ctl.gate (x int); GRANT USAGE ON SCHEMA ctl TO PUBLIC; "
                   "GRANT SELECT ON ctl.gate TO PUBLIC")
    holder.execute("BEGIN")
    holder.execute("LOCK TABLE ctl.gate IN ACCESS EXCLUSIVE MODE")  # the first starter stops inside its step 1
    family = gated("SELECT count(*) FROM ctl.gate")
    results: dict[str, object] = {}

    def run(name: str) -> None:
        with _connect(pg_db) as conn:
            try:
                results[name] = migrate(PostgresDialect(conn), family, "demo")
            except Exception as exc:  # noqa: BLE001 - reported by the assertions below
                results[name] = exc

    def waiting(locktype: str) -> int:
        return admin.execute("SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                             "WHERE d.datname = %s AND l.locktype = %s AND NOT l.granted",
                             (pg_db.name, locktype)).fetchone()[0]

    first = threading.Thread(target=run, args=("first",))
    first.start()
    second = threading.Thread(target=run, args=("second",))
    try:
        poll(lambda: waiting("relation") == 1, timeout=30, what="the first starter to wait on the gate")
        second.start()
        # The second asks for the runner's advisory lock before it reads anything, and waits for it.
        poll(lambda: waiting("advisory") == 1, timeout=30, what="the second starter to wait on the advisory lock")
        held = admin.execute("SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND granted").fetchone()
        assert held is not None and held[0] == ADVISORY_LOCK_KEY & 0xFFFFFFFF
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        first.join(30)
        if second.is_alive() or second.ident:
            second.join(30)
    # The lock is taken per version: the second may apply version 2 after the first committed 1, never 1.
    first_applied, second_applied = results["first"].applied, results["second"].applied
    assert first_applied[0] == (1, "demo step 1") and results["second"].before >= 1, results
    assert sorted(first_applied + second_applied) == [(1, "demo step 1"), (2, "demo step 2")], results
    assert _versions(pg_db, "demo") == [1, 2]


def test_a_failing_statement_rolls_back_its_whole_version_on_postgresql_too(pg_db: PgDatabase):
    dsn = parse_location(pg_db.url)
    with pytest.raises(PostgresUnavailable, match='relation "no_such_table" does not exist'):
        migrate_postgres(dsn, broken_demo())
    assert _versions(pg_db, "demo") == [1]
    assert _columns(pg_db)["items"] == ["id", "name"], "the failed version's ALTER TABLE was rolled back"
    assert migrate_postgres(dsn, DEMO).applied == [(2, "demo step 2")]


def test_two_families_share_one_database_each_with_its_own_versions(pg_db: PgDatabase):
    dsn = parse_location(pg_db.url)
    migrate_postgres(dsn, HUB)
    assert migrate_postgres(dsn, DEMO).before == 0, "the hub's tables are another family's, not a foreign schema"
    assert migrate_postgres(dsn, HUB).applied == []
    assert _versions(pg_db, "hub") == list(range(1, HUB.latest + 1)) and _versions(pg_db, "demo") == [1, 2]


def test_a_newer_or_foreign_postgresql_database_is_refused(pg_db: PgDatabase, pg_server: PgServer):
    dsn = parse_location(pg_db.url)
    with _connect(pg_db) as conn:
        conn.execute("CREATE TABLE orders (id int)")
    with pytest.raises(MigrationError, match="is not a hub database: it holds other tables \\(orders\\)"):
        migrate_postgres(dsn, HUB)
    with _connect(pg_db) as conn:
        conn.execute("DROP TABLE orders")
    migrate_postgres(dsn, HUB)
    with _connect(pg_db) as conn:
        conn.execute("INSERT INTO schema_version VALUES ('hub', %s, 'future', 'x', 'agentctl 9', 0)", (HUB.latest + 1,))
    with pytest.raises(SchemaTooNew, match=f"schema version {HUB.latest + 1}, newer than this agentctl"):
        migrate_postgres(dsn, HUB)
