"""Owns the database a user names: a SQLite file's path, or a PostgreSQL connection string (a postgresql://
URL or libpq's key=value form), parsed to choose the store and described for display with every secret hidden.

Pure: no I/O, no logging. The connection string goes to libpq as it was given (`PostgresDsn.conninfo`), so
PGPASSWORD, PGPASSFILE, service files and sslmode keep libpq's own meaning; this module parses it only to
know what must never be shown. `display()` is rebuilt from the parsed parts, never cut out of the string,
and shows a value only for parameters known to be harmless (host, port, database, user, sslmode, ...):
passwords, `options` (free text that can carry settings) and every other parameter are `***`, and a shown
value that contains a secret is masked too. Errors say what is wrong and where (a parameter's name when
libpq defines it, else its position) and never quote the text: a malformed string may be a password typed
in the wrong place, and libpq's own messages quote it, which is why malformed strings stop here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from agentctl.evidence.sanitize import redact
from agentctl.evidence.secret_registry import SecretRegistry

__all__ = ["MASK", "DsnError", "PostgresDsn", "SqlitePath", "parse_location"]

MASK = "***"
URL_SCHEMES = ("postgresql://", "postgres://")

# libpq's connection parameters (PostgreSQL 18), by what may be shown of them.
SECRET_KEYS = frozenset({"password", "sslpassword", "oauth_client_secret", "scram_client_key", "scram_server_key"})
SHOWN_KEYS = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "service", "sslmode", "sslnegotiation", "gssencmode",
    "channel_binding", "require_auth", "target_session_attrs", "load_balance_hosts", "connect_timeout",
    "application_name", "fallback_application_name", "client_encoding", "sslrootcert", "sslcert", "sslkey",
    "sslcrl", "sslcrldir", "sslcertmode", "sslsni", "sslcompression", "requiressl", "passfile", "keepalives",
    "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication",
    "krbsrvname", "gsslib", "gssdelegation", "requirepeer", "ssl_min_protocol_version",
    "ssl_max_protocol_version", "min_protocol_version", "max_protocol_version", "oauth_issuer",
    "oauth_client_id", "oauth_scope", "sslkeylogfile",
})
KNOWN_KEYS = SHOWN_KEYS | SECRET_KEYS | {"options"}

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYWORD_START = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\s*=")
_OTHER_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,19})://")
_DB_SCHEME = re.compile(r"(postgres(?:ql)?|sqlite3?)\s*:", re.IGNORECASE)
_PERCENT = re.compile(rb"%([0-9A-Fa-f]{2})")
_PORT = re.compile(r"[0-9]{0,5}")


class DsnError(ValueError):
    """A database location that cannot be used; str() is one line and quotes nothing of the input."""


@dataclass(frozen=True, repr=False)
class SqlitePath:
    path: Path
    kind: Literal["sqlite"] = "sqlite"

    def display(self) -> str:
        return str(self.path)

    def scrub(self, text: str) -> str:
        return text

    @property
    def has_inline_secret(self) -> bool:
        return False

    __str__ = display

    def __repr__(self) -> str:
        return f"SqlitePath({self.display()!r})"


@dataclass(frozen=True, repr=False, eq=False)
class PostgresDsn:
    """A PostgreSQL connection string. `conninfo` is for libpq only: never print, log or store it."""

    conninfo: str
    params: tuple[tuple[str, str], ...]  # decoded, in order; libpq keeps the last of a repeated key
    form: Literal["url", "keyword"]
    scheme: str = "postgresql"
    kind: Literal["postgresql"] = "postgresql"

    def get(self, key: str) -> str | None:
        found = None
        for name, value in self.params:
            if name == key:
                found = value
        return found

    def secrets(self) -> tuple[str, ...]:
        """Every value that must never be shown: passwords, the values `options` sets, parameters not known to
        be harmless."""
        found: list[str] = []
        for name, value in self.params:
            if value and name == "options":
                found += _options_secrets(value)
            elif value and name not in SHOWN_KEYS:
                found.append(value)
        return tuple(found)

    @property
    def has_inline_secret(self) -> bool:
        """The string itself holds a password (not PGPASSWORD, a password file or a service file)."""
        return any(name in SECRET_KEYS and value for name, value in self.params)

    def _shown(self, value: str) -> str:
        secrets = self.secrets()
        lowered = value.lower()
        # A secret, or a part of one an error message could quote alone (agentctl.evidence.secret_registry),
        # inside a harmless field (the password typed as the user name too, in another case) masks that field.
        if value in secrets or any(part.lower() in lowered for part in SecretRegistry(secrets).values()):
            return MASK
        return value

    def display(self) -> str:
        last = {name: value for name, value in self.params}  # what libpq uses: the last of each name
        items = [(name, self._shown(value) if name in SHOWN_KEYS else MASK) for name, value in last.items()]
        if self.form == "url":
            return self._display_url(items)
        return " ".join(f"{name}={_kv_quote(value)}" for name, value in items)

    def _display_url(self, items: list[tuple[str, str]]) -> str:
        values = dict(items)
        user, password = values.pop("user", None), values.pop("password", None)
        userinfo = ""
        if user is not None or password is not None:
            userinfo = _q(user or "") + (f":{MASK}" if password is not None else "") + "@"
        host, port = values.get("host"), values.get("port")
        netloc = ""
        # A host list of names and addresses goes in the netloc; a socket directory (a path) stays a parameter.
        if host is not None and "/" not in host and (port is None or host.count(",") == port.count(",")):
            hosts, ports = host.split(","), (port.split(",") if port is not None else [""] * (host.count(",") + 1))
            netloc = ",".join((f"[{h}]" if ":" in h else _q(h)) + (f":{p}" if p else "") for h, p in zip(hosts, ports))
            del values["host"]
            values.pop("port", None)
        dbname = values.pop("dbname", None)
        path = "/" + _q(dbname) if dbname is not None else ("/" if values else "")
        query = "&".join(f"{name}={_q(value)}" for name, value in values.items())
        return f"{self.scheme}://{userinfo}{netloc}{path}" + (f"?{query}" if query else "")

    def scrub(self, text: str) -> str:
        """A driver's message with every secret of this DSN (and anything credential-like) masked."""
        return redact(text, self.secrets())

    __str__ = display

    def __repr__(self) -> str:
        return f"PostgresDsn({self.display()!r})"


# A server setting as `options` passes it: `-c NAME=VALUE`, `-cNAME=VALUE` or `--NAME=VALUE`.
_SETTING = re.compile(r"(?:-c|--)?[A-Za-z_][A-Za-z0-9_.-]*=(?P<value>.*)", re.S)
_SHORT_FLAG = re.compile(r"-[A-Za-z]")


def _options_secrets(options: str) -> list[str]:
    """What `options` holds that is secret: each setting's value, and any word that is not a setting or a
    flag. The setting names are PostgreSQL's own (`statement_timeout`) and the server quotes them in its
    errors; registering the whole string would redact them by fragment and leave the error unreadable."""
    found: list[str] = []
    # The server splits `options` at blanks, a backslash escaping the next character (a blank or itself).
    for word in re.findall(r"(?:\\.|[^\s\\]|\\$)+", options, re.S):
        unescaped = re.sub(r"\\(.)", r"\1", word, flags=re.S)
        setting = _SETTING.fullmatch(unescaped)
        if setting:
            found += [setting.group("value")] if setting.group("value") else []
        elif unescaped != "-c" and not _SHORT_FLAG.fullmatch(unescaped):
            found.append(unescaped)
    return found


def _q(value: str) -> str:
    return value if value == MASK else quote(value, safe="")


def _kv_quote(value: str) -> str:
    if value == MASK:
        return value
    if value and not any(c.isspace() or c in "'\\" for c in value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# ---- parsing --------------------------------------------------------------------------------------------------


def parse_location(text: str) -> SqlitePath | PostgresDsn:
    """A --db value, without the blanks around it: a postgresql:// (or postgres://) URL; libpq's key=value form
    (it starts with a name and '='); else a SQLite file's path, as given (the caller resolves it). A file whose
    name looks like either is given as ./NAME. Raises DsnError.

    Whatever might be a mistyped connection string is refused rather than taken for a path: a path is shown
    in full (the ready line, errors), and a mistyped string may hold a password."""
    if not isinstance(text, str) or not text.strip():
        raise DsnError("the database location is empty")
    text = text.strip()
    if "\x00" in text:
        raise DsnError("the database location contains a NUL character")
    if text.startswith(URL_SCHEMES):
        return _parse_url(text)
    if _KEYWORD_START.match(text):
        return _parse_keywords(text)
    other = _OTHER_SCHEME.match(text) or _DB_SCHEME.match(text)
    if other:
        scheme = other.group(1).lower()
        if scheme in ("postgresql", "postgres"):
            raise DsnError("a PostgreSQL URL starts with postgresql:// (in lower case, two slashes)")
        raise DsnError(f"unsupported database URL scheme {scheme!r}: give a SQLite file's path or a postgresql:// "
                       "URL")
    return SqlitePath(Path(text))


def _decode(raw: str, where: str) -> str:
    """libpq's percent-decoding: every '%' starts two hex digits, %00 is refused, '+' is a plus."""
    data = raw.encode("utf-8", "surrogatepass")
    out = bytearray()
    i = 0
    while i < len(data):
        if data[i] == 0x25:  # '%'
            match = _PERCENT.match(data, i)
            if match is None:
                raise DsnError(f"the database URL has a '%' not followed by two hex digits in {where}")
            byte = int(match.group(1), 16)
            if byte == 0:
                raise DsnError(f"the database URL encodes a NUL character (%00) in {where}")
            out.append(byte)
            i += 3
        else:
            out.append(data[i])
            i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise DsnError(f"the database URL's {where} is not UTF-8 once decoded") from None


def _parse_url(text: str) -> PostgresDsn:
    scheme, rest = text.split("://", 1)
    params: list[tuple[str, str]] = []
    # User info: up to the first '@' met before any '/' (libpq's reading; a '@' or '/' in a password must be
    # percent-encoded, and an unencoded '/' makes libpq read no user info at all).
    cut = next((i for i, c in enumerate(rest) if c in "@/"), len(rest))
    if cut < len(rest) and rest[cut] == "@":
        userinfo, rest = rest[:cut], rest[cut + 1 :]
        user, colon, password = userinfo.partition(":")
        if user:
            params.append(("user", _decode(user, "the user name")))
        if colon and password:
            params.append(("password", _decode(password, "the password")))
    hosts, ports, rest, terminator = _parse_netloc(rest)
    if any(hosts):
        params.append(("host", _decode(",".join(hosts), "the host")))
    if any(ports):
        params.append(("port", _decode(",".join(ports), "the port")))
    if terminator == "/":
        dbname, question, rest = rest.partition("?")
        if "@" in dbname:
            # libpq would take "pass@host/db" for the database name (and quote it in its errors): an unencoded
            # '/' in the password ended the user info early.
            raise DsnError("the database URL has a '@' after the host (a '/' or '@' in a password is written %2F "
                           "or %40, and in a database name %40)")
        if dbname:
            params.append(("dbname", _decode(dbname, "the database name")))
        terminator = "?" if question else ""
    if terminator == "?":
        params += _parse_query(rest)
    _check_ports(params, "database URL")
    return PostgresDsn(conninfo=text, params=tuple(params), form="url", scheme=scheme)


def _parse_netloc(rest: str) -> tuple[list[str], list[str], str, str]:
    """Hosts and ports (comma-separated, IPv6 in brackets) up to '/', '?' or the end: (hosts, ports, what
    follows the terminator, the terminator)."""
    hosts: list[str] = []
    ports: list[str] = []
    i = 0
    while True:
        if rest.startswith("[", i):
            end = rest.find("]", i)
            if end < 0:
                raise DsnError("the database URL has a '[' without its ']' in the host")
            if end == i + 1:
                raise DsnError("the database URL has an empty IPv6 address in the host")
            host = rest[i + 1 : end]
            i = end + 1
            if i < len(rest) and rest[i] not in ":/?,":
                raise DsnError("the database URL has unexpected text after an IPv6 address")
        else:
            start = i
            while i < len(rest) and rest[i] not in ":/?,":
                i += 1
            host = rest[start:i]
        port = ""
        if i < len(rest) and rest[i] == ":":
            start = i = i + 1
            while i < len(rest) and rest[i] not in "/?,":
                i += 1
            port = rest[start:i]
        hosts.append(host)
        ports.append(port)
        if i < len(rest) and rest[i] == ",":
            i += 1
            continue
        terminator = rest[i] if i < len(rest) else ""
        return hosts, ports, rest[i + 1 :], terminator


def _check_ports(params: list[tuple[str, str]], what: str) -> None:
    # libpq checks ports only when it connects, and its message quotes the value: a password's tail, when an
    # unencoded '/' in it made libpq read the user info as host:port.
    for name, value in params:
        if name != "port":
            continue
        for n, port in enumerate(value.split(","), 1):
            if not _PORT.fullmatch(port.strip()) or (port.strip() and not 0 < int(port) < 65536):
                where = "the port" if "," not in value else f"port number {n}"
                hint = " (a '/' or '@' in a password is written %2F or %40)" if what == "database URL" else ""
                raise DsnError(f"{where} of the {what} is not a number from 1 to 65535{hint}")


def _name(key: str, position: int, what: str) -> str:
    return repr(key) if key in KNOWN_KEYS else f"{what} {position}"


def _parse_query(query: str) -> list[tuple[str, str]]:
    params = []
    items = query.split("&")
    for n, item in enumerate(items, 1):
        if not item:
            if n == len(items):
                continue  # a trailing '&' (or a bare '?'), as libpq allows
            raise DsnError(f"query parameter {n} of the database URL is empty")
        key, eq, value = item.partition("=")
        if not eq:
            raise DsnError(f"query parameter {n} of the database URL has no '='")
        key = _decode(key, f"query parameter {n}")
        if key not in KNOWN_KEYS and not (key == "ssl" and value == "true"):
            raise DsnError(f"query parameter {n} of the database URL is not a libpq connection parameter")
        if "=" in value:
            raise DsnError(f"query parameter {_name(key, n, 'number')} of the database URL has a second '=' "
                           "(encode it as %3D)")
        value = _decode(value, f"query parameter {_name(key, n, 'number')}")
        if key == "ssl" and value == "true":
            key, value = "sslmode", "require"  # libpq's JDBC compatibility spelling
        params.append((key, value))
    return params


def _parse_keywords(text: str) -> PostgresDsn:
    """libpq's key=value form: blanks around '=', values bare (backslash escapes the next character) or in
    single quotes (backslash escapes a quote or a backslash)."""
    params = []
    i, n = 0, len(text)
    position = 0
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        position += 1
        start = i
        while i < n and text[i] != "=" and not text[i].isspace():
            i += 1
        key = text[start:i]
        while i < n and text[i].isspace():
            i += 1
        if i >= n or text[i] != "=" or not _KEY.fullmatch(key):
            raise DsnError(f"item {position} of the connection string is not key=value")
        if key not in KNOWN_KEYS:
            raise DsnError(f"item {position} of the connection string is not a libpq connection parameter")
        i += 1
        while i < n and text[i].isspace():
            i += 1
        value: list[str] = []
        if i < n and text[i] == "'":
            i += 1
            while True:
                if i >= n:
                    raise DsnError(f"the value of {_name(key, position, 'item')} in the connection string has no "
                                   "closing quote")
                if text[i] == "\\" and i + 1 < n:
                    value.append(text[i + 1])
                    i += 2
                elif text[i] == "'":
                    i += 1
                    break
                else:
                    value.append(text[i])
                    i += 1
        else:
            while i < n and not text[i].isspace():
                if text[i] == "\\" and i + 1 < n:
                    value.append(text[i + 1])
                    i += 2
                else:
                    value.append(text[i])
                    i += 1
        params.append((key, "".join(value)))
    _check_ports(params, "connection string")
    return PostgresDsn(conninfo=text, params=tuple(params), form="keyword")
