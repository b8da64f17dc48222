"""Where the hub's socket and database are by default: the environment variables the hub's commands read, then
the runtime and state directories."""

from __future__ import annotations

import os
from pathlib import Path

ENV_HUB_SOCKET = "AGENTCTL_HUB_SOCKET"
ENV_HUB_DB = "AGENTCTL_HUB_DB"
ENV_HUB_RETENTION = "AGENTCTL_HUB_RETENTION"  # `hub serve --retention`'s default (agentctl.hub.retention)


def default_socket() -> Path:
    env = os.environ.get(ENV_HUB_SOCKET)
    if env:
        return Path(env).expanduser().absolute()
    from agentctl.control.socket import socket_base_dir

    return socket_base_dir() / "hub" / "hub.sock"


def default_db() -> Path:
    env = os.environ.get(ENV_HUB_DB)
    if env:
        return Path(env).expanduser().absolute()
    from agentctl.evidence.store import resolve_state_dir

    return resolve_state_dir(None) / "hub.sqlite3"

