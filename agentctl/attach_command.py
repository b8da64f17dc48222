"""`agentctl attach`: this terminal connected to a running daemon's agent terminal, over the control socket.

A WebSocket on the daemon's control server (`GET /v1/agent/terminal`, the same uid checks as every route). The
first viewer to come holds the keyboard, `--take` takes it from whoever does; the others watch read-only and are
told so, on connect and whenever the keyboard changes hands. The detach key (Ctrl-] unless `--detach-keys` says
otherwise) leaves the agent running. This terminal's settings are restored however the attachment ends.

Keys are sent whole and in order: a chunk of stdin is sent before the next is read, and the daemon reads no more
from this viewer while the agent has not read what came before (back-pressure to this terminal, or to the pipe).
Piped or redirected stdin is typed the same way, then the attachment detaches once it reached the agent. The daemon
says how many bytes of this viewer's keys reached the agent; when that is fewer than were read, one line says how
many did not and why, and the exit code is 1 (never 0 with input lost).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from typing import Any

from agentctl.cli_support import EXIT_FAILED, EXIT_NO_DAEMON, EXIT_OK, UsageError, command, fail, locate_socket

DEFAULT_DETACH = "ctrl-]"
KEY_CHUNK = 16 * 1024  # stdin read (and sent as one frame) at a time: within the daemon's frame bound


def detach_byte(spec: str) -> bytes:
    """`ctrl-X` (X a letter or one of @[\\]^_) as the byte that key sends; UsageError otherwise."""
    text = spec.strip().lower()
    if text.startswith("ctrl-") and len(text) == 6:
        key = text[5].upper()
        if "@" <= key <= "_":
            return bytes([ord(key) - 0x40])
    raise UsageError(f"--detach-keys: expected ctrl-<letter> or ctrl-] (one of ctrl-@ .. ctrl-_), not {spec!r}")


def add_attach_command(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "attach",
        help="attach this terminal to the running agent's terminal (passthrough, [agent] terminal = true)",
        description="Connect this terminal to the running daemon's passthrough agent terminal. The first viewer "
        "holds the keyboard; others watch read-only until it leaves or they take it with --take. The detach key "
        f"({DEFAULT_DETACH}) leaves the agent running. What the terminal shows may be sensitive; it is never "
        f"persisted. Piped or redirected input is typed whole, then it detaches. Exit codes: {EXIT_OK} detached or "
        f"the agent exited with all the input delivered, {EXIT_FAILED} the daemon refused (no terminal, closed) or "
        f"some input did not reach the agent (one line says how much), {EXIT_NO_DAEMON} cannot connect.",
    )
    p.add_argument("--socket", metavar="PATH", help="control socket path")
    p.add_argument("--execution", metavar="ID", help="execution id: finds <runtime dir>/<ID>/control.sock")
    p.add_argument("--take", action="store_true", help="take the keyboard from whoever holds it")
    p.add_argument("--detach-keys", metavar="KEY", default=DEFAULT_DETACH, help=f"the detach key ({DEFAULT_DETACH})")
    p.set_defaults(func=cmd_attach)


@command
def cmd_attach(args: argparse.Namespace) -> int:
    key = detach_byte(args.detach_keys)
    path = locate_socket(args)
    # A signal to agentctl (SIGINT from outside: in raw mode Ctrl-C is a key for the agent) is 128+N, never 0:
    # keys read and not yet confirmed may be lost.
    return asyncio.run(_attach(str(path), key, args.take, args.detach_keys))


def _note(text: str) -> None:
    """A line of ours between the agent's output: from column 0, on its own line, in raw mode too."""
    os.write(2, f"\r\n[agentctl: {text}]\r\n".encode())


class _Input:
    """What this viewer typed and what became of it: `read` bytes taken from stdin to send (the detach key and
    what follows it excluded), `delivered` as the daemon last said (`detached` / `closed`: final), `refused`
    bytes it refused at once (read-only)."""

    def __init__(self) -> None:
        self.read = 0
        self.delivered = 0
        self.refused = 0
        self.final = False
        self.detaching = False

    def lost_line(self, ending: str) -> str | None:
        """One line when some of the input did not reach the agent, else None."""
        lost = self.read - self.delivered
        if lost <= 0:
            return None
        if not self.final:
            return (f"up to {lost} bytes of your input may not have reached the agent: the connection closed "
                    "before the daemon said what it delivered")
        why = ("another viewer held the keyboard (--take takes it)" if self.refused >= lost else
               "the agent exited before reading them" if ending == "closed" else
               "the agent did not read them within the daemon's bound of the detach")
        return f"{lost} of the {self.read} bytes of your input did not reach the agent: {why}"


async def _read_stdin(loop: asyncio.AbstractEventLoop) -> bytes:
    """The next chunk of stdin (b"" at its end): a terminal, a pipe or a socket waited on, a regular file or
    /dev/null (which cannot be polled, and never block) read at once."""
    while True:
        ready = loop.create_future()
        try:
            loop.add_reader(0, lambda: ready.done() or ready.set_result(None))
        except PermissionError:
            pass  # not pollable: a file, read at once
        except (OSError, ValueError):
            return b""  # stdin closed
        else:
            try:
                await ready
            finally:
                loop.remove_reader(0)
        try:
            return os.read(0, KEY_CHUNK)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            return b""


async def _send_input(ws: Any, loop: asyncio.AbstractEventLoop, key: bytes | None, typed: _Input) -> None:
    """stdin to the agent, in order, each chunk sent before the next is read (the daemon reads no more while the
    agent has not read what came before: back-pressure to this terminal or the pipe). At the detach key (a
    terminal only), or at the end of piped or redirected input, asks to detach once the keys reached the agent."""
    import msgspec

    from agentctl.control.attach_protocol import Detach

    while True:
        data = await _read_stdin(loop)
        if not data:
            if key is not None:
                return  # the terminal hung up: watch on, as before
            break
        cut = data.find(key) if key is not None else -1
        if cut >= 0:
            data = data[:cut]
        if data:
            typed.read += len(data)
            await ws.send_bytes(data)
        if cut >= 0:
            break
    typed.detaching = True
    await ws.send_str(msgspec.json.encode(Detach()).decode())


async def _attach(path: str, key: bytes, take: bool, key_name: str) -> int:
    import aiohttp

    from agentctl.agent.pty_host import get_window_size
    from agentctl.agent.pty_local import ScreenModes, raw_mode, write_all
    from agentctl.control.attach_protocol import (
        TERMINAL_ROUTE,
        Closed,
        Detached,
        Hello,
        Notice,
        Resize,
        RoleChanged,
        ServerMessage,
    )
    from agentctl.control.client import ControlClient, ControlClientError
    import msgspec

    size = get_window_size(1) or get_window_size(0)
    query = {"take": "1" if take else "0"}
    if size is not None:
        query.update(rows=str(size.rows), cols=str(size.cols))
    decoder = msgspec.json.Decoder(ServerMessage)
    loop = asyncio.get_running_loop()
    modes = ScreenModes()
    interactive = os.isatty(0)
    typed = _Input()
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path)) as session:
        try:
            ws = await session.ws_connect(f"http://localhost{TERMINAL_ROUTE}", params=query, max_msg_size=0,
                                          autoping=True)
        except aiohttp.WSServerHandshakeError:
            # The refusal is JSON on the plain route; ask it again without the upgrade to say why.
            try:
                status, body = ControlClient(path).get(TERMINAL_ROUTE)
            except ControlClientError as exc:
                return fail(str(exc), EXIT_NO_DAEMON)
            return fail(f"the daemon refused to attach: {body.get('error', f'HTTP {status}')}", EXIT_FAILED)
        except (aiohttp.ClientConnectionError, OSError) as exc:
            return fail(f"cannot connect to the agentctl daemon at {path}: {exc}", EXIT_NO_DAEMON)
        outcome = "the daemon closed the connection"
        ending = "dropped"
        sender: asyncio.Task[None] | None = None
        with contextlib.ExitStack() as stack:

            def on_winch() -> None:
                now = get_window_size(1) or get_window_size(0)
                if now is not None:
                    asyncio.ensure_future(ws.send_str(msgspec.json.encode(Resize(rows=now.rows, cols=now.cols)).decode()))

            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    modes.see(msg.data)
                    await asyncio.to_thread(write_all, 1, msg.data)
                    continue
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                try:
                    event = decoder.decode(msg.data)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue  # a newer daemon's message this agentctl does not know
                if isinstance(event, Hello):
                    role = "you hold the keyboard" if event.role == "writer" else "read-only (another viewer holds the keyboard; --take takes it)"
                    how = f"detach with {key_name}" if interactive else "detaching at the end of the input"
                    os.write(2, f"agentctl: attached to the agent's terminal ({event.viewers} viewer(s)): {role}; "
                                f"{how}\r\nagentctl: {event.warning}\r\n".encode())
                    if interactive:
                        stack.enter_context(raw_mode(0))
                        loop.add_signal_handler(signal.SIGWINCH, on_winch)
                        stack.callback(loop.remove_signal_handler, signal.SIGWINCH)
                    if sender is None:
                        sender = loop.create_task(_send_input(ws, loop, key if interactive else None, typed))
                elif isinstance(event, RoleChanged):
                    _note("you hold the keyboard now" if event.role == "writer" else
                          "read-only now: another viewer holds the keyboard" if event.held else
                          "nobody holds the keyboard")
                elif isinstance(event, Notice):
                    typed.refused += event.undelivered
                    if event.message:
                        _note(event.message)
                elif isinstance(event, Closed):
                    outcome, ending = event.reason, "closed"
                    typed.delivered, typed.final = event.delivered, True
                elif isinstance(event, Detached):
                    outcome, ending = "detached; the agent keeps running", "detached"
                    typed.delivered, typed.final = event.delivered, True
            if sender is not None:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):  # the connection went: said below
                    await sender
            if interactive:
                # The agent's screen stays as it is (it still runs): our line goes below it, not into it.
                with contextlib.suppress(OSError):
                    write_all(1, b"\x1b[999;1H" + modes.reset())
        # Back in cooked mode: plain lines.
        print(f"agentctl: {outcome}", file=sys.stderr)
        lost = typed.lost_line(ending)
        if lost is not None:
            return fail(lost, EXIT_FAILED)
        return EXIT_OK
