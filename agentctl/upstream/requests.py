"""The daemon's answers to the upstream's on-demand requests: recent agent output, the agent terminal's recent
screen, and endpoint tests.

Each function takes the DaemonContext and the request frame and returns the encoded answer line (a
result frame, or an `error` frame with the request's id). Agent output is bounded here to the smaller of
50 lines and 16 KiB, the terminal's screen to its last 32 KiB, whatever the request asked for; endpoint
tests take a stored server name only. Nothing answered here is logged.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from agentctl.context import current_terminal, runs_on_terminal
from agentctl.evidence.contract.control import StderrView, TerminalView
from agentctl.present.output import STDERR_UPSTREAM_WARNING, TERMINAL_UPSTREAM_WARNING
from agentctl.upstream import protocol as P

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.context import DaemonContext

log = logging.getLogger("agentctl.upstream")

ENDPOINT_TEST_TIMEOUT = 60.0


def stderr_view(ctx: DaemonContext, request: P.StderrReadFrame) -> StderrView:
    history = ctx.ledger.history
    state = history.agent.state if history.agent else None
    supervisor = ctx.agent.supervisor if ctx.agent is not None else None
    if supervisor is None or supervisor.process is None:
        return StderrView(warning=STDERR_UPSTREAM_WARNING, agent_state=state, lines=[], truncated=False,
                          total_bytes_seen=0, empty=True)
    window = supervisor.stderr_snapshot()
    max_lines = max(0, min(request.max_lines, P.MAX_STDERR_LINES))
    budget = max(0, min(request.max_bytes, P.MAX_STDERR_BYTES))
    kept: list[str] = []
    for line in reversed(window.lines[-max_lines:] if max_lines else []):
        size = len(line.encode("utf-8")) + 1
        if size > budget:
            break
        budget -= size
        kept.append(line)
    kept.reverse()
    return StderrView(
        warning=STDERR_UPSTREAM_WARNING,
        agent_state=state,
        lines=kept,
        truncated=window.truncated or len(kept) < len(window.lines),
        total_bytes_seen=window.total_bytes_seen,
        empty=window.empty,
    )


def stderr_answer(ctx: DaemonContext, request: P.StderrReadFrame) -> bytes:
    return P.encode_frame(P.frame(P.StderrResultFrame, id=request.id, view=stderr_view(ctx, request)))


def terminal_view(ctx: DaemonContext, request: P.TerminalReadFrame) -> TerminalView:
    """The tail of the agent terminal's replay, at most MAX_TERMINAL_BYTES; a closed terminal's last screen."""
    history = ctx.ledger.history
    state = history.agent.state if history.agent else None
    on_terminal = runs_on_terminal(ctx)
    host = current_terminal(ctx) if on_terminal else None
    if host is None:
        return TerminalView(warning=TERMINAL_UPSTREAM_WARNING, agent_state=state, terminal=on_terminal, open=False,
                            rows=0, cols=0, screen=b"", truncated=False, total_bytes_seen=0)
    budget = max(0, min(request.max_bytes, P.MAX_TERMINAL_BYTES))
    replay = host.replay()
    screen = replay[-budget:] if budget else b""
    return TerminalView(
        warning=TERMINAL_UPSTREAM_WARNING,
        agent_state=state,
        terminal=True,
        open=host.open,
        rows=host.size.rows,
        cols=host.size.cols,
        screen=screen,
        truncated=len(screen) < host.bytes_seen,
        total_bytes_seen=host.bytes_seen,
    )


def terminal_answer(ctx: DaemonContext, request: P.TerminalReadFrame) -> bytes:
    return P.encode_frame(P.frame(P.TerminalResultFrame, id=request.id, view=terminal_view(ctx, request)))


def _stored_server_names(ctx: DaemonContext) -> set[str]:
    spec = ctx.spec
    return {spec.mcp.builtin_name, *(server.name for server in spec.mcp.servers)}


async def endpoint_test_answer(ctx: DaemonContext, request: P.EndpointTestFrame) -> bytes:
    """Run the daemon's endpoint test (`ctx.endpoint_tester`) for a stored name."""

    def refuse(code: str, message: str) -> bytes:
        return P.encode_frame(P.frame(P.ErrorFrame, code=code, message=message, id=request.id))

    if request.server not in _stored_server_names(ctx):
        return refuse("unknown_server", "no stored MCP server has that name")
    tester = ctx.endpoint_tester
    if tester is None:
        return refuse("not_supported", "endpoint tests are not supported by this daemon yet")
    try:
        result = await asyncio.wait_for(tester.upstream_test(request.server), ENDPOINT_TEST_TIMEOUT)
    except LookupError:
        return refuse("unknown_server", "no stored MCP server has that name")
    except TimeoutError:
        return refuse("unavailable", f"the endpoint test did not finish within {ENDPOINT_TEST_TIMEOUT:g} s")
    except Exception as exc:
        log.warning("endpoint test failed unexpectedly: %s", type(exc).__name__)
        return refuse("internal", "the endpoint test failed unexpectedly; the daemon log has details")
    return P.encode_frame(P.frame(P.EndpointTestResultFrame, id=request.id, server=request.server, result=result))
