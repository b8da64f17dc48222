"""The client commands over the control socket: `status`, `report`, `health`, `stop`.

Each is `func(args) -> exit code`. Exit codes: 0 ok, 1 bad arguments or a failed request, 2 cannot
connect to the daemon. `health` also: 4 unhealthy (not live, or not ready with --ready, or a daemon that
answers but not sensibly). Errors are one line on stderr, prefixed `agentctl: `, never a traceback.

Import cost matters here (a health probe may run every few seconds): no aiohttp, no msgspec unless a
persisted report is read offline.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_USAGE = 1
EXIT_UNREACHABLE = 2
EXIT_UNHEALTHY = 4


class _Usage(Exception):
    """Bad or missing arguments (exit 1)."""


class _ClientParser(argparse.ArgumentParser):
    """Bad arguments exit 1 (argparse's default 2 means "cannot connect" for these commands)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"agentctl: {self.prog}: {message}\n")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        # A subcommand is parsed with parse_known_args; unknown extras would reach the top-level parser,
        # which exits 2. Refuse them here instead.
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error("unrecognized arguments: " + " ".join(extras))
        return namespace, extras


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0: {text!r}")
    return value


def add_client_commands(subparsers: Any) -> None:
    """Register status, report, health and stop on an argparse subparsers action."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--socket", metavar="PATH", help="control socket path")
    common.add_argument(
        "--execution",
        metavar="ID",
        help="execution id: finds <runtime dir>/<ID>/control.sock (runtime dir: $AGENTCTL_SOCKET, "
        "$RUNTIME_DIRECTORY, or the user runtime dir)",
    )
    common.add_argument("--json", action="store_true", help="print the daemon's JSON instead of text")
    common.add_argument(
        "--timeout", metavar="SECONDS", type=_positive_float, default=5.0, help="give up after this long (5)"
    )

    saved = getattr(subparsers, "_parser_class", None)
    if saved is not None:
        subparsers._parser_class = _ClientParser
    try:
        p = subparsers.add_parser(
            "status", parents=[common], help="show the MCP attachment status of the current attempt"
        )
        p.set_defaults(func=cmd_status)

        p = subparsers.add_parser(
            "report",
            parents=[common],
            help="print the whole attachment report (current and previous attempts)",
            description="Print the report from the running daemon, or read a persisted one offline with "
            "--state-dir DIR --execution ID.",
        )
        p.add_argument("--state-dir", metavar="DIR", help="read the persisted report offline from this state dir")
        p.set_defaults(func=cmd_report)

        p = subparsers.add_parser(
            "health",
            parents=[common],
            help="exit 0 when healthy, 2 when the daemon cannot be reached, 4 when unhealthy",
            description="Liveness (or readiness with --ready) of the daemon. Exit codes: 0 healthy, "
            "1 bad arguments, 2 cannot connect, 4 unhealthy.",
        )
        p.add_argument("--ready", action="store_true", help="check readiness instead of liveness")
        p.set_defaults(func=cmd_health)

        p = subparsers.add_parser("stop", parents=[common], help="ask the daemon to stop (it drains, then exits)")
        p.set_defaults(func=cmd_stop)

        from agentctl.control.session_commands import add_session_commands

        add_session_commands(subparsers, common)

        from agentctl.diagnostics.commands import add_diagnostics_commands

        add_diagnostics_commands(subparsers, common)
    finally:
        if saved is not None:
            subparsers._parser_class = saved


# -- helpers ------------------------------------------------------------------------------------------


def _err(message: str, code: int) -> int:
    from agentctl.safetext import neutralize

    print(f"agentctl: {neutralize(message)}", file=sys.stderr)
    return code


def _out(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `agentctl report | head`: the reader left; that is fine
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass


def _print_json(data: Any) -> None:
    _out(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def locate_socket(args: argparse.Namespace) -> Path:
    """--socket, else --execution (via resolve_socket_path), else the only live daemon under the runtime dir.

    Sockets that nobody listens on any more (daemons killed without removing theirs) are removed, said so
    on stderr, and never count as a daemon."""
    from agentctl.control.client import ControlUnavailable
    from agentctl.control.socket import (
        ControlSocketError,
        check_path_length,
        discover,
        remove_stale,
        resolve_socket_path,
        socket_base_dir,
    )

    try:
        if getattr(args, "socket", None) or getattr(args, "execution", None):
            path = resolve_socket_path(args.socket, args.execution or "")
            check_path_length(path)
            return path
        base = socket_base_dir()
    except ControlSocketError as exc:
        raise _Usage(str(exc)) from None
    live, stale = discover(base)
    removed = [p.parent.name for p in stale if remove_stale(p)]
    if removed:
        print(f"agentctl: removed the stale control socket(s) of {len(removed)} dead daemon(s) under {base} "
              f"({', '.join(removed)})", file=sys.stderr)
    if len(live) == 1:
        return live[0]
    if live:
        ids = ", ".join(p.parent.name for p in live)
        raise _Usage(f"several daemons under {base} ({ids}); choose one with --execution ID or --socket PATH")
    if removed:
        raise ControlUnavailable(f"no agentctl daemon is running under {base} (only dead ones had left sockets)")
    raise _Usage(
        f"cannot locate the control socket: no --socket or --execution given, and no daemon socket under {base}"
    )


def _request(args: argparse.Namespace, method: str, route: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    from agentctl.control.client import ControlClient

    client = ControlClient(locate_socket(args), timeout=getattr(args, "timeout", 5.0))
    return client.get(route) if method == "GET" else client.post(route, body)


def _answer_error(status: int, body: dict[str, Any], route: str) -> str:
    message = body.get("error") if isinstance(body.get("error"), str) else None
    return f"the daemon refused {route} (HTTP {status})" + (f": {message}" if message else "")


def _call(
    args: argparse.Namespace, method: str, route: str, ok: tuple[int, ...] = (200,), body: Any = None
) -> dict[str, Any] | int:
    """The decoded body, or an exit code after printing one error line."""
    from agentctl.control.client import ControlError, ControlUnavailable

    try:
        status, body = _request(args, method, route, body)
    except _Usage as exc:
        return _err(str(exc), EXIT_USAGE)
    except ControlUnavailable as exc:
        return _err(str(exc), EXIT_UNREACHABLE)
    except ControlError as exc:
        return _err(str(exc), EXIT_USAGE)
    if status == 403:
        return _err(_answer_error(status, body, route), EXIT_UNREACHABLE)
    if status not in ok:
        return _err(_answer_error(status, body, route), EXIT_USAGE)
    return body


# -- commands -----------------------------------------------------------------------------------------


def _show(args: argparse.Namespace, body: Any, renderer: str) -> int:
    """Print a body as JSON (--json) or through the named renderer of agentctl.control.render."""
    if args.json:
        _print_json(body)
    else:
        from agentctl.control import render

        _out(getattr(render, renderer)(body, render.use_color(sys.stdout)))
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    body = _call(args, "GET", "/v1/status")
    if isinstance(body, int):
        return body
    return _show(args, body, "render_status")


def _report_offline(args: argparse.Namespace) -> int:
    if not args.execution:
        return _err("report --state-dir needs --execution ID (which execution's report to read)", EXIT_USAGE)
    if args.socket:
        return _err("report: use either --state-dir (offline) or --socket (live daemon), not both", EXIT_USAGE)
    import msgspec

    from agentctl.evidence.store import StoreError, read_report

    try:
        history = read_report(Path(args.state_dir).expanduser(), args.execution)
    except (StoreError, ValueError) as exc:
        return _err(str(exc), EXIT_USAGE)
    return _show(args, msgspec.to_builtins(history) if args.json else history, "render_report")


def cmd_report(args: argparse.Namespace) -> int:
    if getattr(args, "state_dir", None):
        return _report_offline(args)
    body = _call(args, "GET", "/v1/report")
    if isinstance(body, int):
        return body
    return _show(args, body, "render_report")


def cmd_health(args: argparse.Namespace) -> int:
    from agentctl.control.client import ControlError, ControlUnavailable

    try:
        status, body = _request(args, "GET", "/v1/health")
    except _Usage as exc:
        return _err(str(exc), EXIT_USAGE)
    except ControlUnavailable as exc:
        return _err(str(exc), EXIT_UNREACHABLE)
    except ControlError as exc:  # connected, but it did not answer sensibly: that daemon is not healthy
        return _err(str(exc), EXIT_UNHEALTHY)
    if status == 403:
        return _err(_answer_error(status, body, "/v1/health"), EXIT_UNREACHABLE)
    if status != 200:
        return _err(_answer_error(status, body, "/v1/health"), EXIT_UNHEALTHY)
    healthy = bool(body.get("ready") if args.ready else body.get("live"))
    if args.json:
        _print_json(body)
    else:
        from agentctl.control.render import render_health, use_color

        _out(render_health(body, args.ready, use_color(sys.stdout)))
    return EXIT_OK if healthy else EXIT_UNHEALTHY


def cmd_stop(args: argparse.Namespace) -> int:
    body = _call(args, "POST", "/v1/stop", ok=(200, 202))
    if isinstance(body, int):
        return body
    if args.json:
        _print_json(body)
    else:
        _out("stopping: the daemon drains and exits\n")
    return EXIT_OK
