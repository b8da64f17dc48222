"""The execution spec: typed msgspec structs, parsing TOML/JSON bytes, and error messages that never echo a
value. Pure: reading the file and checking the agent's workdir and executable is agentctl.spec_loader."""

from __future__ import annotations

import re
import tomllib
from typing import Literal, get_args
from urllib.parse import urlsplit

import msgspec
import msgspec.inspect

from agentctl.evidence.contract.report import Transport
from agentctl.evidence.decode_errors import describe_decode_error
from agentctl.evidence.sanitize import target_for_command, target_for_url
from agentctl.evidence.secret_registry import SecretRegistry, url_parts

AF_UNIX_PATH_MAX = 107
# Used with fullmatch: `$` alone would also accept a trailing line break.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")


# The passthrough strategies, one module each in agentctl/agent/passthrough/ (a test keeps the two equal).
StrategyName = Literal["claude", "codex", "cursor", "gemini", "opencode"]
# `strategy = "none"`: a passthrough CLI run on purpose without MCP configuration (every server is then
# `unavailable`, no_passthrough_strategy). Leaving `strategy` out is refused, so that is never an accident.
NO_STRATEGY = "none"


class SpecError(Exception):
    """A spec problem, phrased for one line: file, field path, what is wrong. Never the offending value."""


class _S(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class IdentitySpec(_S):
    """[identity]: who this execution is, from the executor (execution_id is generated when absent)."""

    task_id: str
    session_id: str
    agent_id: str
    agent_profile_id: str
    execution_id: str | None = None


class AgentSpec(_S):
    """[agent]: the agent to run (optional: without it the daemon hosts MCP only)."""

    command: list[str]
    protocol: Literal["acp", "passthrough"] = "acp"
    strategy: StrategyName | Literal["none"] | None = None
    workdir: str | None = None
    env: dict[str, str] = {}
    permission: Literal["allow", "deny", "ask"] = "deny"  # answer to the agent's permission requests
    initialize_timeout: float = 30.0
    session_timeout: float = 60.0
    stop_grace: float = 2.0  # after closing stdin, before SIGTERM to the agent's process group
    linger: float | None = None  # after the agent exits, stop the daemon after this many seconds
    # A passthrough CLI on a pseudo-terminal agentctl owns (attachable), instead of headless pipes.
    terminal: bool = False
    # Passthrough: read the CLI's own report of its MCP servers when its arguments ask for one ("auto"),
    # also add the arguments that make a print-mode run report ("request", Claude Code), or never ("off").
    report: Literal["auto", "request", "off"] = "auto"
    # ACP: the `authenticate` method id to send after initialize ("none": never). Unset: the advertised method
    # whose credential variable is set in the agent's environment (agentctl/agent/acp_auth.py), if any.
    auth_method: str | None = None


Observe = Literal["direct", "witness"]


class ServerSpec(_S):
    """[[mcp.servers]]: a third-party MCP server of the profile, delivered to the agent."""

    name: str
    type: Transport
    url: str | None = None
    headers: dict[str, str] = {}
    # A program, or a whole argv as docker and Kubernetes take it (`["npx", "-y", "server"]`): its first item
    # becomes `command` and the rest go before `args` once decoded, so the rest of agentctl sees a string.
    command: str | list[str] | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    # The prompt waits until this server is attached (agentctl/evidence/required.py decides); a third-party
    # server must have a channel that can prove it (the agent's own report, or the witness), or the spec is refused.
    required: bool = False
    # stdio only: "witness" delivers the command wrapped in agentctl's stdio witness (agentctl/agent/mcp_witness.py),
    # which relays the server's pipes byte for byte and reports what it sees; unset follows [mcp] observe_stdio.
    observe: Observe | None = None

    def __post_init__(self) -> None:
        if isinstance(self.command, list) and self.command:
            self.command, self.args = self.command[0], [*self.command[1:], *self.args]

    @property
    def program(self) -> str | None:
        """`command` as the rest of agentctl reads it: a string once decoded (only an empty list stays a list, and
        validation refuses it)."""
        return self.command if isinstance(self.command, str) else None


class McpSpec(_S):
    """[mcp]: the built-in MCP endpoint (loopback only) and the profile's servers."""

    listen: str = "127.0.0.1:0"
    profile: Literal["task", "task-title", "config", "external"] = "task"
    builtin_name: str = "kandev"
    # The built-in server is required: `run --prompt` (and `wait --attached`) hold until the agent is observed
    # active on the endpoint.
    builtin_required: bool = False
    # How long a required server may take to attach before the gate says it is not there.
    required_timeout: float = 30.0
    # How every stdio server without its own `observe` reaches the agent: "direct" (the agent spawns it) or
    # "witness" (the agent spawns agentctl's witness, which spawns it).
    observe_stdio: Observe = "direct"
    servers: list[ServerSpec] = []


class PolicySpec(_S):
    """[policy]: what the executor allows."""

    transports: list[Transport] = msgspec.field(default_factory=lambda: ["http", "sse", "stdio"])


class UpstreamSpec(_S):
    """[upstream]: the hub's socket (absent: an embedded backend answers tool calls)."""

    socket: str | None = None


class StateSpec(_S):
    """[state]: where reports and the task store go (else $STATE_DIRECTORY, else the user state dir)."""

    dir: str | None = None


class DaemonSpec(_S):
    """[daemon]: shutdown and persistence timing."""

    shutdown_timeout: float = 10.0
    persist_delay: float = 0.2


class Spec(_S):
    """An agentctl execution spec (TOML or JSON): `agentctl spec check` validates one."""

    identity: IdentitySpec
    agent: AgentSpec | None = None
    mcp: McpSpec = msgspec.field(default_factory=McpSpec)
    policy: PolicySpec = msgspec.field(default_factory=PolicySpec)
    upstream: UpstreamSpec = msgspec.field(default_factory=UpstreamSpec)
    state: StateSpec = msgspec.field(default_factory=StateSpec)
    daemon: DaemonSpec = msgspec.field(default_factory=DaemonSpec)


def spec_error(source: str, path: str, what: str) -> SpecError:
    what = "".join(ch if ch.isprintable() else "?" for ch in what)  # one line, whatever the parser said
    return SpecError(f"{source}: {path}: {what}")


def parse_spec(raw: bytes, *, source: str = "<spec>", fmt: str = "toml") -> Spec:
    if fmt == "json":
        try:
            data = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            raise spec_error(source, "(syntax)", f"invalid JSON ({describe_decode_error(exc).reason})") from None
        except RecursionError:
            raise spec_error(source, "(syntax)", "invalid JSON (nested too deeply)") from None
    else:
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise spec_error(source, "(syntax)", "not UTF-8 text") from None
        except tomllib.TOMLDecodeError as exc:
            # tomllib messages name a line and column, never the value.
            raise spec_error(source, "(syntax)", f"invalid TOML ({exc})") from None
        except RecursionError:
            raise spec_error(source, "(syntax)", "invalid TOML (nested too deeply)") from None
    if not isinstance(data, dict):
        raise spec_error(source, "(top level)", "expected a table/object")
    try:
        spec = msgspec.convert(data, type=Spec, strict=True)
    except msgspec.ValidationError as exc:
        problem = describe_decode_error(exc)
        if str(exc).startswith("Invalid enum value") and (allowed := allowed_values(problem.path or "$")):
            raise spec_error(source, problem.field(), f"not one of the allowed values: {', '.join(allowed)}") from None
        raise spec_error(source, problem.field(), problem.reason) from None
    except RecursionError:
        raise spec_error(source, "(top level)", "nested too deeply") from None
    _check(spec, source)
    return spec


def _check(spec: Spec, source: str) -> None:
    ident = spec.identity
    for field in ("task_id", "session_id", "agent_id", "agent_profile_id", "execution_id"):
        value = getattr(ident, field)
        if value is None:
            continue
        if not _ID_RE.fullmatch(value):
            raise spec_error(source, f"identity.{field}", "must be 1-128 characters of letters, digits, '_', '.', ':' or '-'")
    if spec.agent is not None:
        agent = spec.agent
        if not agent.command or not agent.command[0]:
            raise spec_error(source, "agent.command", "must be a non-empty argv list")
        if agent.protocol == "acp" and agent.strategy is not None:
            raise spec_error(source, "agent.strategy", "only valid with protocol = \"passthrough\"")
        if agent.protocol == "acp" and agent.terminal:
            raise spec_error(source, "agent.terminal", "only valid with protocol = \"passthrough\" (ACP speaks over stdio)")
        if agent.auth_method is not None and agent.protocol != "acp":
            raise spec_error(source, "agent.auth_method", "only valid with protocol = \"acp\" (ACP authenticate)")
        if agent.auth_method is not None and not _NAME_RE.fullmatch(agent.auth_method):
            raise spec_error(source, "agent.auth_method", "must be an ACP auth method id (1-64 characters of letters, "
                        "digits, '_', '.' or '-'), or \"none\"")
        if agent.protocol == "passthrough" and agent.strategy is None:
            known = ", ".join(get_args(StrategyName))
            raise spec_error(source, "agent.strategy", f"required with protocol = \"passthrough\" (one of {known}; "
                        f"strategy = \"{NO_STRATEGY}\" runs the CLI without MCP configuration, if that is intended)")
    mcp = spec.mcp
    _check_listen(mcp.listen, source)
    if not _NAME_RE.fullmatch(mcp.builtin_name):
        raise spec_error(source, "mcp.builtin_name", "must be 1-64 characters of letters, digits, '_', '.' or '-'")
    for i, server in enumerate(mcp.servers):
        where = f"mcp.servers[{i}]"
        if not _NAME_RE.fullmatch(server.name):
            raise spec_error(source, f"{where}.name", "must be 1-64 characters of letters, digits, '_', '.' or '-'")
        if server.type in ("http", "sse"):
            if not server.url:
                raise spec_error(source, f"{where}.url", f"required for type = \"{server.type}\"")
            if server.command is not None or server.args:
                raise spec_error(source, f"{where}.command", f"not allowed for type = \"{server.type}\"")
            _check_url(server.url, f"{where}.url", source)
            if server.observe is not None:
                raise spec_error(source, f"{where}.observe", "only stdio servers can be observed by the witness")
        else:
            if not server.command:
                raise spec_error(source, f"{where}.command", "required for type = \"stdio\": a program (\"npx\") or an "
                            "argv list ([\"npx\", \"-y\", \"server\"])")
            if server.url is not None or server.headers:
                raise spec_error(source, f"{where}.url", "not allowed for type = \"stdio\"")
        if server.required and (why := no_attachment_channel(spec, witnessed=witnessed(server, mcp))) is not None:
            raise spec_error(source, f"{where}.required", f"cannot be required: {why}")
    if not 0 < mcp.required_timeout <= 3600:
        raise spec_error(source, "mcp.required_timeout", "must be > 0 and <= 3600 seconds")
    if spec.agent is not None:
        for field in ("initialize_timeout", "session_timeout", "stop_grace"):
            value = getattr(spec.agent, field)
            if not 0 < value <= 600:  # written so that NaN is refused too
                raise spec_error(source, f"agent.{field}", "must be > 0 and <= 600 seconds")
        if spec.agent.linger is not None and not spec.agent.linger >= 0:
            raise spec_error(source, "agent.linger", "must be >= 0 seconds")
    if not 0 < spec.daemon.shutdown_timeout <= 300:
        raise spec_error(source, "daemon.shutdown_timeout", "must be > 0 and <= 300 seconds")
    if not 0 <= spec.daemon.persist_delay <= 10:
        raise spec_error(source, "daemon.persist_delay", "must be between 0 and 10 seconds")
    if spec.upstream.socket is not None and len(spec.upstream.socket.encode()) > AF_UNIX_PATH_MAX:
        raise spec_error(source, "upstream.socket", f"path longer than {AF_UNIX_PATH_MAX} bytes (AF_UNIX limit)")


def witnessed(server: ServerSpec, mcp: McpSpec) -> bool:
    """Whether this server is delivered wrapped in agentctl's stdio witness (stdio servers only)."""
    return server.type == "stdio" and (server.observe or mcp.observe_stdio) == "witness"


def no_attachment_channel(spec: Spec, *, witnessed: bool = False) -> str | None:
    """Why nothing could ever prove a third-party server attached under this spec, or None.

    agentctl does not observe third-party servers (the agent connects to them directly): only the agent's own
    report can say one is connected. An ACP agent may report (claude-agent-acp, codex-acp and Kiro do, which
    one runs is known only after initialize); a passthrough CLI only under a strategy with a known status
    output (agentctl/agent/clis/). Whether its arguments ask for that output is known at its start
    (`report_note` says so); a run that gives none leaves the server unverified until the deadline. A server
    delivered through the witness is observed by agentctl itself whenever it is delivered at all."""
    agent = spec.agent
    if agent is not None and witnessed and not (agent.protocol != "acp" and agent.strategy in (None, NO_STRATEGY)):
        return None
    if agent is None:
        return ("no [agent] runs under this daemon, and agentctl does not observe third-party servers, so "
                "nothing could report it attached")
    if agent.protocol == "acp":
        return None
    if agent.report == "off":
        return "agent.report = \"off\": the CLI's own report is the only channel that could prove it attached"
    if agent.strategy in (None, NO_STRATEGY):
        return "the CLI runs without MCP configuration (strategy = \"none\"): no server is delivered to it"
    if agent.strategy not in REPORTING_STRATEGIES:
        return (f"the {agent.strategy} strategy has no known MCP status output, so nothing could report it "
                "attached")
    return None


# Passthrough strategies whose CLI reports its own MCP status (an agent module's `plan_report`, agentctl/agent/clis/):
# the spec is pure and below the agent layer, so it keeps this copy; tests/agent/test_agent_modules.py holds it equal.
REPORTING_STRATEGIES = ("claude", "codex", "opencode")


def spec_schema() -> dict[str, object]:
    """The spec's JSON Schema, generated from the structs above (so it cannot drift from what `run` accepts):
    msgspec's schema, with unknown keys refused in every table as the loader refuses them. The checks made in
    code (identifier shapes, bounds, one transport's fields) are not in it: `agentctl spec check` makes them."""
    schema = msgspec.json.schema(Spec)
    for definition in schema.get("$defs", {}).values():
        if definition.get("type") == "object":
            definition["additionalProperties"] = False
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "agentctl execution spec"
    return schema


# A field path step as msgspec writes it: `.name`, `[3]` or `[...]` (a dict key).
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(?:\d+|\.\.\.)\]")


def allowed_values(path: str) -> list[str] | None:
    """The values the enum (a Literal) at msgspec's field path `path` accepts, read from the Spec's own
    types (so every enum field gets them, present and future); None when the path is not an enum."""
    info: msgspec.inspect.Type = msgspec.inspect.type_info(Spec)
    for match in _STEP.finditer(path.removeprefix("$")):
        info = _without_none(info)
        name = match.group(1)
        if name is not None and isinstance(info, msgspec.inspect.StructType):
            found = [f.type for f in info.fields if f.encode_name == name]
            if not found:
                return None
            info = found[0]
        elif name is None and isinstance(info, (msgspec.inspect.ListType, msgspec.inspect.SetType)):
            info = info.item_type
        elif name is None and isinstance(info, msgspec.inspect.DictType):
            info = info.value_type
        else:
            return None
    info = _without_none(info)
    members = info.types if isinstance(info, msgspec.inspect.UnionType) else (info,)
    values = [str(v) for m in members if isinstance(m, msgspec.inspect.LiteralType) for v in m.values]
    return values or None


def _without_none(info: msgspec.inspect.Type) -> msgspec.inspect.Type:
    if isinstance(info, msgspec.inspect.UnionType):
        rest = [t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
        if len(rest) == 1:
            return rest[0]
    return info


def _check_listen(listen: str, source: str) -> None:
    host, sep, port = listen.rpartition(":")
    # isdigit() alone admits other scripts' digits and superscripts, which int() refuses or misreads.
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        raise spec_error(source, "mcp.listen", "must be HOST:PORT with a numeric port (0 picks a free one)")
    if host.strip("[]") not in ("127.0.0.1", "::1", "localhost"):
        raise spec_error(source, "mcp.listen", "must be a loopback address (127.0.0.1, ::1 or localhost)")


def _check_url(url: str, where: str, source: str) -> None:
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises on a bad port
    except ValueError:
        raise spec_error(source, where, "is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise spec_error(source, where, "must use http or https")
    if not parts.hostname:
        raise spec_error(source, where, "has no host")


def listen_address(spec: Spec) -> tuple[str, int]:
    host, _, port = spec.mcp.listen.rpartition(":")
    return host.strip("[]"), int(port)


def secret_values(spec: Spec) -> list[str]:
    """Every value in the spec that must never appear in a report, frame or log: the redaction list.

    Header and env values, command arguments, and the user info, path (and its segments), query (and its
    values) and fragment of server URLs, but not a URL whole: its scheme and host are the reported target.
    The registry (agentctl.evidence.secret_registry) adds each value's parts and applies the minimum lengths.
    """
    values: list[str] = []
    if spec.agent is not None:
        values.extend(spec.agent.env.values())
        values.extend(spec.agent.command[1:])
    for server in spec.mcp.servers:
        values.extend(server.headers.values())
        values.extend(server.env.values())
        values.extend(server.args)
        if server.url:
            values.extend(url_parts(server.url))
    return [v for v in values if v]


def secret_registry(spec: Spec) -> SecretRegistry:
    """The registry of `secret_values` with their parts, and the parts of each server URL (its path
    segments and query values among them). What every report shows anyway (each server's name, its
    target's host, the agent's and servers' executable names) is public: no fragment inside it is redacted."""
    registry = SecretRegistry(secret_values(spec))
    for server in spec.mcp.servers:
        registry.add_public(server.name)
        if server.url:
            registry.add_parts(server.url)
            registry.add_public(target_for_url(server.url).partition("://")[2])
        if server.program:
            registry.add_public(target_for_command(server.program))
    if spec.agent is not None and spec.agent.command:
        registry.add_public(target_for_command(spec.agent.command[0]))
    return registry
