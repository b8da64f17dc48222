"""Shared test helpers: the spec builder, daemon fixtures (a real `agentctl serve`, an in-process daemon),
deadline polling and short socket directories."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest
import tomli_w

if TYPE_CHECKING:
    from agentctl.daemon.app import Daemon
    from agentctl.evidence.contract.report import Identity
    from agentctl.spec import Spec

REPO = Path(__file__).resolve().parents[1]

# The machines that run the suite are shared and noisy, and the suite runs on every core: an example that is slow
# to run is not a failure of the code under test (a test that means a bound sets its own deadline).
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("agentctl", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("agentctl")


def poll(predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    """Poll with a deadline; returns the first truthy value or fails the test."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


async def eventually(predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition",
                     interval: float = 0.02):
    """The async twin of poll(): await a truthy predicate with a deadline; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):  # an async predicate (one that asks a server)
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


def free_socket() -> socket.socket:
    """A listening loopback socket on a free port (handed to a server, so no port race)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


@contextlib.asynccontextmanager
async def serve_asgi(app: Any) -> AsyncIterator[int]:
    """Serve an ASGI app (a real MCP server in tests) with uvicorn in this loop; yields the port."""
    import uvicorn
    from sse_starlette.sse import AppStatus

    AppStatus.should_exit = False  # process-global: a previous shutdown may have left it set
    sock = free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await eventually(lambda: server.started or task.done(), 10, "uvicorn to start")
    assert not task.done(), "uvicorn did not start"
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        AppStatus.should_exit = True  # or open SSE streams stall the shutdown
        try:
            await asyncio.wait_for(task, 10)
        finally:
            # Left set, it would end every later SSE response at once (a daemon's too).
            AppStatus.should_exit = False
            sock.close()


# ---- builders: a clock, an identity, an execution spec ------------------------------------------------


class StepClock:
    """A deterministic clock: every read is one second after the previous one."""

    def __init__(self) -> None:
        self.t = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.t += timedelta(seconds=1)
        return self.t


def identity(session: str = "session-1", execution: str = "exec-1", instance: str = "inst-1",
             task: str = "task-1") -> Identity:
    """The contract's Identity of a test daemon instance (agent-1, profile-1), any of its ids replaced."""
    from agentctl.evidence.contract.report import Identity

    return Identity(task_id=task, session_id=session, execution_id=execution, instance_id=instance,
                    agent_id="agent-1", agent_profile_id="profile-1")


SPEC_IDENTITY = {"task_id": "task-1", "session_id": "session-1", "agent_id": "agent-1", "agent_profile_id": "profile-1"}


def spec_toml(
    *,
    execution_id: str | None = "exec-test",
    identity: dict[str, str] | None = None,
    agent: list[str] | dict[str, Any] | None = None,
    mcp: dict[str, Any] | None = None,
    servers: list[dict[str, Any]] | None = None,
    policy: dict[str, Any] | None = None,
    upstream: str | Path | None = None,
    daemon: dict[str, Any] | None = None,
    state_dir: str | Path | None = None,
    extra: str = "",
) -> str:
    """An execution spec as TOML text, written from the spec's own field names.

    The structured part is checked against `agentctl.spec.Spec` (unknown fields are refused), so a renamed
    field breaks here, once, not in every test that writes a spec. `agent` is a command list or an [agent]
    table; `servers` are [[mcp.servers]] tables; `upstream` is the upstream socket. `extra` is TOML text
    appended verbatim after the [state] table: whole tables, or a test's deliberately broken spec text.
    """
    from agentctl.spec import Spec

    ident = {**SPEC_IDENTITY, **(identity or {})}
    if execution_id is not None:
        ident["execution_id"] = execution_id
    doc: dict[str, Any] = {"identity": ident}
    if agent is not None:
        doc["agent"] = {"command": list(agent)} if isinstance(agent, list) else dict(agent)
    if mcp is not None or servers:
        doc["mcp"] = {**(mcp or {}), **({"servers": list(servers)} if servers else {})}
    if policy is not None:
        doc["policy"] = policy
    if upstream is not None:
        doc["upstream"] = {"socket": str(upstream)}
    if daemon is not None:
        doc["daemon"] = daemon
    if state_dir is not None:
        doc["state"] = {"dir": str(state_dir)}  # last, as bare keys in `extra` have always landed in [state]
    msgspec.convert(doc, Spec)  # a field the spec does not have fails here, with its path
    return tomli_w.dumps(doc) + extra


def write_spec(tmp_path: Path, extra: str = "", *, state_dir: Path | None = None, name: str = "spec.toml",
               **fields: Any) -> Path:
    """spec_toml() written to `tmp_path/name`; the state directory defaults to `tmp_path/state`."""
    path = tmp_path / name
    path.write_text(spec_toml(state_dir=state_dir or (tmp_path / "state"), extra=extra, **fields))
    return path


# ---- a real daemon ------------------------------------------------------------------------------------


class ServeProcess:
    """A running `agentctl serve`: its ready line, socket, spec and (when started here) its drained stderr."""

    def __init__(self, proc: subprocess.Popen, ready: dict, spec: Path | None = None,
                 socket: Path | None = None) -> None:
        self.proc = proc
        self.ready = ready
        self.spec = spec
        self.socket = socket
        self._stderr: list[bytes] = []
        self._drain: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def port(self) -> int | None:
        """The MCP listener's port, from the ready line's URL."""
        url = self.ready.get("mcp_url")
        return urllib.parse.urlsplit(url).port if url else None

    def drain_stderr(self) -> None:
        """Read stderr on a thread (a chatty daemon never blocks on a full pipe); stderr_text() shows it."""
        def drain() -> None:
            for line in iter(self.proc.stderr.readline, b""):
                self._stderr.append(line)

        self._drain = threading.Thread(target=drain, name=f"stderr-{self.proc.pid}", daemon=True)
        self._drain.start()

    def stderr_text(self) -> str:
        """What the daemon logged so far (all of it once it has exited)."""
        if self._drain is not None and self.proc.poll() is not None:
            self._drain.join(timeout=10)
        return b"".join(self._stderr).decode(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def close(self, timeout: float = 20.0) -> None:
        """Stop whatever state it is in: SIGTERM, a bounded wait, then SIGKILL (and SIGCONT if stopped)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._drain is not None:
            self._drain.join(timeout=10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def agentctl_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentctl.cli", *args]


def spawn_serve(spec: Path, socket: Path, env: dict[str, str] | None = None,
                extra_args: tuple[str, ...] = ()) -> subprocess.Popen:
    """`agentctl serve SPEC --socket SOCKET` with stdout and stderr piped, not yet waited on."""
    return subprocess.Popen(
        agentctl_cmd("serve", str(spec), "--socket", str(socket), *extra_args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )


def await_ready(proc: subprocess.Popen, spec: Path | None = None, socket: Path | None = None) -> ServeProcess:
    """The daemon once its one ready line is on stdout; fails the test, with its stderr, if it exited first."""
    line = proc.stdout.readline()  # blocks until ready or exit
    if not line:
        err = proc.stderr.read().decode(errors="replace")
        proc.wait(timeout=10)
        pytest.fail(f"agentctl serve exited before ready ({proc.returncode}): {err}")
    return ServeProcess(proc, json.loads(line), spec, socket)


def start_serve(spec: Path, socket: Path, env: dict[str, str] | None = None, extra_args: tuple[str, ...] = ()) -> ServeProcess:
    """A real `agentctl serve`, ready, its stderr drained (the caller stops it; the `serve` fixture does)."""
    daemon = await_ready(spawn_serve(spec, socket, env, extra_args), spec, socket)
    daemon.drain_stderr()
    return daemon


@pytest.fixture
def serve(short_dir: Path) -> Iterator[Callable[..., ServeProcess]]:
    """Start real `agentctl serve` daemons: `serve(spec=None, socket=None, env=None, extra_args=(), **spec_fields)`.

    With no spec, one is written into short_dir from `spec_fields` (write_spec's); the socket defaults to a
    fresh name in short_dir. Each is ready (its ready line read) when returned, and each is stopped at the
    end of the test whatever state it is in (SIGTERM, bounded, then SIGKILL).
    """
    with contextlib.ExitStack() as stops:  # each one is closed, in reverse, even if one fails
        count = 0

        def start(spec: Path | None = None, socket: Path | None = None, env: dict[str, str] | None = None,
                  extra_args: tuple[str, ...] = (), **spec_fields: Any) -> ServeProcess:
            nonlocal count
            n, count = count, count + 1
            if spec is None:
                spec = write_spec(short_dir, name=f"spec-{n}.toml", **spec_fields)
            daemon = start_serve(spec, socket or short_dir / f"c{n}.sock", env, extra_args)
            stops.callback(daemon.close)
            return daemon

        yield start


@pytest.fixture
async def in_process_daemon(short_dir: Path) -> AsyncIterator[Callable[..., Awaitable[Daemon]]]:
    """Start in-process daemons: `await in_process_daemon(spec, socket=None)`, a Spec, spec text or a spec file.

    Returns the started `Daemon`; every one started is stopped (in reverse) at the end of the test, so a
    test that checks what a stop leaves behind calls `await daemon.stop()` itself (stop is idempotent).
    """
    from agentctl.daemon.app import Daemon
    from agentctl.spec import Spec, parse_spec
    from agentctl.spec_loader import load_spec

    async with contextlib.AsyncExitStack() as stops:  # each stop runs, in reverse, even if one fails
        count = 0

        async def start(spec: Spec | Path | str | bytes, socket: Path | None = None) -> Daemon:
            nonlocal count
            if isinstance(spec, Path):
                spec = load_spec(spec)
            elif isinstance(spec, (str, bytes)):
                spec = parse_spec(spec.encode() if isinstance(spec, str) else spec)
            daemon = Daemon(spec, socket_path=socket or short_dir / f"d{count}.sock")
            count += 1
            stops.push_async_callback(daemon.stop)
            await daemon.start()
            return daemon

        yield start


@pytest.fixture(scope="session", autouse=True)
def _one_estimate_cache_per_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Daemons started by tests share one token-estimate cache, never the user's: the helper runs once per
    distinct catalog in a whole run."""
    name = "AGENTCTL_ESTIMATE_CACHE_DIR"
    old = os.environ.get(name)
    os.environ[name] = str(tmp_path_factory.mktemp("estimate-cache") / "token-estimates")
    yield
    if old is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = old


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory under /tmp for Unix sockets (AF_UNIX paths are limited to 107 bytes; pytest's tmp_path
    can push a socket path past that). Removed whatever a test left in it, unreadable modes included."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="actl-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory for Unix sockets (AF_UNIX paths are limited to 107 bytes; pytest's tmp_path can be long)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="actl-", dir="/tmp") as d:
        yield Path(d)


# A real PostgreSQL server (session) and a fresh database per test: tests/pg.py.
from tests.pg import pg_db, pg_server  # noqa: E402,F401


# The quick loop (`make quick`, `pytest -m "not slow"`): every test that starts no real process, server, browser or
# database. A test is slow when it lives where everything is real (whole agent CLIs, attacks on a running daemon,
# packaging, the browser, traces, terminals, the probe) or asks for a fixture that starts one.
SLOW_DIRECTORIES = frozenset({"clis", "reliability", "packaging", "web", "tracing", "pty", "probe", "docs", "bench"})
SLOW_FIXTURES = frozenset({
    "serve", "in_process_daemon", "pg_db", "pg_server", "pg_pair", "pg_hubs", "pg_open", "start_hub", "hub",
    "make_supervisor", "make_harness", "harness", "daemon", "metrics_daemon", "running", "real_cli", "phoenix",
    "browser", "dist", "artifacts", "shiv_root", "mcp_server", "served", "world", "embedded", "location",
})


# Run alone, after the parallel phase (tests/run_suite.py): modules that measure boundedness or timing under
# attack, or that load the whole machine themselves; beside another worker they would measure that worker.
SERIAL_MODULES = frozenset({
    "reliability/test_faults_listeners.py", "reliability/test_faults_leaks.py", "reliability/test_load.py",
    "reliability/test_faults_agent.py", "reliability/test_faults_sessions.py",
    "reliability/test_canaries_everywhere.py", "reliability/test_fragments_everywhere.py",
    "tracing/test_traces.py", "upstream/test_publisher.py", "upstream/test_processes.py",
    "control/test_client_bounds.py", "daemon/test_signals.py", "pty/test_attach_input.py",
    "packaging/test_artifacts.py", "bench/test_hub_scale.py",
})


# Marked slow by measured cost: modules whose tests took 1.5 s or more in all in a quick-loop run
# (`pytest -n 2 -m "not slow" --durations=0`, summed per module): they start daemons, agents or subprocesses
# without a fixture that says so. Measure again when the quick loop grows past about a minute.
COSTLY_MODULES = frozenset({
    "agent/test_acp_hardening.py", "agent/test_acp_sessions.py", "agent/test_agent_gone.py",
    "agent/test_mcp_bridge.py", "agent/test_orphans.py", "agent/test_run.py",
    "agent/test_run_explains.py", "agent/test_run_required.py", "agent/test_scenarios.py",
    "agent/test_session_during_start.py", "agent/test_witness_daemon_killed.py", "agent/test_witness_process.py",
    "agent/test_witness_run.py", "control/test_discovery.py", "control/test_host_daemons.py",
    "daemon/test_estimates_in_daemon.py", "daemon/test_import_cost.py", "daemon/test_lifecycle.py",
    "daemon/test_metrics_scrape.py", "diagnostics/test_endpoint_test.py", "evidence/test_catalog.py",
    "evidence/test_estimates.py", "evidence/test_reasons.py", "evidence/test_sanitize.py",
    "evidence/test_schema.py", "evidence/test_store.py", "hub/test_hub_limits.py",
    "hub/test_hub_migrate_cli.py", "hub/test_hub_processes.py", "hub/test_listing.py",
    "hub/test_migrations.py", "hub/test_retention.py", "mcp_endpoint/test_tools.py",
    "passthrough/test_hostile_workspace_files.py", "passthrough/test_reported_passthrough.py", "test_cli_toolkit.py",
    "test_completion_and_help.py", "test_listener_guard.py", "test_log_signals.py",
    "test_makefile.py", "test_pg.py", "test_spec_commands.py",
    "testing/test_reference_agent.py", "upstream/test_scale_privacy.py",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = REPO / "tests"
    for item in items:
        parts = Path(str(item.path)).relative_to(tests).parts
        if "/".join(parts) in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)
            item.add_marker(pytest.mark.slow)
        elif ("/".join(parts) in COSTLY_MODULES or (len(parts) > 1 and parts[0] in SLOW_DIRECTORIES)
              or SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.slow)
