"""Owns keeping the required-server gate's reading on the report (Attempt.required): judged again on every
change of the evidence and at the current attempt's deadline (the gate can close with no new evidence), written
only when the reading changed, and once more when the daemon stops (an agent that exited blocks what never
attached). The report then says the same as `wait --attached` to whoever reads it later: `status --json`, the
persisted report.json and the hub."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from agentctl.context import DaemonContext
from agentctl.control.server import build_gate
from agentctl.evidence.contract.control import AttachedGate
from agentctl.evidence.contract.report import EvidenceEvent
from agentctl.evidence.required import reading

# Past the deadline by this much before judging again: the gate's own clock must see the time as up.
_AFTER_DEADLINE = 0.05


class GateRecorder:
    """Subscribed to the ledger from `start()` to `close()`, when the spec requires a server."""

    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    def start(self) -> None:
        if self.record() is None:
            return  # nothing is required: nothing to keep
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        self.ctx.ledger.subscribe(self._on_change)
        self._task = asyncio.create_task(self._run(), name="agentctl-required-gate")

    async def close(self) -> None:
        self.ctx.ledger.unsubscribe(self._on_change)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            self.record()

    def record(self) -> AttachedGate | None:
        """Judge the gate now and keep its reading on the attempt it judged."""
        gate = build_gate(self.ctx)
        if gate is not None and gate.attempt_id is not None:
            self.ctx.ledger.set_required(gate.attempt_id, reading(gate, self.ctx.ledger.now()))
        return gate

    def _on_change(self, _event: EvidenceEvent | None) -> None:
        if threading.get_ident() == self._loop_thread:
            self._changed.set()
        elif self._loop is not None and not self._loop.is_closed():
            # Evidence recorded from a worker thread: the event belongs to the loop's thread.
            self._loop.call_soon_threadsafe(self._changed.set)

    async def _run(self) -> None:
        while True:
            self._changed.clear()
            gate = self.record()
            wait: float | None = None
            if gate is not None and gate.state == "waiting" and gate.waited is not None:
                wait = max(gate.timeout - gate.waited, 0.0) + _AFTER_DEADLINE
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=wait)
