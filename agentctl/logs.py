"""Logging set-up: agentctl's own lines on stderr, one line per record with control characters made visible and
an ISO 8601 UTC timestamp, as text or JSON (`--log-format json`, for log shippers), with a journald priority
prefix when stderr is the journal; third-party loggers that leak ids or bodies kept quiet, and what aiohttp
servers may log about bad requests.
"""

from __future__ import annotations

import contextvars
import logging
import os
import sys
import time
from datetime import UTC, datetime
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agentctl.safetext import neutralize

if TYPE_CHECKING:  # pragma: no cover
    from aiohttp import web

# These loggers print bearer-like ids or payloads at INFO/DEBUG: the SDK logs Mcp-Session-Id values, the SSE transport logs message bodies, aiohttp's access log shows
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
# The logger of the transitions `agentctl run` shows in its own output (the agent's end, readiness, an attempt
# whose every server failed): at run's default level they are not logged a second time (agentctl.daemon.run).
TRANSITIONS = "agentctl.transitions"
LOG_FORMAT = "%(asctime)s agentctl %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")
# The fields of a JSON line, by their name there; nothing else of a record (a call site's `extra=`) is written.
JSON_FIELDS = {"asctime": "time", "levelname": "level", "name": "logger", "message": "message"}
# syslog(3) priorities, as journald reads a `<N>` prefix on a line of a service's stderr.
JOURNAL_PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))


def iso_time(record: logging.LogRecord) -> str:
    """The record's time as ISO 8601 in UTC with milliseconds (`2026-12-02T11:04:05.123Z`), whatever the TZ."""
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def journal_priority(levelno: int) -> int:
    return next((prio for level, prio in JOURNAL_PRIORITIES if levelno >= level), 7)


def stderr_is_journal(environ: Mapping[str, str] = os.environ, fd: int = 2) -> bool:
    """True when `fd` is the journal's stream: systemd sets JOURNAL_STREAM to its `device:inode`, and a
    service whose stderr was redirected elsewhere inherits the variable with another file's numbers."""
    dev, sep, ino = environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return bool(sep) and dev.isdigit() and ino.isdigit() and (st.st_dev, st.st_ino) == (int(dev), int(ino))


class SafeFormatter(logging.Formatter):
    """One record, one line: control, bidi and line-separator characters in the message (a session id with
    a newline, an escape sequence in a server name) are written as visible escapes, so no call site can
    forge a log line or drive the terminal. A traceback (DEBUG only) keeps its line breaks, each line
    neutralized the same way. With `journal`, each line starts with its journald priority (`<4>`)."""

    def __init__(self, fmt: str | None = None, *, journal: bool = False) -> None:
        super().__init__(fmt)
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if not self.journal:
            return text
        prefix = f"<{journal_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in text.split("\n"))

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return iso_time(record)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        return neutralize(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:  # noqa: N802
        return "\n".join(neutralize(line) for line in super().formatException(ei).split("\n"))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return "\n".join(neutralize(line) for line in super().formatStack(stack_info).split("\n"))


def json_formatter(journal: bool = False) -> logging.Formatter:
    """One JSON object per line (python-json-logger): time, level, logger and message only, the message
    neutralized like a text line's; a traceback (DEBUG only) as the `exc_info` string."""
    from pythonjsonlogger.json import JsonFormatter

    class SafeJsonFormatter(JsonFormatter):
        def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
            return iso_time(record)

        def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
            kept = {k: v for k, v in log_data.items() if k in JSON_FIELDS.values() or k == "exc_info"}
            kept["message"] = neutralize(str(kept.get("message", "")))
            return kept

        def format(self, record: logging.LogRecord) -> str:
            text = super().format(record)
            return f"<{journal_priority(record.levelno)}>{text}" if journal else text

    return SafeJsonFormatter(list(JSON_FIELDS), rename_fields=JSON_FIELDS)


def configure_logging(level: str = "info", log_format: str = "text") -> None:
    numeric = getattr(logging, level.upper(), logging.INFO)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    journal = stderr_is_journal()
    handler.setFormatter(json_formatter(journal) if log_format == "json" else SafeFormatter(LOG_FORMAT, journal=journal))
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


# ---- aiohttp servers ---------------------------------------------------------------------------------

# The matched route of the request being handled, set by `route_middleware` in the request's own task, so
# a 500 logged by aiohttp from that task can name it. A request that never parsed has none.
_ROUTE: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentctl_http_route", default=None)
REQUEST_LOG_INTERVAL = 10.0  # seconds: one line per interval and listener, the rest counted
UNPARSED = "(unparsed)"


def route_of(request: Any) -> str:
    """A route fit for a log line: the matched route's pattern (`/v1/servers/{name}/test`, never the path a
    client chose, never a query), else "(unmatched)"."""
    try:
        resource = request.match_info.route.resource
    except AttributeError:
        resource = None
    return resource.canonical if resource is not None else "(unmatched)"


async def route_middleware(request: Any, handler: Callable[[Any], Any]) -> Any:
    _ROUTE.set(route_of(request))
    return await handler(request)


route_middleware.__middleware_version__ = 1  # type: ignore[attr-defined]  # what @web.middleware sets


class RequestErrorLog(logging.Logger):
    """aiohttp's server logger for one listener (`AppRunner(app, logger=...)`): every "Error handling
    request" becomes one line with the exception's type, the route and the status only.

    aiohttp passes the parser's message as the exception, and it quotes the offending request line or
    header: a bearer token padded past the size limit, or sent with a control character, would reach the
    log whole. Here neither the message nor the traceback is ever written (a malformed request is the
    client's bytes, nothing of ours to debug); a handler's own failure (500) keeps its traceback at DEBUG.
    Lines are rate-limited per listener and exception type: one per `interval`, the next one counting
    what was not shown (a flood of one kind costs one line; a different kind of error still shows).
    """

    def __init__(self, listener: str, *, interval: float = REQUEST_LOG_INTERVAL,
                 clock: Callable[[], float] = time.monotonic, target: logging.Logger | None = None) -> None:
        super().__init__(f"agentctl.http.{listener}")
        self.listener = listener
        self.interval = interval
        self._clock = clock
        self._target = target or logging.getLogger("agentctl.http")
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def _log(self, level: int, msg: object, args: Any, exc_info: Any = None, **_: Any) -> None:  # type: ignore[override]
        exc = exc_info[1] if isinstance(exc_info, tuple) else exc_info
        if not isinstance(exc, BaseException):
            # aiohttp's other lines ("Web-handler should return a response instance, got <repr>") may
            # carry a value as well; the type of event is all they may say.
            self._emit(logging.ERROR if level >= logging.ERROR else logging.DEBUG, "a handler failed", None, exc)
            return
        code = getattr(exc, "code", None)
        client_fault = isinstance(code, int) and 400 <= code < 500
        what = "refused a malformed request" if client_fault else "a request failed"
        # aiohttp logs the first request of a non-HTTP client (TLS to a plain port) at DEBUG: keep that.
        level = logging.DEBUG if level < logging.WARNING else logging.WARNING if client_fault else logging.ERROR
        self._emit(level, what, _ROUTE.get() or UNPARSED, exc, code if client_fault else 500)

    def _emit(self, level: int, what: str, route: str | None, exc: Any, status: int | None = None) -> None:
        if not self._target.isEnabledFor(level):
            return
        kind = type(exc).__name__ if isinstance(exc, BaseException) else "no exception"
        now = self._clock()
        if level > logging.DEBUG:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval:
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                return
            self._last[kind] = now
        more = self._suppressed.pop(kind, 0)
        where = f" on {route}" if route else ""
        line = f"{self.listener}: {what}: {kind}{where}" + (f", status {status}" if status else "")
        if more:
            line += f" ({more} more in the last {self.interval:g} s not shown)"
        self._target.log(level, "%s", line)
        if status == 500 and isinstance(exc, BaseException):
            self._target.debug("%s: traceback", self.listener, exc_info=exc)


def http_server_logging(app: web.Application, listener: str) -> dict[str, Any]:
    """Install the route middleware first in `app` (before it is frozen) and return the AppRunner keyword
    arguments that route aiohttp's request errors through `RequestErrorLog` for `listener`."""
    app.middlewares.insert(0, route_middleware)
    return {"logger": RequestErrorLog(listener), "access_log": None}
