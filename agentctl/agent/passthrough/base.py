"""What every passthrough strategy shares: the Strategy protocol, the server plan, and safe file writing.

A strategy turns the spec, the attempt's built-in URL and token, the agent's workdir and a private 0700
temporary directory into a Materialization: argv and env additions for the agent, the files it wrote,
the workspace files to restore, what it delivered and what it filtered (with stable reason codes).

Files are written 0600, atomically (temporary file + fsync + rename in the same directory), never through
a symlink: every directory below the workdir is opened with O_NOFOLLOW and a symlink anywhere in the way
is refused. Nothing is written outside the workdir and the private temporary directory, so the user's
global configuration is never touched. Secrets (header and env values, the attempt token) go into those
files and the agent's argv/env only; errors name a path relative to the workdir, never a value.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agentctl.agent.delivery import DUPLICATE_NAME, POLICY_DENIED, Omitted
from agentctl.evidence.contract import Transport
from agentctl.evidence.sanitize import target_for_command, target_for_url

if TYPE_CHECKING:
    from agentctl.spec import Spec

MATERIALIZE_FAILED = "materialize_failed"
NO_PASSTHROUGH_STRATEGY = "no_passthrough_strategy"
NAME_UNSUPPORTED = "name_unsupported_by_strategy"
MAX_WORKSPACE_FILE_BYTES = 4 * 1024 * 1024


def unsupported(transport: str) -> str:
    """The reason code for a transport a strategy cannot express, e.g. `sse_unsupported_by_strategy`."""
    return f"{transport}_unsupported_by_strategy"


@dataclass(frozen=True)
class BuiltinEndpoint:
    """The daemon's built-in server as this attempt reaches it. `token` is the attempt's bearer token."""

    name: str
    url: str  # streamable HTTP (both MCP eras): <base>/mcp
    sse_url: str  # legacy HTTP+SSE: <base>/sse
    token: str = field(repr=False)


@dataclass(frozen=True)
class MaterializeRequest:
    spec: Spec
    builtin: BuiltinEndpoint
    workdir: Path  # the agent's working directory (resolved)
    tmpdir: Path  # private 0700 directory of this attempt, removed at stop
    # The environment the CLI inherits (before the spec's env and our additions); None: this process's.
    environ: Mapping[str, str] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ServerEntry:
    """One server to hand to the CLI. Holds secrets (headers, env, args): it goes into the config only."""

    name: str
    source: str  # "builtin" | "profile"
    transport: Transport
    target: str
    url: str = field(default="", repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    command: str = field(default="", repr=False)
    args: list[str] = field(default_factory=list, repr=False)
    env: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass
class Restore:
    """A workspace file we merged into: its original bytes (None: it did not exist) and the dirs we created."""

    workdir: Path
    parts: tuple[str, ...]  # path below the workdir, e.g. (".cursor", "mcp.json")
    original: bytes | None = field(repr=False)
    mode: int
    created_dirs: list[tuple[str, ...]] = field(default_factory=list)


@dataclass
class Materialization:
    argv: list[str] = field(default_factory=list, repr=False)
    env: dict[str, str] = field(default_factory=dict, repr=False)
    files: list[Path] = field(default_factory=list)  # temporary files, removed at stop
    restores: list[Restore] = field(default_factory=list)  # merged workspace files, restored at stop
    delivered: list[ServerEntry] = field(default_factory=list)
    filtered: list[Omitted] = field(default_factory=list)


class MaterializeError(Exception):
    """The configuration could not be written. `summary` names a relative path or a cause, never a value."""

    def __init__(self, summary: str, reason_code: str = MATERIALIZE_FAILED) -> None:
        super().__init__(summary)
        self.reason_code = reason_code
        self.summary = summary


class Strategy(Protocol):
    name: str
    transports: frozenset[str]  # what the CLI's configuration can express

    def materialize(self, req: MaterializeRequest) -> Materialization: ...


# -- the plan: which servers, over which transport -------------------------------------------------


def plan_servers(req: MaterializeRequest, supported: frozenset[str]) -> Materialization:
    """The built-in server (http preferred, else sse) and the profile's servers, by policy and by what
    the CLI can express; everything left out is `filtered` with a reason."""
    spec, builtin = req.spec, req.builtin
    allowed = set(spec.policy.transports)
    out = Materialization()
    auth = {"Authorization": f"Bearer {builtin.token}"}
    for transport, url in (("http", builtin.url), ("sse", builtin.sse_url)):
        if transport in allowed and transport in supported:
            out.delivered.append(
                ServerEntry(builtin.name, "builtin", transport, target_for_url(url), url=url, headers=auth)
            )
            break
    else:
        wanted = [t for t in ("http", "sse") if t in allowed]
        if not wanted:
            out.filtered.append(Omitted(builtin.name, POLICY_DENIED, "executor policy allows neither http nor sse"))
        else:
            out.filtered.append(
                Omitted(builtin.name, unsupported(wanted[0]), f"this CLI's configuration cannot express {wanted[0]}")
            )
    seen = {builtin.name}
    for server in spec.mcp.servers:
        if server.name in seen:
            out.filtered.append(Omitted(server.name, DUPLICATE_NAME, "another server already uses this name"))
            continue
        seen.add(server.name)
        if server.type not in allowed:
            out.filtered.append(Omitted(server.name, POLICY_DENIED, f"executor policy does not allow {server.type}"))
            continue
        if server.type not in supported:
            out.filtered.append(
                Omitted(server.name, unsupported(server.type), f"this CLI's configuration cannot express {server.type}")
            )
            continue
        if server.type == "stdio":
            out.delivered.append(
                ServerEntry(
                    server.name, "profile", "stdio", target_for_command(server.command or ""),
                    command=server.command or "", args=list(server.args), env=dict(server.env),
                )
            )
        else:
            out.delivered.append(
                ServerEntry(
                    server.name, "profile", server.type, target_for_url(server.url or ""),
                    url=server.url or "", headers=dict(server.headers),
                )
            )
    return out


def drop(plan: Materialization, entry: ServerEntry, reason_code: str, summary: str) -> None:
    """Move a planned server from delivered to filtered."""
    plan.delivered.remove(entry)
    plan.filtered.append(Omitted(entry.name, reason_code, summary))


def insert_args(argv: Sequence[str], additions: Sequence[str]) -> list[str]:
    """`argv` plus `additions`, placed before a `--` separator when there is one (after it they would
    become positional arguments)."""
    argv = list(argv)
    if "--" in argv[1:]:
        i = argv.index("--", 1)
        return [*argv[:i], *additions, *argv[i:]]
    return [*argv, *additions]


def dump_json(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


# -- safe file writing -----------------------------------------------------------------------------


def _fs_summary(exc: OSError, where: str, dir_fd: int | None = None, name: str | None = None) -> str:
    code = exc.errno
    if code == errno.ELOOP:
        return f"symlink in the way at {where}; refusing to write through it"
    if code == errno.ENOTDIR and dir_fd is not None and name is not None:
        try:
            if stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
                return f"symlink in the way at {where}; refusing to write through it"
        except OSError:
            pass
        return f"{where} is in the way and is not a directory"
    if code == errno.ENOSPC:
        return f"no space left on device writing {where}"
    if code == errno.EDQUOT:
        return f"disk quota exceeded writing {where}"
    if code in (errno.EACCES, errno.EPERM):
        return f"permission denied writing {where}"
    if code == errno.EROFS:
        return f"read-only file system at {where}"
    if code == errno.ENOENT:
        return f"{where} does not exist"
    return f"cannot write {where}: {exc.strerror or type(exc).__name__}"


def _label(parts: Sequence[str]) -> str:
    return "/".join(parts) if parts else "the working directory"


def _open_dirs(root: Path, parts: Sequence[str], *, create: bool, created: list[tuple[str, ...]] | None = None) -> int:
    """An fd of root/parts[0]/..., each level opened with O_NOFOLLOW (the root itself is the user's choice)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        fd = os.open(root, flags)
    except OSError as exc:
        raise MaterializeError(_fs_summary(exc, "the working directory")) from None
    done: list[str] = []
    try:
        for part in parts:
            done.append(part)
            if create:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                    if created is not None:
                        created.append(tuple(done))
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise MaterializeError(_fs_summary(exc, _label(done), fd, part)) from None
            try:
                nfd = os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise MaterializeError(_fs_summary(exc, _label(done), fd, part)) from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_existing(dir_fd: int, name: str, where: str) -> tuple[bytes | None, int]:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return None, 0o600
    except OSError as exc:
        raise MaterializeError(_fs_summary(exc, where, dir_fd, name)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise MaterializeError(f"{where} is not a regular file")
        if st.st_size > MAX_WORKSPACE_FILE_BYTES:
            raise MaterializeError(f"{where} is larger than {MAX_WORKSPACE_FILE_BYTES} bytes; left untouched")
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks), stat.S_IMODE(st.st_mode)
    except OSError as exc:
        raise MaterializeError(_fs_summary(exc, where)) from None
    finally:
        os.close(fd)


def _atomic_write(dir_fd: int, name: str, data: bytes, mode: int, where: str) -> None:
    tmp = f".{name}.agentctl-{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        raise MaterializeError(_fs_summary(exc, where)) from None
    try:
        try:
            os.fchmod(fd, mode)  # the umask must not widen or narrow what we chose
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            if stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
                raise MaterializeError(f"symlink in the way at {where}; refusing to write through it")
        except FileNotFoundError:
            pass
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        _unlink_quietly(dir_fd, tmp)
        raise MaterializeError(_fs_summary(exc, where)) from None
    except BaseException:
        _unlink_quietly(dir_fd, tmp)
        raise


def _unlink_quietly(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def write_private(directory: Path, name: str, data: bytes) -> Path:
    """Write `directory/name` 0600 and atomically (the directory is ours: the attempt's 0700 tmpdir)."""
    fd = _open_dirs(directory, (), create=False)
    try:
        _atomic_write(fd, name, data, 0o600, name)
    finally:
        os.close(fd)
    return directory / name


def merge_workspace_json(
    workdir: Path, parts: tuple[str, ...], mutate: Callable[[dict[str, Any]], None]
) -> Restore:
    """Read <workdir>/parts (JSON or JSON with comments), let `mutate` change it, write it back 0600.

    Returns what is needed to put the original back byte for byte (or remove the file and the
    directories we created) at stop. A file we cannot parse is left untouched and refused.
    """
    where = _label(parts)
    created: list[tuple[str, ...]] = []
    fd = _open_dirs(workdir, parts[:-1], create=True, created=created)
    restore = Restore(workdir, parts, None, 0o600, created)
    try:
        original, mode = _read_existing(fd, parts[-1], where)
        restore.original, restore.mode = original, mode
        doc = _parse_json_object(original, where) if original is not None else {}
        mutate(doc)
        _atomic_write(fd, parts[-1], dump_json(doc), 0o600, where)
    except BaseException:
        # The file itself is untouched (the write is atomic and comes last): only undo our directories.
        _remove_created_dirs(restore)
        raise
    finally:
        os.close(fd)
    return restore


def _parse_json_object(raw: bytes, where: str) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise MaterializeError(f"{where} is not UTF-8 text; left untouched") from None
    if not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        try:
            doc = json.loads(strip_json_comments(text))
        except json.JSONDecodeError:
            raise MaterializeError(f"{where} is not valid JSON; left untouched") from None
    if not isinstance(doc, dict):
        raise MaterializeError(f"{where} is not a JSON object; left untouched")
    return doc


def strip_json_comments(text: str) -> str:
    """JSON with `//` and `/* */` comments (as Gemini CLI and Cursor accept) as plain JSON."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def json_section(doc: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """doc[key] as a dict (created when missing); a non-object there is refused, the file left untouched."""
    section = doc.setdefault(key, {})
    if not isinstance(section, dict):
        raise MaterializeError(f"{where}: \"{key}\" is not a JSON object; left untouched")
    return section


# -- cleanup ---------------------------------------------------------------------------------------


def restore_workspace(restore: Restore) -> None:
    """Put a merged file back as it was (byte for byte, original mode) or remove it; remove the
    directories we created when they are empty. Best effort: raises nothing."""
    try:
        fd = _open_dirs(restore.workdir, restore.parts[:-1], create=False)
    except MaterializeError:
        fd = -1
    if fd >= 0:
        try:
            if restore.original is None:
                _unlink_quietly(fd, restore.parts[-1])
            else:
                _atomic_write(fd, restore.parts[-1], restore.original, restore.mode, _label(restore.parts))
        except MaterializeError:
            pass
        finally:
            os.close(fd)
    _remove_created_dirs(restore)


def _remove_created_dirs(restore: Restore) -> None:
    for rel in reversed(restore.created_dirs):
        path = restore.workdir.joinpath(*rel)
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                os.rmdir(path)
        except OSError:
            pass  # not empty (the user or the agent put something there), or already gone


def cleanup(mat: Materialization) -> None:
    """Remove the temporary files and restore the merged workspace files. Idempotent."""
    for path in mat.files:
        try:
            os.unlink(path)
        except OSError:
            pass
    for restore in mat.restores:
        restore_workspace(restore)
    mat.files.clear()
    mat.restores.clear()
