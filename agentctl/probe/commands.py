"""The `agentctl probe mcp` command: argument parsing, output, exit codes.

Exit codes (agentctl.cli_support's table): 0 the probe ran (whatever it observed), 1 bad arguments (nothing
was started), 2 the probe could not run (the agent could not be started, or did not complete ACP
initialize). Errors are one line on stderr, prefixed `agentctl: probe mcp: `.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, get_args

from agentctl.cli_support import EXIT_USAGE, fail, positive_seconds
from agentctl.probe.defaults import DEFAULT_TIMEOUT, MAX_TIMEOUT

_DESCRIPTION = """\
Start a temporary sentinel MCP server on loopback, spawn the agent CMD the way the daemon does, run
ACP initialize, deliver the sentinel in session/new over the best transport the agent advertises
(http, else sse, else stdio), and report what the agent actually did: advertised transports,
sentinel delivered, session accepted (or the agent's error), initialize, tools/list and the
sentinel tool call observed, each with its time. Not being contacted is reported as unobserved,
not as a failure of the agent.

As for the daemon's agent, AGENTCTL_* variables are not passed on; use --env to set them.
"""


_PASSTHROUGH_DESCRIPTION = """\
Start a temporary sentinel MCP server on loopback, write it into the CLI's MCP configuration with the
passthrough strategy NAME (as the daemon writes its built-in server), run CMD bounded by --timeout with
stdin closed, and report separately: configuration written (or why the strategy left the sentinel out),
initialize, tools/list and tool use observed by the sentinel, and the status the CLI itself reported
(Claude Code with -p --output-format stream-json --verbose), or why it reports none. Temporary files are
removed and merged workspace files restored (checked byte for byte) before the probe exits. The CLI's
output is never shown or kept. Exit 0: the probe ran; 1: bad arguments; 2: it could not run.
"""


def _env_item(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or "\0" in text:
        # The value is never echoed: it may be a secret.
        raise argparse.ArgumentTypeError("expected NAME=VALUE")
    return name, value


def _timeout_arg(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--timeout", type=positive_seconds(MAX_TIMEOUT), default=DEFAULT_TIMEOUT, metavar="S",
                        help=help_text)


def _env_arg(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--env", action="append", type=_env_item, default=[], metavar="NAME=VALUE", help=help_text)


def add_probe_commands(subparsers: Any) -> None:
    """Register `probe mcp` and `probe passthrough` on the top-level subparsers action (no heavy imports: every CLI call builds it)."""
    probe = subparsers.add_parser("probe", help="developer probes against a real agent (mcp, passthrough)")
    probe.set_defaults(func=lambda args: _no_probe(probe))
    kinds = probe.add_subparsers(title="probes", metavar="PROBE")
    mcp = kinds.add_parser(
        "mcp",
        help="inject a sentinel MCP server into a real ACP session/new and report what the agent did",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="agentctl probe mcp [--prompt [TEXT]] [--timeout S] [--workdir DIR] [--jsonl FILE] [--json] "
        "[--env NAME=VALUE] -- CMD [ARGS...]",
    )
    mcp.add_argument(
        "--prompt",
        nargs="?",
        const="",
        metavar="TEXT",
        help="after the session is accepted, send a prompt (without TEXT: one asking the agent to call the sentinel tool)",
    )
    _timeout_arg(mcp, f"from delivery, wait this long for the agent to use the sentinel ({DEFAULT_TIMEOUT:g}); "
                 "ACP initialize may take up to 30 s or S, whichever is longer")
    mcp.add_argument("--workdir", metavar="DIR", help="the agent's working directory and session cwd (default: here)")
    mcp.add_argument(
        "--jsonl",
        metavar="FILE",
        help="write raw ACP frames (both ways) and sentinel markers here (0600; holds prompts and credentials)",
    )
    mcp.add_argument("--json", action="store_true", help="print the findings as JSON (never raw frames)")
    _env_arg(mcp, "set a variable for the agent")
    mcp.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    mcp.set_defaults(func=cmd_probe_mcp)

    from agentctl.spec import StrategyName

    strategies = get_args(StrategyName)
    passthrough = kinds.add_parser(
        "passthrough",
        help="materialize a sentinel MCP server with a passthrough strategy, run the CLI bounded, report what it did",
        description=_PASSTHROUGH_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="agentctl probe passthrough --strategy NAME [--timeout S] [--workdir DIR] [--json] "
        "[--env NAME=VALUE] -- CMD [ARGS...]",
    )
    passthrough.add_argument("--strategy", required=True, choices=strategies, metavar="NAME",
                             help=f"the CLI's strategy: {', '.join(strategies)}")
    _timeout_arg(passthrough, f"stop the CLI if it still runs after S seconds ({DEFAULT_TIMEOUT:g})")
    passthrough.add_argument("--workdir", metavar="DIR", help="the CLI's working directory (default: here)")
    passthrough.add_argument("--json", action="store_true", help="print the findings as JSON (never the CLI's output)")
    _env_arg(passthrough, "set a variable for the CLI")
    passthrough.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    passthrough.set_defaults(func=cmd_probe_passthrough)

    # Hidden: the stdio sentinel the probe delivers, reachable through whichever agentctl is running
    # (venv, zipapp or frozen build: agentctl.bundled.self_command), not only as a Python module.
    stdio = kinds.add_parser("stdio-sentinel")  # no help=: not listed
    stdio.add_argument("--report", required=True)
    stdio.add_argument("--expect")
    stdio.set_defaults(func=_stdio_sentinel)


def _stdio_sentinel(args: argparse.Namespace) -> int:
    from agentctl.probe.stdio_sentinel import main

    return main(["--report", args.report, *(["--expect", args.expect] if args.expect else [])])


def _no_probe(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    return fail(f"probe mcp: {message}", code)


def _command_of(args: argparse.Namespace, example: str) -> list[str] | str:
    """The agent command after `--`, or the usage error to print."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        return f"no agent command: put it after --, e.g. {example}"
    if command[0].startswith("-"):
        return "unknown option before the agent command (put the command after --)"
    return command


def cmd_probe_passthrough(args: argparse.Namespace) -> int:
    command = _command_of(args, "agentctl probe passthrough --strategy claude -- claude -p hi "
                                 "--output-format stream-json --verbose")
    if isinstance(command, str):
        return fail(f"probe passthrough: {command}", EXIT_USAGE)
    workdir = os.path.realpath(args.workdir) if args.workdir else os.getcwd()
    if not os.path.isdir(workdir):
        return fail("probe passthrough: --workdir is not a directory", EXIT_USAGE)

    import asyncio

    from agentctl.evidence.contract.base import encode
    from agentctl.logs import configure_logging
    from agentctl.probe.passthrough import PassthroughOptions, run_passthrough_probe
    from agentctl.probe.report import render_passthrough

    configure_logging("warning")
    opts = PassthroughOptions(strategy=args.strategy, command=command, timeout=args.timeout, workdir=workdir,
                              env=dict(args.env))
    report, code = asyncio.run(run_passthrough_probe(opts))
    if args.json:
        sys.stdout.write(encode(report).decode() + "\n")
    else:
        from agentctl.control.render import use_color

        sys.stdout.write(render_passthrough(report, color=use_color(sys.stdout)))
    sys.stdout.flush()
    if not report.ran and report.error is not None:
        fail(f"probe passthrough: could not run: {report.error.summary}", code)
    return code


def cmd_probe_mcp(args: argparse.Namespace) -> int:
    command = _command_of(args, "agentctl probe mcp -- agentctl-reference-agent")
    if isinstance(command, str):
        return _fail(command)
    workdir = os.path.realpath(args.workdir) if args.workdir else os.getcwd()
    if not os.path.isdir(workdir):
        return _fail("--workdir is not a directory")

    import asyncio

    from agentctl.evidence.contract.base import encode
    from agentctl.logs import configure_logging
    from agentctl.probe.report import render_report
    from agentctl.probe.run import DEFAULT_PROMPT, ProbeOptions, open_jsonl, run_probe

    prompt = None if args.prompt is None else (args.prompt or DEFAULT_PROMPT)
    jsonl_fd = None
    if args.jsonl:
        try:
            jsonl_fd = open_jsonl(args.jsonl)
        except OSError as exc:
            return _fail(f"cannot open the --jsonl file: {exc.strerror or type(exc).__name__}")
    configure_logging("warning")
    opts = ProbeOptions(
        command=command, prompt=prompt, timeout=args.timeout, workdir=workdir, jsonl=args.jsonl, env=dict(args.env)
    )
    report, code = asyncio.run(run_probe(opts, jsonl_fd=jsonl_fd))
    if args.json:
        sys.stdout.write(encode(report).decode() + "\n")
    else:
        from agentctl.control.render import use_color

        sys.stdout.write(render_report(report, color=use_color(sys.stdout), jsonl_path=args.jsonl))
    sys.stdout.flush()
    if not report.ran and report.error is not None:
        _fail(f"could not run: {report.error.summary}", code)
    return code
