"""The canary scenario: plant unique canaries everywhere a secret can enter, run one whole execution with
real parts, and keep every sink's bytes for the tests to search.

Real parts: `agentctl hub serve`, `agentctl serve` with the reference agent behind a wrapper that writes a
canary to stderr and, asked to load a session, refuses with an error echoing each part of every secret it
was handed (fixtures/echo_agent.py), a real third-party MCP server (MCPServer on uvicorn, streamable HTTP
and SSE), a real stdio MCP server, servers that refuse initialize echoing what they received (over HTTP and
over stdio), the `agentctl` CLI as subprocesses, and a recording relay (real Unix sockets) between the
daemon and the hub that keeps every upstream frame.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, unquote

import aiohttp
import psutil
from mcp.server import MCPServer

from tests.conftest import REPO, agentctl_cmd, eventually, serve_asgi
from tests.diagnostics.conftest import (
    FIXTURES,
    PY,
    Seen,
    _recording,
    build_server,
    http_server,
    plain_app,
    spec_text,
    stdio_server,
)
from tests.diagnostics.fixtures.noisy_agent import STDERR_CANARY
from tests.upstream.procs import start_daemon, start_hub
from tests.upstream.support import Relay

EXECUTION = "exec-canary"

# Each canary's core is an alphanumeric run with non-hex letters: every textual encoding keeps it whole
# (raw, URL-quoted, JSON-escaped, shell-quoted), and no random id or token can contain it by chance.
# The decorations around some cores make quoting and escaping actually change the value.
SPEC = {
    "header": "cnryHDRqk",                  # Authorization: Bearer ...
    "header2": "cnryKEYzw key/+x",          # X-Api-Key (space, slash, plus)
    "user": "cnryUSRvj",                    # URL user info
    "password": "cnryPWDxq%2Fslash",        # URL user info, percent-encoded as a URL carries it
    "path": "cnryPTHgk",                    # URL path segment
    "query": "cnryQRYwz%20sp",              # URL query value, percent-encoded
    "sse_header": "cnrySSEHjq",
    "sse_query": "cnrySSEQvx",
    "dead_path": "cnryDPTHkz",
    "dead_query": "cnryDQRYjw",
    "refuse_user": "cnryRUSRkq",             # a server that refuses initialize, quoting what it received
    "refuse_password": "cnryRPWDzx",
    "refuse_path": "cnryRPTHwv",
    "refuse_query": "cnryRQRYkj",
    "refuse_key": "cnryRKEYxz",
    "server_env": "cnrySENVqz ü/\"q\"",      # stdio server env (the fixture prints it on its stderr)
    "server_arg": "--cnrySARGkx",
    "agent_env": "cnryAENVwj ü",
    "agent_arg": "--canary-cnryAARGzq",
    "agent_flag": "--api-token=cnryAFLGvw",  # the agent echoes the value after '=' alone
    "fragment": "cnryFRAGzk",                 # a URL fragment (the dead server's)
    "refuse_env": "cnryRENVqk Ä",             # a stdio server that refuses initialize echoing its env...
    "refuse_flag": "--key=cnryRFLGwz",        # ...and the value of its --flag=value argument
}
# The parts the echoing agent and the refusing servers quote on their own, as given and case-swapped
# (each is also the core of a SPEC canary, so every sink search looks for it, in any case).
PARTS = {
    "bearer token": SPEC["header"], "header word": SPEC["header2"].split()[0], "url user": SPEC["user"],
    "url password": unquote(SPEC["password"]), "url path segment": SPEC["path"],
    "url query value": unquote(SPEC["query"]), "url fragment": SPEC["fragment"],
    "server env": SPEC["server_env"], "agent env": SPEC["agent_env"],
    "agent flag value": SPEC["agent_flag"].split("=", 1)[1], "server flag value": SPEC["refuse_flag"].split("=")[1],
    "refusing server env": SPEC["refuse_env"],
}
ECHO_AGENT = Path(__file__).parent / "fixtures" / "echo_agent.py"
REFUSING_STDIO = Path(__file__).parent / "fixtures" / "refusing_stdio_server.py"
PROMPT = "cnryPRMTkv ü"                       # prompt text that is no tool call
TOOL_ARG = "cnryTARGqj ü/\"q\""               # a built-in tool's argument; the tunnel carries it to the hub
TP_ARG = "cnryTPARGxk"                        # a third-party tool's argument
TP_RESULT = "cnryTPRESzv"                     # a third-party tool's result
STDERR = STDERR_CANARY                        # the wrapper's first stderr line

ALL = {**SPEC, "prompt": PROMPT, "tool_arg": TOOL_ARG, "tp_arg": TP_ARG, "tp_result": TP_RESULT, "stderr": STDERR}


def _b64_aligned(data: bytes) -> set[bytes]:
    """The part of base64(... + data + ...) fixed by `data` alone, at each of the three byte alignments."""
    found = set()
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + data)
        inner = enc[4 if pad else 0: -4]
        for alphabet in (inner, inner.replace(b"+", b"-").replace(b"/", b"_")):
            if len(alphabet) >= 8:
                found.add(alphabet)
    return found


def _text_forms(value: str) -> set[bytes]:
    texts = {value, unquote(value), quote(value, safe=""), quote_plus(value), json.dumps(value)[1:-1],
             json.dumps(value, ensure_ascii=False)[1:-1]}
    # The core: the value's first word, before any percent-escape, after any '=' (what an echo quotes alone).
    texts.add(value.lstrip("-").split(" ")[0].split("%")[0].split("=")[-1])
    return {t.encode() for t in texts}


def forms(value: str) -> set[bytes]:
    """What a leak of `value` looks like: raw, URL-decoded and -quoted, JSON-escaped, its core, base64 at
    any alignment."""
    texts = _text_forms(value)
    return texts | {b for t in texts for b in _b64_aligned(t)}


def hits(data: bytes, canaries: dict[str, str]) -> list[str]:
    """The names of the canaries found in `data`, in any of their forms: text forms in any letter case (an
    echo may change it), base64 forms as they are (their case is their content)."""
    folded = data.decode("utf-8", "replace").lower()
    found = []
    for name, value in canaries.items():
        texts = _text_forms(value)
        encoded = {b for t in texts for b in _b64_aligned(t)}
        if any(t.decode().lower() in folded for t in texts) or any(b in data for b in encoded):
            found.append(name)
    return found


@dataclass
class Sinks:
    """Everything the scenario left behind, by sink; CLI outputs keyed by their command line."""

    cli: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)   # every file under the run dir: "path@phase" -> bytes
    frames: list[tuple[str, bytes]] = field(default_factory=list)
    web: dict[str, str] = field(default_factory=dict)       # the hub page's API answers, by route
    tokens: dict[str, str] = field(default_factory=dict)    # bearer tokens: the attempts' and the hub page's
    seen: Seen = field(default_factory=Seen)                 # what the third-party server received
    agent_environ: dict[str, str] = field(default_factory=dict)  # the running agent's environment


def _third_party() -> MCPServer:
    server = build_server()

    @server.tool()
    async def lookup(key: str) -> str:
        """Look a key up."""
        return f"{key} is {TP_RESULT}"

    return server


def _refusing_app() -> Any:
    """An HTTP server that answers every JSON-RPC request (initialize first) with an error quoting the
    request's path, query and credentials back, as a careless server does. Hand-written: a real MCPServer
    cannot refuse initialize with a message of its choosing. The daemon keeps the message (redacted) in
    the endpoint test's failure summary, so this is where a server's words could carry a secret in."""
    lifespan = plain_app(200, b"")

    async def app(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await lifespan(scope, receive, send)
        body = b""
        while (message := await receive())["type"] == "http.request":
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        text = (f"refused {scope['method']} {scope['path']}?{scope['query_string'].decode()} "
                f"(authorization: {headers.get('authorization')}; x-api-key: {headers.get('x-api-key')})")
        request_id = json.loads(body).get("id") if body.strip() else None
        answer = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32001, "message": text}})
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer.encode()})

    return app


def _toml_table(values: dict[str, str]) -> str:
    return "{" + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in values.items()) + "}"


def _spec(state: Path, port: int, sse_port: int, refusing_port: int) -> bytes:
    c = SPEC
    # User info on the SSE server only: httpx turns it into Basic credentials, which would win over the
    # http server's stored Authorization header (and hide whether that one reached the server).
    servers = http_server("web", f"http://127.0.0.1:{port}/{c['path']}/mcp?key={c['query']}",
                          headers=_toml_table({"Authorization": f"Bearer {c['header']}", "X-Api-Key": c["header2"]}))
    servers += http_server("events",
                           f"http://{c['user']}:{c['password']}@127.0.0.1:{sse_port}/sse?sig={c['sse_query']}",
                           "sse", headers=_toml_table({"X-Api-Key": c["sse_header"]}))
    servers += http_server(
        "refusing",
        f"http://{c['refuse_user']}:{c['refuse_password']}@127.0.0.1:{refusing_port}/{c['refuse_path']}/mcp"
        f"?k={c['refuse_query']}",
        headers=_toml_table({"X-Api-Key": c["refuse_key"]}),
    )
    servers += http_server("dead", f"http://127.0.0.1:1/{c['dead_path']}/mcp?t={c['dead_query']}#{c['fragment']}")
    servers += stdio_server("local", "stdio_server.py", c["server_arg"],
                            env=_toml_table({"SERVER_SECRET": c["server_env"]}))
    servers += stdio_server("refusing-local", str(REFUSING_STDIO), c["refuse_flag"],
                            env=_toml_table({"SERVER_SECRET": c["refuse_env"]}))
    agent = f"""
[agent]
command = {json.dumps([PY, str(ECHO_AGENT), c['agent_arg'], c['agent_flag']])}
env = {_toml_table({"AGENT_SECRET": c["agent_env"]})}
"""
    upstream = f'\n[upstream]\nsocket = "{state.parent / "relay.sock"}"\n'
    return spec_text(state, servers, agent + upstream, execution_id=EXECUTION)


class _Cli:
    """Runs `agentctl` as a subprocess and keeps each output (stdout and stderr) by its command line."""

    def __init__(self, sinks: Sinks, sock: Path, root: Path) -> None:
        self.sinks, self.sock, self.root = sinks, sock, str(root)

    async def __call__(self, *argv: str, ok: tuple[int, ...] = (0,), control: bool = True) -> str:
        full = [*argv, "--socket", str(self.sock)] if control else list(argv)
        proc = await asyncio.to_thread(subprocess.run, agentctl_cmd(*full), capture_output=True, text=True,
                                       cwd=REPO, timeout=90)
        assert proc.returncode in ok, (argv, proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
        key = " ".join(argv).replace(self.root, "<run>")
        while key in self.sinks.cli:
            key += " (again)"
        self.sinks.cli[key] = proc.stdout + proc.stderr
        return proc.stdout


def _collect(root: Path, phase: str, sinks: Sinks) -> None:
    for path in sorted(root.rglob("*")):
        try:
            if path.is_file() and not path.is_socket():
                sinks.files[f"{path.relative_to(root)}@{phase}"] = path.read_bytes()
        except FileNotFoundError:  # a journal or temporary file gone between listing and reading
            continue


async def _attempt_token(cli: _Cli) -> str:
    return json.loads(await cli("mcp-config", "--json"))["headers"]["Authorization"].split()[-1]


async def _hub_page(base: str, token: str, sinks: Sinks, again: bool = False) -> None:
    """The hub page's API: every view of the session, and the two upstream requests (endpoint test, agent
    output); `again`: the views only, after the echo (whose failed attempt has no tool catalog)."""
    session = "api/sessions/session-1/"
    gets = ["api/status", session + "history", session + "tools", session + "tools/get_task", session + "diagnostics"]
    posts = [(session + "test-endpoint", {"server": name}) for name in ("web", "events", "refusing", "dead", "local")]
    posts.append((session + "agent-output", None))
    if again:
        gets, posts = [route for route in gets if "get_task" not in route], []
    async with aiohttp.ClientSession(base, headers={"Authorization": f"Bearer {token}"},
                                     timeout=aiohttp.ClientTimeout(total=60)) as http:
        for route, body in [(r, None) for r in gets] + posts:
            method = "GET" if route in gets else "POST"
            async with http.request(method, "/" + route, json=body) as resp:
                assert resp.status == 200, (route, resp.status, await resp.text())
                key = f"{method} {route} {json.dumps(body) if body else ''}".rstrip()
                sinks.web[key + (" (after the echo)" if again else "")] = await resp.text()


def _agent_environ(daemon_pid: int) -> dict[str, str]:
    for child in psutil.Process(daemon_pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            environ = child.environ()
            if "AGENT_SECRET" in environ:
                return environ
    return {}


async def _drive(cli: _Cli, sinks: Sinks, daemon_pid: int) -> None:
    """The execution: session, prompts and tool calls, reset, endpoint tests, every read-only command."""
    await cli("session", "new")
    sinks.agent_environ = _agent_environ(daemon_pid)
    for text in (
        f"summarise the task for {PROMPT}",
        "CALL post_task_message " + json.dumps({"text": f"note {TOOL_ARG}"}),
        "CALL get_task {}",  # its result quotes the message: a tool-result canary, through the tunnel
        "CALL web__lookup " + json.dumps({"key": TP_ARG}),
    ):
        await cli("prompt", text, "--timeout", "60")
    sinks.tokens["attempt 1 token"] = await _attempt_token(cli)
    await cli("stderr")
    await cli("session", "reset")
    sinks.tokens["attempt 2 token"] = await _attempt_token(cli)
    for name in ("web", "events", "local", "kandev"):
        await cli("test-endpoint", name, "--timeout", "20")
    await cli("test-endpoint", "dead", "--timeout", "20", ok=(3,))
    await cli("test-endpoint", "refusing", "--timeout", "20", ok=(3,))
    await cli("test-endpoint", "refusing-local", "--timeout", "20", ok=(3,))
    await cli("test-endpoint", "web", "--json", "--timeout", "20")
    await cli("test-endpoint", "refusing", "--json", "--timeout", "20", ok=(3,))
    await cli("test-endpoint", "refusing-local", "--json", "--timeout", "20", ok=(3,))
    await _read_everything(cli)
    await cli("tools", "get_task")
    await cli("health", "--ready")
    await cli("stderr", "--json")


def _malformed_http(address: tuple[int, object], route: str, token: str) -> None:
    """Requests aiohttp's parser refuses, quoting `token` in what it complains about (a header padded past
    the line limit; a control character in a header), sent as raw bytes over a real socket."""
    requests = (
        f"GET {route} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}".encode() + b"A" * 9000 + b"\r\n\r\n",
        f"GET {route} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token[:9]}\x01{token[9:]}\r\n\r\n".encode(),
    )
    for data in requests:
        with socket.socket(address[0], socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(address[1])
            sock.sendall(data)
            assert sock.recv(100).startswith(b"HTTP/1.0 400"), route


async def _echo(cli: _Cli) -> None:
    """Last: the agent refuses a session/load echoing every part of every secret it holds; that failed
    attempt (now current) is what every read-only view shows the second time."""
    acp_session = json.loads(await cli("report", "--json"))["current"]["acp_session_id"]
    await cli("session", "load", acp_session, ok=(1,))
    await _read_everything(cli)
    await cli("stderr")


async def _read_everything(cli: _Cli) -> None:
    for argv in (("diagnostics",), ("status",), ("report",), ("tools",), ("health",)):
        await cli(*argv)
        await cli(*argv, "--json")


async def run(root: Path, spec_dir: Path) -> Sinks:
    sinks = Sinks()
    server = _third_party()
    async with serve_asgi(_recording(server.streamable_http_app(), sinks.seen, "/mcp")) as port, \
            serve_asgi(_recording(server.sse_app(), sinks.seen, None)) as sse_port, \
            serve_asgi(_refusing_app()) as refusing_port:
        spec = spec_dir / "spec.toml"
        spec.write_bytes(_spec(root / "state", port, sse_port, refusing_port))
        db = str(root / "hub.sqlite3")  # where start_hub keeps it
        hub = await asyncio.to_thread(start_hub, root, "hub", ("--http", "127.0.0.1:0"))
        sinks.tokens["hub page token"] = hub.ready["page"].split("#token=", 1)[1]
        relay, daemon = Relay(root / "relay.sock", root / "hub.sock"), None
        try:
            await relay.start()
            daemon = await asyncio.to_thread(start_daemon, root, spec)
            cli = _Cli(sinks, Path(daemon.ready["control_socket"]), root)
            await eventually(lambda: any(b'"snapshot"' in line for _, line in relay.lines), 20, "the daemon upstream")
            await _drive(cli, sinks, daemon.pid)
            await _hub_page(hub.ready["http"], sinks.tokens["hub page token"], sinks)
            await _echo(cli)
            await eventually(lambda: any(b"session_rejected" in line for _, line in relay.lines), 20, "the echo upstream")
            await _hub_page(hub.ready["http"], sinks.tokens["hub page token"], sinks, again=True)
            # Malformed requests carrying the live tokens, on the MCP port, the control socket, the hub page.
            mcp_port = int(daemon.ready["mcp_url"].rsplit(":", 1)[1].split("/")[0])
            page_port = int(hub.ready["http"].rstrip("/").rsplit(":", 1)[1])
            for address, route, token in (
                ((socket.AF_INET, ("127.0.0.1", mcp_port)), "/mcp?k=1", sinks.tokens["attempt 2 token"]),
                ((socket.AF_UNIX, daemon.ready["control_socket"]), "/v1/status", sinks.tokens["attempt 2 token"]),
                ((socket.AF_INET, ("127.0.0.1", page_port)), "/api/status", sinks.tokens["hub page token"]),
            ):
                await asyncio.to_thread(_malformed_http, address, route, token)
            _collect(root, "daemon-running", sinks)  # the daemon's SQLite WAL and any temporary file
            await cli("stop")
            assert await asyncio.to_thread(daemon.popen.wait, 30) == 0
            await cli("report", "--state-dir", str(root / "state"), "--execution", EXECUTION, control=False)
            for argv in (("hub", "status"), ("hub", "report", "session-1")):
                await cli(*argv, "--db", db, control=False)
                await cli(*argv, "--db", db, "--json", control=False)
            _collect(root, "hub-running", sinks)  # the hub's WAL is still there
        finally:
            if daemon is not None:
                daemon.kill()
            relay.stop()
            await asyncio.to_thread(hub.stop)
        _collect(root, "after", sinks)
        sinks.frames = list(relay.lines)
    return sinks


def run_scenario() -> Sinks:
    with tempfile.TemporaryDirectory(prefix="actl-c-", dir="/tmp") as root, \
            tempfile.TemporaryDirectory(prefix="actl-spec-") as spec_dir:
        return asyncio.run(run(Path(root), Path(spec_dir)))
