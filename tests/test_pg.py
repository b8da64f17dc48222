"""The PostgreSQL test server (tests/pg.py): a real postmaster on a socket in its own directory only, a
password-protected role, a database per test, and a missing server that fails CI instead of skipping."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import psycopg
import pytest

from tests.conftest import REPO
from tests.pg import APP_ROLE, BINDIR, REQUIRE, SKIP, PgDatabase, PgServer


def test_the_server_listens_on_its_own_socket_directory_only_and_runs_unprivileged(pg_server: PgServer):
    conn = pg_server.admin()
    assert conn.execute("SHOW listen_addresses").fetchone()[0] == ""  # no TCP at all
    assert conn.execute("SHOW unix_socket_directories").fetchone()[0] == str(pg_server.base)
    socket_file = pg_server.base / f".s.PGSQL.{pg_server.port}"
    assert stat.S_ISSOCK(os.lstat(socket_file).st_mode)
    assert stat.S_IMODE(os.stat(pg_server.base).st_mode) == 0o700
    pid = int((pg_server.data / "postmaster.pid").read_text().split()[0])
    uid = os.stat(f"/proc/{pid}").st_uid
    assert uid != 0, "initdb and the server run as an unprivileged user"


def test_each_test_gets_its_own_empty_database_owned_by_the_password_role(pg_db: PgDatabase, pg_server: PgServer):
    with psycopg.connect(pg_db.url) as conn:
        assert conn.execute("SELECT current_user, current_database()").fetchone() == (APP_ROLE, pg_db.name)
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0
        conn.execute("CREATE TABLE mine (x int)")  # the owner may create tables
    other = pg_server.create_database()
    try:
        with psycopg.connect(other.url) as conn:
            assert conn.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'mine'").fetchone()[0] == 0
    finally:
        pg_server.drop_database(other)


def test_the_role_needs_its_password_and_the_wrong_one_is_refused(pg_db: PgDatabase):
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(pg_db.url_without_password, connect_timeout=5)
    wrong = pg_db.url.replace("Pg-Canary", "Not-The-Password", 1)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong, connect_timeout=5)
    with psycopg.connect(pg_db.conninfo) as conn:  # the key=value form, password quoted
        assert conn.execute("SELECT 1").fetchone() == (1,)


_MISSING = """
def test_needs_the_server(pg_server):
    pass
"""


@pytest.mark.parametrize(("env", "outcome"), [
    ({}, "failed"),
    ({SKIP: "1"}, "skipped"),
    ({SKIP: "1", REQUIRE: "1"}, "failed"),
])
def test_a_missing_server_fails_unless_skipping_was_asked_for_and_ci_always_fails(tmp_path, env, outcome):
    (tmp_path / "test_missing.py").write_text(_MISSING)
    (tmp_path / "conftest.py").write_text("from tests.pg import pg_server  # noqa: F401\n")
    base = {k: v for k, v in os.environ.items() if k not in (SKIP, REQUIRE)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**base, **env, BINDIR: str(tmp_path / "no-such-bin"), "PYTHONPATH": str(REPO),
             "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    summary = proc.stdout.strip().splitlines()[-1]
    assert f"1 {outcome if outcome == 'skipped' else 'error'}" in summary, proc.stdout
    assert "initdb, pg_ctl" in proc.stdout and "apt-get install postgresql" in proc.stdout
