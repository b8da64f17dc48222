"""The agent side of the daemon: process supervision (spawn, stop the whole tree, exit evidence) and the bounded stderr window."""

from agentctl.agent.stderr_ring import StderrRing, StderrWindow
from agentctl.agent.supervisor import (
    AgentProcess,
    AgentStartError,
    ExitInfo,
    Supervisor,
    become_subreaper,
    build_agent_env,
)

__all__ = [
    "AgentProcess",
    "AgentStartError",
    "ExitInfo",
    "StderrRing",
    "StderrWindow",
    "Supervisor",
    "become_subreaper",
    "build_agent_env",
]
