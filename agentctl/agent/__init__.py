"""The agent side of the daemon: process supervision (spawn, stop the whole tree, exit evidence) and the bounded
stderr window (agentctl.agent.supervisor, agentctl.agent.stderr_ring), the ACP client and the passthrough CLIs.

Nothing is imported here: a daemon without an agent never loads the supervision stack (psutil, ctypes, PTYs)."""
