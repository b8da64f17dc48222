"""The stdio side of endpoint tests: an MCP transport over a process we spawned, and stopping its whole tree.

We spawn the server ourselves (not through the SDK's stdio_client) to hold its pid from the first moment:
it is registered with the agent supervisor before any await, and its process group is ours to signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any, Final

MARKER_ENV: Final = "AGENTCTL_ENDPOINT_TEST"  # random per test: finds the test's escaped descendants
STOP_GRACE: Final = 1.0  # after stdin close + SIGTERM, before SIGKILL


@contextlib.asynccontextmanager
async def pipe_transport(proc: asyncio.subprocess.Process) -> AsyncIterator[Any]:
    """An MCP transport over a process we spawned ourselves (so we hold its pid and its group)."""
    import anyio
    import mcp_types
    from mcp.shared.message import SessionMessage

    read_writer, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, write_reader = anyio.create_memory_object_stream[Any](0)
    assert proc.stdout is not None and proc.stdin is not None
    stdout, stdin = proc.stdout, proc.stdin

    async def reader() -> None:
        async with read_writer:
            while True:
                try:
                    line = await stdout.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    return  # a line over the limit: treat as a closed connection
                if not line:
                    return
                line = line.strip()
                if not line:
                    continue
                try:
                    message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValueError:
                    continue  # stray output on stdout is not a frame (agents skip it too)
                try:
                    await read_writer.send(SessionMessage(message))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return

    async def writer() -> None:
        async with write_reader:
            async for item in write_reader:
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                try:
                    stdin.write(data.encode())
                    await stdin.drain()
                except (ConnectionError, OSError):
                    await read_writer.aclose()
                    return

    async def exit_watch() -> None:
        # Not proc.wait(): it also waits for pipe EOF, which a surviving child holding stdout delays forever.
        while proc.returncode is None:
            await anyio.sleep(0.05)
        await anyio.sleep(0.1)  # let the reader deliver what the server wrote before it exited
        await read_writer.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        tg.start_soon(exit_watch)
        try:
            yield read_stream, write_stream
        finally:
            tg.cancel_scope.cancel()


async def exit_code(proc: asyncio.subprocess.Process, wait: float = 0.5) -> int | None:
    deadline = time.monotonic() + wait
    while proc.returncode is None and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return proc.returncode


def _tree(pid: int, marker: str | None, since: float) -> list[Any]:
    """Every process of the test's tree: descendants of `pid`, and any process carrying our marker.

    The marker (an env variable with a random value) finds descendants that escaped with setsid after
    their parent exited, which neither the process group nor the parent chain can reach any more.
    """
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return []
    found: dict[int, Any] = {}
    with contextlib.suppress(Exception):
        for child in psutil.Process(pid).children(recursive=True):
            found[child.pid] = child
    if marker is not None:
        uid = os.getuid()
        for candidate in psutil.process_iter(["create_time", "uids"]):
            info = candidate.info
            if candidate.pid in found or candidate.pid in (pid, os.getpid()):
                continue
            if (info.get("create_time") or 0) < since - 1 or (info.get("uids") and info["uids"].real != uid):
                continue
            with contextlib.suppress(Exception):
                if candidate.environ().get(MARKER_ENV) == marker:
                    found[candidate.pid] = candidate
    return list(found.values())


def _signal_tree(pgid: int, others: list[Any], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for proc in others:
        with contextlib.suppress(Exception):
            proc.send_signal(sig)


def _gone(other: Any) -> bool:
    try:
        return not other.is_running() or other.status() == "zombie"
    except Exception:
        return True


def _alive(proc: asyncio.subprocess.Process, others: list[Any]) -> bool:
    return proc.returncode is None or not all(_gone(other) for other in others)


async def stop_process_tree(
    proc: asyncio.subprocess.Process, grace: float = STOP_GRACE, *, marker: str | None = None, since: float = 0.0
) -> None:
    """Close stdin, SIGTERM the group and every descendant, SIGKILL what is left after `grace`.

    Survives cancellation: the first SIGTERM is sent before any await, and if a wait is cancelled the
    SIGKILL goes out at once, so no exit path leaves the tree running.
    """
    others = _tree(proc.pid, marker, since)
    if proc.stdin is not None:
        with contextlib.suppress(Exception):
            proc.stdin.close()
    _signal_tree(proc.pid, others, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    try:
        deadline = loop.time() + grace
        while _alive(proc, others) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        if _alive(proc, others):
            _signal_tree(proc.pid, others, signal.SIGKILL)
        deadline = loop.time() + 2.0
        while _alive(proc, others) and loop.time() < deadline:
            await asyncio.sleep(0.02)
    except asyncio.CancelledError:
        _signal_tree(proc.pid, others, signal.SIGKILL)
        raise
    finally:
        for other in others:  # reap descendants re-parented to us (the daemon is a subreaper with an agent)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(other.pid, os.WNOHANG)
