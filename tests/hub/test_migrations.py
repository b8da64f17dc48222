"""Versioned schema migrations (agentctl.migrations) on real SQLite files: fresh, adopted from before
migrations, from every previous version, refused when newer or foreign, atomic per version under SIGKILL at
every statement, and serialized between concurrent starters."""

from __future__ import annotations

import json

from agentctl.evidence.contract.report import CONTRACT_VERSION
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agentctl.backend.embedded import EmbeddedBackend
from agentctl.cli import main
from agentctl.hub.hub_store import HubStore, HubStoreError
from agentctl.hub.migrations import HUB
from agentctl.migrations import (
    VERSION_TABLE,
    Family,
    Migration,
    MigrationError,
    SchemaTooNew,
    SqliteDialect,
    migrate,
    open_migrated_sqlite,
)
from agentctl.sqlite_util import connect_sqlite
from tests.conftest import REPO, agentctl_cmd
from tests.hub.families import DEMO, DEMO_V1_ONLY, TABLES, broken_demo, gated

DATA = Path(__file__).parent / "data"
BEFORE = DATA / "hub-before-migrations.sqlite3"

# Rows written at each version (by that version's columns), for the from-every-version test: a new
# migration N+1 needs rows for version N here.
SAMPLE_ROWS = {
    1: [
        "INSERT INTO sessions VALUES ('s-1', 't-1', 'e-2', 3, '2026-12-01T10:00:00+00:00')",
        "INSERT INTO executions VALUES ('s-1', 'e-1', 1, '{}', '0.1.0', '2026-12-01T09:00:00+00:00', "
        "'2026-12-01T09:30:00+00:00', 0, 4, NULL)",
        "INSERT INTO executions VALUES ('s-1', 'e-2', 2, '{}', '0.1.0', '2026-12-01T09:40:00+00:00', "
        "'2026-12-01T10:00:00+00:00', 1, 0, '{\"x\": 1}')",
    ],
    2: [
        "INSERT INTO sessions VALUES ('s-1', 't-1', 'e-1', 0, '2026-12-01T10:00:00+00:00')",
        "INSERT INTO executions VALUES ('s-1', 'e-1', 1, '{}', '0.1.0', '2026-12-01T09:00:00+00:00', "
        "'2026-12-01T09:30:00+00:00', 1, 0, NULL, 'host-a:/run/hub.sock')",
    ],
}


def _tables(path: Path, *, ours_only: bool = False) -> dict[str, list[tuple]]:
    """Every table's full column description (name, type, not null, default, primary key) and the indexes;
    `ours_only`: without the runner's own schema_version."""
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        out = {name: [tuple(r) for r in conn.execute(f'PRAGMA table_info("{name}")')] for name in names}
        out["(indexes)"] = sorted(tuple(r) for r in conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type='index'"))
        if ours_only:
            out.pop(VERSION_TABLE, None)
            out["(indexes)"] = [i for i in out["(indexes)"] if i[1] != VERSION_TABLE]
        return out
    finally:
        conn.close()


def _rows(path: Path, *tables: str) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(path)
    try:
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
    finally:
        conn.close()


def _versions(path: Path, family: str = "hub") -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute(f"SELECT version FROM {VERSION_TABLE} WHERE family=? ORDER BY version",
                                           (family,))]
    finally:
        conn.close()


def _user_version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


def _copy_before(tmp_path: Path) -> Path:
    target = tmp_path / "hub.sqlite3"
    shutil.copyfile(BEFORE, target)
    target.chmod(0o600)
    return target


# ---- the hub's schema ---------------------------------------------------------------------------------------


def test_a_new_hub_file_gets_every_version_in_one_row_each_and_a_matching_user_version(tmp_path):
    store = HubStore(tmp_path / "hub.sqlite3")
    store.close()
    assert store.migration.before == 0 and store.migration.after == HUB.latest
    assert [v for v, _ in store.migration.applied] == list(range(1, HUB.latest + 1))
    assert _versions(tmp_path / "hub.sqlite3") == list(range(1, HUB.latest + 1))
    assert _user_version(tmp_path / "hub.sqlite3") == HUB.latest  # what an agentctl before migrations reads
    again = HubStore(tmp_path / "hub.sqlite3")
    again.close()
    assert again.migration.applied == [] and again.migration.before == HUB.latest


def test_version_1_is_exactly_the_schema_the_hub_wrote_before_migrations(tmp_path):
    fresh, _ = open_migrated_sqlite(tmp_path / "fresh.sqlite3", HUB, target=1)
    fresh.close()
    assert _tables(tmp_path / "fresh.sqlite3", ours_only=True) == _tables(_copy_before(tmp_path))


def test_a_hub_database_from_before_migrations_is_adopted_unchanged_and_reads_exactly_as_it_did(tmp_path, capsys):
    db = _copy_before(tmp_path)
    rows_before = _rows(db, "sessions", "executions")
    assert _user_version(db) == 1 and VERSION_TABLE not in _tables(db)

    store = HubStore(db)
    store.close()
    assert store.migration.adopted and store.migration.before == 1
    assert [v for v, _ in store.migration.applied] == list(range(2, HUB.latest + 1))  # the later steps only
    assert _versions(db) == list(range(1, HUB.latest + 1))
    after = _rows(db, "sessions", "executions")
    # Nothing rewritten, nothing lost: the adopted columns read as before (later versions only add columns).
    width = len(HUB.adopt[1]["executions"])
    assert {"sessions": after["sessions"], "executions": [r[:width] for r in after["executions"]]} == rows_before
    conn = sqlite3.connect(db)
    assert conn.execute(f"SELECT adopted FROM {VERSION_TABLE} ORDER BY version").fetchall() == [
        (1,), *[(0,)] * (HUB.latest - 1)]
    conn.close()

    # What `hub status` and `hub report` printed from this file with the code from before migrations.
    for argv, saved in [
        (["hub", "status"], "hub-before-migrations.status.json"),
        (["hub", "report", "session-a"], "hub-before-migrations.report-session-a.json"),
        (["hub", "report", "session-a", "--execution", "exec-1"], "hub-before-migrations.report-session-a-exec-1.json"),
    ]:
        assert main([*argv, "--db", str(db), "--json"]) == 0
        # The envelope says this code's contract version; everything in it is what the old code printed.
        expected = {**json.loads((DATA / saved).read_text()), "version": CONTRACT_VERSION}
        printed = json.loads(capsys.readouterr().out)
        # Added since: the database's footprint (tests/hub/test_retention.py checks it).
        assert printed.pop("database", None) is None or argv == ["hub", "status"]
        assert printed == expected, argv


@pytest.mark.parametrize("start", ["before-migrations", *range(0, HUB.latest)])
def test_every_previous_version_reaches_the_latest_with_its_rows_kept(tmp_path, start):
    db = tmp_path / "hub.sqlite3"
    if start == "before-migrations":
        db = _copy_before(tmp_path)
    else:
        conn, _ = open_migrated_sqlite(db, HUB, target=start)
        for statement in SAMPLE_ROWS.get(start, []):
            conn.execute(statement)
        if start:
            assert start in SAMPLE_ROWS, f"add sample rows for version {start} to SAMPLE_ROWS"
        conn.close()
    tables = [t for t in HUB.tables if t in _tables(db)]
    kept = _rows(db, *tables)
    store = HubStore(db)
    store.close()
    assert _versions(db) == list(range(1, HUB.latest + 1))
    counts = {t: len(r) for t, r in _rows(db, *tables).items()}
    assert counts == {t: len(r) for t, r in kept.items()}
    fresh, _ = open_migrated_sqlite(tmp_path / "fresh.sqlite3", HUB)
    fresh.close()
    assert _tables(db) == _tables(tmp_path / "fresh.sqlite3")


def test_a_database_migrated_by_a_newer_agentctl_is_refused_and_left_as_it_is(tmp_path, capsys):
    db = tmp_path / "hub.sqlite3"
    HubStore(db).close()
    conn = sqlite3.connect(db)
    conn.execute(f"INSERT INTO {VERSION_TABLE} VALUES ('hub', ?, 'from the future', 'x', 'agentctl 9', 0)",
                 (HUB.latest + 1,))
    conn.commit()
    conn.close()
    before = _rows(db, VERSION_TABLE, *HUB.tables)
    for readonly in (False, True):
        with pytest.raises(HubStoreError, match=f"schema version {HUB.latest + 1}, newer than this agentctl"):
            HubStore(db, readonly=readonly)
    assert _rows(db, VERSION_TABLE, *HUB.tables) == before
    assert main(["hub", "migrate", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "newer than this agentctl knows" in err and err.count("\n") == 1
    assert main(["hub", "status", "--db", str(db)]) == 2
    assert "upgrade this one" in capsys.readouterr().err


def test_a_file_whose_user_version_is_newer_and_has_no_schema_version_is_refused(tmp_path):
    db = tmp_path / "hub.sqlite3"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version=5")
    conn.close()
    with pytest.raises(HubStoreError, match="user_version"):
        HubStore(db)
    assert _tables(db) == {"(indexes)": []}


def test_the_task_store_given_as_the_hub_database_is_refused_not_extended(tmp_path, capsys):
    tasks = tmp_path / "tasks.sqlite3"
    EmbeddedBackend(tasks, agents_info={}, mcp_info=[], execution_info={}).close()
    before = _tables(tasks)
    assert main(["hub", "migrate", "--db", str(tasks)]) == 2
    err = capsys.readouterr().err
    assert f"{tasks} is not a hub database: it holds other tables (" in err and "no schema_version" in err
    assert _tables(tasks) == before
    with pytest.raises(HubStoreError, match="not a hub database"):
        HubStore(tasks)


@pytest.mark.parametrize(("schema", "expected"), [
    (["CREATE TABLE sessions (session_id TEXT PRIMARY KEY, task_id TEXT, current_execution_id TEXT, "
      "stale_rejected INTEGER, last_contact_at TEXT)"], "no table executions"),
    ([*(s.replace("history TEXT,", "history TEXT, extra TEXT,") for s in HUB.step(1).sqlite)],
     "executions has extra extra"),
])
def test_an_altered_or_partial_old_schema_is_refused_with_what_differs(tmp_path, schema, expected):
    db = tmp_path / "hub.sqlite3"
    conn = sqlite3.connect(db)
    for statement in schema:
        conn.execute(statement)
    conn.close()
    with pytest.raises(HubStoreError, match=f"not in the shape of the hub database's schema version 1 \\({expected}"):
        HubStore(db)
    assert VERSION_TABLE not in _tables(db)


def test_a_reader_refuses_a_file_that_is_not_yet_at_the_latest_version(tmp_path, capsys):
    db = tmp_path / "empty.sqlite3"
    sqlite3.connect(db).close()
    assert main(["hub", "status", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "is at schema version 0" in err and "agentctl hub migrate" in err
    assert _tables(db) == {"(indexes)": []}, "a reader never migrates"


# ---- the runner ----------------------------------------------------------------------------------------------


def test_families_must_number_their_migrations_from_one_without_gaps():
    step = Migration(2, "two", ("SELECT 1",), ("SELECT 1",))
    with pytest.raises(ValueError, match="without gaps"):
        Family(name="x", what="x", migrations=(step,), tables=(), upgrade_hint="")


def test_a_failing_statement_rolls_back_its_whole_version_and_the_next_run_goes_on_from_there(tmp_path):
    db = tmp_path / "demo.sqlite3"
    conn = connect_sqlite(db)
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        migrate(SqliteDialect(conn), broken_demo(), str(db))
    conn.close()
    assert _versions(db, "demo") == [1] and _user_version(db) == 1
    assert [c[1] for c in _tables(db)["items"]] == ["id", "name"], "the failed version's ALTER was rolled back"
    conn, result = open_migrated_sqlite(db, DEMO)
    conn.close()
    assert result.before == 1 and result.applied == [(2, "demo step 2")]
    assert _rows(db, "items") == {"items": [(1, "seed", 7)]}


def test_a_recorded_history_with_a_gap_is_refused(tmp_path):
    db = tmp_path / "demo.sqlite3"
    open_migrated_sqlite(db, DEMO)[0].close()
    conn = sqlite3.connect(db)
    conn.execute(f"DELETE FROM {VERSION_TABLE} WHERE version = 1")
    conn.commit()
    conn.close()
    with pytest.raises(MigrationError, match=r"records schema version 2 without version\(s\) 1"):
        open_migrated_sqlite(db, DEMO)


def test_a_target_below_the_latest_stops_there_and_a_later_run_finishes(tmp_path):
    db = tmp_path / "demo.sqlite3"
    _, first = open_migrated_sqlite(db, DEMO, target=1)
    assert (first.before, first.after) == (0, 1)
    _, second = open_migrated_sqlite(db, DEMO)
    assert (second.before, second.after, second.applied) == (1, 2, [(2, "demo step 2")])
    with pytest.raises(SchemaTooNew):
        open_migrated_sqlite(db, DEMO_V1_ONLY)


# A process that migrates DEMO and stops, before the N-th statement of the runner runs, until it is killed.
_CRASHER = """
import sys
from agentctl.migrations import SqliteDialect, migrate
from agentctl.sqlite_util import connect_sqlite
from tests.hub.families import DEMO
stop_at = int(sys.argv[2])
seen = []
def trace(statement):
    seen.append(statement)
    if len(seen) == stop_at:
        print("at", statement.split()[0], flush=True)
        sys.stdin.read()
conn = connect_sqlite(sys.argv[1])
conn.set_trace_callback(trace)
migrate(SqliteDialect(conn), DEMO, sys.argv[1])
print("done", len(seen), flush=True)
"""


def _crasher(db: Path, stop_at: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _CRASHER, str(db), str(stop_at)], cwd=REPO, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_sigkill_before_any_statement_of_a_migration_leaves_a_whole_version_and_the_next_start_completes(tmp_path):
    dry = _crasher(tmp_path / "dry.sqlite3", 0)
    out, err = dry.communicate(timeout=60)
    assert dry.returncode == 0, err
    total = int(out.split()[-1])
    assert total > 2 * (len(DEMO.step(1).sqlite) + len(DEMO.step(2).sqlite))  # begin, reads, writes, commits
    for stop_at in range(1, total + 1):
        db = tmp_path / f"crash-{stop_at}.sqlite3"
        proc = _crasher(db, stop_at)
        line = proc.stdout.readline()
        assert line.startswith("at "), proc.stderr.read()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close(), proc.stderr.close(), proc.stdin.close()
        versions = _versions(db, "demo") if db.exists() and VERSION_TABLE in _tables(db) else []
        assert versions in ([], [1], [1, 2]), (stop_at, line)
        at = len(versions)
        assert _user_version(db) == at, (stop_at, line)
        tables = _tables(db) if db.exists() else {}
        assert set(tables) - {VERSION_TABLE, "(indexes)"} == (set(TABLES) if at else set()), (stop_at, line)
        if at:
            columns = [c[1] for c in tables["items"]]
            assert columns == (["id", "name", "size"] if at == 2 else ["id", "name"]), (stop_at, line)
        conn, result = open_migrated_sqlite(db, DEMO)
        conn.close()
        assert result.before == at and result.after == 2, (stop_at, line)
        assert _rows(db, "items") == {"items": [(1, "seed", 7)]}, (stop_at, line)


def test_a_second_starter_cannot_enter_while_a_migration_is_in_progress_and_then_finds_it_done(tmp_path):
    db = tmp_path / "demo.sqlite3"
    inside, release = threading.Event(), threading.Event()
    results: dict[str, object] = {}

    def gate() -> int:
        inside.set()
        release.wait(30)
        return 1

    traced: list[str] = []

    def first() -> None:
        conn = connect_sqlite(db)
        conn.create_function("gate", 0, gate)
        conn.set_trace_callback(traced.append)
        try:
            results["first"] = migrate(SqliteDialect(conn), gated("SELECT gate()"), str(db))
        finally:
            conn.close()

    worker = threading.Thread(target=first)
    worker.start()
    try:
        assert inside.wait(30)
        impatient = connect_sqlite(db, busy_timeout_ms=0)
        # The first holds the file's write lock from its BEGIN: nobody reads a version it is about to change.
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            migrate(SqliteDialect(impatient), gated("SELECT 1"), str(db))
        impatient.close()
        waiting = {}
        second = threading.Thread(target=lambda: waiting.setdefault("r", open_migrated_sqlite(db, gated("SELECT 1"))))
        second.start()
    finally:
        release.set()
        worker.join(30)
    second.join(30)
    conn, result = waiting["r"]
    conn.close()
    # The lock is taken per version: the second may apply version 2 after the first committed 1, never 1.
    assert results["first"].applied[0] == (1, "demo step 1") and result.before >= 1
    assert sorted(results["first"].applied + result.applied) == [(1, "demo step 1"), (2, "demo step 2")]
    assert _versions(db, "demo") == [1, 2]
    # Every step takes the write lock before it reads anything (a deferred BEGIN would read a version that
    # another starter is about to change, and fail on its first write).
    steps = " ".join(s.split()[0].upper() for s in traced).split("COMMIT")
    assert {tuple(step.split()[:2]) for step in steps if step.strip()} == {("BEGIN", "SELECT")}, traced[:3]
    assert all(s.startswith("BEGIN IMMEDIATE") for s in traced if s.upper().startswith("BEGIN"))


def test_hub_migrate_processes_racing_on_one_new_file_apply_each_version_once(tmp_path):
    db = tmp_path / "hub.sqlite3"
    procs = [subprocess.Popen(agentctl_cmd("hub", "migrate", "--db", str(db), "--json"), cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in outputs]
    views = [json.loads(out) for out, _ in outputs]
    assert sorted(len(v["applied"]) for v in views) == [0, 0, 0, HUB.latest]
    assert all(v["schema_to"] == HUB.latest for v in views)
    assert _versions(db) == list(range(1, HUB.latest + 1))
