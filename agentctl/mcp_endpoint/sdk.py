"""The MCP SDK's server object and its log lines: `MCPServer` without logging side effects, and redaction.

A light module (no aiohttp, no daemon imports) so the probe's stdio sentinel process can use it too.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Final

from mcp.server import MCPServer

from agentctl import __version__
from agentctl.mcp_endpoint.sdk_imports import missing


def new_mcp_server(name: str, **kwargs: Any) -> MCPServer[Any]:
    """`MCPServer(name, ...)` without its side effect on logging.

    The constructor calls `logging.basicConfig(INFO)` (a root handler at INFO would print the SDK's
    session-id lines). Whatever it adds to the root logger is removed again and the root level restored;
    rich is reported missing meanwhile, so the handler it would build (and remove) costs no import.
    """
    install_sdk_log_redaction()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        with missing("rich"):
            return MCPServer(name, version=__version__, **kwargs)
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)


_PLACEHOLDER = re.compile(r"%(\([^)]*\))?[-#0 +]*(\*|\d+)?(\.(\*|\d+))?[diouxXeEfFgGcrsa]")
_ID_LIKE = re.compile(
    r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}|[A-Za-z0-9_\-]{20,}"
)
_SDK_LOGGER_PREFIXES: Final = ("mcp", "mcp_types", "sse_starlette")


class SdkLogRedactor(logging.Filter):
    """Rewrites the SDK's INFO-and-above records so no value they carry reaches a log line.

    The SDK logs session ids (`Mcp-Session-Id`, SSE `session_id`), Host headers, tool error text and
    message bodies, some at WARNING and ERROR, often through f-strings. A record keeps its logger,
    level and the fixed part of its text: %-placeholders become `<…>`, an f-string message is cut at
    its first colon, anything id-like is masked, and a traceback becomes the exception's type name.
    DEBUG records are left alone (those loggers are held at WARNING by agentctl.logs).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.INFO or getattr(record, "_agentctl_redacted", False):
            return True
        try:
            template = str(record.msg)
            if record.args:
                text = _PLACEHOLDER.sub("<…>", template)
            else:
                text = template.split(":", 1)[0]
            text = _ID_LIKE.sub("<id>", text.replace("\n", " "))[:200]
            if record.exc_info and record.exc_info[0] is not None:
                text += f" ({record.exc_info[0].__name__})"
        except Exception:
            text = "MCP SDK log line (redacted)"
        record.msg = text
        record.args = None
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        record._agentctl_redacted = True
        return True


_REDACTOR = SdkLogRedactor()


def install_sdk_log_redaction() -> None:
    """Attach the redactor to every SDK logger that exists (they exist once the SDK is imported)."""
    manager = logging.Logger.manager
    names = [
        name
        for name in list(manager.loggerDict)
        if name.split(".", 1)[0] in _SDK_LOGGER_PREFIXES
    ]
    for name in (*_SDK_LOGGER_PREFIXES, *names):
        logger = logging.getLogger(name)
        if _REDACTOR not in logger.filters:
            logger.addFilter(_REDACTOR)
