"""Gemini CLI, everything agentctl knows of it (`AGENT`): its passthrough strategy, its folder-trust rules (for
the strategy and for `gemini --acp`), its display name and hints.

The `gemini` strategy: merge the servers into the workspace settings `<workdir>/.gemini/settings.json`.

Format (Gemini CLI docs, https://github.com/google-gemini/gemini-cli/blob/main/docs/tools/mcp-server.md
and docs/get-started/configuration.md — the project settings file is `.gemini/settings.json` in the
workspace, merged over the user's `~/.gemini/settings.json`):

    {"mcpServers": {"<name>": {"httpUrl": "...", "headers": {...}},    streamable HTTP
                    "<name>": {"url": "...", "headers": {...}},        legacy SSE
                    "<name>": {"command": "...", "args": [...], "env": {...}}}}   stdio

All three transports are expressible. The workspace file's own server filters are honoured: a server
listed in `mcp.excluded` (or the older `excludeMCPServers`), or missing from a present `mcp.allowed`
(`allowMCPServers`), would be skipped by the CLI, so it is `filtered` (`excluded_by_workspace_settings`)
rather than claimed as delivered. Filters in the user's global settings are not read.

Merging and restoring work as for cursor: the user's entries and every other setting are kept, ours
replace same-named entries for the run, the file is written 0600 atomically and never through a symlink,
and at stop the original is restored byte for byte (or removed with a `.gemini` directory we created).
Gemini CLI starts no MCP server at all (the workspace's or the user's) in a folder it does not trust.
Before writing anything the strategy decides trust as the CLI would (the trust rules below: its
environment, `--skip-trust`, settings and trusted-folders file); in an untrusted folder every server is
`filtered` (`untrusted_folder`, with how to trust the folder the CLI's own way) and no file is written:
nothing would read it. agentctl never writes the user's Gemini settings to change the answer. A trust
file Gemini would refuse stops the CLI before any server starts; the servers are then delivered as usual
and the CLI's exit is the report-level error.

Trust: Gemini CLI's folder trust, decided as the CLI decides it: a pure rule over file contents, and a thin reader.

Gemini CLI disables every MCP server (the workspace's and the user's) in a folder it does not trust, so a
server agentctl gives it there never reaches the agent. The rules, as Gemini CLI 0.61.0 applies them:

1. `GEMINI_RESTRICTED_MODE=true` or `GEMINI_CLI_TRUST_WORKSPACE=false`: untrusted. Otherwise
   `GEMINI_CLI_TRUST_WORKSPACE=true`, or the `--skip-trust` flag (which sets that variable): trusted.
2. `security.folderTrust.enabled` (default true; system defaults, then user settings, then system settings,
   each overriding the one before; the workspace's settings are never consulted) switched off: trusted.
   Gemini's settings schema first turns the strings `"true"` and `"false"` (any letter case, nothing
   trimmed) into booleans; any other value is kept as written and read with JavaScript's truthiness
   (`0`, `-0` and `""` are off; `"no"`, `1`, `[]`, `{}` are on; `null` is the default).
   A system file counts only when it and every folder above it are root's and writable by no one else
   (Gemini skips it with a security warning otherwise: one under /tmp never counts).
3. The trusted-folders file (`~/.gemini/trustedFolders.json`, JSON with comments) maps paths to
   `TRUST_FOLDER`, `TRUST_PARENT` (the path's parent and below) or `DO_NOT_TRUST`. Paths resolve like
   Node's `path.resolve` from the working directory and through symlinks; among the rules whose folder holds
   the working directory, the one with the longest path as written wins. No rule: untrusted.
4. A trusted-folders file that is not an object of valid levels, or a settings file that is not a JSON
   object, stops the CLI before it starts any server: the decision is then `trusted=None` with the error.

Not modelled: an IDE companion's own trust answer (no IDE runs under agentctl), `$VAR` expansion inside
settings values, and a file that fails Gemini's schema somewhere else (Gemini then keeps every value of that
file uncoerced, so `"false"` there reads as on: agentctl decides trusted and delivers, and Gemini disables). Nothing here writes a file: agentctl never changes the user's Gemini settings.

Over ACP: Gemini CLI as an ACP agent (`gemini --acp`): how it is recognized, and its servers `filtered` in a folder it
does not trust.

Gemini CLI 0.61.0's ACP session manager merges the servers of session/new (and session/load) into its
settings and hands them to the same MCP client manager as its own servers, which starts none of them when
the session's folder is untrusted (`if (!this.cliConfig.isTrustedFolder()) return;`, for every server: the
workspace's, the user's and the client's). docs/agents.md has the measurement with the real CLI. So when the
agent is Gemini CLI and the trust rules above decide (with the agent's environment and command, as
Gemini would) that the session's working directory is untrusted, no server is sent and each is `filtered`
(`untrusted_folder`) with how to trust the folder. A trust file Gemini would refuse (`trusted=None`) leaves the
plan as it is: the agent's own error then says why. Nothing here writes a file. Gemini CLI reads its
trusted-folders file once per process (and caches it), so agentctl decides once too, when the agent has
answered initialize: a folder trusted while the agent runs takes effect at its next start, for both.

Gemini CLI is recognized by the name it gives in ACP initialize (`agentInfo.name` = `gemini-cli`); only when
an agent gives no name, by its command's program name (`gemini`). A wrapper script that starts Gemini CLI is
recognized by the name; another agent started through a program called `gemini` is not.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentctl.agent import bounded_json
from agentctl.agent.agent_cli import AgentCli
from agentctl.agent.delivery import DeliveryPlan, Omitted, drop
from agentctl.agent.passthrough.base import (
    CliReceiver,
    Materialization,
    MaterializeRequest,
    json_section,
    plan_materialization,
)
from agentctl.agent.passthrough.workspace import merge_workspace_json
from agentctl.agent.refusal_hints import RefusalHint

TRUST_LEVELS = ("TRUST_FOLDER", "TRUST_PARENT", "DO_NOT_TRUST")
REASON_UNTRUSTED = "untrusted_folder"  # the reason the gemini strategy filters every server with
Source = Literal["env", "flag", "setting", "file", "default", "error"]
_HOW_TO_TRUST = ("run `gemini` in the folder and choose \"Trust folder\", add a TRUST_FOLDER rule for it to "
                 "Gemini's trusted-folders file, or add --skip-trust to the agent's command")



@dataclass(frozen=True)
class TrustInputs:
    """What Gemini reads to decide: file texts (None when the file is absent), the environment, the flag."""

    workdir: str  # absolute, as Gemini's process.cwd() gives it (symlinks resolved)
    trusted_folders: str | None = None
    trusted_folders_path: str = "~/.gemini/trustedFolders.json"
    user_settings: str | None = None
    system_settings: str | None = None
    system_defaults: str | None = None
    env: Mapping[str, str] | None = None
    skip_trust: bool = False


@dataclass(frozen=True)
class TrustDecision:
    trusted: bool | None  # None: Gemini would refuse to start at all (`error` says why)
    source: Source
    rule: str | None = None  # the trusted-folders path that decided, when the file did
    error: str | None = None


def untrusted_summary(decision: TrustDecision) -> str:
    """Why Gemini will not trust the workdir, and how to trust it; never a path or a value."""
    why = {
        "env": "the environment distrusts it (GEMINI_RESTRICTED_MODE or GEMINI_CLI_TRUST_WORKSPACE=false)",
        "file": "a DO_NOT_TRUST rule in the trusted-folders file covers it",
    }.get(decision.source, "no rule in Gemini's trusted-folders file covers it")
    return f"Gemini CLI does not trust the working directory ({why}): {_HOW_TO_TRUST}"


def parse_jsonc(text: str) -> Any:
    """JSON with `//` and `/* */` comments, as Gemini reads its settings and trusted-folders files, within
    agentctl.agent.bounded_json's bounds (an agent can write these files too): a ValueError otherwise."""
    return bounded_json.loads(text)


def decide(inputs: TrustInputs, realpath: Callable[[str], str] = lambda p: p) -> TrustDecision:
    """Whether Gemini CLI trusts `inputs.workdir`. `realpath` resolves an existing path's symlinks (the
    reader passes the file system's; the default leaves paths as written)."""
    env = inputs.env or {}
    if env.get("GEMINI_RESTRICTED_MODE") == "true":
        return TrustDecision(False, "env")
    if inputs.skip_trust:
        return TrustDecision(True, "flag")  # the flag overwrites GEMINI_CLI_TRUST_WORKSPACE with true
    if env.get("GEMINI_CLI_TRUST_WORKSPACE") == "false":
        return TrustDecision(False, "env")
    if env.get("GEMINI_CLI_TRUST_WORKSPACE") == "true":
        return TrustDecision(True, "env")
    enabled: Any = True
    for name, text in (("system defaults", inputs.system_defaults), ("user settings", inputs.user_settings),
                       ("system settings", inputs.system_settings)):
        settings, error = _object(text, "Settings")
        if error:
            return TrustDecision(None, "error", error=f"{name}: {error}")
        value = _coerce_boolean(_enabled(settings))
        if value is not _UNSET:
            enabled = True if value is None else value  # `enabled ?? true`
    if not _truthy(enabled):
        return TrustDecision(True, "setting")
    rules, error = _rules(inputs.trusted_folders, inputs.workdir)
    if error:
        return TrustDecision(None, "error", error=f"{inputs.trusted_folders_path}: {error}")
    return _match(rules, inputs.workdir, realpath)


_UNSET: Any = object()


def _coerce_boolean(value: Any) -> Any:
    """Gemini's settings schema preprocesses a boolean setting: the strings "true"/"false" in any case become
    booleans (no trimming); every other value passes through unchanged."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def _truthy(value: Any) -> bool:
    """JavaScript's truthiness, which is how Gemini reads the setting: `"false"` is on, `0` and `""` off."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0 and value == value  # 0 and NaN are falsy
    return value != "" and value is not None


def _object(text: str | None, what: str) -> tuple[dict[str, Any], str | None]:
    """A settings-like file's top-level object ({} when absent), or the error that stops Gemini."""
    if text is None:
        return {}, None
    try:
        parsed = parse_jsonc(text)
    except bounded_json.Unparseable as exc:
        return {}, "not valid JSON" if exc.reason == "is not valid JSON" else f"not valid JSON: it {exc.reason}"
    if not isinstance(parsed, dict):
        return {}, f"{what} file is not a valid JSON object."
    return parsed, None


def _enabled(settings: dict[str, Any]) -> Any:
    """The file's `security.folderTrust.enabled`, or _UNSET. A non-object on the way (`"security": 1`) is
    Gemini's `?.` reading undefined."""
    security = settings.get("security")
    folder = security.get("folderTrust") if isinstance(security, dict) else None
    return folder.get("enabled", _UNSET) if isinstance(folder, dict) else _UNSET


def _rules(text: str | None, cwd: str) -> tuple[dict[str, str], str | None]:
    parsed, error = _object(text, "Trusted folders")
    rules: dict[str, str] = {}
    for raw_path, level in parsed.items():
        if level not in TRUST_LEVELS:
            return {}, f"an invalid trust level for a path (possible values: {', '.join(TRUST_LEVELS)})"
        rules[_resolve(cwd, raw_path)] = level
    return rules, error


def _resolve(cwd: str, path: str) -> str:
    """Node's `path.resolve(path)` run from `cwd`: absolute, normalized, no trailing slash."""
    resolved = posixpath.normpath(posixpath.join(cwd, path))
    return "/" + resolved.lstrip("/")  # normpath keeps a leading `//`; Node does not


def _match(rules: Mapping[str, str], workdir: str, realpath: Callable[[str], str]) -> TrustDecision:
    location = _resolve("/", realpath(workdir))
    best: tuple[int, str, str] | None = None
    for rule_path, level in rules.items():
        folder = posixpath.dirname(rule_path) if level == "TRUST_PARENT" else rule_path
        folder = _resolve("/", realpath(folder))
        if _holds(folder, location) and (best is None or len(rule_path) > best[0]):
            best = (len(rule_path), rule_path, level)
    if best is None:
        return TrustDecision(False, "default")
    return TrustDecision(best[2] != "DO_NOT_TRUST", "file", rule=best[1])


def _holds(folder: str, location: str) -> bool:
    relative = posixpath.relpath(location, folder)
    return relative != ".." and not relative.startswith("../")


# ---- the thin reader -----------------------------------------------------------------------------------

_ENV_NAMES = ("GEMINI_RESTRICTED_MODE", "GEMINI_CLI_TRUST_WORKSPACE")


def skip_trust_in(argv: Sequence[str]) -> bool:
    """Whether Gemini's arguments carry `--skip-trust` (yargs also takes `--skipTrust` and `=true`)."""
    for arg in argv:
        if arg == "--":
            return False
        name, _, value = arg.partition("=")
        if name in ("--skip-trust", "--skipTrust") and value in ("", "true"):
            return True
    return False


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("GEMINI_CLI_HOME") or env.get("HOME") or os.path.expanduser("~"))


def _read(path: Path) -> str | None:
    """The file's text (symlinks followed, as Gemini follows them); never hangs on a FIFO, never reads more
    than bounded_json.MAX_BYTES: anything else is an OSError, which decide_for turns into the error decision."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")  # a FIFO would block the read for good
        data = f.read(bounded_json.MAX_BYTES + 1)
    if len(data) > bounded_json.MAX_BYTES:
        raise OSError(errno.EFBIG, f"larger than {bounded_json.MAX_BYTES} bytes")
    return data.decode("utf-8")


def _existing_realpath(path: str) -> str:
    return os.path.realpath(path) if os.path.exists(path) else path


def _secure_system_file(path: Path) -> bool:
    """Gemini's check before it reads a system settings file: the file and each folder above it owned by
    root and not writable by group or others (a symlink among them owned by root as well)."""
    normalized = Path(os.path.normpath(os.path.abspath(path)))
    try:
        for item in (normalized, *normalized.parents):
            if item.is_symlink() and item.lstat().st_uid != 0:
                return False
            st = item.stat()
            if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return False
        return normalized.is_file()
    except OSError:
        return False


def _read_system(path: Path) -> str | None:
    return _read(path) if path.exists() and _secure_system_file(path) else None


def read_inputs(workdir: str | os.PathLike[str], env: Mapping[str, str], argv: Sequence[str] = ()) -> TrustInputs:
    """The files and settings the Gemini CLI run with `env` and `argv` in `workdir` would read."""
    gemini_dir = _home(env) / ".gemini"
    runtime_dir = _home(env) / ".cache" / ".gemini" if env.get("SANDBOX") == "sandbox-exec" else gemini_dir
    folders = Path(env.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH") or runtime_dir / "trustedFolders.json")
    system = Path(env.get("GEMINI_CLI_SYSTEM_SETTINGS_PATH") or "/etc/gemini-cli/settings.json")
    defaults = Path(env.get("GEMINI_CLI_SYSTEM_DEFAULTS_PATH") or system.parent / "system-defaults.json")
    return TrustInputs(
        workdir=os.path.realpath(workdir),
        trusted_folders=_read(folders),
        trusted_folders_path=str(folders),
        user_settings=_read(gemini_dir / "settings.json"),
        system_settings=_read_system(system),
        system_defaults=_read_system(defaults),
        env={name: env[name] for name in _ENV_NAMES if name in env},
        skip_trust=skip_trust_in(argv),
    )


def decide_for_agent(workdir: str | os.PathLike[str], agent_env: Mapping[str, str], argv: Sequence[str],
                     environ: Mapping[str, str] | None = None) -> TrustDecision:
    """decide_for with the environment the agent runs with: the inherited one (`environ`, else this process's)
    with the spec's `agent_env` over it."""
    env = dict(os.environ if environ is None else environ)
    env.update(agent_env)
    return decide_for(workdir, env, argv)


def decide_for(workdir: str | os.PathLike[str], env: Mapping[str, str], argv: Sequence[str] = ()) -> TrustDecision:
    """Whether the Gemini CLI run with `env` and `argv` in `workdir` trusts it, reading what it would read."""
    try:
        inputs = read_inputs(workdir, env, argv)
    except (OSError, UnicodeDecodeError) as exc:
        strerror = exc.strerror if isinstance(exc, OSError) else None
        why = f"{exc.__class__.__name__}: {strerror}" if strerror else exc.__class__.__name__
        return TrustDecision(None, "error", error=f"a trust file could not be read ({why})")
    return decide(inputs, _existing_realpath)


# ---- Gemini CLI over ACP ------------------------------------------------------------------------------

AGENT_NAME = "gemini-cli"  # agentInfo.name in Gemini CLI's initialize answer
PROGRAM = "gemini"


def is_gemini(agent_name: str | None, command: Sequence[str]) -> bool:
    """Whether the ACP agent is Gemini CLI: by the name it declared, else by the program it was started as."""
    if agent_name:
        return agent_name == AGENT_NAME
    return bool(command) and os.path.basename(command[0]) == PROGRAM


def trust_for(cwd: str, agent_env: Mapping[str, str], command: Sequence[str],
              environ: Mapping[str, str] | None = None) -> TrustDecision:
    """Gemini's answer for a session in `cwd`: the inherited environment with the spec's env over it."""
    return decide_for_agent(cwd, agent_env, list(command), environ)


def filter_untrusted(plan: DeliveryPlan, decision: TrustDecision) -> None:
    """In an untrusted folder, every planned server becomes `filtered` (`untrusted_folder`): none is sent."""
    if decision.trusted is not False:
        return
    summary = untrusted_summary(decision)
    plan.filtered.extend(Omitted(p.name, REASON_UNTRUSTED, summary) for p in plan.delivered)
    plan.delivered.clear()


# ---- the passthrough strategy ----------------------------------------------------------------------

PARTS = (".gemini", "settings.json")
EXCLUDED = "excluded_by_workspace_settings"
UNTRUSTED = REASON_UNTRUSTED


def trust_of(req: MaterializeRequest) -> TrustDecision:
    """Gemini's own answer for this run: the inherited environment with the spec's env over it."""
    agent = req.spec.agent
    return decide_for_agent(req.workdir, agent.env if agent else {}, list(agent.command) if agent else [],
                                         req.environ)


def _names(value: Any) -> list[str] | None:
    return [str(v) for v in value] if isinstance(value, list) else None


# Why a headless run (`gemini -p`) fails, as Gemini CLI 0.61 says it: no credentials, "Please set an Auth
# method ...", exit 41 (FatalAuthenticationError); an untrusted folder, "Gemini CLI is not running in a trusted
# directory ...", exit 55.
FAILURE_HINTS = (
    RefusalHint(
        "api_key_missing",
        ("please set an auth method", "api key is missing", "exited with code 41"),
        "Gemini CLI has no credentials: set GEMINI_API_KEY in [agent] env, or an auth method in the Gemini "
        "settings of the user agentctl runs as.",
    ),
    RefusalHint(
        "untrusted_folder",
        ("not running in a trusted directory", "exited with code 55"),
        "Gemini CLI does not trust the agent's workdir: set GEMINI_CLI_TRUST_WORKSPACE=true in [agent] env, add "
        "--skip-trust to the command, or trust the folder in ~/.gemini/trustedFolders.json.",
    ),
)


class GeminiStrategy:
    name = "gemini"
    receiver = CliReceiver(frozenset({"http", "sse", "stdio"}))

    def materialize(self, req: MaterializeRequest) -> Materialization:
        plan = plan_materialization(req, self.receiver)
        decision = trust_of(req)
        if decision.trusted is False:
            summary = untrusted_summary(decision)
            for entry in list(plan.delivered):
                drop(plan, entry, UNTRUSTED, summary)
            return plan

        def mutate(doc: dict[str, Any]) -> None:
            given = doc.get("mcp")
            mcp = given if isinstance(given, dict) else {}
            excluded = _names(mcp.get("excluded")) or _names(doc.get("excludeMCPServers")) or []
            allowed = _names(mcp.get("allowed"))
            if allowed is None:
                allowed = _names(doc.get("allowMCPServers"))
            for entry in list(plan.delivered):
                if entry.name in excluded or (allowed is not None and entry.name not in allowed):
                    drop(plan, entry, EXCLUDED, "the workspace settings exclude this server")
            servers = json_section(doc, "mcpServers", "/".join(PARTS))
            for entry in plan.delivered:
                if entry.transport == "stdio":
                    servers[entry.name] = {"command": entry.command, "args": entry.args, "env": entry.env}
                elif entry.transport == "http":
                    servers[entry.name] = {"httpUrl": entry.url, "headers": entry.headers}
                else:
                    servers[entry.name] = {"url": entry.url, "headers": entry.headers}

        plan.restores.append(merge_workspace_json(req.workdir, PARTS, mutate, journal=req.journal))
        return plan


STRATEGY = GeminiStrategy()


def acp_gate(agent_name: str | None, command: Sequence[str], cwd: str,
             agent_env: Mapping[str, str]) -> Callable[[DeliveryPlan], None] | None:
    """For Gemini CLI over ACP, the filter of each session's plan by the folder trust decided now (Gemini reads
    its trusted-folders file once per process); None for any other agent."""
    if not is_gemini(agent_name, command):
        return None
    decision = trust_for(cwd, agent_env, command)
    return lambda plan: filter_untrusted(plan, decision)


# Why Gemini CLI refuses a session over ACP: checked before the generic table.
REFUSAL_HINTS = (
    RefusalHint(
        "untrusted_folder",
        ("folder is not trusted", "untrusted folder"),
        "Gemini CLI ignores project settings in an untrusted folder: trust the agent's workdir "
        "(~/.gemini/trustedFolders.json) for the user agentctl runs as.",
    ),
)

AGENT = AgentCli(
    name="gemini",
    display_name="Gemini CLI",
    strategy=STRATEGY,
    reporters={"gemini": "Gemini CLI"},
    failure_hints=FAILURE_HINTS,
    refusal_hints=REFUSAL_HINTS,
    no_report="Gemini CLI prints no MCP server status in its output: no agent report is available for this CLI",
    acp_gate=acp_gate,
)
