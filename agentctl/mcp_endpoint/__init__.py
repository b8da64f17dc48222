"""The task-aware MCP endpoint: both MCP eras served through aiohttp, and the evidence of what reached the agent.

Importing the package first brings the MCP SDK in lean (agentctl.mcp_endpoint.sdk_imports).
"""

from agentctl.mcp_endpoint.sdk_imports import import_sdk_lean

import_sdk_lean()
