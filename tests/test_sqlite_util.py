"""The one SQLite opener (agentctl.sqlite_util) and the start errors of the stores built on it: a corrupt
or foreign file is one clear line naming it, never a traceback; new files are private from the start."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest

from agentctl.backend.base import BackendError
from agentctl.backend.embedded import EmbeddedBackend, TaskStoreError
from agentctl.sqlite_util import open_sqlite, open_sqlite_readonly
from agentctl.hub.hub_store import HubStore, HubStoreError
from tests.conftest import REPO, agentctl_cmd

SCHEMA = "CREATE TABLE IF NOT EXISTS t (x INTEGER);"


def _backend(path: Path) -> EmbeddedBackend:
    return EmbeddedBackend(path, agents_info={"agents": []}, mcp_info=[], execution_info={})


def test_a_new_file_is_private_from_creation_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        conn = open_sqlite(tmp_path / "sub" / "db.sqlite3", SCHEMA, 3, too_new=lambda v: RuntimeError(v))
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE((tmp_path / "sub" / "db.sqlite3").stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "sub").stat().st_mode) == 0o700
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    finally:
        conn.close()


def test_a_file_from_a_newer_schema_raises_the_callers_error(tmp_path):
    path = tmp_path / "db.sqlite3"
    open_sqlite(path, SCHEMA, 5, too_new=lambda v: RuntimeError(v)).close()
    with pytest.raises(LookupError, match="found 5"):
        open_sqlite(path, SCHEMA, 4, too_new=lambda v: LookupError(f"found {v}"))


def test_a_read_only_connection_never_creates_and_accepts_odd_path_characters(tmp_path):
    path = tmp_path / "odd?name#1%.sqlite3"
    open_sqlite(path, SCHEMA, 1, too_new=lambda v: RuntimeError(v)).close()
    conn = open_sqlite_readonly(path)
    try:
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 0
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("INSERT INTO t VALUES (1)")
    finally:
        conn.close()
    with pytest.raises(sqlite3.Error):
        open_sqlite_readonly(tmp_path / "missing.sqlite3")
    assert not (tmp_path / "missing.sqlite3").exists()


def test_a_corrupt_task_store_is_one_line_start_error_naming_the_file(tmp_path):
    path = tmp_path / "tasks.sqlite3"
    path.write_bytes(b"this is not a database, it is garbage " * 200)
    with pytest.raises(TaskStoreError) as info:
        _backend(path)
    message = str(info.value)
    assert isinstance(info.value, BackendError)
    assert "\n" not in message and str(path) in message and "not a database" in message
    assert "move the file aside" in message


def test_a_corrupt_hub_database_and_a_corrupt_hub_task_store_each_stop_hub_serve_with_one_line(short_tmp):
    garbage = b"garbage, not SQLite " * 200
    (short_tmp / "bad-hub.sqlite3").write_bytes(garbage)
    with pytest.raises(HubStoreError, match="not a database"):
        HubStore(short_tmp / "bad-hub.sqlite3")

    (short_tmp / "bad.tasks.sqlite3").write_bytes(garbage)
    run = subprocess.run(
        agentctl_cmd("hub", "serve", "--socket", str(short_tmp / "h.sock"), "--db", str(short_tmp / "hub.sqlite3"),
                     "--tasks-db", str(short_tmp / "bad.tasks.sqlite3")),
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith("agentctl: cannot open the task store ") and run.stderr.count("\n") == 1
    assert not (short_tmp / "h.sock").exists()
