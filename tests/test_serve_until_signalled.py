"""agentctl.lifecycle with real signals sent to this process (pytest runs tests in the main thread): a stop
signal at any point drains, a second one (or the shutdown bound) cuts the drain short, signals before the
event loop are kept."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from agentctl.lifecycle import Signals, serve_until_signalled
from tests.conftest import eventually


class Service:
    """Records what the lifecycle asked of it; each phase can be made to hang until cancelled."""

    def __init__(self, *, start_hangs: bool = False, stop_hangs: bool = False) -> None:
        self.calls: list[str] = []
        self.start_hangs = start_hangs
        self.stop_hangs = stop_hangs
        self.in_start = asyncio.Event()
        self.in_main = asyncio.Event()
        self.in_stop = asyncio.Event()

    async def start(self) -> str:
        self.calls.append("start")
        self.in_start.set()
        if self.start_hangs:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.calls.append("start undone")  # a cancelled start stops what it started
                raise
        return "info"

    async def main(self, info: str) -> str:
        self.calls.append(f"main {info}")
        self.in_main.set()
        await asyncio.Event().wait()
        return "never"

    async def stop(self) -> None:
        self.calls.append("stop")
        self.in_stop.set()
        if self.stop_hangs:
            await asyncio.Event().wait()
        self.calls.append("stopped")

    async def abort(self) -> None:
        self.calls.append("abort")


def kill_self(sig: int = signal.SIGTERM) -> None:
    os.kill(os.getpid(), sig)


async def run(service: Service, *, timeout: float = 30.0, signals: Signals | None = None, main: bool = True):
    return await serve_until_signalled(start=service.start, main=service.main if main else None, stop=service.stop,
                                       abort=service.abort, shutdown_timeout=timeout, signals=signals)


async def test_a_signal_during_start_up_cancels_the_start_and_drains_from_there():
    service = Service(start_hangs=True)
    task = asyncio.ensure_future(run(service))
    await asyncio.wait_for(service.in_start.wait(), 10)
    kill_self()
    outcome = await asyncio.wait_for(task, 10)
    assert (outcome.signum, outcome.forced, outcome.started) == (signal.SIGTERM, False, False)
    assert service.calls == ["start", "start undone", "stop", "stopped"]


async def test_a_signal_while_serving_stops_main_and_drains():
    service = Service()
    task = asyncio.ensure_future(run(service))
    await asyncio.wait_for(service.in_main.wait(), 10)
    kill_self(signal.SIGINT)
    outcome = await asyncio.wait_for(task, 10)
    assert (outcome.signum, outcome.forced, outcome.started, outcome.result) == (signal.SIGINT, False, True, None)
    assert service.calls == ["start", "main info", "stop", "stopped"]


async def test_a_second_signal_cuts_the_drain_short_and_aborts():
    service = Service(stop_hangs=True)
    task = asyncio.ensure_future(run(service))
    await asyncio.wait_for(service.in_main.wait(), 10)
    kill_self()
    await asyncio.wait_for(service.in_stop.wait(), 10)
    kill_self(signal.SIGINT)
    outcome = await asyncio.wait_for(task, 10)
    assert (outcome.signum, outcome.forced, outcome.forced_by) == (signal.SIGTERM, True, signal.SIGINT)
    assert service.calls == ["start", "main info", "stop", "abort"]


async def test_the_drain_is_bounded_by_the_shutdown_timeout():
    service = Service(stop_hangs=True)
    task = asyncio.ensure_future(run(service, timeout=0.5))
    await asyncio.wait_for(service.in_main.wait(), 10)
    started = time.monotonic()
    kill_self()
    outcome = await asyncio.wait_for(task, 10)
    assert 0.5 <= time.monotonic() - started < 5
    assert (outcome.forced, outcome.forced_by) == (True, None)
    assert service.calls == ["start", "main info", "stop", "abort"]


async def test_a_service_ending_on_its_own_drains_and_a_signal_meanwhile_forces_the_exit():
    service = Service(stop_hangs=True)

    async def main(info: str) -> str:
        return "done"

    task = asyncio.ensure_future(serve_until_signalled(start=service.start, main=main, stop=service.stop,
                                                       abort=service.abort, shutdown_timeout=30))
    await asyncio.wait_for(service.in_stop.wait(), 10)
    kill_self()  # the first signal, but the drain had begun: it is the "again"
    outcome = await asyncio.wait_for(task, 10)
    assert (outcome.signum, outcome.result, outcome.forced_by) == (None, "done", signal.SIGTERM)


def test_signals_before_the_event_loop_are_kept_and_nothing_is_started():
    signals = Signals().install()
    try:
        kill_self()  # e.g. while the CLI still imports: recorded, not fatal
        assert signals.received == [signal.SIGTERM]
        service = Service()
        outcome = asyncio.run(run(service, signals=signals))
        assert (outcome.signum, outcome.started) == (signal.SIGTERM, False)
        assert service.calls == []
        kill_self()  # after the loop, until the CLI gives the handlers back: still recorded
        assert signals.received == [signal.SIGTERM, signal.SIGTERM]
    finally:
        signals.uninstall()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


async def test_the_default_main_waits_for_a_signal():
    service = Service()
    task = asyncio.ensure_future(run(service, main=False))
    await asyncio.wait_for(service.in_start.wait(), 10)
    await eventually(lambda: signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None), 5, "the handler")
    kill_self()
    outcome = await asyncio.wait_for(task, 10)
    assert outcome.started and outcome.signum == signal.SIGTERM and service.calls == ["start", "stop", "stopped"]


async def test_a_start_up_failure_propagates_and_gives_the_signals_back():
    async def start() -> None:
        raise RuntimeError("cannot start")

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RuntimeError, match="cannot start"):
        await serve_until_signalled(start=start, stop=Service().stop, shutdown_timeout=1)
    assert signal.getsignal(signal.SIGTERM) == before


async def test_a_service_embedded_without_capture_leaves_the_process_signals_alone():
    before = signal.getsignal(signal.SIGTERM)
    service = Service()
    stop = asyncio.Event()

    async def main(info: str) -> None:
        assert signal.getsignal(signal.SIGTERM) == before
        await stop.wait()

    task = asyncio.ensure_future(serve_until_signalled(start=service.start, main=main, stop=service.stop,
                                                       shutdown_timeout=5, signals=Signals(capture=False)))
    await asyncio.wait_for(service.in_start.wait(), 10)
    stop.set()  # the service's own trigger is the only way out
    outcome = await asyncio.wait_for(task, 10)
    assert outcome.signum is None and service.calls == ["start", "stop", "stopped"]
