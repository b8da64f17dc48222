"""agentctl-reference-agent: a real ACP agent (ACP SDK, stdio) that really uses delivered MCP servers.

On `session/new` and `session/load` it connects to each delivered MCP server with the MCP
SDK client (http: streamable HTTP with the given headers; sse: SSE with headers; stdio:
command/args/env), initializes (legacy era, or adopts 2026-07-28 with `--modern`), lists
tools and keeps the sessions open. On a prompt it calls a harmless read tool on the
built-in server (named by `--builtin-name`, default "kandev") and answers with an
`agent_message_chunk` quoting the result; `CALL <tool> <json-args>` calls that tool.

Modes, as flags or in `AGENTCTL_REF_MODE` (comma list; valued ones as `name=value`,
e.g. `lazy,strict,crash-after=5`): ignore-mcp, lazy, strict, modern, sse-only,
no-mcp-capabilities, stdio-only (the same, named for what it models: agentctl bridges the built-in server), crash-after=S, crash-before-initialize, delay-initialize=S, flood-stderr=MB,
garbage-stdout, hang-on-shutdown, fork-grandchildren, stubborn-grandchildren, request-permission,
refuse-auth, send-notice, stray-notices, hostile-echo, passthrough=claude|codex, builtin-name=NAME, connect-timeout=S, call-timeout=S. In
passthrough mode `--prompt TEXT` chooses the call (`CALL <tool> <json-args>`), as a prompt does over ACP.
send-notice sends, during session/new, an ACP session notice naming the last delivered server with its full
URL and a header value in its text (deliberately: what agentctl must redact before keeping it).
stray-notices sends two more, before it: one without a session id and one naming a session that does not exist.
hostile-echo echoes every secret it was handed (its *SECRET env values, delivered header credentials and env
values) in every mangled form of agentctl.testing.secret_forms: in its agent name, notices, stderr and a
refused session/load (agentctl.testing._hostile_echo).

stdout carries only ACP frames (plus, in garbage-stdout mode, deliberate non-JSON lines);
diagnostics go to stderr and never contain header values, env values or URL queries.
Exit codes: 0 normal shutdown (stdin EOF or SIGTERM), 2 crash-before-initialize or a
usage error, 3 crash-after, 1 passthrough strict failure or an internal error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field, fields
from typing import Any, cast

from agentctl import __version__

AGENT_NAME = "agentctl-reference-agent"  # also in _ref_mcp (no import cycle)
ENV_MODE = "AGENTCTL_REF_MODE"
ENV_PIDFILE = "AGENTCTL_REF_PIDFILE"
log = logging.getLogger("agentctl.reference_agent")


@dataclass
class Options:
    ignore_mcp: bool = False
    lazy: bool = False
    strict: bool = False
    modern: bool = False
    sse_only: bool = False
    no_mcp_capabilities: bool = False
    stdio_only: bool = False
    crash_after: float | None = None
    crash_before_initialize: bool = False
    delay_initialize: float = 0.0
    flood_stderr: float = 0.0
    garbage_stdout: bool = False
    hang_on_shutdown: bool = False
    fork_grandchildren: bool = False
    stubborn_grandchildren: bool = False
    request_permission: bool = False
    refuse_auth: bool = False
    send_notice: bool = False
    hostile_echo: bool = False
    stray_notices: bool = False
    passthrough: str | None = None
    builtin_name: str = "kandev"
    connect_timeout: float = 10.0
    call_timeout: float = 30.0
    prompt: str | None = None
    extra: list[str] = field(default_factory=list)

    @property
    def advertise_http(self) -> bool:
        return not (self.no_mcp_capabilities or self.stdio_only or self.sse_only)

    @property
    def advertise_sse(self) -> bool:
        return not (self.no_mcp_capabilities or self.stdio_only)


_VALUED = {"crash_after": float, "delay_initialize": float, "flood_stderr": float, "passthrough": str,
           "builtin_name": str, "connect_timeout": float, "call_timeout": float}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=AGENT_NAME, allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--ignore-mcp", action="store_true", help="never connect to delivered MCP servers")
    p.add_argument("--lazy", action="store_true", help="connect on the first prompt instead of session/new")
    p.add_argument("--strict", action="store_true", help="fail session/new naming any unreachable server")
    p.add_argument("--modern", action="store_true", help="use the 2026-07-28 (modern-era) MCP client")
    p.add_argument("--sse-only", action="store_true", help="advertise only sse in mcpCapabilities")
    p.add_argument("--no-mcp-capabilities", action="store_true", help="advertise neither http nor sse")
    p.add_argument("--stdio-only", action="store_true",
                   help="a stdio-only MCP agent (as Auggie, pi-acp): advertise neither http nor sse, spawn stdio servers")
    p.add_argument("--crash-after", type=float, metavar="SECONDS", help="exit 3 after SECONDS")
    p.add_argument("--crash-before-initialize", action="store_true", help="exit 2 before reading anything")
    p.add_argument("--delay-initialize", type=float, metavar="SECONDS", help="answer initialize SECONDS late")
    p.add_argument("--flood-stderr", type=float, metavar="MB", help="write MB megabytes to stderr at startup")
    p.add_argument("--garbage-stdout", action="store_true", help="write non-JSON lines to stdout between frames")
    p.add_argument("--hang-on-shutdown", action="store_true", help="ignore SIGTERM and stdin EOF")
    p.add_argument("--fork-grandchildren", action="store_true", help=f"spawn 2 sleepers (one setsid); pids to ${ENV_PIDFILE}")
    p.add_argument("--stubborn-grandchildren", action="store_true",
                   help="fork-grandchildren whose sleepers ignore SIGTERM (one setsid, one double-forked orphan)")
    p.add_argument("--request-permission", action="store_true", help="ask the client's permission on every prompt")
    p.add_argument("--refuse-auth", action="store_true",
                   help="refuse session/new as an agent with no credentials does (auth-style lines on stderr first)")
    p.add_argument("--send-notice", action="store_true",
                   help="during session/new, send an ACP session notice naming a server (its URL and a header value in the text)")
    p.add_argument("--hostile-echo", action="store_true",
                   help="echo every handed secret, mangled every way, in its name, notices, stderr and a refused load")
    p.add_argument("--stray-notices", action="store_true",
                   help="with --send-notice, first one notice without a session id and one naming no session")
    p.add_argument("--passthrough", choices=["claude", "codex"], help="not ACP: read that CLI's MCP config")
    p.add_argument("--builtin-name", help="name of the built-in MCP server (default kandev)")
    p.add_argument("--connect-timeout", type=float, metavar="SECONDS", help="per-server connect timeout (10)")
    p.add_argument("--call-timeout", type=float, metavar="SECONDS", help="per-call timeout (30)")
    p.add_argument("--prompt", help="passthrough mode: the prompt text (e.g. 'CALL tool {}')")
    return p


def parse_options(argv: list[str], environ: dict[str, str] | None = None) -> Options:
    """Flags plus `AGENTCTL_REF_MODE`; flags win for valued options. Unknown argv is kept in `extra`."""
    parser = _parser()
    ns, extra = parser.parse_known_args(argv)
    opts = Options(extra=extra)
    names = {f.name for f in fields(Options)}
    raw = (os.environ if environ is None else environ).get(ENV_MODE, "")
    for item in filter(None, (s.strip() for s in raw.split(","))):
        key, sep, value = item.partition("=")
        attr = key.strip().lower().replace("-", "_")
        if attr not in names or attr in ("extra", "prompt"):
            parser.error(f"{ENV_MODE}: unknown mode {key!r}")
        if attr in _VALUED:
            if not sep:
                parser.error(f"{ENV_MODE}: mode {key!r} needs a value ({key}=...)")
            try:
                setattr(opts, attr, _VALUED[attr](value.strip()))
            except ValueError:
                parser.error(f"{ENV_MODE}: bad value for {key!r}")
        else:
            setattr(opts, attr, True)
    for f in fields(Options):
        given = getattr(ns, f.name, None)
        if given not in (None, False):
            setattr(opts, f.name, given)
    if opts.passthrough not in (None, "claude", "codex"):
        parser.error("passthrough must be claude or codex")
    return opts


# ---------------------------------------------------------------- startup side effects


def _setup_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("reference-agent: %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)  # SDK loggers (httpx request lines, session ids) stay quiet
    log.setLevel(logging.INFO)


def _flood_stderr(megabytes: float) -> None:
    total = int(megabytes * 1024 * 1024)
    line = b"reference-agent flood-stderr " + b"x" * 98 + b"\n"  # 128 bytes
    chunk = line * 8192  # 1 MiB

    def run() -> None:
        left = total
        try:
            while left > 0:
                n = os.write(2, chunk[: min(left, len(chunk))])
                left -= n
        except OSError:
            return

    threading.Thread(target=run, name="flood-stderr", daemon=True).start()


def _crash_after(seconds: float) -> None:
    def fire() -> None:
        with contextlib.suppress(Exception):
            os.write(2, f"reference-agent: crash-after: exiting with code 3 after {seconds:g}s\n".encode())
        os._exit(3)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


_STUBBORN_SLEEPER = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.pause()"
# A classic daemon: setsid, fork, the middle exits at once; the grandchild (SIGTERM ignored) prints its pid.
_DAEMONIZED = (
    "import os, signal, sys\n"
    "os.setsid()\n"
    "if os.fork() == 0:\n"
    "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "    print(os.getpid(), flush=True)\n"
    "    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)\n"
    "    signal.pause()\n"
)


def _fork_grandchildren(stubborn: bool = False) -> list[int]:
    """Two sleepers inheriting stdout/stderr (stdin from /dev/null); the second in its own session.
    Stubborn: both ignore SIGTERM, and a third is a double-forked daemon re-parented away from us."""
    sleep = shutil.which("sleep")
    cmd = [sleep, "3600"] if sleep else [sys.executable, "-c", "import time; time.sleep(3600)"]
    if stubborn:
        cmd = [sys.executable, "-c", _STUBBORN_SLEEPER]
    a = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    b = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)
    pids = [a.pid, b.pid]
    if stubborn:
        daemon = subprocess.run([sys.executable, "-c", _DAEMONIZED], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, text=True, check=True)
        pids.append(int(daemon.stdout.split()[0]))
    pidfile = os.environ.get(ENV_PIDFILE)
    if pidfile:
        tmp = f"{pidfile}.tmp"
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write("".join(f"{p}\n" for p in pids))
        os.replace(tmp, pidfile)
    log.info("forked grandchildren %s (second with setsid)", pids)
    return pids


# ---------------------------------------------------------------- runners


_LINE_LIMIT = 50 * 1024 * 1024


class _FdWriteTransport(asyncio.WriteTransport):
    """Blocking writes to fd 1, for when stdout is a regular file."""

    def __init__(self) -> None:
        super().__init__()
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(bytes(data))
        while view and not self._closing:
            view = view[os.write(1, view):]

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


def _file_stdio_streams() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_LINE_LIMIT)

    def feed() -> None:
        try:
            while data := os.read(0, 65536):
                loop.call_soon_threadsafe(reader.feed_data, data)
        except OSError:
            pass
        loop.call_soon_threadsafe(reader.feed_eof)

    threading.Thread(target=feed, name="stdin-feeder", daemon=True).start()
    protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader())
    writer = asyncio.StreamWriter(_FdWriteTransport(), protocol, None, loop)
    return reader, writer


async def _run_acp(opts: Options) -> int:
    import acp

    from agentctl.testing._acp_agent import ReferenceAgent

    try:
        reader, writer = await acp.stdio_streams(limit=_LINE_LIMIT)
    except ValueError:  # stdin/stdout is a regular file: asyncio pipe transports refuse those
        reader, writer = _file_stdio_streams()
    agent = ReferenceAgent(opts, writer)
    agent.garbage("reference-agent garbage-stdout: startup line, not JSON")
    main_task = asyncio.current_task()
    loop = asyncio.get_running_loop()

    stopping = False

    def on_signal(sig: signal.Signals) -> None:
        nonlocal stopping
        stopping = True
        log.info("%s: shutting down", sig.name)
        if main_task is not None:
            main_task.cancel()

    if not opts.hang_on_shutdown:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
    ticker = asyncio.create_task(agent.garbage_ticker()) if opts.garbage_stdout else None
    try:
        # The SDK dispatches to whichever agent methods exist (a missing one answers -32601), while its Agent
        # Protocol lists every method: the reference agent leaves some out on purpose.
        await acp.run_agent(agent, writer, reader, use_unstable_protocol=True)  # type: ignore[arg-type]
        if not stopping:
            log.info("stdin closed")
        if opts.hang_on_shutdown:
            log.info("hang-on-shutdown: ignoring stdin EOF and SIGTERM")
            await asyncio.Event().wait()
    except asyncio.CancelledError:
        pass
    finally:
        if ticker:
            ticker.cancel()
        await asyncio.shield(agent.shutdown())
    return 0


async def _run_passthrough(opts: Options) -> int:
    from agentctl.testing import _ref_mcp as M
    from agentctl.testing import _ref_passthrough as P

    argv = opts.extra
    try:
        entries = P.parse_claude_args(argv) if opts.passthrough == "claude" else P.parse_codex_args(argv)
    except (OSError, ValueError, AttributeError) as exc:  # unreadable file, bad JSON, wrong shape
        log.error("passthrough %s: cannot read MCP configuration: %s", opts.passthrough, type(exc).__name__)
        return 1
    log.info("passthrough %s: %d MCP servers configured", opts.passthrough, len(entries))
    summary: dict[str, Any] = {"agent": AGENT_NAME, "version": __version__, "passthrough": opts.passthrough}
    conns: dict[str, Any] = {}
    failures: list[Any] = []
    if not opts.ignore_mcp:
        conns, failures = await M.connect_all(
            entries, modern=opts.modern, client_name=M.AGENT_NAME, client_version=__version__,
            connect_timeout=opts.connect_timeout, call_timeout=opts.call_timeout,
        )
    servers = []
    for e in entries:
        item: dict[str, Any] = {"name": e.name, "transport": e.transport, "connected": e.name in conns}
        if e.name in conns:
            item["tools"] = conns[e.name].tool_names()
        fail = next((f for f in failures if f.name == e.name), None)
        if fail:
            item["error"] = fail.reason
        servers.append(item)
    summary["servers"] = servers
    if opts.passthrough == "claude" and P.wants_stream_json(argv):
        sys.stdout.write(P.claude_init_line(servers) + "\n")  # Claude Code's first stream-json line
        sys.stdout.flush()
    if conns:
        summary["call"] = await M.perform_turn(conns, opts.builtin_name, opts.prompt or "")
    else:
        summary["call"] = None
    sys.stdout.write(json.dumps(summary, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    try:
        if opts.strict and failures:
            return 1
        await _wait_stdin_eof_or_term(opts.hang_on_shutdown)
        return 0
    finally:
        await M.close_all(conns.values())


async def _wait_stdin_eof_or_term(hang: bool) -> None:
    loop = asyncio.get_running_loop()
    done = asyncio.Event()

    def read_stdin() -> None:
        # A BufferedReader at run time (typeshed says BinaryIO, which has no read1).
        stdin = cast(io.BufferedReader, sys.stdin.buffer)
        with contextlib.suppress(Exception):
            while stdin.read1(65536):
                pass
        loop.call_soon_threadsafe(done.set)

    threading.Thread(target=read_stdin, name="stdin-eof", daemon=True).start()
    if not hang:
        loop.add_signal_handler(signal.SIGTERM, done.set)
        loop.add_signal_handler(signal.SIGINT, done.set)
    await done.wait()
    if hang:
        log.info("hang-on-shutdown: ignoring stdin EOF and SIGTERM")
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    opts = parse_options(sys.argv[1:] if argv is None else argv)
    if opts.crash_before_initialize:
        os.write(2, b"reference-agent: crash-before-initialize: exiting with code 2\n")
        os._exit(2)
    _setup_logging()
    if opts.hang_on_shutdown:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if opts.flood_stderr:
        _flood_stderr(opts.flood_stderr)
    if opts.crash_after is not None:
        _crash_after(opts.crash_after)
    if opts.fork_grandchildren or opts.stubborn_grandchildren:
        _fork_grandchildren(opts.stubborn_grandchildren)
    if opts.extra and not opts.passthrough:
        log.warning("ignoring unknown arguments (%d)", len(opts.extra))
    runner = _run_passthrough if opts.passthrough else _run_acp
    try:
        return asyncio.run(runner(opts))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
