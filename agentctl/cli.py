"""The `agentctl` entry point: argument parsing and one function per command."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from agentctl import __version__
from agentctl.cli_support import (
    EXIT_FAILED,
    EXIT_NO_DAEMON,
    EXIT_OK,
    EXIT_SIGNAL_BASE,
    EXIT_USAGE,
    FILE_COMPLETION,
    CommandParser,
    add_main_command,
    fail,
    wrapped,
)
from agentctl.cli_help import environment_help, examples_help
from agentctl.exit_codes import EXIT_NOT_ATTACHED, exit_codes_help

if TYPE_CHECKING:  # pragma: no cover - the daemon's modules are imported only by the commands that run one
    from agentctl.daemon.app import Daemon
    from agentctl.lifecycle import Signals
    from agentctl.spec import Spec


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["health"], ["status"]):
        from agentctl import fastpath  # the exec probe, without the parser tree or http.client

        code = fastpath.run(argv)
        if code is not None:
            return code
    if argv[:1] == ["reference-agent"]:
        # Hidden: the shipped reference agent, so a zipapp or frozen build provides agentctl-reference-agent
        # too (agentctl.bundled). Dispatched before argparse: its flags belong to the agent, not to us.
        from agentctl.testing.reference_agent import main as reference_agent

        return int(reference_agent(argv[1:]) or 0)
    if argv[:1] == ["agent-shim"]:
        # Hidden: the agent's shim (agentctl.agent.shim), for a frozen build that has no shim.py file to run.
        from agentctl.agent.shim import main as shim

        return shim(["agent-shim", *argv[1:]])
    if argv[:1] == ["mcp-bridge"]:
        # Hidden: the built-in server as a stdio server, for an agent that speaks only stdio MCP
        # (agentctl.agent.mcp_bridge). Its URL and token come from its environment, never from argv.
        from agentctl.agent.mcp_bridge import main as mcp_bridge

        return mcp_bridge(argv[1:])
    if argv[:1] == ["mcp-witness"]:
        # Hidden: a third-party stdio server wrapped in agentctl's witness (agentctl.agent.mcp_witness): it
        # relays the server's pipes byte for byte and reports what it sees. Where to report comes from its env.
        from agentctl.agent.mcp_witness import main as mcp_witness

        return mcp_witness(argv[1:])
    if argv[:1] == ["estimate-tokens"]:
        # Hidden: the short-lived token-estimate helper a daemon starts (agentctl.evidence.estimates), here
        # so a zipapp or frozen build has it too.
        from agentctl.evidence.estimate_helper import run as estimate_helper

        estimate_helper()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args) or EXIT_OK)
    except KeyboardInterrupt:
        return EXIT_SIGNAL_BASE + signal.SIGINT


# The contract surfaces `agentctl schema` prints, each from its module of agentctl.evidence.contract.
SCHEMA_SURFACES = ("report", "control", "diagnostics", "probe", "hub")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="agentctl",
        description="Per-execution sidecar: MCP attachment evidence, the task-aware MCP endpoint, agent supervision.",
        epilog="\n\n".join([examples_help(), environment_help(), exit_codes_help()]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"agentctl {__version__}")
    # Every subcommand's parser (and theirs) is a CommandParser: one usage error, one exit code.
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=CommandParser)

    serve = add_main_command(
        sub, "serve", help="run the daemon in the foreground for one execution",
        description=("Run the daemon for one execution in the foreground.",
                     "Once it is ready it prints one JSON line (`\"event\": \"ready\"`, the control socket, the MCP "
                     "URL, the pid) on stdout; logs go to stderr. SIGTERM or SIGINT drains it (the report persisted) "
                     f"and it exits {EXIT_OK}; a second signal exits at once. Exit codes: {EXIT_NO_DAEMON} bad spec "
                     "or the daemon could not start."),
    )
    _daemon_arguments(serve, log_level="info")
    serve.set_defaults(func=cmd_serve)

    run = add_main_command(
        sub, "run", help="the main job: start the daemon, open a session, show status, persist",
        description=(
            "The main job: the daemon, the agent, a session, the status and the report.",
            "Start the daemon with an in-process hub (unless [upstream] names one), start the agent, "
            "open a session, optionally prompt, show the status and persist the report.",
            f"exit codes: {EXIT_OK} the job ran (an agent that ended on its own exited with code 0); "
            f"{EXIT_FAILED} the agent failed: it did not start, did not accept the session, the prompt failed, or it "
            "exited with an error (a non-zero code or a signal), for ACP and passthrough agents alike; "
            f"{EXIT_NO_DAEMON} bad spec or the daemon could not start; {EXIT_NOT_ATTACHED} a required server failed "
            f"or was not attached in time, so the prompt was not sent; {EXIT_SIGNAL_BASE}+N interrupted by signal N "
            "(the agent is stopped and the report persisted all the same). A spec with [agent] terminal = true run "
            "from a terminal is attached to the agent, and exits with the agent's own status instead (128+N if a "
            "signal killed it), as `ssh -t` does"),
    )
    _daemon_arguments(run, log_level="warning")
    run.add_argument("--prompt", metavar="TEXT", help="send this prompt once the session is accepted and every "
                     "required server is attached")
    run.add_argument("--json", action="store_true", help="print the final report as JSON")
    run.set_defaults(func=cmd_run)

    schema = sub.add_parser("schema", help="print the JSON Schema of one surface of the contract (the report)")
    schema.add_argument("surface", nargs="?", default="report", choices=SCHEMA_SURFACES,
                        help="report (persisted and sent upstream), control (the control API's answers), "
                        "diagnostics, probe or hub (its --json answers; `hub schema` prints the upstream frames)")
    schema.set_defaults(func=cmd_schema)

    completion = sub.add_parser(
        "completion",
        help="print the tab-completion script for bash or zsh",
        description=wrapped("Print the tab-completion script for bash or zsh.", "Generated from this agentctl's own parser "
                            "(commands, options, choices), so it always matches the installed version."),
        epilog="examples:\n  source <(agentctl completion bash)                         # this bash session\n"
        "  agentctl completion bash > /etc/bash_completion.d/agentctl  # every bash session\n"
        "  agentctl completion zsh > \"${fpath[1]}/_agentctl\"           # zsh (then restart it)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    completion.add_argument("shell", metavar="SHELL", choices=["bash", "zsh"], help="bash or zsh")
    completion.set_defaults(func=cmd_completion)

    from agentctl.commands.daemon_commands import add_client_commands
    from agentctl.commands.session_commands import add_session_commands
    from agentctl.commands.spec_commands import add_spec_commands
    from agentctl.diagnostics.commands import add_diagnostics_commands

    add_spec_commands(sub)
    add_client_commands(sub)
    add_session_commands(sub)
    add_diagnostics_commands(sub)
    from agentctl.attach_command import add_attach_command

    add_attach_command(sub)
    from agentctl.probe.commands import add_probe_commands

    add_probe_commands(sub)
    from agentctl.hub.commands import add_hub_commands

    add_hub_commands(sub)
    recover = sub.add_parser(
        "recover",
        help="undo what killed daemons left: merged workspace files, private config directories",
        description="Put back the workspace files (cursor's .cursor/mcp.json, gemini's .gemini/settings.json) "
        "that a daemon killed with SIGKILL left holding its configuration, from the journal in the state "
        "directory, and remove the private config directories of dead daemons. A file the user edited since "
        "keeps the edits; only agentctl's entries are taken out. A running daemon's files are left alone. "
        f"Every daemon does this at start too. Exit codes: {EXIT_OK} nothing left to do, {EXIT_FAILED} something "
        "could not be recovered (its journal entry keeps the user's original).",
    )
    recover.add_argument("--state-dir", metavar="DIR", help="the state directory (default: $STATE_DIRECTORY, else "
                         "the platform state dir; give the spec's [state] dir when it sets one)")
    recover.add_argument("--json", action="store_true", help="print what was done as JSON")
    recover.set_defaults(func=cmd_recover)
    return parser


def _daemon_arguments(parser: argparse.ArgumentParser, *, log_level: str) -> None:
    """SPEC, --socket and --log-level: what `serve` and `run` share."""
    # shtab reads its completion hint from an attribute argparse does not declare.
    setattr(parser.add_argument("spec", metavar="SPEC", help="execution spec (TOML or JSON)"), "complete",
            FILE_COMPLETION)
    parser.add_argument("--socket", metavar="PATH", help="control socket path (default: $AGENTCTL_SOCKET, else "
                        "<runtime dir>/<execution_id>/control.sock)")
    parser.add_argument("--log-level", default=log_level, choices=["debug", "info", "warning", "error"],
                        help=f"the least severe log lines written to stderr ({log_level}); debug is for "
                        "troubleshooting and adds the traceback of an unexpected start-up error")
    parser.add_argument("--log-format", default="text", choices=["text", "json"],
                        help="text lines, or one JSON object per line for log shippers (text)")
    parser.add_argument("--metrics-listen", metavar="HOST:PORT", help="also serve /metrics, and nothing else, "
                        "without a token on HOST:PORT (the pod's address, for a Prometheus scrape)")


def cmd_schema(args: argparse.Namespace) -> int:
    import importlib
    import json

    module = importlib.import_module(f"agentctl.evidence.contract.{args.surface}")
    schema = module.history_schema() if args.surface == "report" else module.schema()
    print(json.dumps(schema, indent=2, sort_keys=True))
    return EXIT_OK


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    from agentctl.cli_support import out

    script = shtab.complete(build_parser(), shell=args.shell)
    out(script if script.endswith("\n") else script + "\n")
    return EXIT_OK


def cmd_recover(args: argparse.Namespace) -> int:
    import json

    from agentctl.agent.passthrough.recovery import recover
    from agentctl.evidence.store import resolve_state_dir

    from agentctl.safetext import neutralize

    state_dir = resolve_state_dir(args.state_dir)
    outcomes = recover(state_dir)  # raises nothing: a leftover it cannot deal with is one `left` line, kept
    if args.json:
        done = [vars(o) for o in outcomes if o.done]
        left = [vars(o) for o in outcomes if not o.done]
        print(json.dumps({"state_dir": str(state_dir), "recovered": done, "left": left}, indent=2))
    elif not outcomes:
        print(f"nothing to recover (state directory {neutralize(str(state_dir))})")
    else:
        for outcome in outcomes:  # one line each: a path or a detail never starts another line
            print(f"{'recovered' if outcome.done else 'left'}  {neutralize(outcome.file)}: {neutralize(outcome.detail)}")
    return EXIT_OK if all(o.done for o in outcomes) else EXIT_FAILED


def _load(spec_path: str) -> Spec | str:
    """The spec, or why it cannot be loaded."""
    from agentctl.spec import SpecError, load_spec

    try:
        return load_spec(spec_path)
    except SpecError as exc:
        return str(exc)


def _daemon_command(args: argparse.Namespace, body: Callable[[Daemon, Signals], Coroutine[Any, Any, int]]) -> int:
    """`serve` and `run`: SIGTERM/SIGINT captured first, before the heavy imports (a stop during start-up is
    a drain, not a kill), then logging, the spec, and `body(daemon, signals)` in a fresh loop."""
    from agentctl.lifecycle import Signals

    signals = Signals().install()
    try:
        from agentctl.logs import configure_logging

        configure_logging(args.log_level, args.log_format)
        spec = _load(args.spec)
        if isinstance(spec, str):
            return fail(spec, EXIT_NO_DAEMON)
        return _run_daemon(spec, args.socket, lambda daemon: body(daemon, signals), args.metrics_listen)
    finally:
        signals.uninstall()


def cmd_serve(args: argparse.Namespace) -> int:
    from agentctl.evidence.contract.base import encode
    from agentctl.evidence.contract.control import DaemonReady

    def on_ready(info: DaemonReady) -> None:
        sys.stdout.write(encode(info).decode() + "\n")
        sys.stdout.flush()

    return _daemon_command(args, lambda daemon, signals: daemon.serve(on_ready, signals=signals))


def _run_daemon(spec: Spec, socket_path: str | None, body: Callable[[Daemon], Coroutine[Any, Any, int]],
                metrics_listen: str | None = None) -> int:
    """Build the daemon and run `body(daemon)` in a fresh loop, turning start-up failures into one line."""
    from agentctl.unix_socket import ControlSocketError
    from agentctl.daemon.app import Daemon, StartupError
    from agentctl.evidence.store import StateDirError

    import logging

    from agentctl.backend.embedded import TaskStoreError
    from agentctl.daemon.app import describe_error

    try:
        from agentctl.daemon.metrics_listener import parse_metrics_listen

        listen = parse_metrics_listen(metrics_listen) if metrics_listen else None
        daemon = Daemon(spec, socket_path=socket_path, metrics_listen=listen)
    except (ControlSocketError, StateDirError, ValueError) as exc:
        return fail(str(exc), EXIT_NO_DAEMON)
    from agentctl.lifecycle import run

    try:
        return run(body(daemon))
    except (ControlSocketError, StateDirError, StartupError, TaskStoreError) as exc:
        return fail(str(exc), EXIT_NO_DAEMON)
    except Exception as exc:
        # Never a traceback at default verbosity (it may quote a payload); --log-level debug shows it.
        if logging.getLogger("agentctl").isEnabledFor(logging.DEBUG):
            raise
        return fail(describe_error(exc, spec), EXIT_NO_DAEMON)


def cmd_run(args: argparse.Namespace) -> int:
    def job(daemon: Daemon, signals: Signals) -> Coroutine[Any, Any, int]:
        from agentctl.daemon.run import run_main_job

        return run_main_job(daemon, prompt=args.prompt, as_json=args.json, signals=signals)

    return _daemon_command(args, job)


if __name__ == "__main__":
    sys.exit(main())
