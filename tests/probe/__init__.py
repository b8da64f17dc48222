"""Tests for the developer probe (`agentctl probe mcp`)."""
