"""What every passthrough strategy shares: the Strategy protocol, the CLI as the delivery planner's receiver, and the data a strategy produces.

Which servers a CLI gets is decided by the one delivery planner (agentctl/agent/delivery.py), told what
the CLI's configuration can express by the strategy's `CliReceiver`. A strategy turns the spec, the
attempt's built-in URL and token, the agent's workdir and a private 0700 temporary directory into a
Materialization: argv and env additions for the agent, the files it wrote, the workspace files to
restore, what it delivered and what it filtered (with stable reason codes).

Files are written by agentctl/agent/passthrough/workspace.py (0600, atomically, never through a symlink,
merged workspace files journaled before they change). Secrets (header and env values, the attempt token)
go into those files and the agent's argv/env only; errors name a path relative to the workdir, never a
value.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agentctl.agent.delivery import BuiltinEndpoint, Refusal, ServerPlan, plan_servers
from agentctl.spec import Spec

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.agent.passthrough.journal import Entry

MATERIALIZE_FAILED = "materialize_failed"
NO_PASSTHROUGH_STRATEGY = "no_passthrough_strategy"
NAME_UNSUPPORTED = "name_unsupported_by_strategy"
MAX_WORKSPACE_FILE_BYTES = 4 * 1024 * 1024


def unsupported(transport: str) -> str:
    """The reason code for a transport a strategy cannot express, e.g. `sse_unsupported_by_strategy`."""
    return f"{transport}_unsupported_by_strategy"


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
    journal: Entry | None = field(default=None, repr=False)


@dataclass
class Materialization(ServerPlan):
    argv: list[str] = field(default_factory=list, repr=False)
    env: dict[str, str] = field(default_factory=dict, repr=False)
    files: list[Path] = field(default_factory=list)  # temporary files, removed at stop
    restores: list[Restore] = field(default_factory=list)  # merged workspace files, restored at stop


class MaterializeError(Exception):
    """The configuration could not be written. `summary` names a relative path or a cause, never a value."""

    def __init__(self, summary: str, reason_code: str = MATERIALIZE_FAILED) -> None:
        super().__init__(summary)
        self.reason_code = reason_code
        self.summary = summary


class WorkspaceJournal(Protocol):
    """Where a merge is recorded durably before the file changes (agentctl/agent/passthrough/journal.py)."""

    def settle(self, workdir: Path, parts: tuple[str, ...]) -> None: ...

    def record(self, restore: Restore) -> Entry: ...

    def discard(self, entry: Entry | None) -> None: ...


class Strategy(Protocol):
    name: str
    receiver: CliReceiver  # what the CLI's configuration can express

    def materialize(self, req: MaterializeRequest) -> Materialization: ...


# -- the plan: which servers, over which transport -------------------------------------------------


@dataclass(frozen=True)
class CliReceiver:
    """A CLI as the delivery planner's receiver: the transports its configuration can express and, for
    a CLI that restricts them, the server names it accepts (`refuse_name` says why a name is refused)."""

    transports: frozenset[str]
    refuse_name: Callable[[str], str | None] | None = field(default=None, compare=False)

    def transport_refused(self, transport: str) -> Refusal:
        return Refusal(
            reason_code=unsupported(transport), summary=f"this CLI's configuration cannot express {transport}"
        )

    def builtin_refused(self, wanted: str) -> Refusal:
        return self.transport_refused(wanted)

    def name_refused(self, name: str) -> Refusal | None:
        why = self.refuse_name(name) if self.refuse_name is not None else None
        return None if why is None else Refusal(reason_code=NAME_UNSUPPORTED, summary=why)


def plan_materialization(req: MaterializeRequest, receiver: CliReceiver) -> Materialization:
    """A Materialization holding the plan for this CLI (agentctl/agent/delivery.py `plan_servers`): the
    strategy then writes its configuration from `delivered`, and may `drop` more servers (agentctl.agent.delivery)."""
    plan = plan_servers(req.spec, req.builtin, receiver)
    return Materialization(delivered=plan.delivered, filtered=plan.filtered)


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
