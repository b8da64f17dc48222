"""When a passthrough CLI's session counts as accepted: at the first evidence that the CLI runs a session with the
configuration it was given, never at its process start.

A passthrough CLI has no session handshake. A process that started can exit 1 four seconds later having done
nothing, so "session accepted" at spawn would be a claim agentctl never observed. The rule: `session_accepted` is
recorded on the start's attempt at the first of its events that only a running session produces: the CLI's
contact with the built-in endpoint (initialize, tools/list or a tool call with this attempt's token), or the
CLI's own report of its MCP servers (Claude Code's stream-json init, printed when its session begins). A CLI
that shows neither (no strategy, no MCP use, an exit before it got that far) never has its session accepted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agentctl.evidence.contract.report import EvidenceEvent
from agentctl.evidence.ledger import Ledger

ACCEPTING_KINDS = frozenset({"initialize_observed", "tools_list_observed", "tool_call_observed", "agent_reported"})


def watch_acceptance(ledger: Ledger, attempt_id: str) -> Callable[[], None]:
    """Record `session_accepted` on `attempt_id` at its first accepting event; returns a function that stops the
    watch. The record is made from the event loop, after the event's own listeners have run."""
    loop = asyncio.get_running_loop()
    state = {"done": False}

    def listener(event: EvidenceEvent | None) -> None:
        if state["done"] or event is None or event.attempt_id != attempt_id or event.kind not in ACCEPTING_KINDS:
            return
        state["done"] = True
        loop.call_soon(accept)

    def accept() -> None:
        ledger.unsubscribe(listener)
        ledger.record("session_accepted", attempt_id)

    def stop() -> None:
        state["done"] = True
        ledger.unsubscribe(listener)

    ledger.subscribe(listener)
    return stop
