"""The names a rule needs as well as every surface: the label of a delivered row, and the agent a report source
names, as people call it, and how a row agentctl's stdio witness observed reads (the gate words it too). The rest
of how a row reads is agentctl.present.rows (above this layer).
"""

from __future__ import annotations

from agentctl.evidence.contract.report import ServerRow

DELIVERED_LABEL = "delivered · connection unverified"
WITNESS = "agentctl's witness"

# Report sources are `<agent>:<contract>`; the agent's part, as people call the agent.
REPORTERS: dict[str, str] = {
    "claude": "Claude Code",
    "claude-agent-acp": "claude-agent-acp",
    "codex-acp": "codex-acp",
    "kiro": "Kiro CLI",
    "codex": "Codex",
    "cursor": "Cursor",
    "gemini": "Gemini CLI",
    "opencode": "OpenCode",
}


def reporter_name(source: str) -> str:
    """The agent a report source names, as people call it (`claude:stream-json-init` -> `Claude Code`)."""
    agent = source.partition(":")[0]
    return REPORTERS.get(agent, agent)




def row_label(row: ServerRow) -> str:
    """The row's status in words with what it rests on when that is agentctl's stdio witness, and the
    server's exit when the witness saw it exit after its last contact (mid-session too)."""
    plain = DELIVERED_LABEL if row.status == "delivered" else row.status
    if row.observed_by != "witness" or row.status_source != "observed":
        return plain
    if row.exited_at is not None and (exited := exited_words(row)) is not None:
        return f"{'failed, ' if row.status == 'failed' else ''}{exited} · observed by {WITNESS}"
    if row.status in ("connected", "active", "failed"):
        return f"{row.status} · observed by {WITNESS}"
    return plain


def exited_words(row: ServerRow) -> str | None:
    """`exited with code N` when the witness saw the server exit after every contact it observed, else None."""
    if row.exited_at is None:
        return None
    contacts = [t for t in (row.initialize_observed_at, row.tools_list_observed_at, row.tool_call_observed_at)
                if t is not None]
    if contacts and max(contacts) > row.exited_at:
        return None
    return "exited" if row.exit_code is None else f"exited with code {row.exit_code}"
