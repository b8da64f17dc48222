"""Owns how `agentctl run` explains an agent's refusal on its own stderr: the agent's (sanitized) error, the
last lines of the agent's recent-output window under the usual warning, and a hint for a known cause.

The lines are the agent's own output and may hold anything it printed: they go to this terminal only,
never into the report, the diagnostics, the upstream or a log.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from agentctl.agent.refusal_hints import match_hint
from agentctl.control.agent_routes import STDERR_WARNING
from agentctl.safetext import neutralize

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.agent.component import Agent

LAST_LINES = 5
LINE_CHARS = 400  # a line's tail beyond this is cut: the window itself allows 16 KiB in one line


def explain_refusal(agent: Agent | None, what: str, error: str | None, *, err: TextIO | None = None,
                    last: int = LAST_LINES) -> None:
    """`what` completes "the agent ...": "refused the session", "refused the prompt", "did not start";
    `error` is the agent's error as the evidence records it (sanitized)."""
    err = err or sys.stderr
    lines: list[str] = []
    if agent is not None and agent.supervisor.process is not None:
        window = agent.supervisor.stderr_snapshot()
        lines = [_cut(neutralize(line, spaces=True)) for line in window.lines[-last:]]
    out = [f"agentctl: the agent {what}: {neutralize(error or 'no reason given', spaces=True)}"]
    if lines:
        out.append(f"warning: {STDERR_WARNING}")
        out.append(f"the agent's last {len(lines)} line(s) of output (shown here only, never recorded):")
        out.extend(f"  | {line}" for line in lines)
    else:
        out.append("(the agent wrote nothing to stderr)")
    if (hint := match_hint(error, lines)) is not None:
        out.append(f"hint: {hint.text}")
    err.write("\n".join(out) + "\n")
    err.flush()


def _cut(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"
