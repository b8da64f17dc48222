"""agentctl's logging set-up: aiohttp's request errors as one rate-limited line of type, route and status."""

from __future__ import annotations

import logging

import pytest
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from agentctl.logs import RequestErrorLog, http_server_logging, route_of

SECRET = "Bearer tok3n-SECRET-value"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Lines:
    """What agentctl.http logged, read when asked (pytest swaps its record list between test phases)."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self._caplog = caplog

    def __iter__(self):
        return iter([r for r in self._caplog.records if r.name == "agentctl.http"])

    def __getitem__(self, index: int) -> logging.LogRecord:
        return list(self)[index]


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture) -> Lines:
    caplog.set_level(logging.DEBUG, logger="agentctl.http")
    return Lines(caplog)


def _refuse(log: RequestErrorLog, exc: BaseException) -> None:
    # Exactly how aiohttp's RequestHandler.handle_error calls its logger.
    log.exception("Error handling request from %s", "127.0.0.1", exc_info=exc)


def test_a_flood_of_one_kind_costs_one_line_per_interval_and_the_next_line_counts_the_rest(lines) -> None:
    clock = Clock()
    log = RequestErrorLog("daemon", interval=10.0, clock=clock)
    for _ in range(50):
        _refuse(log, LineTooLong(f"Got more than 8190 bytes when reading: {SECRET}", "8190"))
    _refuse(log, BadHttpMessage(f"Invalid header value char: {SECRET}"))  # another kind still shows
    clock.now += 10.5
    _refuse(log, LineTooLong(SECRET, "8190"))
    text = [r.getMessage() for r in lines if r.levelno >= logging.INFO]
    assert text == [
        "daemon: refused a malformed request: LineTooLong on (unparsed), status 400",
        "daemon: refused a malformed request: BadHttpMessage on (unparsed), status 400",
        "daemon: refused a malformed request: LineTooLong on (unparsed), status 400 (49 more in the last 10 s not shown)",
    ]
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in lines)
    assert not [r for r in lines if SECRET in r.getMessage()]


def test_a_handlers_own_failure_names_its_route_pattern_and_keeps_the_traceback_at_debug_only(lines) -> None:
    log = RequestErrorLog("hub page", clock=Clock())
    log.exception("Error handling request from %s", "127.0.0.1", exc_info=ValueError(SECRET))
    log.exception("Web-handler should return a response instance, got %r" % SECRET)
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (logging.ERROR, "hub page: a request failed: ValueError on (unparsed), status 500"),
        (logging.DEBUG, "hub page: traceback"),
        (logging.ERROR, "hub page: a handler failed: no exception"),
    ]
    assert lines[1].exc_info is not None  # only at DEBUG, where a traceback may quote a payload


def test_a_non_http_client_stays_a_debug_line(lines) -> None:
    log = RequestErrorLog("daemon", clock=Clock())
    log.debug("Error handling request from %s", "127.0.0.1", exc_info=BadHttpMessage(SECRET))
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (logging.DEBUG, "daemon: refused a malformed request: BadHttpMessage on (unparsed), status 400")]


async def test_a_failing_handler_is_logged_by_its_route_pattern_never_the_path_or_query_a_client_chose(lines) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    async def handler(request: web.Request) -> web.Response:
        raise ValueError(SECRET)

    app = web.Application()
    app.router.add_get("/v1/servers/{name}/test", handler)
    kwargs = http_server_logging(app, "t")  # the route middleware, and the logger for the runner
    assert isinstance(kwargs["logger"], logging.Logger) and kwargs["access_log"] is None
    server = TestServer(app)
    await server.start_server(**kwargs)  # the AppRunner keyword arguments, as the product passes them
    async with TestClient(server) as client:
        response = await client.get("/v1/servers/tok3n-SECRET/test?q=SECRET")
        assert response.status == 500
    assert [r.getMessage() for r in lines if r.levelno > logging.DEBUG] == [
        "t: a request failed: ValueError on /v1/servers/{name}/test, status 500"]
    assert not [r for r in lines if r.levelno > logging.DEBUG and "SECRET" in r.getMessage()]
    assert route_of(object()) == "(unmatched)"
