"""The diagnostics checklist of a row and how it reads: its steps from the row's evidence, each step's mark,
label and text, the notes beside it, and an endpoint test's line (pure, no I/O). `agentctl diagnostics` lays
these out for the terminal, the hub page as JSON fields.
"""

from __future__ import annotations

from agentctl.evidence.contract.diagnostics import ChecklistStep
from agentctl.evidence.contract.report import Attempt, EndpointTestResult, ServerRow
from agentctl.evidence.reasons import meaning
from agentctl.present.tones import Tone
from agentctl.present.words import plural, when

REACHABILITY_NOTE = "reachability from the daemon, not attachment: the row's status is unchanged"
TEST_FAILURE_NOTE = "a failed test is a test failure, not proof of what happened inside the agent"
THIRD_PARTY_NOTE = (
    "no catalog: third-party servers connect directly to the agent, so agentctl never sees their tools/list"
)
ESTIMATE_NOTE = (
    "~N tokens: o200k_base over each tool's JSON definition; the agent may tokenize differently"
)
NOT_OBSERVABLE = "not observable: the agent connects to this server directly"

STEP_LABELS = {
    "configured": "configured",
    "filtered": "filtered",
    "unavailable": "unavailable",
    "delivered": "delivered",
    "session_accepted": "session accepted",
    "initialize": "initialize",
    "tools_loaded": "tools loaded",
    "used": "used",
    "disconnected": "disconnected",
    "failed": "failed",
}
# Steps only the built-in endpoint can observe: for third-party servers they are not evidence either way.
BUILTIN_ONLY = frozenset({"initialize", "tools_loaded", "used", "disconnected"})


def checklist(row: ServerRow, attempt: Attempt) -> list[ChecklistStep]:
    """The attachment steps of one row, in the order they happen, each observed or not, with its time."""
    steps = [ChecklistStep(step="configured", done=row.configured_at is not None, at=row.configured_at)]
    if row.status == "filtered" or row.filtered_at is not None:
        steps.append(ChecklistStep(step="filtered", done=True, at=row.filtered_at, detail=row.reason_code))
    if row.status == "unavailable" or row.unavailable_at is not None:
        steps.append(ChecklistStep(step="unavailable", done=True, at=row.unavailable_at, detail=row.reason_code))
    delivered = row.delivered_at is not None
    steps.append(ChecklistStep(step="delivered", done=delivered, at=row.delivered_at))
    accepted = delivered and attempt.accepted_at is not None
    steps.append(ChecklistStep(step="session_accepted", done=accepted, at=attempt.accepted_at if accepted else None))
    era = f"{row.era} era" if row.era else None
    steps.append(
        ChecklistStep(
            step="initialize", done=row.initialize_observed_at is not None, at=row.initialize_observed_at, detail=era
        )
    )
    count = plural(row.tool_count, "tool") if row.tool_count is not None else None
    listed = row.tools_list_observed_at
    steps.append(ChecklistStep(step="tools_loaded", done=listed is not None, at=listed, detail=count))
    used = None
    if row.tool_calls:
        used = plural(row.tool_calls, "call") + (f", {row.tool_errors} returned an error" if row.tool_errors else "")
    steps.append(ChecklistStep(step="used", done=row.tool_calls > 0, at=row.tool_call_observed_at, detail=used))
    steps.append(ChecklistStep(step="disconnected", done=row.disconnected_at is not None, at=row.disconnected_at))
    failed = row.status == "failed"
    reason = None
    if failed:
        reason = row.reason_code or "error"
    elif row.failed_at is not None and row.last_failure is not None:
        # Kept as detail: it happened, and a later contact of the same attempt superseded it.
        reason = f"earlier: {row.last_failure.reason_code}; no longer current (a later contact succeeded)"
    steps.append(ChecklistStep(step="failed", done=failed, at=row.failed_at if reason else None, detail=reason))
    return steps


def shown_steps(steps: list[ChecklistStep], builtin: bool) -> tuple[list[ChecklistStep], str | None]:
    """The steps a surface lists, and one `[-]` line for those only the built-in endpoint could have observed
    (not four identical ones; only once the server was handed to the agent: before that there is nothing the
    agent could have done). A third-party row's unobserved built-in-only steps are not evidence either way."""
    shown: list[ChecklistStep] = []
    hidden: list[str] = []
    for step in steps:
        if not builtin and step.step in BUILTIN_ONLY and not step.done:
            hidden.append(STEP_LABELS.get(step.step, step.step))
        else:
            shown.append(step)
    delivered = any(s.done for s in steps if s.step == "delivered")
    return shown, f"[-] {', '.join(hidden)}: {NOT_OBSERVABLE}" if hidden and delivered else None


def step_words(step: ChecklistStep) -> tuple[str, str, str]:
    """A step as both surfaces show it: its mark (`[x]` observed, `[ ]` not), its label, and its time or what
    its absence means. The step's detail is the caller's to place."""
    label = STEP_LABELS.get(step.step, step.step)
    if step.done or step.at:  # a step with a time but not done: a failure that is no longer current
        return ("[x]" if step.done else "[ ]"), label, when(step.at) if step.at else ""
    return "[ ]", label, "not observed" if step.step != "failed" else "no attachment error"


def _ms(value: float | None) -> str:
    return f"{float(value):.1f} ms" if isinstance(value, int | float) else "?"


def endpoint_test_line(test: EndpointTestResult) -> str:
    """One line for a stored or fresh endpoint test: labelled as reachability, failures as test failures."""
    tested = when(test.tested_at)
    if test.succeeded:
        count = test.tool_count
        listed = f", {plural(count, 'tool')} listed" if isinstance(count, int) else ""
        return f"reachable from the daemon{listed} in {_ms(test.latency_ms)} (tested {tested})"
    code = test.reason_code or "error"
    # The words first; the bare code (with the redacted summary) is the detail at the end.
    return f"test failed: {meaning(code)} (tested {tested}) · {code}" + (f": {test.summary}" if test.summary else "")


def endpoint_test_words(succeeded: bool) -> tuple[str, Tone, str]:
    """An endpoint test's headline, its tone, and the note that says what it proves."""
    if succeeded:
        return "reachable", "green", REACHABILITY_NOTE
    return "test failed", "red", TEST_FAILURE_NOTE
