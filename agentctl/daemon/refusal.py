"""Owns how `agentctl run` explains an agent's refusal, or a passthrough CLI's failed exit, on its own stderr:
the agent's (sanitized) error, the last lines of the agent's recent-output window under the usual warning, and
a hint for a known cause (the agents' own first, agentctl/agent/clis/; for a passthrough CLI, its own failure hints
before those: agentctl/agent/passthrough/explain.py).

The lines are the agent's own output and may hold anything it printed: they go to this terminal only,
never into the report, the diagnostics, the upstream or a log.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from agentctl.agent import clis
from agentctl.agent.passthrough.explain import explain_failure
from agentctl.agent.refusal_hints import RefusalHint, match_hint
from agentctl.present.output import STDERR_WARNING
from agentctl.safetext import neutralize

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.agent.component import Agent

LAST_LINES = 5
LINE_CHARS = 400  # a line's tail beyond this is cut: the window itself allows 16 KiB in one line


def explain_refusal(agent: Agent | None, what: str, error: str | None, *, err: TextIO | None = None,
                    last: int = LAST_LINES) -> None:
    """`what` completes "the agent ...": "refused the session", "refused the prompt", "did not start";
    `error` is the agent's error as the evidence records it (sanitized)."""
    lines: list[str] = []
    if agent is not None and agent.supervisor.process is not None:
        window = agent.supervisor.stderr_snapshot()
        lines = [_cut(neutralize(line, spaces=True)) for line in window.lines[-last:]]
    head = f"agentctl: the agent {what}: {neutralize(error or 'no reason given', spaces=True)}"
    _write(err or sys.stderr, head, lines, match_hint(error, lines, clis.refusal_table()),
           "(the agent wrote nothing to stderr)")


def explain_exit(agent: Agent, reason: str, *, err: TextIO | None = None, last: int = LAST_LINES) -> None:
    """A passthrough CLI ended on its own with an error (`reason`: "exited with code 1"). Its stdout and stderr
    share the window; its agent module reads its output (Claude Code's stream-json events) and knows its causes."""
    cli = getattr(agent, "cli", None)
    told = explain_failure(
        reason, agent.supervisor.stderr_snapshot().lines, last=last, fallback=clis.refusal_table(),
        hints=cli.failure_hints if cli is not None else (), readable=cli.readable_lines if cli is not None else None,
    )
    lines = [_cut(neutralize(line, spaces=True)) for line in told.lines]
    _write(err or sys.stderr, f"agentctl: the agent {neutralize(reason, spaces=True)}", lines, told.hint,
           "(the agent printed nothing)")


def _write(err: TextIO, head: str, lines: list[str], hint: RefusalHint | None, silent: str) -> None:
    out = [head]
    if lines:
        out.append(f"warning: {STDERR_WARNING}")
        out.append(f"the agent's last {len(lines)} line(s) of output (shown here only, never recorded):")
        out.extend(f"  | {line}" for line in lines)
    else:
        out.append(silent)
    if hint is not None:
        out.append(f"hint: {hint.text}")
    err.write("\n".join(out) + "\n")
    err.flush()


def _cut(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"
