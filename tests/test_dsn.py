"""Database locations (agentctl.dsn, agentctl.dsn_source): a SQLite path or a PostgreSQL connection string,
parsed as libpq parses it, shown with no secret in any rendering, refused without quoting when malformed,
and read from a private file or the environment."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote

import pytest
from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict

from agentctl.dsn import MASK, DsnError, PostgresDsn, SqlitePath, parse_location
from agentctl.dsn_source import ARGV_PASSWORD_WARNING, resolve_location

CANARY = "Zq9-Canary-s3cr3t"
# The canary as it may appear: raw, percent-encoded, in another case.
FORMS = (CANARY, quote(CANARY, safe=""), CANARY.upper(), CANARY.lower())


def _leaks(text: str) -> list[str]:
    return [form for form in FORMS if form.lower() in text.lower()]


def _renderings(location: SqlitePath | PostgresDsn) -> list[str]:
    return [location.display(), str(location), repr(location), f"{location}", json.dumps(str(location))]


# (connection string, what display() must show): the canary in every position a secret can take.
SECRET_POSITIONS = [
    (f"postgresql://alice:{CANARY}@db.example:5433/hub", "postgresql://alice:***@db.example:5433/hub"),
    (f"postgresql://alice:{quote(CANARY + '/@:%', safe='')}@db/hub", "postgresql://alice:***@db/hub"),
    (f"postgres://alice@db/hub?password={CANARY}&sslmode=require", "postgres://alice:***@db/hub?sslmode=require"),
    (f"postgresql://db/hub?%70assword={CANARY}", "postgresql://:***@db/hub"),
    (f"postgresql://db/hub?sslpassword={CANARY}", "postgresql://db/hub?sslpassword=***"),
    (f"postgresql://db/hub?options=-c%20app.secret%3D{CANARY}", "postgresql://db/hub?options=***"),
    (f"postgresql://{CANARY}:{CANARY}@db/{CANARY}", "postgresql://***:***@db/***"),
    (f"postgresql://alice:{CANARY}@db/{CANARY.upper()}-prod", "postgresql://alice:***@db/***"),
    (f"postgresql://alice:{CANARY}@{CANARY.lower()}.example/hub", "postgresql://alice:***@***/hub"),
    (f"postgresql://alice:{CANARY}@db/hub?application_name={CANARY}", "postgresql://alice:***@db/hub?application_name=***"),
    (f"host=/run/pg dbname=hub user=alice password={CANARY}", "host=/run/pg dbname=hub user=alice password=***"),
    (f"host=db password = '{CANARY} with spaces' user=alice", "host=db password=*** user=alice"),
    (f"host=db password='it\\'s {CANARY}'", "host=db password=***"),
    (f"host=db options='-c app.key={CANARY}' sslpassword={CANARY}", "host=db options=*** sslpassword=***"),
    (f"host=db password={CANARY} user={CANARY.upper()}", "host=db password=*** user=***"),
]


@pytest.mark.parametrize(("conninfo", "shown"), SECRET_POSITIONS)
def test_a_secret_in_any_position_is_masked_in_every_rendering(conninfo, shown):
    location = parse_location(conninfo)
    assert isinstance(location, PostgresDsn) and location.conninfo == conninfo  # libpq gets it untouched
    assert location.display() == shown
    for text in _renderings(location):
        assert _leaks(text) == [], text
    assert CANARY in " ".join(location.secrets())


@pytest.mark.parametrize("conninfo", [c for c, _ in SECRET_POSITIONS])
def test_our_reading_of_a_connection_string_is_libpqs(conninfo):
    ours: dict[str, str] = {}
    for name, value in parse_location(conninfo).params:
        ours[name] = value
    assert ours == conninfo_to_dict(conninfo)


# Strings libpq reads too, for the comparison with libpq's own parser (PQconninfoParse, through psycopg).
LIBPQ_AGREES = [
    "postgresql://",
    "postgresql:///hub?host=%2Ftmp%2Fsock&port=5432",
    "postgresql://u:pw@h1:1,h2:2,[::1]:3/db",
    "postgresql://[2001:db8::1]:6432/db",
    "postgresql://u:pa:ss@h/db",
    "postgresql://u:pa?ss@h/db",
    "postgresql://:pw@h/db",
    "postgresql://u:@h/db",
    "postgresql://@h/db",
    "postgresql://h?dbname=x&user=y",
    "postgresql://h/db?ssl=true",
    "postgresql://h/db?sslmode=disable&connect_timeout=3&",
    "postgresql://h/db?application_name=a+b",
    "postgresql://h/d%20b#not-a-fragment",
    "postgresql://u:pw@h/db?password=other&user=bob",
    "postgresql://h/db?host=a&host=b",
    "postgresql://u%3Ax:p@h/db",
    "host = /tmp  dbname= hub",
    "password=a\\ b host=x",
    "sslmode=require password= host=x",
    "  host=x\tdbname=y\npassword=z  ",
    "service=hub",
    "host=x port=1,2",
]


@pytest.mark.parametrize("conninfo", LIBPQ_AGREES)
def test_a_string_libpq_reads_is_read_the_same(conninfo):
    location = parse_location(conninfo)
    assert isinstance(location, PostgresDsn)
    assert dict(location.params) == conninfo_to_dict(conninfo.strip())


# Malformed strings: libpq refuses them too, and its message quotes the text (a password typed in the wrong
# place); ours says where, never what.
MALFORMED = [
    (f"postgresql://h/db?{CANARY}", "query parameter 1 of the database URL has no '='"),
    (f"postgresql://h/db?password={CANARY}={CANARY}", "query parameter 'password' of the database URL has a second '='"),
    (f"postgresql://u:{CANARY}%zz@h/db", "'%' not followed by two hex digits in the password"),
    (f"postgresql://u:{CANARY}%00@h/db", "encodes a NUL character (%00) in the password"),
    (f"postgresql://h/db?{CANARY}=1", "query parameter 1 of the database URL is not a libpq connection parameter"),
    (f"postgresql://[{CANARY}/db", "'[' without its ']'"),
    ("postgresql://[]/db", "empty IPv6 address"),
    ("postgresql://h/db?sslmode=disable&&user=x", "query parameter 2 of the database URL is empty"),
    (f"postgresql://[::1]{CANARY}/db", "unexpected text after an IPv6 address"),
    (f"host=x {CANARY}", "item 2 of the connection string is not key=value"),
    (f"host=x password='{CANARY}", "the value of 'password' in the connection string has no closing quote"),
    (f"dbname=x {CANARY.replace('-', '_')}=1", "item 2 of the connection string is not a libpq connection parameter"),
]


@pytest.mark.parametrize(("conninfo", "message"), MALFORMED)
def test_a_malformed_string_is_refused_saying_where_and_quoting_nothing(conninfo, message):
    with pytest.raises(DsnError) as caught:
        parse_location(conninfo)
    assert message in str(caught.value) and _leaks(str(caught.value)) == []
    with pytest.raises(ProgrammingError) as libpq:
        conninfo_to_dict(conninfo)
    assert libpq.value is not None  # libpq refuses it as well (and quotes it: that is why we stop first)


# Read by libpq as something else, so that the password would reach a message or the display: refused here.
PASSWORD_IN_THE_WRONG_PLACE = [
    f"postgresql://alice:12/{CANARY}@db/hub",  # an unencoded '/': libpq reads host alice, port 12, db "...@db/hub"
    f"postgresql://alice:{CANARY}/x@db/hub",  # the same, with a port libpq would reject quoting the password
    f"postgresql://alice@db/hub?port={CANARY}",
    f"host=db port={CANARY}",
]


@pytest.mark.parametrize("conninfo", PASSWORD_IN_THE_WRONG_PLACE)
def test_a_password_libpq_would_misread_into_another_field_is_refused_before_it_is_shown(conninfo):
    with pytest.raises(DsnError, match="%2F or %40|not a number") as caught:
        parse_location(conninfo)
    assert _leaks(str(caught.value)) == []


@pytest.mark.parametrize("text", [
    f"POSTGRESQL://alice:{CANARY}@db/hub",
    f"postgresql:/alice:{CANARY}@db/hub",
    f" postgres:alice:{CANARY}@db",
    f"mysql://alice:{CANARY}@db/hub",
    f"sqlite:///var/lib/{CANARY}.db",
])
def test_what_looks_like_a_mistyped_url_is_refused_not_taken_for_a_path(text):
    with pytest.raises(DsnError, match="PostgreSQL URL starts with postgresql://|unsupported database URL scheme") as c:
        parse_location(text)
    assert _leaks(str(c.value)) == []


@pytest.mark.parametrize(("text", "path"), [
    ("/var/lib/agentctl/hub.sqlite3", "/var/lib/agentctl/hub.sqlite3"),
    ("hub.sqlite3", "hub.sqlite3"),
    ("./dbname=odd.sqlite3", "dbname=odd.sqlite3"),
    ("~/hub.sqlite3", "~/hub.sqlite3"),
    ("data:hub.sqlite3", "data:hub.sqlite3"),
])
def test_anything_else_is_a_sqlite_path_shown_as_it_is(text, path):
    location = parse_location(text)
    assert isinstance(location, SqlitePath) and location.path == Path(path) and location.display() == path
    assert not location.has_inline_secret and location.scrub("x") == "x"


@pytest.mark.parametrize("text", ["", "   ", "a\x00b"])
def test_an_empty_or_nul_location_is_refused(text):
    with pytest.raises(DsnError):
        parse_location(text)


def test_scrubbing_a_driver_message_masks_the_secrets_it_quotes():
    dsn = parse_location(f"postgresql://alice:{CANARY}@db/hub?options=-c%20x%3D{CANARY[::-1]}")
    message = (f'connection to server at "db" failed: FATAL:  invalid value for parameter "x": "{CANARY[::-1]}"\n'
               f'while using password {CANARY.upper()}')
    scrubbed = dsn.scrub(message)
    assert _leaks(scrubbed) == [] and CANARY[::-1] not in scrubbed
    assert 'invalid value for parameter "x"' in scrubbed


@pytest.mark.parametrize("options", [
    f"-c statement_timeout={CANARY}", f"-cstatement_timeout={CANARY}", f"--statement_timeout={CANARY}",
    f"-c search_path=a\\ {CANARY} -c statement_timeout={CANARY}",
])
def test_the_options_register_the_values_they_set_and_leave_the_setting_names_readable(options):
    dsn = parse_location(f"postgresql://db/hub?options={quote(options, safe='')}")
    message = f'FATAL:  invalid value for parameter "statement_timeout": "{CANARY}"'
    scrubbed = dsn.scrub(message)
    assert _leaks(scrubbed) == [] and 'invalid value for parameter "statement_timeout"' in scrubbed
    assert not [value for value in dsn.secrets() if "statement_timeout" in value]
    assert dsn.display() == "postgresql://db/hub?options=***"


def test_a_word_of_the_options_that_sets_nothing_is_a_secret_whole():
    dsn = parse_location(f"host=db options='-c geqo=off {CANARY} -B 128'")
    assert set(dsn.secrets()) == {"off", CANARY, "128"}
    assert _leaks(dsn.scrub(f"unrecognized option {CANARY}")) == []


# ---- sources ----------------------------------------------------------------------------------------------


def _default() -> Path:
    return Path("/default/hub.sqlite3")


def test_the_first_given_source_wins_and_a_password_on_the_command_line_earns_a_warning(tmp_path):
    url = f"postgresql://alice:{CANARY}@db/hub"
    resolved = resolve_location(url, None, "AGENTCTL_HUB_DB", _default, environ={"AGENTCTL_HUB_DB": "/env.db"})
    assert resolved.origin == "--db" and resolved.warnings == [ARGV_PASSWORD_WARNING]
    assert _leaks(ARGV_PASSWORD_WARNING) == []
    quiet = resolve_location("postgresql://alice@db/hub", None, "AGENTCTL_HUB_DB", _default)
    assert quiet.warnings == []  # a password from PGPASSFILE/PGPASSWORD is libpq's business
    from_env = resolve_location(None, None, "AGENTCTL_HUB_DB", _default, environ={"AGENTCTL_HUB_DB": url})
    assert from_env.origin == "AGENTCTL_HUB_DB" and from_env.warnings == []
    assert from_env.location.display() == "postgresql://alice:***@db/hub"
    rel = resolve_location(None, None, "AGENTCTL_HUB_DB", _default, environ={"AGENTCTL_HUB_DB": "~/h.sqlite3"})
    assert rel.location.path == Path("~/h.sqlite3").expanduser()
    assert resolve_location(None, None, "X", _default, environ={}).location.path == _default()
    with pytest.raises(DsnError, match="either --db or --db-file"):
        resolve_location(url, str(tmp_path / "f"), "X", _default)
    with pytest.raises(DsnError, match=r"^\$AGENTCTL_HUB_DB: query parameter 1") as bad:
        resolve_location(None, None, "AGENTCTL_HUB_DB", _default, environ={"AGENTCTL_HUB_DB": f"{url}?{CANARY}"})
    assert _leaks(str(bad.value)) == []


def _dsn_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "hub.dsn"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_dsn_file_of_ours_readable_by_no_one_else_is_read_and_stripped(tmp_path):
    path = _dsn_file(tmp_path, f"\n  postgresql://alice:{CANARY}@db/hub  \n")
    resolved = resolve_location(None, str(path), "X", _default)
    assert resolved.origin == "--db-file" and resolved.warnings == []
    assert resolved.location.conninfo == f"postgresql://alice:{CANARY}@db/hub"


@pytest.mark.parametrize(("setup", "message"), [
    (lambda p: p.chmod(0o640), "is readable by other users (mode 0640): chmod 600"),
    (lambda p: p.chmod(0o604), "is readable by other users (mode 0604)"),
    (lambda p: os.chown(p, 65534, 65534), "is owned by uid 65534, not by this user"),
    (lambda p: p.write_text("  \n"), "is empty"),
    (lambda p: p.write_bytes(b"\xff\xfe"), "is not UTF-8 text"),
    (lambda p: p.write_text("x" * 70_000), "is larger than 65536 bytes"),
    (lambda p: p.unlink(), "No such file or directory"),
])
def test_a_dsn_file_others_could_read_or_plant_or_that_is_unusable_is_refused_with_one_line(tmp_path, setup, message):
    path = _dsn_file(tmp_path, f"postgresql://alice:{CANARY}@db/hub")
    setup(path)
    with pytest.raises(DsnError, match=r"^--db-file ") as caught:
        resolve_location(None, str(path), "X", _default)
    assert message in str(caught.value) and "\n" not in str(caught.value) and _leaks(str(caught.value)) == []


def test_a_dsn_file_that_is_a_link_or_a_fifo_is_refused_without_reading_or_blocking(tmp_path):
    real = _dsn_file(tmp_path, f"postgresql://alice:{CANARY}@db/hub")
    link = tmp_path / "link.dsn"
    link.symlink_to(real)
    with pytest.raises(DsnError, match="is a symbolic link; refusing to follow it"):
        resolve_location(None, str(link), "X", _default)
    fifo = tmp_path / "fifo.dsn"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(DsnError, match="is not a regular file"):
        resolve_location(None, str(fifo), "X", _default)


def test_a_malformed_string_in_a_dsn_file_names_the_file_and_quotes_nothing(tmp_path):
    path = _dsn_file(tmp_path, f"host=db {CANARY}")
    with pytest.raises(DsnError, match=rf"^--db-file {path}: item 2 of the connection string") as caught:
        resolve_location(None, str(path), "X", _default)
    assert _leaks(str(caught.value)) == []


def test_masking_leaves_harmless_fields_and_a_password_free_string_whole():
    plain = parse_location("postgresql://alice@db.example:5432/hub?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem")
    assert plain.display() == "postgresql://alice@db.example:5432/hub?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem"
    assert plain.secrets() == () and not plain.has_inline_secret
    kv = parse_location("host=/run/postgresql dbname=hub user=alice application_name='agentctl hub'")
    assert kv.display() == "host=/run/postgresql dbname=hub user=alice application_name='agentctl hub'"
    assert MASK not in kv.display()
