"""Owns the daemon's notable transitions as log lines, each written once at the default level: "ready" only
when every readiness check is true (never for a daemon whose agent has not become ready, or died first), and
an attempt all of whose servers failed. (The agent's exit is the supervisor's line, the upstream's loss and
return the publisher's.)

What a line may carry: counts, the execution id and reason codes (a closed set); never a server name, a
summary, an argument or anything a client or an agent sent.
"""

from __future__ import annotations

import logging

from agentctl import __version__
from agentctl.context import DaemonContext
from agentctl.evidence.contract.report import EvidenceEvent
from agentctl.logs import TRANSITIONS

log = logging.getLogger(TRANSITIONS)


class Transitions:
    """Subscribed to the ledger from `start()` (once the daemon's start steps are done) to `close()`."""

    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        self._all_failed_logged: str | None = None  # the attempt whose total failure was logged

    def start(self) -> None:
        readiness = self.ctx.readiness
        if readiness.ready:
            self._ready()
        else:
            waiting = sorted(name for name, ok in readiness.checks.items() if not ok)
            detail = "; ".join(f"{name}: {readiness.details.get(name, 'not ready')}" for name in waiting)
            log.info("agentctl %s started (execution %s), not ready yet (%s)", __version__,
                     self.ctx.identity.execution_id, detail)
            readiness.on_ready = self._ready
        self.ctx.ledger.subscribe(self._on_change)
        self._on_change(None)

    def close(self) -> None:
        self.ctx.readiness.on_ready = None
        self.ctx.ledger.unsubscribe(self._on_change)

    def _ready(self) -> None:
        log.info("agentctl %s ready (execution %s)", __version__, self.ctx.identity.execution_id)

    def _on_change(self, _event: EvidenceEvent | None) -> None:
        attempt = self.ctx.ledger.history.current
        if attempt is None or not attempt.servers or attempt.attempt_id == self._all_failed_logged:
            return
        if all(row.status == "failed" for row in attempt.servers):
            self._all_failed_logged = attempt.attempt_id
            codes = sorted({row.reason_code or "unknown" for row in attempt.servers})
            log.warning("every server of the current attempt failed (%d: %s)", len(attempt.servers), ", ".join(codes))
