"""What every reader of an agent's own report of its MCP servers shares; the readers themselves live in their
agent's module (agentctl/agent/clis/), the feed and the ACP tap that hand them the agent's output here.

Each parser reads the CLI's output as it passes through (agentctl/agent/reported/lines.py bounds the line and
drops every line that cannot be the event it wants), keeps only what the contract defines (which server,
its state, its tool count, a sanitized reason) for servers agentctl delivered, and never keeps the line.
The result is evidence of kind `agent_reported`, recorded with `record`.
"""

from agentctl.agent.reported.base import ServerReport, record

__all__ = ["ServerReport", "record"]
