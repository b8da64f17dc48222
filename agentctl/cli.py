"""The `agentctl` entry point: the hidden helpers dispatched before argparse, and the parser, whose commands
run their targets (agentctl.commands.targets, imported only when the command runs)."""

from __future__ import annotations

import argparse
import signal
import sys

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
    wrapped,
)
from agentctl.cli_help import environment_help, examples_help
from agentctl.commands.targets import PARSERS, TARGETS, resolve, target
from agentctl.exit_codes import EXIT_NOT_ATTACHED, exit_codes_help


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["health"], ["status"]):
        code = resolve(TARGETS["fast path"])(argv)  # the exec probe, without the parser tree or http.client
        if code is not None:
            return int(code)
    if argv[:1] == ["reference-agent"]:
        # Hidden: the shipped reference agent, so a zipapp or frozen build provides agentctl-reference-agent
        # too (agentctl.bundled). Dispatched before argparse: its flags belong to the agent, not to us.
        return int(resolve(TARGETS["reference-agent"])(argv[1:]) or 0)
    if argv[:1] == ["agent-shim"]:
        # Hidden: the agent's shim (agentctl.agent.shim), for a frozen build that has no shim.py file to run.
        return int(resolve(TARGETS["agent-shim"])(["agent-shim", *argv[1:]]))
    if argv[:1] == ["mcp-bridge"]:
        # Hidden: the built-in server as a stdio server, for an agent that speaks only stdio MCP
        # (agentctl.agent.mcp_bridge). Its URL and token come from its environment, never from argv.
        return int(resolve(TARGETS["mcp-bridge"])(argv[1:]))
    if argv[:1] == ["mcp-witness"]:
        # Hidden: a third-party stdio server wrapped in agentctl's witness (agentctl.agent.mcp_witness): it
        # relays the server's pipes byte for byte and reports what it sees. Where to report comes from its env.
        return int(resolve(TARGETS["mcp-witness"])(argv[1:]))
    if argv[:1] == ["estimate-tokens"]:
        # Hidden: the short-lived token-estimate helper a daemon starts (agentctl.evidence.estimates), here
        # so a zipapp or frozen build has it too.
        resolve(TARGETS["estimate-tokens"])()
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
    serve.set_defaults(func=target("serve"))

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
    run.set_defaults(func=target("run"))

    schema = sub.add_parser("schema", help="print the JSON Schema of one surface of the contract (the report)")
    schema.add_argument("surface", nargs="?", default="report", choices=SCHEMA_SURFACES,
                        help="report (persisted and sent upstream), control (the control API's answers), "
                        "diagnostics, probe or hub (its --json answers; `hub schema` prints the upstream frames)")
    schema.set_defaults(func=target("schema"))

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
    completion.set_defaults(func=target("completion"))

    for registrar in PARSERS:
        resolve(registrar)(sub)
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
    recover.set_defaults(func=target("recover"))
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


if __name__ == "__main__":
    sys.exit(main())
