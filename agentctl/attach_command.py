"""`agentctl attach`: this terminal connected to a running daemon's agent terminal, over the control socket.

A WebSocket on the daemon's control server (`GET /v1/agent/terminal`, the same uid checks as every route). The
first viewer to come holds the keyboard, `--take` takes it from whoever does; the others watch read-only and are
told so, on connect and whenever the keyboard changes hands. The detach key (Ctrl-] unless `--detach-keys` says
otherwise) leaves the agent running. This terminal's settings are restored however the attachment ends.
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
        f"persisted. Exit codes: {EXIT_OK} detached or the agent exited, {EXIT_FAILED} the daemon refused "
        f"(no terminal, closed), {EXIT_NO_DAEMON} cannot connect.",
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
    try:
        return asyncio.run(_attach(str(path), key, args.take, args.detach_keys))
    except KeyboardInterrupt:
        return EXIT_OK


def _note(text: str) -> None:
    """A line of ours between the agent's output: from column 0, on its own line, in raw mode too."""
    os.write(2, f"\r\n[agentctl: {text}]\r\n".encode())


async def _attach(path: str, key: bytes, take: bool, key_name: str) -> int:
    import aiohttp

    from agentctl.agent.pty_host import get_window_size
    from agentctl.agent.pty_local import ScreenModes, raw_mode, write_all
    from agentctl.control.attach_protocol import TERMINAL_ROUTE, Closed, Hello, Notice, Resize, RoleChanged, ServerMessage
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
        outcome = ["the daemon closed the connection"]
        with contextlib.ExitStack() as stack:

            def on_input() -> None:
                try:
                    data = os.read(0, 65536)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    data = b""
                if not data:
                    loop.remove_reader(0)
                    return
                cut = data.find(key)
                if cut >= 0:
                    data = data[:cut]
                if data:
                    asyncio.ensure_future(ws.send_bytes(data))
                if cut >= 0:
                    outcome[0] = "detached; the agent keeps running"
                    asyncio.ensure_future(ws.close())

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
                    os.write(2, f"agentctl: attached to the agent's terminal ({event.viewers} viewer(s)): {role}; "
                                f"detach with {key_name}\r\nagentctl: {event.warning}\r\n".encode())
                    if interactive:
                        stack.enter_context(raw_mode(0))
                    loop.add_reader(0, on_input)
                    stack.callback(loop.remove_reader, 0)
                    loop.add_signal_handler(signal.SIGWINCH, on_winch)
                    stack.callback(loop.remove_signal_handler, signal.SIGWINCH)
                elif isinstance(event, RoleChanged):
                    _note("you hold the keyboard now" if event.role == "writer" else
                          "read-only now: another viewer holds the keyboard" if event.held else
                          "nobody holds the keyboard")
                elif isinstance(event, Notice):
                    _note(event.message)
                elif isinstance(event, Closed):
                    outcome[0] = event.reason
            if interactive:
                # The agent's screen stays as it is (it still runs): our line goes below it, not into it.
                with contextlib.suppress(OSError):
                    write_all(1, b"\x1b[999;1H" + modes.reset())
        # Back in cooked mode: a plain line.
        print(f"agentctl: {outcome[0]}", file=sys.stderr)
        return EXIT_OK
