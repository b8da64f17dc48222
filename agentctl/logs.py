"""Logging set-up: agentctl's own lines on stderr, and third-party loggers that leak ids or bodies kept quiet."""

from __future__ import annotations

import logging
import sys

# These loggers print bearer-like ids or payloads at INFO/DEBUG (see NOTES-SDK.md "Logging hazards"):
# the SDK logs Mcp-Session-Id values, the SSE transport logs message bodies, aiohttp's access log shows
# the SSE session_id query parameter. They never log below WARNING, whatever the daemon's level.
QUIET_LOGGERS = (
    "mcp",
    "mcp_types",
    "sse_starlette",
    "uvicorn",
    "uvicorn.access",
    "uvicorn.error",
    "aiohttp.access",
    "aiohttp.server",
    "aiohttp.web",
    "httpx",
    "httpcore",
    "httpx2",
    "httpcore2",
    "opentelemetry",
    "acp",
)


def configure_logging(level: str = "info") -> None:
    numeric = getattr(logging, level.upper(), logging.INFO)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("agentctl %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("agentctl").setLevel(numeric)
    quiet_third_party()


def quiet_third_party() -> None:
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def log_failure(logger: logging.Logger, message: str, exc: BaseException, level: int = logging.ERROR) -> None:
    """Log an unexpected failure as one line with the exception's type only; the traceback at DEBUG.

    An exception's text or traceback may quote a payload (a pydantic error quotes its input), so neither
    reaches the default log level.
    """
    logger.log(level, "%s (%s)", message, type(exc).__name__)
    logger.debug("%s: traceback", message, exc_info=exc)
