"""Helper for test_store's SIGKILL test: the real Ledger + Persister (delay=0) recording forever.

Usage: python persist_writer.py REPORT_PATH EXECUTION_ID
Prints one line "ready" once the persister has started, then records evidence in a tight loop,
yielding to the event loop between small batches so the persister writes continuously.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agentctl.evidence.contract.report import Identity
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from agentctl.evidence.store import Persister


async def main(path: Path, execution_id: str) -> None:
    ledger = Ledger(
        Identity(
            task_id="task_kill",
            session_id="sess_kill",
            execution_id=execution_id,
            instance_id="inst_kill",
            agent_id="agent_kill",
            agent_profile_id="profile_kill",
        )
    )
    persister = Persister(ledger, path, delay=0)
    persister.start()
    print("ready", flush=True)
    seeds = [ServerSeed(name=f"srv{i}", source="profile", transport="http", target="https://example.test") for i in range(4)]
    attempt_id, _ = ledger.begin_attempt("session_new", seeds)
    n = 0
    while True:
        n += 1
        if n % 500 == 0:
            attempt_id, _ = ledger.begin_attempt("reset", seeds)
        ledger.record("delivered", attempt_id, f"srv{n % 4}", transport="http", target="https://example.test")
        ledger.record("tool_call_observed", attempt_id, f"srv{n % 4}", tool_name=f"tool{n}", outcome="ok")
        if n % 8 == 0:
            await asyncio.sleep(0)  # a yield, not a wait: lets the persister's timer run mid-burst


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
