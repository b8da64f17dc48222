"""Owns what every command of the `agentctl` CLI shares: the parser class, the exit codes (agentctl.exit_codes'
one table), where the daemon's control socket is, talking to it, and printing (JSON, text, one-line errors made
safe).

Command modules (cli.py, commands/daemon_commands.py, commands/session_commands.py, commands/spec_commands.py,
diagnostics/commands.py, probe/commands.py, hub/commands.py) import from here and never from each other. No heavy
import at module level: every CLI call builds the parsers.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from agentctl.exit_codes import (
    EXIT_FAILED,
    EXIT_NO_DAEMON,
    EXIT_OK,
    EXIT_SIGNAL_BASE,
    EXIT_STILL_RUNNING,
    EXIT_TEST_FAILED,
    EXIT_UNHEALTHY,
    EXIT_USAGE,
)

if TYPE_CHECKING:  # pragma: no cover - every CLI call imports this module; the client only when it connects
    from agentctl.control.client import ControlClient

__all__ = [
    "EXIT_FAILED", "EXIT_NO_DAEMON", "EXIT_OK", "EXIT_SIGNAL_BASE", "EXIT_STILL_RUNNING", "EXIT_TEST_FAILED",
    "EXIT_UNHEALTHY", "EXIT_USAGE", "FILE_COMPLETION", "CommandExit", "CommandParser", "UsageError",
    "add_main_command", "add_offline_option", "call", "client_exit", "command", "connect", "daemon_options", "fail",
    "locate_socket", "out", "persisted_report", "positive_seconds", "print_json", "stdout_color", "wrapped",
]

T = TypeVar("T")

# An argument completed as a file name (shtab reads an action's `complete`; its value is shtab.FILE, spelt out so
# that building the parser does not import shtab).
FILE_COMPLETION = {"bash": "_shtab_compgen_files", "zsh": "_files", "tcsh": "f"}

# ---- parsing ----------------------------------------------------------------------------------------------


# Generic in typeshed only: subscripted at run time it is a TypeError.
if TYPE_CHECKING:  # pragma: no cover
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _SubParsers = argparse._SubParsersAction


class _DescribedSubParsers(_SubParsers):
    """Subcommands whose `--help` always says what they do: one given only a `help=` line gets it as its
    description too."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        summary = kwargs.get("help")
        if kwargs.get("description") is None and summary:
            kwargs["description"] = summary[:1].upper() + summary[1:] + ("" if summary.endswith(".") else ".")
        return super().add_parser(name, **kwargs)


class CommandParser(argparse.ArgumentParser):
    """Every parser of the CLI (installed with `add_subparsers(parser_class=...)`): a usage error is the usage
    and one `agentctl: COMMAND: message` line, and exits EXIT_USAGE whichever command it is; a mistyped
    command or choice is answered with the nearest one; every subcommand's `--help` has a description."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _DescribedSubParsers)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # argparse's own check, with "did you mean" for a near miss (its list of every choice otherwise).
        choices = action.choices
        if choices is not None and isinstance(value, str) and value not in choices:
            import difflib

            names = [c for c in choices if isinstance(c, str)]
            near = difflib.get_close_matches(value, names, n=1, cutoff=0.6)
            if near:
                raise argparse.ArgumentError(action, f"invalid choice: {value!r} (did you mean {near[0]}?)")
        super()._check_value(action, value)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        command = self.prog.removeprefix("agentctl").strip()
        self.exit(EXIT_USAGE, f"agentctl: {command + ': ' if command else ''}{message}\n")

    def parse_known_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> tuple[Any, list[str]]:
        # A subcommand is parsed with parse_known_args; unknown extras would otherwise reach the parent parser.
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            import difflib

            options = [o for o in self._option_string_actions if o.startswith("--")]
            near = difflib.get_close_matches(extras[0].partition("=")[0], options, n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]}?)" if extras[0].startswith("--") and near else ""
            self.error("unrecognized arguments: " + " ".join(extras) + hint)
        return namespace, extras


class UsageError(Exception):
    """Bad or missing arguments, found after parsing; one line (exit EXIT_USAGE)."""


class CommandExit(Exception):
    """A helper has already said why the command stops: it exits with `code`."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def command(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A command function: a UsageError becomes its one line and EXIT_USAGE, a CommandExit its code."""

    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except UsageError as exc:
            return fail(str(exc), EXIT_USAGE)
        except CommandExit as exc:
            return exc.code

    return run


def positive_seconds(maximum: float | None = None) -> Callable[[str], float]:
    """An argparse type: a number of seconds greater than 0 (and at most `maximum`)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (value > 0 and (maximum is None or value <= maximum)):
            bound = "greater than 0" + (f" and at most {maximum:g}" if maximum is not None else "")
            raise argparse.ArgumentTypeError(f"must be {bound}: {text!r}")
        return value

    return parse


def wrapped(*paragraphs: str, width: int = 79) -> str:
    """Paragraphs filled to `width`, for a description shown by RawDescriptionHelpFormatter (which keeps the
    epilog's examples as written and so leaves the description unwrapped too)."""
    import textwrap

    return "\n\n".join(textwrap.fill(p, width=width, break_on_hyphens=False) for p in paragraphs)


# Any: typeshed gives a parser's `parents` the subparsers' own parser class, while argparse takes any ArgumentParser
# as a parent (the shared option parsers below are plain ones).
def add_main_command(subparsers: argparse._SubParsersAction[Any], name: str, *, help: str, description: tuple[str, ...],
                     parents: tuple[argparse.ArgumentParser, ...] = (), aliases: tuple[str, ...] = ()
                     ) -> argparse.ArgumentParser:
    """A main command's parser: its description (a one-line summary first, which shell completion shows), then
    its examples and the variables it reads (agentctl.cli_help) as the epilog, laid out as written."""
    from agentctl.cli_help import command_epilog

    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, aliases=list(aliases), parents=list(parents), help=help, description=wrapped(*description),
        epilog=command_epilog(name), formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser


def daemon_options(*, timeout: bool = True) -> argparse.ArgumentParser:
    """The options of every command that talks to a daemon, as a parent parser: which daemon, --json and
    (unless the command has its own) the client's --timeout."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--socket", metavar="PATH", help="the daemon's control socket (default: $AGENTCTL_SOCKET)")
    options.add_argument(
        "--execution",
        metavar="ID",
        help="execution id: finds <runtime dir>/<ID>/control.sock (runtime dir: $AGENTCTL_RUNTIME_DIR, "
        "$RUNTIME_DIRECTORY, or the user runtime dir)",
    )
    options.add_argument("--json", action="store_true", help="print the daemon's JSON instead of text")
    if timeout:
        options.add_argument(
            "--timeout", metavar="SECONDS", type=positive_seconds(), default=5.0, help="give up after this long (5)"
        )
    return options


def add_offline_option(parser: argparse.ArgumentParser) -> None:
    """--state-dir: read the persisted report (with --execution) instead of asking a daemon."""
    parser.add_argument("--state-dir", metavar="DIR", help="read the persisted report offline from this state dir "
                        "(with --execution ID): the daemon may be gone")


def persisted_report(args: argparse.Namespace) -> Any:
    """The AttachmentHistory `--state-dir DIR --execution ID` names, read from disk; any problem stops the
    command with one line (EXIT_USAGE)."""
    command = args.command_name
    if not args.execution:
        raise UsageError(f"{command} --state-dir needs --execution ID (which execution's report to read)")
    if args.socket:
        raise UsageError(f"{command}: use either --state-dir (offline) or --socket (live daemon), not both")
    from agentctl.evidence.store import StoreError, read_report

    try:
        return read_report(Path(args.state_dir).expanduser(), args.execution)
    except (StoreError, ValueError) as exc:
        raise UsageError(str(exc)) from None


# ---- output -----------------------------------------------------------------------------------------------


def out(text: str) -> None:
    """Text on stdout; a reader that went away (`agentctl report | head`) is fine."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass


def print_json(data: Any) -> None:
    """A contract struct (or builtins) as indented JSON on stdout: exactly the fields the contract encodes."""
    if hasattr(data, "__struct_fields__"):
        import msgspec

        data = msgspec.to_builtins(data)
    out(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def fail(message: str, code: int) -> int:
    """One `agentctl: ...` line on stderr, its control characters made visible; returns `code`."""
    from agentctl.safetext import neutralize

    print(f"agentctl: {neutralize(message)}", file=sys.stderr)
    return code


def stdout_color() -> bool:
    from agentctl.control.render import use_color

    return use_color(sys.stdout)


# ---- the daemon's control socket --------------------------------------------------------------------------


def locate_socket(args: argparse.Namespace) -> Path:
    """--socket, else --execution under the runtime dir, else $AGENTCTL_SOCKET, else the only live daemon
    under the runtime dir. An option given on the command line wins over the environment, as everywhere.

    Sockets that nobody listens on any more (daemons killed without removing theirs) are removed, said so
    on stderr, and never count as a daemon. No daemon found stops the command with EXIT_NO_DAEMON."""
    from agentctl.control.socket import discover, named_socket, remove_stale, socket_base_dir
    from agentctl.unix_socket import ControlSocketError

    try:
        path = named_socket(getattr(args, "socket", None), getattr(args, "execution", None))
        if path is not None:
            return path
        base = socket_base_dir()
    except ControlSocketError as exc:
        raise UsageError(str(exc)) from None
    live, stale = discover(base)
    removed = [p.parent.name for p in stale if remove_stale(p)]
    if removed:
        print(f"agentctl: removed the stale control socket(s) of {len(removed)} dead daemon(s) under {base} "
              f"({', '.join(removed)})", file=sys.stderr)
    if len(live) == 1:
        return live[0]
    if live:
        ids = ", ".join(p.parent.name for p in live)
        raise UsageError(f"several daemons under {base} ({ids}); choose one with --execution ID or --socket PATH "
                         "(`agentctl ls` lists them)")
    # No daemon to work with is EXIT_NO_DAEMON, for every command: as when a named socket does not answer.
    if removed:
        raise CommandExit(fail(f"no agentctl daemon is running under {base} (only dead ones had left sockets)",
                               EXIT_NO_DAEMON))
    raise CommandExit(fail(
        f"cannot locate the control socket: no --socket, --execution or $AGENTCTL_SOCKET given, and no daemon "
        f"socket under {base}", EXIT_NO_DAEMON))


def client_exit(exc: Exception) -> int:
    """The exit code for a failed exchange with the daemon (ControlClientError and its kinds)."""
    from agentctl.control.client import ControlRefused, ControlUnavailable

    if isinstance(exc, ControlUnavailable):
        return EXIT_NO_DAEMON
    if isinstance(exc, ControlRefused) and exc.error.status == 403:
        return EXIT_NO_DAEMON  # another user's daemon: there is none this user may work with
    return EXIT_FAILED


def connect(args: argparse.Namespace, timeout: float | None = None) -> ControlClient:
    """A ControlClient for the daemon the arguments name; a daemon that cannot be found stops the command."""
    from agentctl.control.client import ControlClient

    path = locate_socket(args)
    return ControlClient(path, timeout=timeout if timeout is not None else getattr(args, "timeout", 5.0))


def call(args: argparse.Namespace, method: str, route: str, kind: type[T], *, body: Any = None,
         ok: tuple[int, ...] = (200,)) -> T:
    """The daemon's answer to one request, decoded as `kind`; anything else stops the command with one line."""
    from agentctl.control.client import ControlClientError

    client = connect(args)
    try:
        return client.call(method, route, kind, body, ok)
    except ControlClientError as exc:
        raise CommandExit(fail(str(exc), client_exit(exc))) from None
