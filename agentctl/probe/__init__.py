"""The developer probe (`agentctl probe mcp -- CMD`): a sentinel MCP server injected into a real ACP session.

sentinel.py owns the sentinel server (loopback HTTP + SSE, and the probe side of the stdio variant);
stdio_sentinel.py is the stdio sentinel process the agent spawns; run.py is the probe flow; report.py
renders the findings (the ProbeReport contract type); commands.py registers the CLI command.
"""
