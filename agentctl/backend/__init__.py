"""Where the built-in MCP tools get their answers: one Backend interface, the daemon's identity injected."""

from agentctl.backend.base import DEFAULT_DEADLINE, OPS, TASK_STATUSES, Backend, BackendError
from agentctl.backend.embedded import EmbeddedBackend

__all__ = ["DEFAULT_DEADLINE", "OPS", "TASK_STATUSES", "Backend", "BackendError", "EmbeddedBackend"]
