"""What every passthrough strategy shares: the Strategy protocol, the server plan and its data types.

A strategy turns the spec, the attempt's built-in URL and token, the agent's workdir and a private 0700
temporary directory into a Materialization: argv and env additions for the agent, the files it wrote,
the workspace files to restore, what it delivered and what it filtered (with stable reason codes).

Files are written by agentctl/agent/passthrough/workspace.py (0600, atomically, never through a symlink,
merged workspace files journaled before they change). Secrets (header and env values, the attempt token)
go into those files and the agent's argv/env only; errors name a path relative to the workdir, never a
value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
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
    # Records merged workspace files before they change, so a killed daemon's merge can be undone.
    journal: WorkspaceJournal | None = field(default=None, repr=False)


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
    """A workspace file we merged into: its original bytes (None: it did not exist), the dirs we created,
    a digest of what we wrote (never the bytes: they hold the attempt's secrets) and the key paths we set
    (`("mcpServers", "kandev")`), so our entries can be taken out of a file the user edited since."""

    workdir: Path
    parts: tuple[str, ...]  # path below the workdir, e.g. (".cursor", "mcp.json")
    original: bytes | None = field(repr=False)
    mode: int
    created_dirs: list[tuple[str, ...]] = field(default_factory=list)
    written_sha256: str = ""
    changed: list[tuple[str, ...]] = field(default_factory=list)
    # The journal entry that makes this restore survive a crash (None: no journal, e.g. unit tests).
    journal: Any = field(default=None, repr=False)


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


class WorkspaceJournal(Protocol):
    """Where a merge is recorded durably before the file changes (agentctl/agent/passthrough/journal.py)."""

    def settle(self, workdir: Path, parts: tuple[str, ...]) -> None: ...

    def record(self, restore: Restore) -> Any: ...

    def discard(self, entry: Any) -> None: ...


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


def json_section(doc: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """doc[key] as a dict (created when missing); a non-object there is refused, the file left untouched."""
    section = doc.setdefault(key, {})
    if not isinstance(section, dict):
        raise MaterializeError(f"{where}: \"{key}\" is not a JSON object; left untouched")
    return section
