"""Owns the required-server gate's rule: from an attempt's rows, whether every required server is attached
(the prompt may go), still within its time, or not there (no prompt). Pure: no I/O, the clock is the caller's.

Attached means the strongest evidence that can exist for the server: the built-in one observed `active` on
agentctl's own endpoint (it listed its tools), a third-party one `connected` or `active` (the agent's own
report, or agentctl's stdio witness's observation). A witnessed server seen to exit before that blocks at once. A row that failed, or can never be delivered (filtered, unavailable), blocks at
once; one with neither after `timeout` seconds of the attempt blocks then. The result is a policy reading
shown beside the evidence: it never changes a row, and a row not yet attached is still not a failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agentctl.evidence.contract.control import AttachedGate, RequiredServer
from agentctl.evidence.contract.report import (
    MAX_REQUIRED_SERVERS,
    MAX_SUMMARY_BYTES,
    Attempt,
    GateState,
    RequiredGate,
    RequiredReading,
    RequiredState,
    ServerRow,
    Source,
)
from agentctl.evidence.display import DELIVERED_LABEL, exited_words, reporter_name, row_label

_NEVER_DELIVERED = ("filtered", "unavailable")


def required_names(builtin_name: str, builtin_required: bool, profile_required: Sequence[str]) -> list[str]:
    """The servers the spec marks required, the built-in one first."""
    return ([builtin_name] if builtin_required else []) + [name for name in profile_required if name != builtin_name]


def judge(attempt: Attempt | None, required: Sequence[str], *, builtin_name: str, timeout: float,
          now: datetime, agent_exited: bool = False, no_report: str | None = None) -> AttachedGate | None:
    """The gate for `attempt` at `now` (None when nothing is required). Without an attempt it waits: the time
    counts from the attempt's start, the moment delivery began. Once the agent has exited nothing more can
    attach: what is not attached then blocks at once, rather than when the time is up. `no_report` says why
    this agent run gives no report of its servers (a passthrough CLI whose arguments ask for none): a third-party
    server nothing else observes can then never be proven attached, and blocks at once saying so."""
    if not required:
        return None
    if attempt is None:
        servers = [_server(name, _source(name, builtin_name), "waiting", "no attempt yet", "required, waiting")
                   for name in required]
        return AttachedGate(state="waiting", timeout=timeout, servers=servers)
    waited = max(0.0, (now - attempt.started_at).total_seconds())
    late = "the agent exited" if agent_exited else f"after {timeout:g} s" if waited >= timeout else None
    rows = {row.name: row for row in attempt.servers}
    servers = [_judge_row(name, rows.get(name), _source(name, builtin_name), late, timeout, no_report)
               for name in required]
    states = {server.state for server in servers}
    state: GateState
    if states & {"failed", "not_attached"}:
        state = "blocked"
    elif states == {"attached"}:
        state = "open"
    else:
        state = "waiting"
    return AttachedGate(state=state, timeout=timeout, waited=round(waited, 3), attempt_id=attempt.attempt_id,
                        servers=servers)


def _source(name: str, builtin_name: str) -> Source:
    return "builtin" if name == builtin_name else "profile"


def _server(name: str, source: Source, state: RequiredState, evidence: str, policy: str) -> RequiredServer:
    return RequiredServer(name=name, source=source, state=state, evidence=evidence, policy=policy)


def _judge_row(name: str, row: ServerRow | None, source: Source, late: str | None, timeout: float,
               no_report: str | None) -> RequiredServer:
    if row is None:
        # Not in this attempt at all: never configured for it, so nothing could ever attach it.
        return _server(name, source, "failed", "not in this attempt", "required, not delivered")
    if row.status == "failed" or row.status in _NEVER_DELIVERED:
        return _server(name, source, "failed", _evidence(row), f"required, {row.status}")
    if exited_words(row) is not None and not _attached(row, source):
        # The witness saw the server end before it was attached: nothing can attach it any more.
        return _server(name, source, "failed", _evidence(row), "required, exited")
    if _attached(row, source):
        return _server(name, source, "attached", _evidence(row), "required, attached")
    if source == "profile" and no_report is not None:
        return _server(name, source, "failed", f"{_evidence(row)}; {no_report}",
                       "required, cannot be proven attached")
    if late is not None:
        evidence = _evidence(row)
        if row.status == "delivered" and late.startswith("after"):
            evidence += f" for {timeout:g} s"
        policy = f"required, not attached {late}" if late.startswith("after") else f"required, not attached ({late})"
        return _server(name, source, "not_attached", evidence, policy)
    return _server(name, source, "waiting", _evidence(row), "required, waiting")


def _attached(row: ServerRow, source: Source) -> bool:
    if source == "builtin":
        # Agentctl's own endpoint sees it: only an observation counts, and only once the tools were listed.
        return row.status == "active" and row.status_source == "observed"
    if row.observed_by == "witness" and row.status_source == "observed":
        # The witness sees the server's own answers: attached once the agent has its tools, as on the built-in row.
        return row.status == "active"
    if row.status in ("connected", "active"):
        return True
    return row.reported is not None and row.reported.state == "connected"


def _evidence(row: ServerRow) -> str:
    """The row's evidence in words, with whose it is."""
    words = DELIVERED_LABEL if row.status == "delivered" else row.status
    if row.observed_by == "witness" and row.status_source == "observed":
        words = row_label(row)
    elif row.status_source == "reported" and row.reported is not None:
        words += f" · reported by {reporter_name(row.reported.source)}"
    elif row.status not in ("delivered", "configured"):
        words += " · observed by agentctl"
    detail = row.summary or row.reason_code
    if row.status in ("failed", "filtered", "unavailable") and detail:
        words += f": {detail}"
    return words


def reading(gate: AttachedGate, judged_at: datetime) -> RequiredGate:
    """The gate as the report keeps it on its attempt: the states and the policy words, bounded. The evidence
    words stay out: the row beside it is the evidence, and says it itself."""
    servers = [RequiredReading(name=server.name, state=server.state, policy=server.policy[:MAX_SUMMARY_BYTES])
               for server in gate.servers[:MAX_REQUIRED_SERVERS]]
    return RequiredGate(state=gate.state, timeout=gate.timeout, judged_at=judged_at, servers=servers)


def same_reading(old: RequiredGate | None, new: RequiredGate) -> bool:
    """Whether `new` says what `old` said (its time aside): the report changes only when the reading does."""
    return old is not None and old.state == new.state and old.timeout == new.timeout and old.servers == new.servers


def reading_line(gate: RequiredGate) -> str:
    """The reading in one line for beside the evidence: `blocked: kandev required, not attached after 30 s`."""
    if gate.state == "open":
        return "open: every required server attached"
    shown = [f"{server.name} {server.policy}" for server in gate.servers if server.state != "attached"]
    return f"{gate.state}: " + "; ".join(shown)


def gate_lines(gate: AttachedGate) -> list[str]:
    """One line per required server: its name, the gate's reading and the evidence it rests on."""
    return [f"{server.name}: {server.policy} ({server.evidence})" for server in gate.servers]
