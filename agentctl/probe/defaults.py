"""Owns the probe's defaults, apart from the probe itself: the parser is built for every agentctl command, and
agentctl.probe.run pulls in the MCP and ACP SDKs (~2 s)."""

from __future__ import annotations

DEFAULT_TIMEOUT = 15.0  # seconds from delivery for the agent to use the sentinel
MAX_TIMEOUT = 3600.0
