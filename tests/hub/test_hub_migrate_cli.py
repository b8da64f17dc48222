"""`agentctl hub migrate` as a user runs it (a real process): SQLite files created, adopted or left current;
a real PostgreSQL database reached through every libpq convention (the URL, key=value, --db-file, the
environment, PGPASSWORD, PGPASSFILE, a service file), with the password in no output, error or warning."""

from __future__ import annotations

import json

from agentctl.evidence.contract.report import CONTRACT_VERSION
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from agentctl.cli import main
from agentctl.hub.migrations import HUB
from tests.conftest import REPO, agentctl_cmd
from tests.pg import PgDatabase

DATA = Path(__file__).parent / "data"


def _env(env: dict[str, str] | None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PG") and k != "AGENTCTL_HUB_DB"}
    base["PGPASSFILE"] = "/nonexistent/pgpass"  # never the user's own ~/.pgpass
    return {**base, **(env or {})}


def _run(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(agentctl_cmd("hub", *args), capture_output=True, text=True, timeout=120, cwd=cwd,
                          env=_env(env))


def _run_here(monkeypatch, capsys, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command in this process (libpq reads PGPASSWORD, PGPASSFILE, PGSERVICEFILE from the environment when
    it connects, so the conventions hold the same): a process start saved per case."""
    wanted = _env(env)
    for name in set(os.environ) - set(wanted):
        monkeypatch.delenv(name)
    for name, value in wanted.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    code = main(["hub", *args])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["agentctl", "hub", *args], code, out, err)


def _forms(password: str) -> list[str]:
    """The password as it could leak: raw, percent-encoded, in another case, and its random part alone."""
    random_part = password.split(":")[1][:16]
    return [password, quote(password, safe=""), password.upper(), password.lower(), random_part]


def _assert_no_password(proc: subprocess.CompletedProcess[str], password: str) -> None:
    for form in _forms(password):
        assert form.lower() not in (proc.stdout + proc.stderr).lower(), (form, proc.stdout, proc.stderr)


# ---- SQLite -------------------------------------------------------------------------------------------------


def test_a_sqlite_file_is_created_then_up_to_date_and_a_file_from_before_migrations_adopted(tmp_path):
    db = tmp_path / "hub.sqlite3"
    created = _run("migrate", "--db", str(db))
    assert created.returncode == 0, created.stderr
    assert created.stdout == f"created hub database {db} at schema version {HUB.latest}\n"
    again = _run("migrate", "--db", str(db), "--json")
    assert json.loads(again.stdout) == {"version": CONTRACT_VERSION, "database": str(db), "engine": "sqlite",
                                        "schema_from": HUB.latest, "schema_to": HUB.latest,
                                        "schema_latest": HUB.latest, "adopted": False, "applied": []}
    assert _run("migrate", "--db", str(db)).stdout == f"hub database {db}: schema version {HUB.latest}, up to date\n"

    old = tmp_path / "old.sqlite3"
    shutil.copyfile(DATA / "hub-before-migrations.sqlite3", old)
    adopted = _run("migrate", "--db", str(old))
    assert adopted.returncode == 0, adopted.stderr
    assert adopted.stdout.startswith(f"hub database {old}: written before versioned migrations, recorded as "
                                     "schema version 1 as it is (nothing rewritten)")


def test_the_default_location_comes_from_the_environment(tmp_path):
    db = tmp_path / "env.sqlite3"
    proc = _run("migrate", "--json", env={"AGENTCTL_HUB_DB": str(db)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["database"] == str(db) and db.exists()


def test_db_and_db_file_together_is_a_usage_error(tmp_path):
    proc = _run("migrate", "--db", str(tmp_path / "a"), "--db-file", str(tmp_path / "b"))
    assert proc.returncode == 1 and proc.stderr == "agentctl: give either --db or --db-file, not both\n"


def test_the_daemon_and_a_sqlite_hub_never_import_a_postgresql_driver(tmp_path):
    probe = textwrap.dedent(f"""
        import sys
        from agentctl.cli import main
        import agentctl.daemon.app, agentctl.hub.hub
        assert main(["hub", "migrate", "--db", {str(tmp_path / 'h.sqlite3')!r}]) == 0
        assert main(["hub", "status", "--db", {str(tmp_path / 'h.sqlite3')!r}]) == 0
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("psycopg", "psycopg_pool", "asyncpg")))
    """)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


# ---- PostgreSQL ---------------------------------------------------------------------------------------------


def _pgpass_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:")


def _sources(db: PgDatabase, tmp: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Every way a user gives the database and its password: (arguments, environment)."""
    dsn_file = tmp / "hub.dsn"
    dsn_file.write_text(db.url + "\n")
    dsn_file.chmod(0o600)
    passfile = tmp / "pgpass"
    passfile.write_text(f"*:*:{db.name}:{db.user}:{_pgpass_escape(db.password)}\n")
    passfile.chmod(0o600)
    services = tmp / "pg_service.conf"
    services.write_text(f"[hub]\nhost={db.socket_dir}\nport={db.port}\ndbname={db.name}\nuser={db.user}\n"
                        f"password={db.password}\n")
    return {
        "url": (["--db", db.url], {}),
        "keyword": (["--db", db.conninfo], {}),
        "db-file": (["--db-file", str(dsn_file)], {}),
        "environment": ([], {"AGENTCTL_HUB_DB": db.url}),
        "PGPASSWORD": (["--db", db.url_without_password], {"PGPASSWORD": db.password}),
        "PGPASSFILE": (["--db", db.url_without_password], {"PGPASSFILE": str(passfile)}),
        "service file": (["--db", "service=hub"], {"PGSERVICEFILE": str(services)}),
    }


@pytest.mark.parametrize("source", ["url", "keyword", "db-file", "environment", "PGPASSWORD", "PGPASSFILE",
                                    "service file"])
def test_postgresql_through_every_libpq_convention_migrates_and_never_shows_the_password(pg_db: PgDatabase,
                                                                                          tmp_path, source,
                                                                                          monkeypatch, capsys):
    args, env = _sources(pg_db, tmp_path)[source]
    first = _run_here(monkeypatch, capsys, "migrate", *args, "--json", env=env)
    assert first.returncode == 0, first.stderr
    _assert_no_password(first, pg_db.password)
    view = json.loads(first.stdout)
    assert view["engine"] == "postgresql" and (view["schema_from"], view["schema_to"]) == (0, HUB.latest)
    assert view["applied"] == [{"version": v, "description": m.description}
                               for v, m in enumerate(HUB.migrations, 1)]
    inline = source in ("url", "keyword")
    assert (("***" in view["database"]) == (inline or source in ("db-file", "environment")))
    # Only a password in the command line itself (visible in the process list) earns the warning.
    assert ("warning: the --db value holds a password" in first.stderr) == inline
    with psycopg.connect(pg_db.url) as conn:  # the task store's family too, in the same database
        assert conn.execute("SELECT count(*) FROM schema_version WHERE family = 'tasks'").fetchone()[0] >= 1
    again = _run_here(monkeypatch, capsys, "migrate", *args, env=env)
    assert again.returncode == 0 and again.stdout.endswith(f": schema version {HUB.latest}, up to date\n")
    _assert_no_password(again, pg_db.password)


def test_a_wrong_password_or_a_missing_server_is_one_line_exit_2_with_no_password(pg_db: PgDatabase, tmp_path):
    wrong = pg_db.password.replace("Pg-Canary", "Wrong-Canary")
    proc = _run("migrate", "--db", pg_db.url.replace(quote(pg_db.password, safe=""), quote(wrong, safe="")))
    assert proc.returncode == 2
    assert 'password authentication failed for user "agentctl"' in proc.stderr
    assert proc.stderr.count("\n") == 2  # the warning about a password on the command line, and the error
    _assert_no_password(proc, wrong)
    gone = _run("migrate", "--db", pg_db.url.replace(quote(str(pg_db.socket_dir), safe=""),
                                                       quote(str(tmp_path), safe="")))
    assert gone.returncode == 2 and "cannot connect to postgresql://agentctl:***@/" in gone.stderr
    _assert_no_password(gone, pg_db.password)


def test_a_server_error_that_quotes_the_options_has_them_masked(pg_db: PgDatabase):
    marker = "Opt-Canary-7f3a9c"
    proc = _run("migrate", "--db", pg_db.url + "&options=" + quote(f"-c statement_timeout={marker}", safe=""))
    assert proc.returncode == 2
    assert 'invalid value for parameter "statement_timeout"' in proc.stderr  # the server quoted the value...
    assert marker not in proc.stderr and marker.lower() not in proc.stderr.lower()  # ...and it was masked
    _assert_no_password(proc, pg_db.password)


def test_status_and_report_read_postgresql_through_any_convention_and_never_show_the_password(
        pg_db: PgDatabase, tmp_path, monkeypatch, capsys):
    from agentctl.dsn import parse_location
    from agentctl.hub.stores import open_store
    from tests.hub.test_store import _execution, _session

    store = open_store(parse_location(pg_db.url), hub_id="host-a")  # a hub's writes, migrated at open
    store.write([_session("session-1", "e-1")], [_execution("session-1", "e-1", 1)])
    store.close()
    for source in ("url", "db-file", "PGPASSFILE"):
        args, env = _sources(pg_db, tmp_path)[source]
        status = _run_here(monkeypatch, capsys, "status", *args, "--json", env=env)
        assert status.returncode == 0, status.stderr
        assert [s["current_execution_id"] for s in json.loads(status.stdout)["sessions"]] == ["e-1"]
        report = _run_here(monkeypatch, capsys, "report", "session-1", *args, env=env)
        assert report.returncode == 0 and "e-1 (current" in report.stdout
        missing = _run_here(monkeypatch, capsys, "report", "no-such-session", *args, env=env)
        assert missing.returncode == 1 and "the hub has no session 'no-such-session'" in missing.stderr
        for proc in (status, report, missing):
            _assert_no_password(proc, pg_db.password)
    wrong = pg_db.password.replace("Pg-Canary", "Wrong-Canary")
    bad = _run_here(monkeypatch, capsys, "status", "--db",
                    pg_db.url.replace(quote(pg_db.password, safe=""), quote(wrong, safe="")))
    assert bad.returncode == 2 and 'password authentication failed for user "agentctl"' in bad.stderr
    _assert_no_password(bad, wrong)
