"""What the built-in endpoint advertises: one set of server capabilities, the same in both MCP eras.

The SDK derives the change-notification flags per era. For 2026-07-28 (`server/discover`, and a modern
client's view) every `listChanged` flag and `resources.subscribe` follow from `subscriptions/listen` being
served, so discovery claimed prompt and resource change notifications and resource subscriptions this
server never sends; for the handshake era (`initialize`) they come from options that are all off, which
denied the tool-list changes the endpoint does announce when its profile switches.

Both answers get the flags from what the endpoint does instead: a tool-list change is announced in both
eras (notifications/tools/list_changed to legacy connections, the subscription bus to modern listeners);
the prompt and resource lists never change and nothing can be subscribed to. Everything else in the
capabilities (which lists exist, logging, completions, extensions) is the SDK's own derivation from the
registered handlers, which does not depend on the era.
"""

from __future__ import annotations

from typing import Any, Final

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

# capability -> flag -> value, wherever the SDK's derivation lists that capability at all.
FLAGS: Final = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": False},
    "resources": {"listChanged": False, "subscribe": False},
}
_ANSWERS_WITH_CAPABILITIES: Final = frozenset({"initialize", "server/discover"})


def same_in_every_era(capabilities: Any) -> Any:
    """The capabilities with the change-notification flags set from what the endpoint does (in place)."""
    if isinstance(capabilities, dict):
        for name, flags in FLAGS.items():
            entry = capabilities.get(name)
            if isinstance(entry, dict):
                entry.update(flags)
    return capabilities


async def advertise_capabilities(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """SDK middleware: `initialize` and `server/discover` answer with the same capabilities."""
    result = await call_next(ctx)
    if ctx.method in _ANSWERS_WITH_CAPABILITIES and isinstance(result, dict):
        same_in_every_era(result.get("capabilities"))
    return result
