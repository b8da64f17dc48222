"""The daemon: one execution's process. Importing it first brings the MCP SDK and aiohttp in lean, before any
daemon module imports them (agentctl.mcp_endpoint.sdk_imports)."""

import agentctl.mcp_endpoint  # noqa: F401
