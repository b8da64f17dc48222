"""The warnings that travel with the agent's own output and terminal screen, on every surface that shows them."""

from __future__ import annotations

# Over the control socket (`agentctl stderr`) and in the hub page's output panel.
STDERR_WARNING = (
    "recent agent output may contain sensitive data (prompts, file contents, tokens); "
    "it is kept only in memory, never persisted, and sent upstream only when the upstream asks for it"
)
# In the daemon's answer to the upstream's request for agent output or the terminal's screen.
STDERR_UPSTREAM_WARNING = (
    "recent agent output may contain sensitive data (prompts, file contents, tokens); it was sent only "
    "because the upstream asked, and must not be persisted or logged"
)
TERMINAL_UPSTREAM_WARNING = (
    "the agent's terminal screen may contain sensitive data (prompts, file contents, tokens); it was sent only "
    "because the upstream asked, and must not be persisted or logged"
)
# To a viewer attached to the agent's terminal (`agentctl attach`, the hello message).
ATTACH_WARNING = (
    "the agent's terminal may show sensitive data (prompts, file contents, tokens); it is kept only in memory "
    "and never persisted"
)
# On the hub page, before the terminal view is fetched (the daemon's answer carries its own warning too).
TERMINAL_WARNING = (
    "the agent's terminal screen may contain sensitive data (prompts, file contents, tokens); it is fetched "
    "from the daemon only when you ask, shown read-only, and never persisted"
)
