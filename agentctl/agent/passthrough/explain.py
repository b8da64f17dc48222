"""Owns how a passthrough CLI that failed is explained to the person who ran it: the last lines of its recent
output as a person reads them, and a hint for a known cause. Pure: no I/O.

The output is the CLI's stdout and stderr window (agentctl/agent/stderr_ring.py): colour codes are dropped
(opencode paints its errors), blank lines skipped, and a strategy that knows its CLI's machine-readable
output (Claude Code's stream-json) says what each event means instead of showing a cut JSON line. The hint
comes from the CLI's own table first (`failure_hints`, in its module under agentctl/agent/clis/: the texts and
exit codes that CLI gives), then from the table ACP refusals use (`fallback`: the registry's `refusal_table`,
ending in agentctl/agent/refusal_hints.py's generic one). The exit
reason ("exited with code 41") is matched as the error, so a table may name a CLI's exit code.
What is returned may hold anything the CLI printed: the caller shows it on its terminal only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

from agentctl.agent.refusal_hints import HINTS, RefusalHint, match_hint

__all__ = ["LAST_LINES", "FailureExplanation", "explain_failure", "strip_colour"]

LAST_LINES = 5
# CSI sequences (colours, cursor moves) and OSC sequences (titles, links): a terminal's paint, not the message.
_PAINT = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


class FailureExplanation(NamedTuple):
    lines: list[str]  # the last lines of output, oldest first (raw text: the caller neutralizes it)
    hint: RefusalHint | None


def strip_colour(line: str) -> str:
    """`line` without its colour and cursor sequences (any other control character stays for neutralize)."""
    return _PAINT.sub("", line) if "\x1b" in line else line


def explain_failure(
    reason: str,
    window: Sequence[str],
    *,
    hints: Sequence[RefusalHint] = (),
    readable: Callable[[list[str]], list[str]] | None = None,
    last: int = LAST_LINES,
    fallback: Sequence[RefusalHint] = HINTS,
) -> FailureExplanation:
    """`reason`: the exit as ExitInfo says it; `window`: the output window's lines; `hints`: the CLI's own
    table; `readable`: the CLI's rewriting of its lines (machine-readable events into words); `fallback`: the
    table after it."""
    lines = [text for line in window if (text := strip_colour(line).strip())]
    if readable is not None:
        lines = [text for line in readable(lines) if (text := line.strip())]
    shown = lines[-last:] if last > 0 else []
    hint = match_hint(reason, shown, (*hints, *fallback))
    return FailureExplanation(shown, hint)
