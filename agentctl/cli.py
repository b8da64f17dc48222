"""The `agentctl` entry point: argument parsing and one function per command."""

from __future__ import annotations

import argparse
import sys

from agentctl import __version__


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["reference-agent"]:
        # Hidden: the shipped reference agent, so a zipapp or frozen build provides agentctl-reference-agent
        # too (agentctl.bundled). Dispatched before argparse: its flags belong to the agent, not to us.
        from agentctl.testing.reference_agent import main as reference_agent

        return int(reference_agent(argv[1:]) or 0)
    if argv[:1] == ["agent-shim"]:
        # Hidden: the agent's shim (agentctl.agent.shim), for a frozen build that has no shim.py file to run.
        from agentctl.agent.shim import main as shim

        return shim(["agent-shim", *argv[1:]])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentctl",
        description="Per-execution sidecar: MCP attachment evidence, the task-aware MCP endpoint, agent supervision.",
    )
    parser.add_argument("--version", action="version", version=f"agentctl {__version__}")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the daemon in the foreground for one execution")
    serve.add_argument("spec", metavar="SPEC", help="execution spec (TOML or JSON)")
    serve.add_argument("--socket", help="control socket path (default: <runtime dir>/<execution_id>/control.sock)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.set_defaults(func=cmd_serve)

    run = sub.add_parser("run", help="the main job: start the daemon, open a session, show status, persist")
    run.add_argument("spec", metavar="SPEC", help="execution spec (TOML or JSON)")
    run.add_argument("--socket", help="control socket path")
    run.add_argument("--prompt", metavar="TEXT", help="send this prompt once the session is accepted")
    run.add_argument("--json", action="store_true", help="print the final report as JSON")
    run.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    run.set_defaults(func=cmd_run)

    schema = sub.add_parser("schema", help="print the JSON Schema of the report contract")
    schema.set_defaults(func=cmd_schema)

    from agentctl.control.commands import add_client_commands

    add_client_commands(sub)
    from agentctl.probe.commands import add_probe_commands

    add_probe_commands(sub)
    from agentctl.upstream.commands import add_hub_commands

    add_hub_commands(sub)
    return parser


def _fail(message: str, code: int = 2) -> int:
    print(f"agentctl: {message}", file=sys.stderr)
    return code


def cmd_schema(args: argparse.Namespace) -> int:
    import json

    from agentctl.evidence.contract import history_schema

    print(json.dumps(history_schema(), indent=2, sort_keys=True))
    return 0


def _load(spec_path: str):
    from agentctl.spec import SpecError, load_spec

    try:
        return load_spec(spec_path), None
    except SpecError as exc:
        return None, str(exc)


def cmd_serve(args: argparse.Namespace) -> int:
    import json

    from agentctl.logs import configure_logging

    configure_logging(args.log_level)
    spec, error = _load(args.spec)
    if error:
        return _fail(error)

    def on_ready(info: dict) -> None:
        sys.stdout.write(json.dumps(info) + "\n")
        sys.stdout.flush()

    return _run_daemon(spec, args.socket, lambda daemon: daemon.serve(on_ready))


def _run_daemon(spec, socket_path, body) -> int:
    """Build the daemon and run `body(daemon)` in a fresh loop, turning start-up failures into one line."""
    import asyncio

    from agentctl.control.socket import ControlSocketError
    from agentctl.daemon.app import Daemon, StartupError
    from agentctl.evidence.store import StateDirError

    import logging

    from agentctl.backend.embedded import TaskStoreError
    from agentctl.daemon.app import describe_error

    try:
        daemon = Daemon(spec, socket_path=socket_path)
    except (ControlSocketError, StateDirError, ValueError) as exc:
        return _fail(str(exc))
    try:
        return asyncio.run(body(daemon))
    except (ControlSocketError, StateDirError, StartupError, TaskStoreError) as exc:
        return _fail(str(exc))
    except Exception as exc:
        # Never a traceback at default verbosity (it may quote a payload); --log-level debug shows it.
        if logging.getLogger("agentctl").isEnabledFor(logging.DEBUG):
            raise
        return _fail(describe_error(exc, spec))


def cmd_run(args: argparse.Namespace) -> int:
    from agentctl.daemon.run import run_main_job
    from agentctl.logs import configure_logging

    configure_logging(args.log_level)
    spec, error = _load(args.spec)
    if error:
        return _fail(error)
    return _run_daemon(spec, args.socket, lambda daemon: run_main_job(daemon, prompt=args.prompt, as_json=args.json))


if __name__ == "__main__":
    sys.exit(main())
