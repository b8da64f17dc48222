"""The passthrough strategy registry: one module per CLI, looked up by the spec's `agent.strategy`.

Names are listed here without importing the modules, so looking one up loads only that strategy. The
spec declares the same names as its `StrategyName` literal, so validating a spec needs nothing from here;
a test keeps the two lists equal.
"""

from __future__ import annotations

import importlib

from agentctl.agent.passthrough.base import Strategy

STRATEGY_NAMES: tuple[str, ...] = ("claude", "codex", "cursor", "gemini", "opencode")


def get_strategy(name: str | None) -> Strategy | None:
    """The strategy registered under `name`, or None (no strategy configured, or an unknown name)."""
    if name not in STRATEGY_NAMES:
        return None
    module = importlib.import_module(f"agentctl.agent.passthrough.{name}")
    strategy: Strategy = module.STRATEGY
    return strategy


__all__ = ["STRATEGY_NAMES", "Strategy", "get_strategy"]
