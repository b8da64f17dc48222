"""When a passthrough CLI's session counts as accepted (agentctl/agent/passthrough/acceptance.py): at the first
event only a running session produces, once, on its own attempt; never at the process start.

The end-to-end forms run real processes: tests/passthrough/test_passthrough_daemon.py (accepted after the CLI's
first contact; a CLI without configuration never accepted) and tests/agent/test_run.py (a CLI that exits 3 at
once shows NO SESSION, never "accepted").
"""

from __future__ import annotations

import asyncio

from agentctl.agent.passthrough.acceptance import watch_acceptance
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from tests.conftest import eventually
from tests.evidence.fixed import IDENT

SEEDS = [ServerSeed(name="kandev", source="builtin", transport="http", target="http://127.0.0.1:1")]


def _kinds(ledger: Ledger, attempt_id: str) -> list[str]:
    attempt = next(a for a in [ledger.history.current, *ledger.history.previous] if a.attempt_id == attempt_id)
    return [e.kind for e in attempt.evidence]


async def callbacks_already_scheduled_have_run() -> None:
    """Return once every callback scheduled before this call has run: the loop runs them first come, first
    served, so an acceptance the watch scheduled from an earlier event has been recorded by then, if any."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_soon(done.set_result, None)
    await done


async def test_the_first_contact_accepts_the_session_once_and_nothing_before_it_does() -> None:
    ledger = Ledger(IDENT)
    attempt_id, _ = ledger.begin_attempt("passthrough_start", SEEDS)
    watch_acceptance(ledger, attempt_id)
    ledger.record("delivered", attempt_id, "kandev", transport="http", target="http://127.0.0.1:1")
    ledger.record("explicit_error", attempt_id, reason_code="agent_exited", summary="exited with code 1")
    await callbacks_already_scheduled_have_run()
    assert ledger.history.current.accepted_at is None, "delivery and an exit are not a session"
    ledger.record("initialize_observed", attempt_id, "kandev")
    ledger.record("tools_list_observed", attempt_id, "kandev", tool_count=1)
    await eventually(lambda: ledger.history.current.accepted_at is not None, what="the session accepted")
    await callbacks_already_scheduled_have_run()  # a second acceptance, if the watch scheduled one
    assert _kinds(ledger, attempt_id).count("session_accepted") == 1


async def test_another_attempts_contact_or_a_stopped_watch_accepts_nothing() -> None:
    ledger = Ledger(IDENT)
    first, _ = ledger.begin_attempt("passthrough_start", SEEDS)
    stop = watch_acceptance(ledger, first)
    second, _ = ledger.begin_attempt("passthrough_start", SEEDS)
    ledger.record("initialize_observed", second, "kandev")
    await callbacks_already_scheduled_have_run()
    stop()
    ledger.record("initialize_observed", first, "kandev")
    await callbacks_already_scheduled_have_run()
    assert "session_accepted" not in _kinds(ledger, first) + _kinds(ledger, second)
