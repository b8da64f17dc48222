"""agentctl.lifecycle's StopStack and StackedService: what a start pushed is stopped in reverse, a failing stop
does not keep the rest from running, a cancelled stop ends the unwinding, and a start that fails stops what it
started before it raises."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agentctl.lifecycle import StackedService, StopStack

log = logging.getLogger("tests.stop_stack")


async def test_stops_run_in_reverse_order_of_push_sync_and_async_alike():
    calls: list[str] = []
    stops = StopStack(log)

    async def stop_b() -> None:
        calls.append("b")

    stops.push("a", lambda: calls.append("a"))
    stops.push("b", stop_b)
    stops.push("c", lambda: calls.append("c"))
    await stops.aclose()
    assert calls == ["c", "b", "a"]


async def test_a_failing_stop_is_logged_by_name_with_its_type_only_and_the_rest_still_run(caplog):
    calls: list[str] = []
    stops = StopStack(log)

    def broken() -> None:
        raise OSError("secret-canary-7e1 in the text")

    stops.push("first", lambda: calls.append("first"))
    stops.push("broken step", broken)
    stops.push("last", lambda: calls.append("last"))
    with caplog.at_level(logging.WARNING, logger=log.name):
        await stops.aclose()
    assert calls == ["last", "first"]
    assert "stopping broken step failed: OSError" in caplog.text
    assert "secret-canary-7e1" not in caplog.text


async def test_a_cancelled_stop_ends_the_unwinding_and_leaves_the_earlier_stops_to_the_abort():
    calls: list[str] = []
    stops = StopStack(log)
    entered = asyncio.Event()

    async def hangs() -> None:
        entered.set()
        await asyncio.Event().wait()

    stops.push("earlier", lambda: calls.append("earlier"))
    stops.push("hangs", hangs)
    closing = asyncio.create_task(stops.aclose())
    await entered.wait()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert calls == []


class Steps(StackedService):
    stop_log = log

    def __init__(self, calls: list[str], fail_at: str | None = None) -> None:
        self.calls = calls
        self.fail_at = fail_at

    async def _start(self, stops: StopStack) -> None:
        for name in ("store", "socket", "page"):
            if name == self.fail_at:
                raise RuntimeError(f"cannot start {name}")
            self.calls.append(f"start {name}")
            stops.push(name, lambda name=name: self.calls.append(f"stop {name}"))


async def test_a_stacked_service_stops_in_reverse_once_however_often_it_is_stopped():
    calls: list[str] = []
    async with Steps(calls) as service:
        assert calls == ["start store", "start socket", "start page"]
    await service.stop()
    assert calls[3:] == ["stop page", "stop socket", "stop store"]


async def test_a_stacked_service_whose_start_fails_stops_what_started_before_it_raises():
    calls: list[str] = []
    with pytest.raises(RuntimeError, match="cannot start page"):
        async with Steps(calls, fail_at="page"):
            pytest.fail("the body runs only after a start that succeeded")
    assert calls == ["start store", "start socket", "stop socket", "stop store"]
