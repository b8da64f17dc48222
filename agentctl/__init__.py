"""agentctl: the per-execution sidecar daemon (package version lives here)."""

__version__ = "0.1.0"
