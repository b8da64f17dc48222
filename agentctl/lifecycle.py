"""Running a service until SIGTERM or SIGINT: signals captured from before start-up, a drain from any point, a second signal (or the shutdown bound) cutting the drain short for a fast exit.

One `serve_until_signalled()` serves `agentctl serve`, `agentctl run` and `agentctl hub serve`, modelled on
uvicorn's server lifecycle (capture signals first, start, serve, drain; a second signal forces the exit):

1. `Signals.install()` records SIGTERM/SIGINT from the first line of the command, before the heavy imports
   and before the event loop exists; once the loop runs they are handled through it.
2. start: a stop signal during start-up cancels it; a start cancelled midway stops what it had started
   (the service's own start is written to undo itself), and the drain follows as for any stop.
3. serve: `main(info)` runs (print the ready line and wait for the service's own stop trigger, or do the
   job); a stop signal cancels it.
4. drain: `stop()`, bounded by `shutdown_timeout`. A further signal, or the bound, cancels it and runs
   `abort()`: the fast end (kill what still runs, write what must be written, remove the socket file).

The caller turns the `Outcome` into an exit status. A non-main thread (an embedding test) cannot own
signals: there `Signals` captures nothing and only the service's own trigger ends it.

A service's own start and stop are written with a `StopStack`: each start step pushes its stop, and the stop
runs them in reverse, so the order of the one is the mirror of the other by construction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Self, TypeVar

log = logging.getLogger("agentctl.lifecycle")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How long abort() may take after a drain was cut short (it is written to be fast; this bounds it anyway).
ABORT_TIMEOUT = 3.0
# After the service's coroutine: how long worker threads (file writes, store closes) may take to finish.
THREADS_TIMEOUT = 5.0

T = TypeVar("T")
Stopper = Callable[[], Awaitable[object] | None]


class StopStack:
    """The stops of what a service started, run in reverse order of start by an AsyncExitStack.

    Each start step pushes its own stop, under a name for the log, as soon as there is something to stop. A
    stop that fails is logged by name and the rest still run: nothing may be left running. A stop that is
    cancelled (a drain cut short by a second signal or the shutdown bound) ends the unwinding at once: the
    service's `abort()` does the fast end instead of the remaining stops."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._stack = contextlib.AsyncExitStack()
        self._cut_short = False

    def push(self, name: str, stop: Stopper) -> None:
        async def run() -> None:
            if self._cut_short:
                return
            try:
                pending = stop()
                if pending is not None:
                    await pending
            except Exception as exc:  # the type only: an exception's text may quote what it was handling
                self._log.warning("stopping %s failed: %s", name, type(exc).__name__)
            except BaseException:
                self._cut_short = True
                raise

        self._stack.push_async_callback(run)

    async def enter(self, name: str, service: contextlib.AbstractAsyncContextManager[T]) -> T:
        """Start `service` (an async context manager) and push its stop."""
        started = await service.__aenter__()
        self.push(name, lambda: service.__aexit__(None, None, None))
        return started

    async def aclose(self) -> None:
        await self._stack.aclose()


class StackedService:
    """A service that is an async context manager over its StopStack: `_start(stops)` starts it step by step,
    each step pushing its own stop; a start that fails or is cancelled stops what it started, in reverse, before
    it raises; `stop()` runs the stops in reverse and is idempotent."""

    stop_log: ClassVar[logging.Logger] = log
    _stops: StopStack | None = None  # the stops of what started, while running

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self._stops = StopStack(self.stop_log)
        try:
            await self._start(self._stops)
        except BaseException:
            await self.stop()
            raise

    async def _start(self, stops: StopStack) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        stops, self._stops = self._stops, None
        if stops is not None:
            await stops.aclose()


class Signals:
    """SIGTERM and SIGINT as they arrive, counted: before the event loop through signal.signal, inside it
    through the loop's own handlers (so a signal wakes the loop at once), after it recorded again."""

    def __init__(self, *, capture: bool = True) -> None:
        self.capture = capture  # False: leave the process's signals alone (a service embedded in a test)
        self.received: list[int] = []
        self._saved: dict[int, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def install(self) -> Signals:
        """Start recording (main thread only; elsewhere this captures nothing). Idempotent."""
        if not self.capture or self._saved or threading.current_thread() is not threading.main_thread():
            return self
        for sig in STOP_SIGNALS:
            self._saved[sig] = signal.signal(sig, self._record)
        return self

    def uninstall(self) -> None:
        """Give the signals back their previous handlers."""
        for sig, previous in self._saved.items():
            signal.signal(sig, previous)
        self._saved.clear()

    @property
    def installed(self) -> bool:
        return bool(self._saved)

    def _record(self, signum: int, frame: object) -> None:
        self._received(signum)

    def _received(self, signum: int) -> None:
        self.received.append(signum)
        name = signal.Signals(signum).name
        if len(self.received) == 1:
            log.info("%s received: stopping", name)
        else:
            log.warning("%s received again: exiting without finishing the drain", name)
        for count, waiter in list(self._waiters):
            if len(self.received) >= count and not waiter.done():
                waiter.set_result(None)

    def attach(self) -> None:
        """Handle the signals through the running loop from now on."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        if not self._saved:
            return
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self._received, int(sig))

    def detach(self) -> None:
        """Back to recording outside the loop (the loop's handler removal would restore the default)."""
        loop, self._loop = self._loop, None
        if loop is None or not self._saved:
            return
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
            signal.signal(sig, self._record)

    async def wait(self, count: int) -> None:
        """Until `count` stop signals have arrived in all."""
        if len(self.received) >= count:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (count, waiter)
        self._waiters.append(entry)
        try:
            await waiter
        finally:
            self._waiters.remove(entry)


@dataclass
class Outcome(Generic[T]):
    """How a service run ended. `signum`: the stop signal that ended it (None: it ended on its own).
    `forced`: the drain was cut short (by `forced_by`, a signal number, or None for the shutdown bound).
    `result`: what `main` returned, when it ran to its end."""

    signum: int | None = None
    forced: bool = False
    forced_by: int | None = None
    result: T | None = None
    started: bool = False


async def _cancel(task: asyncio.Task[Any] | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    await asyncio.wait({task}, timeout=ABORT_TIMEOUT)  # bounded: a task may take its time to unwind


async def serve_until_signalled(
    *,
    start: Callable[[], Awaitable[Any]],
    stop: Callable[[], Awaitable[None]],
    shutdown_timeout: float,
    main: Callable[[Any], Awaitable[T]] | None = None,
    abort: Callable[[], Awaitable[None]] | None = None,
    signals: Signals | None = None,
) -> Outcome[T]:
    """Start, run `main(start's result)` (default: until a signal), then drain; see the module docstring.

    An exception from `start` (a start-up failure, already undone by the service) propagates once the
    signals are given back; one from `main` propagates after the drain."""
    owned = signals is None
    sigs = (signals or Signals()).install()
    sigs.attach()
    outcome: Outcome[T] = Outcome()
    interrupted: list[asyncio.Task[Any]] = []  # tasks a signal cancelled: the drain waits for their own cleanup
    main_error: BaseException | None = None
    signalled = asyncio.ensure_future(sigs.wait(1))
    try:
        if sigs.received:
            outcome.signum = sigs.received[0]  # before start-up: nothing to start, nothing to drain
        else:
            starting = asyncio.ensure_future(start())
            await asyncio.wait({starting, signalled}, return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                outcome.signum = sigs.received[0]
                starting.cancel()
                interrupted.append(starting)
            else:
                info = starting.result()  # a start-up failure raises here
                outcome.started = True
                running = asyncio.ensure_future(_main_or_forever(main, info))
                await asyncio.wait({running, signalled}, return_when=asyncio.FIRST_COMPLETED)
                if running.done():
                    try:
                        outcome.result = running.result()
                    except BaseException as exc:  # noqa: BLE001 - re-raised after the drain
                        main_error = exc
                else:
                    outcome.signum = sigs.received[0]
                    running.cancel()
                    interrupted.append(running)
        if outcome.started or interrupted:
            await _drain(outcome, sigs, stop, abort, shutdown_timeout, interrupted)
    finally:
        signalled.cancel()
        sigs.detach()
        if owned:
            sigs.uninstall()
    if main_error is not None:
        raise main_error
    return outcome


async def _drain(
    outcome: Outcome[Any],
    sigs: Signals,
    stop: Callable[[], Awaitable[None]],
    abort: Callable[[], Awaitable[None]] | None,
    shutdown_timeout: float,
    interrupted: list[asyncio.Task[Any]],
) -> None:
    async def drain() -> None:
        for task in interrupted:
            await asyncio.wait({task})  # its own cleanup (a cancelled start stops what it started)
            if not task.cancelled() and task.exception() is not None:
                log.debug("interrupted by a stop signal: %s", type(task.exception()).__name__)
        await stop()

    draining = asyncio.ensure_future(drain())
    forcing = asyncio.ensure_future(sigs.wait(len(sigs.received) + 1))
    try:
        done, _ = await asyncio.wait({draining, forcing}, timeout=shutdown_timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        forcing.cancel()
    if draining in done:
        if draining.exception() is not None:
            log.warning("stopping failed: %s", type(draining.exception()).__name__)
        return
    outcome.forced = True
    if forcing in done:
        outcome.forced_by = sigs.received[-1]
    else:
        log.warning("shutdown exceeded %.1f s; exiting anyway", shutdown_timeout)
    await _cancel(draining)
    for task in interrupted:
        await _cancel(task)
    if abort is not None:
        try:
            await asyncio.wait_for(abort(), ABORT_TIMEOUT)
        except (TimeoutError, Exception) as exc:  # noqa: BLE001 - the exit goes ahead regardless
            log.warning("the fast exit's clean-up did not finish: %s", type(exc).__name__)


async def _main_or_forever(main: Callable[[Any], Awaitable[T]] | None, info: Any) -> T | None:
    """`main(info)`'s result, or (no main) nothing until cancelled by a signal."""
    if main is None:
        await asyncio.Event().wait()
        return None
    return await main(info)


def run(main: Coroutine[Any, Any, int], *, threads_timeout: float = THREADS_TIMEOUT) -> int:
    """asyncio.run for a command's exit status, except that a worker thread stuck after the coroutine ended
    (a write to a hung disk) cannot hold the process: after `threads_timeout` the process exits without it
    (os._exit, once stdout and stderr are flushed). asyncio.run would wait for such a thread for ever."""
    from concurrent.futures import ThreadPoolExecutor

    loop = asyncio.new_event_loop()
    executor = ThreadPoolExecutor(thread_name_prefix="agentctl-worker")
    loop.set_default_executor(executor)
    try:
        code = loop.run_until_complete(main)
    finally:
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=threads_timeout))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
    # The workers' end, waited for from a helper thread so the wait itself is bounded.
    executor.shutdown(wait=False, cancel_futures=True)
    waiter = threading.Thread(target=executor.shutdown, name="agentctl-worker-join", daemon=True)
    waiter.start()
    waiter.join(threads_timeout)
    if waiter.is_alive():
        log.warning("a worker thread did not finish within %.0f s of the stop; exiting without it", threads_timeout)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        logging.shutdown()
        os._exit(code)
    return code
