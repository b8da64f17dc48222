"""The tool tunnel: a Backend that sends each built-in tool call upstream over the publisher's connection.

Every call is a `tool_call` frame with a fresh correlation id, the daemon's identity (injected here, never
from the agent), the tool's arguments (the backend executes the tool, so it needs them; they go nowhere
else: not into evidence, frames of other types, or logs) and a deadline. The answer is the `tool_result`
with the same id. When the upstream is not connected, the deadline passes, or the connection drops while
waiting, the tool answers with one clear sentence (a tool error), never a hang.

`config.*` ops describe this execution (its agent, its MCP servers, its identity), which the daemon knows
first hand: they are answered by the local backend, so they keep working while the upstream is away.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from typing import TYPE_CHECKING, Any

import msgspec

from agentctl.backend.base import OPS, Backend, BackendError, timeout_message
from agentctl.evidence.contract.report import Identity
from agentctl.evidence.ledger import utcnow
from agentctl.upstream import protocol as P

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.upstream.publisher import Publisher

MAX_PENDING = 256
MAX_ERROR_CHARS = 500

NOT_CONNECTED = "the orchestrator is not connected right now (agentctl is reconnecting upstream); try again in a moment"


class TunnelBackend:
    def __init__(self, publisher: Publisher, local: Backend | None = None, *, max_pending: int = MAX_PENDING) -> None:
        self._publisher = publisher
        self._local = local
        self._max_pending = max_pending
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._prefix = "tc_" + secrets.token_hex(4)
        publisher.tunnel = self

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def call(self, op: str, identity: Identity, args: dict[str, Any], *, deadline: float) -> dict[str, Any]:
        if op.startswith("config.") and self._local is not None:
            return await self._local.call(op, identity, args, deadline=deadline)
        if op not in OPS:
            raise BackendError(f"the task backend does not support '{op}'")
        if not self._publisher.connected:
            raise BackendError(NOT_CONNECTED)
        if len(self._pending) >= self._max_pending:
            raise BackendError("too many tool calls are waiting for the orchestrator; try again in a moment")
        call_id = f"{self._prefix}_{next(self._ids)}"
        try:
            line = P.encode_frame(
                P.frame(
                    P.ToolCallFrame,
                    id=call_id,
                    op=op,
                    identity=identity,
                    args=args,
                    deadline_ms=max(1, int(deadline * 1000)),
                    sent_at=utcnow(),
                )
            )
        except P.ProtocolError:
            raise BackendError("the tool's arguments are too large for the upstream tunnel (1 MiB per call)") from None
        except (TypeError, msgspec.EncodeError):
            raise BackendError("the tool's arguments cannot be sent upstream") from None
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        try:
            if not self._publisher.send_control(line, time.monotonic() + deadline):
                raise BackendError(NOT_CONNECTED)
            try:
                return await asyncio.wait_for(future, deadline)
            except TimeoutError:
                raise BackendError(timeout_message(deadline)) from None
        finally:
            self._pending.pop(call_id, None)

    # -- called by the publisher ---------------------------------------------------------------------

    def on_result(self, answer: P.ToolResultFrame) -> None:
        future = self._pending.get(answer.id)
        if future is None or future.done():
            return  # late (the caller gave up) or unknown: nobody is waiting
        if answer.ok and isinstance(answer.result, dict):
            future.set_result(answer.result)
        else:
            future.set_exception(BackendError(_one_line(answer.error) or "the orchestrator refused the request"))

    def on_error(self, error: P.ErrorFrame) -> None:
        future = self._pending.get(error.id or "")
        if future is not None and not future.done():
            future.set_exception(BackendError(_one_line(error.message) or "the orchestrator refused the request"))

    def on_disconnect(self, message: str) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(BackendError(message))


def _one_line(text: str | None) -> str:
    """The upstream's sentence as the agent will see it: one line, bounded."""
    if not text:
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_ERROR_CHARS else flat[: MAX_ERROR_CHARS - 1] + "…"
