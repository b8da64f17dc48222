"""Test and integration helpers shipped with agentctl.

`agentctl.testing.reference_agent` is the reference ACP agent (console script
`agentctl-reference-agent`): a real agent on the ACP SDK that connects to the MCP
servers delivered in `session/new`, with modes for the failure cases the daemon
and the probe must handle. It imports the ACP and MCP SDKs lazily, so importing
this package is cheap.
"""
