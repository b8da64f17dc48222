"""The contract by surface: one module per surface, each with its own version where it has one.

`base` (the shared struct config and encoder), `report` (the versioned report a daemon persists and sends
upstream), `control` (the control API's answers and `--json` of the daemon's commands), `diagnostics` (the
diagnostics, tools and row views), `probe` (`agentctl probe`'s findings) and `hub` (`agentctl hub`'s
answers). The upstream frames are agentctl.upstream.protocol's. docs/contract.md says each surface's
compatibility rule. Import from the surface's module: this package re-exports nothing.
"""
