"""Owns where a database location comes from: `--db VALUE`, `--db-file PATH` (a private file, for a
connection string with a password), an environment variable, or a default path; parsed by agentctl.dsn.

Passwords are best left to libpq (PGPASSWORD, PGPASSFILE, a service file): the connection string is then
not secret at all. A password in `--db` itself works but is visible to every local user in the process
list, so it earns a warning (which never quotes it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agentctl.dsn import DsnError, PostgresDsn, SqlitePath, parse_location
from agentctl.safe_files import UnsafePath, read_secret_file

ARGV_PASSWORD_WARNING = ("the --db value holds a password, which other local users can read in the process list; "
                         "use --db-file PATH, PGPASSFILE or PGPASSWORD instead")


@dataclass
class Resolved:
    location: SqlitePath | PostgresDsn
    origin: str  # "--db", "--db-file", the variable's name, or "default"
    warnings: list[str] = field(default_factory=list)


def resolve_location(db: str | None, db_file: str | None, env_var: str, default: Callable[[], Path],
                     environ: Mapping[str, str] = os.environ) -> Resolved:
    """The location from the first of --db, --db-file, $env_var, default() that is given. A SQLite path is
    made absolute (with ~ expanded). Raises DsnError (one line, quoting nothing secret)."""
    if db is not None and db_file is not None:
        raise DsnError("give either --db or --db-file, not both")
    if db is not None:
        resolved = Resolved(_parse(db, "--db"), "--db")
        if resolved.location.has_inline_secret:
            resolved.warnings.append(ARGV_PASSWORD_WARNING)
    elif db_file is not None:
        try:
            text = read_secret_file(Path(db_file).expanduser())
        except (UnsafePath, ValueError) as exc:
            raise DsnError(f"--db-file {exc}") from None
        except OSError as exc:
            raise DsnError(f"--db-file {db_file}: {exc.strerror or exc}") from None
        resolved = Resolved(_parse(text, f"--db-file {db_file}"), "--db-file")
    elif environ.get(env_var):
        resolved = Resolved(_parse(environ[env_var], f"${env_var}"), env_var)
    else:
        return Resolved(SqlitePath(default()), "default")
    if isinstance(resolved.location, SqlitePath):
        resolved.location = SqlitePath(resolved.location.path.expanduser().absolute())
    return resolved


def _parse(text: str, where: str) -> SqlitePath | PostgresDsn:
    try:
        return parse_location(text)
    except DsnError as exc:
        raise DsnError(f"{where}: {exc}") from None
