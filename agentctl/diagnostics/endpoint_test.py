"""Endpoint tests: a bounded reachability check of ONE configured MCP server, chosen by its stored name.

The caller names a server; everything else (URL, headers, command, arguments, environment) comes from the
daemon's own spec. Nothing the caller sends can choose a target, so this is never a generic fetcher.

- http / sse: MCP initialize (the client's `auto` mode: `server/discover`, falling back to the initialize
  handshake) and tools/list with the stored headers, through the `mcp` SDK client.
- stdio: the stored command in a process group of its own, registered with the agent supervisor so its
  sweep leaves it alone, and stopped with its whole tree (stdin closed, SIGTERM, SIGKILL) on every exit
  path: success, error, timeout and cancellation.
- only what the effective configuration delivers: a server the executor policy leaves out (`policy_denied`,
  `duplicate_name`) or that the current attempt filtered (any reason) is refused with that reason code
  before anything is contacted or started.
- the built-in server: our own loopback endpoint. The request carries a one-off credential minted for a
  test-only attempt id whose evidence the ledger drops (`Ledger.mint_self_test_token`): the daemon contacting itself must
  never look like the agent attaching, so a test cannot promote the row.

One test at a time per server; a second concurrent request is refused. The result is stored beside the
row of the attempt that was current when the test started and never changes that row's status.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from agentctl import __version__
from agentctl.agent.delivery import BuiltinEndpoint, Refusal, plan_servers
from agentctl.evidence.contract.control import EndpointTestResponse
from agentctl.evidence.contract.report import EndpointTestResult
from agentctl.diagnostics.stdio_process import MARKER_ENV, exit_code, pipe_transport, stop_process_tree
from agentctl.evidence.sanitize import summarize
from agentctl.evidence.secret_registry import SecretRegistry

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.context import DaemonContext

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT: Final = 10.0
MAX_TIMEOUT: Final = 60.0
MAX_TOOL_PAGES: Final = 32  # a paginating server cannot keep a test busy forever
STDOUT_LIMIT: Final = 16 * 1024 * 1024  # one JSON-RPC line (a large tools/list) from a stdio server
CLIENT_NAME: Final = "agentctl-endpoint-test"


# When the last tools/list page arrived, per task (a test runs in its caller's task, start to end).
_done_at: contextvars.ContextVar[float | None] = contextvars.ContextVar("agentctl_endpoint_test_done", default=None)


class EndpointTestError(Exception):
    """A request that cannot run: unknown name (404), not delivered by the effective configuration (409, the
    filter's reason code), already running (409), bad timeout (400)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Target:
    """What the spec says about one server. Holds secrets: never logged, stored or returned."""

    name: str
    transport: str
    builtin: bool = False
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


class _Failure(Exception):
    def __init__(self, reason_code: str, text: str) -> None:
        super().__init__(text)
        self.reason_code = reason_code
        self.text = text


class _TakesAll:
    """A receiver that takes every transport and name: planning with it leaves only the policy's filters."""

    transports: frozenset[str] = frozenset({"http", "sse", "stdio"})

    def transport_refused(self, transport: str) -> Refusal:  # pragma: no cover - takes every transport
        raise AssertionError(transport)

    def builtin_refused(self, wanted: str) -> Refusal:  # pragma: no cover - takes every transport
        raise AssertionError(wanted)

    def name_refused(self, name: str) -> Refusal | None:
        return None


class EndpointTester:
    """Runs endpoint tests for one daemon context (spec, ledger, MCP base URL)."""

    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        self._running: set[str] = set()
        # pid of the last stdio process per server: tests check by pid that nothing is left.
        self.last_pids: dict[str, int] = {}

    # ---- names -------------------------------------------------------------------------------------

    def known_names(self) -> list[str]:
        """Servers of the current attempt's effective configuration (the spec's, before any attempt)."""
        spec = self.ctx.spec
        configured = [spec.mcp.builtin_name, *(s.name for s in spec.mcp.servers)]
        current = self.ctx.ledger.history.current
        if current is None:
            return configured
        in_attempt = {row.name for row in current.servers}
        return [name for name in configured if name in in_attempt]

    def not_delivered(self, name: str) -> Refusal | None:
        """Why the effective configuration leaves this server out, or None: the current attempt's filter
        (any reason, the agent's transports included), else the executor policy, which holds before any
        attempt too. A test never reaches further than the agent could."""
        current = self.ctx.ledger.history.current
        if current is not None:
            for row in current.servers:
                # Every recorder files a filter with its Omitted's code, so a filtered row always has one.
                if row.name == name and row.status == "filtered" and row.reason_code is not None:
                    return Refusal(row.reason_code, row.summary or "left out of the current attempt")
        # The planner's own rules with a receiver that takes everything: only policy and duplicates remain.
        plan = plan_servers(self.ctx.spec, BuiltinEndpoint(self.ctx.spec.mcp.builtin_name, "", "", ""), _TakesAll())
        if any(entry.name == name for entry in plan.delivered):
            return None
        for omitted in plan.filtered:
            if omitted.name == name:
                return Refusal(omitted.reason_code, omitted.summary)
        return None

    def resolve(self, name: str) -> Target:
        known = self.known_names()
        if name not in known:
            listing = ", ".join(known) if known else "none"
            raise EndpointTestError(
                404, "unknown_server", f"no server named {name!r} in the current configuration; known: {listing}"
            )
        refusal = self.not_delivered(name)
        if refusal is not None:
            raise EndpointTestError(
                409, refusal.reason_code,
                f"{name!r} is not delivered by the current configuration ({refusal.reason_code}): {refusal.summary}",
            )
        spec = self.ctx.spec
        if name == spec.mcp.builtin_name:
            return Target(name=name, transport="http", builtin=True)
        for server in spec.mcp.servers:
            if server.name == name:
                return Target(
                    name=name,
                    transport=server.type,
                    url=server.url,
                    headers=dict(server.headers),
                    command=server.program,
                    args=tuple(server.args),
                    env=dict(server.env),
                )
        raise EndpointTestError(404, "unknown_server", f"no server named {name!r} in the current configuration")

    # ---- running -----------------------------------------------------------------------------------

    @staticmethod
    def check_timeout(timeout: float | None) -> float:
        if timeout is None:
            return DEFAULT_TIMEOUT
        if not isinstance(timeout, int | float) or not 0 < timeout <= MAX_TIMEOUT:
            raise EndpointTestError(
                400, "bad_timeout", f"timeout must be greater than 0 and at most {MAX_TIMEOUT:g} seconds"
            )
        return float(timeout)

    async def test(self, name: str, timeout: float | None = None) -> EndpointTestResponse:
        """Run one test and store it beside the row; raises EndpointTestError when it cannot run."""
        seconds = self.check_timeout(timeout)
        target = self.resolve(name)
        if name in self._running:
            raise EndpointTestError(
                409, "already_running", f"an endpoint test of {name!r} is already running; wait for it to finish"
            )
        self._running.add(name)
        try:
            ledger = self.ctx.ledger
            attempt_id = ledger.current_attempt_id
            result = await self._measure(target, seconds)
            # The name and a reason code only: never a target detail.
            log.info("endpoint test of %s: %s", name, "reachable" if result.succeeded else result.reason_code)
            stored = attempt_id is not None and ledger.set_endpoint_test(attempt_id, name, result)
            return EndpointTestResponse(name=name, attempt_id=attempt_id, stored=bool(stored), result=result)
        finally:
            self._running.discard(name)

    async def upstream_test(self, name: str, timeout: float | None = None) -> EndpointTestResult:
        """For the upstream `endpoint_test` request: a refusal becomes a failed result with its reason code."""
        try:
            return (await self.test(name, timeout)).result
        except EndpointTestError as exc:
            summary = summarize(exc.code, exc.message, self._secrets())
            return EndpointTestResult(
                succeeded=False,
                tested_at=self.ctx.ledger.now(),
                reason_code=summary.reason_code,
                summary=summary.summary,
            )

    async def _measure(self, target: Target, timeout: float) -> EndpointTestResult:
        ledger = self.ctx.ledger
        tested_at = ledger.now()
        start = time.monotonic()
        _done_at.set(None)
        try:
            tool_count = await self._run(target, timeout)
        except _Failure as failure:
            return self._failed(tested_at, start, failure.reason_code, failure.text)
        except TimeoutError:
            return self._failed(tested_at, start, "timeout", f"no complete answer within {timeout:g} s")
        except Exception as exc:  # our own bug, or a client error not classified: still an answer, not a 500
            log.debug("endpoint test of %s failed unexpectedly: %s", target.name, type(exc).__name__)
            return self._failed(tested_at, start, "test_error", f"the test could not run ({type(exc).__name__})")
        # Up to the tools/list answer: stopping a stdio server afterwards is not the server's latency.
        latency = round(((_done_at.get() or time.monotonic()) - start) * 1000.0, 1)
        return EndpointTestResult(succeeded=True, tested_at=tested_at, tool_count=tool_count, latency_ms=latency)

    def _failed(self, tested_at: Any, start: float, reason_code: str, text: str) -> EndpointTestResult:
        summary = summarize(reason_code, text, self._secrets())
        return EndpointTestResult(
            succeeded=False,
            tested_at=tested_at,
            reason_code=summary.reason_code,
            summary=summary.summary,
            latency_ms=round((time.monotonic() - start) * 1000.0, 1),
        )

    def _secrets(self) -> SecretRegistry:
        return self.ctx.ledger.secrets

    async def _run(self, target: Target, timeout: float) -> int:
        import anyio

        if target.builtin:
            return await self._run_builtin(target, timeout)
        if target.transport == "stdio":
            return await self._run_stdio(target, timeout)
        with anyio.fail_after(timeout):
            return await _run_http(target.transport, target.url or "", target.headers, timeout)

    async def _run_builtin(self, target: Target, timeout: float) -> int:
        import anyio

        base = self.ctx.mcp_base
        if not base:
            raise _Failure("endpoint_not_listening", "the built-in MCP endpoint is not listening yet")
        ledger = self.ctx.ledger
        self_test_id, token = ledger.mint_self_test_token()
        try:
            with anyio.fail_after(timeout):
                return await _run_http("http", f"{base}/mcp", {"Authorization": f"Bearer {token}"}, timeout)
        finally:
            ledger.forget_self_test(self_test_id)

    async def _run_stdio(self, target: Target, timeout: float) -> int:
        import anyio
        from mcp.client.stdio import get_default_environment

        from agentctl.agent.spawn import resolve_command
        from agentctl.agent.supervisor import register_own_child, unregister_own_child

        argv = resolve_command([target.command or "", *target.args])
        agent = self.ctx.spec.agent
        cwd = agent.workdir if agent is not None and agent.workdir else None
        marker = secrets.token_hex(8)
        since = time.time()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                # A server's stderr may hold anything it was given: it is not read, kept or shown.
                stderr=asyncio.subprocess.DEVNULL,
                env=get_default_environment() | target.env | {MARKER_ENV: marker},
                cwd=cwd,
                start_new_session=True,
                limit=STDOUT_LIMIT,
            )
        except FileNotFoundError:
            raise _Failure("command_not_found", "the stored command was not found") from None
        except PermissionError:
            raise _Failure("command_not_executable", "the stored command is not executable") from None
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise _Failure("spawn_failed", f"the stored command could not start ({why})") from None
        # No await between spawn and registration: the agent supervisor's sweep must never see it unregistered.
        register_own_child(proc.pid)
        self.last_pids[target.name] = proc.pid
        try:
            with anyio.fail_after(timeout):
                try:
                    return await _session(pipe_transport(proc), timeout)
                except _Failure as failure:
                    if proc.returncode is not None or failure.reason_code == "connection_closed":
                        code = await exit_code(proc)
                        if code is not None:
                            text = f"the server process exited with code {code} before answering"
                            raise _Failure("process_exited", text) from None
                    raise
        finally:
            # Outside the deadline's scope and shielded: the tree is stopped even when the test timed out or
            # its caller was cancelled (stop_process_tree also SIGKILLs at once if a native cancel gets through).
            with anyio.CancelScope(shield=True):
                await stop_process_tree(proc, marker=marker, since=since)
            unregister_own_child(proc.pid)


# ---- MCP sessions ---------------------------------------------------------------------------------------


async def _run_http(transport: str, url: str, headers: dict[str, str], timeout: float) -> int:
    import httpx2
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    statuses: list[int] = []

    async def on_response(response: Any) -> None:
        statuses.append(response.status_code)  # the status only: never the URL or a header

    def factory(headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None) -> Any:
        client = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
        client.event_hooks["response"].append(on_response)
        return client

    try:
        if transport == "sse":
            return await _session(
                sse_client(
                    url, headers=headers, timeout=timeout, sse_read_timeout=timeout, httpx_client_factory=factory
                ),
                timeout,
                statuses,
            )
        client = factory(headers=headers, timeout=httpx2.Timeout(timeout))
        try:
            return await _session(streamable_http_client(url, http_client=client), timeout, statuses)
        finally:
            await client.aclose()
    except _Failure:
        raise
    except Exception as exc:
        raise _classify(exc, statuses, "connect") from None


async def _session(transport: Any, timeout: float, statuses: list[int] | None = None) -> int:
    """initialize (auto mode) then tools/list, page by page; returns the full tool count."""
    from mcp.client import Client
    from mcp_types import Implementation

    stage = "initialize"
    try:
        client = Client(
            transport,
            mode="auto",
            client_info=Implementation(name=CLIENT_NAME, version=__version__),
            read_timeout_seconds=timeout,
            cache=None,
        )
        async with client:
            stage = "tools_list"
            count, cursor = 0, None
            for _ in range(MAX_TOOL_PAGES):
                page = await client.list_tools(cursor=cursor)
                count += len(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            _done_at.set(time.monotonic())
            return count
    except (_Failure, TimeoutError):
        raise
    except Exception as exc:
        raise _classify(exc, statuses or [], stage) from None


_HTTP_REASONS: Final = {401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed"}


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        found: list[BaseException] = []
        for sub in exc.exceptions:
            found.extend(_leaves(sub))
        return found
    return [exc]


def _classify(exc: BaseException, statuses: list[int], stage: str) -> _Failure:
    """A stable reason code and our own words for a failure; a server's message only through summarize()."""
    import httpx2
    from mcp.shared.exceptions import MCPError

    leaves = _leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, _Failure):
            return leaf
    for leaf in leaves:
        if isinstance(leaf, TimeoutError | httpx2.TimeoutException):
            return _Failure("timeout", "the server did not answer in time")
    refused = [s for s in statuses if s >= 400]
    for leaf in leaves:
        if isinstance(leaf, httpx2.HTTPStatusError):
            refused.append(leaf.response.status_code)
    if refused:
        status = refused[-1]
        code = _HTTP_REASONS.get(status, "http_error")
        return _Failure(code, f"the server answered HTTP {status} during {stage.replace('_', ' ')}")
    for leaf in leaves:
        if isinstance(leaf, httpx2.ConnectError):
            text = str(leaf).lower()
            if "name or service" in text or "nodename" in text or "name resolution" in text:
                return _Failure("dns_failed", "the server's host name did not resolve")
            if "ssl" in text or "certificate" in text:
                return _Failure("tls_error", "the TLS handshake failed")
            return _Failure("connect_failed", "could not connect to the server (refused or unreachable)")
        if isinstance(leaf, httpx2.TransportError):
            return _Failure("transport_error", f"the connection failed ({type(leaf).__name__})")
    for leaf in leaves:
        if isinstance(leaf, MCPError):
            if leaf.error.code == -32000 or "closed" in leaf.error.message.lower():
                return _Failure("connection_closed", "the server closed the connection")
            reason = "initialize_failed" if stage == "initialize" else "tools_list_failed"
            what = stage.replace("_", " ")
            return _Failure(reason, f"{what} failed: MCP error {leaf.error.code}: {leaf.error.message}")
    for leaf in leaves:
        if isinstance(leaf, EOFError | ConnectionError | BrokenPipeError):
            return _Failure("connection_closed", "the server closed the connection")
    kind = type(leaves[0]).__name__ if leaves else type(exc).__name__
    return _Failure("test_error", f"{stage.replace('_', ' ')} failed ({kind})")
