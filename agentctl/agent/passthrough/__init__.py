"""Running a CLI that speaks no agent protocol, its MCP servers written in the CLI's own configuration format.

What this package shares: the Strategy protocol and the data a strategy produces (base.py), writing and
restoring workspace files (workspace.py, journal.py, recovery.py), acceptance and failure explanation, and the
daemon component (manager.py). Each CLI's own strategy lives in its agent module (agentctl/agent/clis/), looked
up there by the spec's `agent.strategy`.
"""

from agentctl.agent.passthrough.base import Strategy

__all__ = ["Strategy"]
