"""The CLI commands that talk to one daemon over its control socket (built on agentctl.cli_support)."""
