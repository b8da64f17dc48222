"""A real PostgreSQL server for tests and benchmarks: Debian's binaries, `initdb` into a temporary directory as
an unprivileged user, listening on a Unix socket in that directory only (TCP on 127.0.0.1 and a free port only
when asked), a password-protected role, and a cheap database per test copied from a template.

Why not pytest-postgresql (10.0.0, evaluated here): it runs `initdb` as the current user, which is root on CI
and is refused ("cannot be run as root"), it has no way to run the server as another uid, and it always
listens on TCP (the port found by probing). This module is the ~200 lines it would have needed around it.

The fixtures (`pg_server` for the session, `pg_db` for one test) are wired in tests/conftest.py. When the
binaries or the driver are missing the fixtures fail with what to install; they skip instead only when
AGENTCTL_SKIP_POSTGRES=1 is set and AGENTCTL_REQUIRE_POSTGRES (set by .ci/run) is not.
"""

from __future__ import annotations

import itertools
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

REQUIRE = "AGENTCTL_REQUIRE_POSTGRES"  # .ci/run sets it: there a missing server fails, never skips
SKIP = "AGENTCTL_SKIP_POSTGRES"
BINDIR = "AGENTCTL_PG_BINDIR"  # where initdb and pg_ctl are, when not in Debian's place
RUN_AS = "AGENTCTL_PG_USER"  # the unprivileged user a root test run starts the server as (default postgres)
NOT_INSTALLED = ("PostgreSQL's server binaries (initdb, pg_ctl) were not found: apt-get install postgresql "
                 f"(.ci/run installs it), or point {BINDIR} at their directory")
SUPERUSER = "postgres"
APP_ROLE = "agentctl"
TEMPLATE = "agentctl_template"
START_TIMEOUT = 60


def unavailable(reason: str) -> None:
    """Fail, or skip where the developer asked to (never where REQUIRE is set)."""
    if os.environ.get(SKIP) == "1" and not os.environ.get(REQUIRE):
        pytest.skip(f"{reason} ({SKIP}=1)")
    pytest.fail(f"{reason}; set {SKIP}=1 to skip the PostgreSQL tests on this machine", pytrace=False)


def find_bindir() -> Path | None:
    """initdb's directory: $AGENTCTL_PG_BINDIR when set (and then only it), else Debian's newest
    /usr/lib/postgresql/N/bin, else the PATH's."""
    if os.environ.get(BINDIR):
        candidates = [Path(os.environ[BINDIR])]
    else:
        candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _major(p.parent.name),
                            reverse=True)
        found = shutil.which("initdb")
        if found:
            candidates.append(Path(found).resolve().parent)
    for bindir in candidates:
        if all(os.access(bindir / tool, os.X_OK) for tool in ("initdb", "pg_ctl", "postgres")):
            return bindir
    return None


def _major(name: str) -> int:
    return int(name) if name.isdigit() else -1


def _clean_env() -> dict[str, str]:
    # libpq and the server tools read PG* variables (PGHOST, PGPASSWORD, PGDATA...): none of the caller's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class PgDatabase:
    """One database of the server, owned by the password-protected role."""

    name: str
    user: str
    password: str
    socket_dir: Path
    port: int
    tcp_port: int | None = None

    @property
    def url(self) -> str:
        """A postgresql:// URL with the password in the user info (percent-encoded) and the socket directory
        as the `host` parameter."""
        return (f"postgresql://{quote(self.user, safe='')}:{quote(self.password, safe='')}@/{quote(self.name)}"
                f"?host={quote(str(self.socket_dir), safe='')}&port={self.port}")

    @property
    def url_without_password(self) -> str:
        return f"postgresql://{quote(self.user, safe='')}@/{quote(self.name)}?host={quote(str(self.socket_dir), safe='')}&port={self.port}"

    def tcp_url(self, host: str = "127.0.0.1", **params: str) -> str:
        """The database over TCP (a server started with tcp=True), with libpq parameters in the query."""
        if self.tcp_port is None:
            raise ValueError("this server listens on its Unix socket only (start it with tcp=True)")
        query = "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())
        return (f"postgresql://{quote(self.user, safe='')}:{quote(self.password, safe='')}@{host}:{self.tcp_port}/"
                f"{quote(self.name)}" + (f"?{query}" if query else ""))

    @property
    def conninfo(self) -> str:
        """The libpq key=value form, password included."""
        return (f"host={self.socket_dir} port={self.port} dbname={self.name} user={self.user} "
                f"password='{_kv_quote(self.password)}'")


def _kv_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


class PgServer:
    """One postmaster in `base` (created 0700, owned by the user it runs as). start() before use, stop() after."""

    def __init__(self, base: Path, *, tcp: bool = False, ssl: bool = False, bindir: Path | None = None) -> None:
        if ssl and not tcp:
            raise ValueError("SSL needs TCP: libpq never uses SSL over a Unix socket")
        found = bindir or find_bindir()
        if found is None:
            raise FileNotFoundError(NOT_INSTALLED)
        self.bindir = found
        self.base = base
        self.data = base / "data"
        self.log = base / "server.log"
        self.tcp_port = free_port() if tcp else None
        self.ssl = ssl
        # Without TCP the port only names the socket file (".s.PGSQL.5432"): the directory is ours alone.
        self.port = self.tcp_port or 5432
        # A password that needs percent-encoding in a URL and quoting in key=value form, and is unique.
        self.password = f"Pg-Canary:{secrets.token_hex(8)}/@%'"
        self._uid, self._gid = self._run_as()
        self._names = itertools.count(1)
        self._admin = None

    @staticmethod
    def _run_as() -> tuple[int | None, int | None]:
        if os.geteuid() != 0:
            return None, None
        name = os.environ.get(RUN_AS, "postgres")
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid

    def _tool(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / argv[0]), *argv[1:]]
        if self._uid is not None:
            # initdb and the server refuse root: drop to the unprivileged uid for the whole process tree.
            cmd = ["setpriv", f"--reuid={self._uid}", f"--regid={self._gid}", "--clear-groups", "--", *cmd]
        proc = subprocess.run(cmd, cwd=self.base, env=_clean_env(), capture_output=True, text=True,
                              timeout=START_TIMEOUT, stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{argv[0]} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}"
                               + self._log_tail())
        return proc

    def _log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-15:]
        except OSError:
            return ""
        return "\nserver log:\n" + "\n".join(lines) if lines else ""

    # ---- lifecycle -------------------------------------------------------------------------------------

    def initdb(self) -> None:
        self.base.mkdir(mode=0o700, exist_ok=True)
        if self._uid is not None:
            os.chown(self.base, self._uid, self._gid)
        self._tool("initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-locale",
                   "--no-sync", "--no-instructions")
        listen = "'127.0.0.1'" if self.tcp_port else "''"
        conf = [
            f"listen_addresses = {listen}",
            f"port = {self.port}",
            f"unix_socket_directories = '{self.base}'",
            "unix_socket_permissions = 0700",
            # A test server: durable across a process crash of the server (the OS keeps the pages), not across
            # a crash of the machine, and started in a fraction of a second.
            "fsync = off",
            "synchronous_commit = off",
            "full_page_writes = off",
            "shared_buffers = 32MB",
            "max_connections = 200",
            "log_min_messages = warning",
            "log_connections = off",
        ]
        if self.ssl:
            conf += ["ssl = on", "ssl_cert_file = 'server.crt'", "ssl_key_file = 'server.key'"]
            self._make_certificate()
        with open(self.data / "postgresql.conf", "a") as out:
            out.write("\n" + "\n".join(conf) + "\n")
        # The superuser only through the socket (a 0700 directory: ours alone); everyone else by password.
        (self.data / "pg_hba.conf").write_text(
            f"local all {SUPERUSER} trust\n"
            "local all all scram-sha-256\n"
            "host all all 127.0.0.1/32 scram-sha-256\n"
        )

    @property
    def certificate(self) -> Path:
        """The server's self-signed certificate (CN localhost, SAN localhost and 127.0.0.1): its own root."""
        return self.data / "server.crt"

    def _make_certificate(self) -> None:
        key = self.data / "server.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(self.certificate)],
                       check=True, capture_output=True, timeout=START_TIMEOUT, env=_clean_env())
        os.chmod(key, 0o600)
        if self._uid is not None:
            for path in (key, self.certificate):
                os.chown(path, self._uid, self._gid)

    def start(self) -> None:
        if not self.data.exists():
            self.initdb()
        self._tool("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", str(START_TIMEOUT), "-s", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the postmaster (`fast`: roll back open transactions, `immediate`: like a crash)."""
        self.close_admin()
        if (self.data / "postmaster.pid").exists():
            self._tool("pg_ctl", "-D", str(self.data), "-w", "-t", str(START_TIMEOUT), "-s", "-m", mode, "stop",
                       check=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    # ---- access ----------------------------------------------------------------------------------------

    def admin_conninfo(self, dbname: str = "postgres") -> str:
        return f"host={self.base} port={self.port} dbname={dbname} user={SUPERUSER}"

    def admin(self):
        """A superuser connection in autocommit mode (kept open; CREATE DATABASE needs autocommit)."""
        import psycopg

        if self._admin is None or self._admin.closed:
            self._admin = psycopg.connect(self.admin_conninfo(), autocommit=True)
        return self._admin

    def close_admin(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def setup_roles(self) -> None:
        from psycopg import sql

        conn = self.admin()
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(APP_ROLE),
                                                                       sql.Literal(self.password)))
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(TEMPLATE), sql.Identifier(APP_ROLE)))

    def create_database(self, prefix: str = "t") -> PgDatabase:
        """A new, empty database owned by the app role: a copy of the template (milliseconds)."""
        from psycopg import sql

        name = f"{prefix}_{next(self._names)}"
        self.admin().execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} OWNER {}").format(
            sql.Identifier(name), sql.Identifier(TEMPLATE), sql.Identifier(APP_ROLE)))
        return PgDatabase(name=name, user=APP_ROLE, password=self.password, socket_dir=self.base, port=self.port,
                          tcp_port=self.tcp_port)

    def drop_database(self, db: PgDatabase) -> None:
        from psycopg import sql

        self.admin().execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db.name)))


def started_server(*, tcp: bool = False, ssl: bool = False, prefix: str = "actl-pg-") -> PgServer:
    """A running server with its roles, in a new private directory under /tmp (short: AF_UNIX paths are
    limited to 107 bytes). The caller stops and removes it."""
    base = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    server = PgServer(base, tcp=tcp, ssl=ssl)
    try:
        server.start()
        server.setup_roles()
    except BaseException:
        server.stop("immediate")
        server.remove()
        raise
    return server


def pg_server_fixture() -> Iterator[PgServer]:
    """The session's server (what the `pg_server` fixture yields)."""
    if find_bindir() is None:
        unavailable(NOT_INSTALLED)
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("the PostgreSQL tests need psycopg (the `test` extra: pip install -e '.[test]')")
    server = started_server()
    try:
        yield server
    finally:
        server.stop()
        server.remove()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    yield from pg_server_fixture()


@pytest.fixture
def pg_db(pg_server: PgServer) -> Iterator[PgDatabase]:
    """A fresh database for one test, dropped after it (open connections included)."""
    db = pg_server.create_database()
    try:
        yield db
    finally:
        pg_server.drop_database(db)
