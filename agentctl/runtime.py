"""Process-wide facts for agentctl's long-lived servers (the daemon, the hub): the start-up heap kept out of
the garbage collector, and which environment variables belong to the service manager that started them or to
the daemon itself."""

from __future__ import annotations

import gc

# Variables that belong to the daemon's service manager, never to anything the daemon spawns (an agent
# holding NOTIFY_SOCKET could tell systemd the daemon is ready or stopping).
SERVICE_MANAGER_ENV_PREFIXES = ("NOTIFY_SOCKET", "WATCHDOG_", "LISTEN_")
# Environment of the daemon that is the daemon's own business, never the agent's.
DAEMON_SECRET_ENV_PREFIXES = ("AGENTCTL_", "CREDENTIALS_DIRECTORY")


def freeze_startup_heap() -> None:
    """Move every object alive after start-up into the collector's permanent generation.

    The MCP and ACP SDKs leave ~120,000 tracked objects (pydantic schemas, modules) that never become garbage;
    a full collection walks them all (~40 ms here), and it comes round under steady request churn, showing
    up as tail latency. Frozen, a full collection walks only what was made since (gc.freeze docs: collect
    first so no garbage is frozen with them). Later imports and state are collected as usual.
    """
    gc.collect()
    gc.freeze()
