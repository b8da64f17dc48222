"""The names a rule needs as well as every surface: the label of a delivered row, and the agent a report source
names, as people call it. The rest of how a row reads is agentctl.present.rows (above this layer).
"""

from __future__ import annotations

DELIVERED_LABEL = "delivered · connection unverified"

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


