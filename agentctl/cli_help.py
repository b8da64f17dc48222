"""Owns the CLI's help texts beyond each option's line: the environment variables the CLI reads (one table, printed
by `agentctl --help` and carried by the README, kept equal by a test) and the examples of the main commands.
Pure: no I/O.
"""

from __future__ import annotations

import textwrap
from typing import NamedTuple


class EnvVar(NamedTuple):
    name: str
    meaning: str


# Every variable the CLI or the daemon reads from its own environment (a test scans the code for AGENTCTL_ names).
ENVIRONMENT: tuple[EnvVar, ...] = (
    EnvVar("AGENTCTL_SOCKET", "the control socket of the daemon to talk to when no --socket or --execution is "
           "given, and where `serve` and `run` bind theirs when no --socket is given (one socket, as SSH_AUTH_SOCK "
           "names one; the directory of daemons is AGENTCTL_RUNTIME_DIR)"),
    EnvVar("AGENTCTL_RUNTIME_DIR", "the directory of daemons, one <execution_id>/control.sock each: where "
           "`serve` puts its socket by default, where --execution looks, what `ls` lists (default: "
           "$RUNTIME_DIRECTORY, else the user runtime dir)"),
    EnvVar("AGENTCTL_HUB_SOCKET", "the hub's socket for `hub serve` (default: <runtime dir>/hub/hub.sock)"),
    EnvVar("AGENTCTL_HUB_DB", "the hub's database, a SQLite path or a postgresql:// address, for `hub serve`, "
           "`hub status`, `hub report` and `hub migrate` (default: <state dir>/hub.sqlite3)"),
    EnvVar("AGENTCTL_HUB_RETENTION", "how long `hub serve` keeps a session after its last contact: 30d, 12h, "
           "90m, 3600s, or `forever` (default: 30d; --retention overrides it)"),
    EnvVar("AGENTCTL_O200K_PATH", "an o200k_base.tiktoken file to use for token estimates instead of the copy "
           "shipped in the package"),
    EnvVar("AGENTCTL_ESTIMATE_CACHE_DIR", "where daemons keep the token counts of their tool catalog, shared "
           "by the host and safe to delete (default: $CACHE_DIRECTORY/token-estimates under systemd, else "
           "<user cache dir>/token-estimates)"),
    EnvVar("AGENTCTL_WITNESS_RELAY", "`python`: a stdio witness relays in Python instead of its compiled relay "
           "(set it in the witnessed server's env; the witness takes it out before the server starts)"),
    EnvVar("RUNTIME_DIRECTORY", "systemd's RuntimeDirectory=: the runtime dir when AGENTCTL_RUNTIME_DIR is unset"),
    EnvVar("STATE_DIRECTORY", "systemd's StateDirectory=: the state dir (reports, task store) when the spec's "
           "[state] dir and --state-dir are unset"),
    EnvVar("NO_COLOR", "set (to anything): no colour in text output; TERM=dumb likewise"),
)

# Examples, by command ("" is the top level), as `--help` prints them.
EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "": (
        ("agentctl run examples/demo.toml", "the main job: daemon, agent, session, status, report"),
        ("agentctl serve spec.toml", "the daemon alone, in the foreground: one JSON ready line, then it serves"),
        ("agentctl ls", "the daemons on this host"),
        ("agentctl status --execution exec-42", "one daemon's MCP attachment status"),
        ("agentctl stop --wait", "stop the only daemon and wait until it is gone"),
        ("source <(agentctl completion bash)", "tab completion in this shell"),
    ),
    "serve": (
        ("agentctl serve spec.toml", "socket at <runtime dir>/<execution_id>/control.sock"),
        ("AGENTCTL_SOCKET=/run/x/ctl.sock agentctl serve spec.toml", "socket where the executor says"),
        ("agentctl serve spec.toml --log-level debug", "more detail on stderr, for troubleshooting"),
    ),
    "run": (
        ("agentctl run examples/demo.toml", "open a session, print the status, persist the report"),
        ("agentctl run spec.toml --prompt 'list my tasks'", "prompt once the session is accepted"),
        ("agentctl run spec.toml --json > report.json", "the final report as JSON"),
    ),
    "status": (
        ("agentctl status", "the only daemon under the runtime dir, or $AGENTCTL_SOCKET's"),
        ("agentctl status --execution exec-42 --json", "one daemon, as the contract's JSON"),
    ),
    "report": (
        ("agentctl report", "current and previous attempts of the running daemon"),
        ("agentctl report --state-dir /var/lib/agentctl --execution exec-42", "a persisted report, daemon gone"),
    ),
    "stop": (
        ("agentctl stop", "ask the daemon to drain and exit; returns at once"),
        ("agentctl stop --wait 30 && echo gone", "return once it has exited, at most 30 s"),
    ),
    "wait": (
        ("agentctl wait --attached && send-first-prompt", "hold the first prompt until the required servers attach"),
        ("agentctl wait --attached --timeout 45 --json", "at most 45 s; each required server and its evidence"),
    ),
    "ls": (
        ("agentctl ls", "one line per daemon: execution, task, session, agent, state, pid, socket"),
        ("agentctl ps --json", "the same as the contract's DaemonListing"),
    ),
}

# The variables that choose the daemon a client command talks to.
_SOCKET_ENV = ("AGENTCTL_SOCKET", "AGENTCTL_RUNTIME_DIR")
_COMMAND_ENV: dict[str, tuple[str, ...]] = {
    "serve": (*_SOCKET_ENV, "RUNTIME_DIRECTORY", "STATE_DIRECTORY", "AGENTCTL_O200K_PATH",
              "AGENTCTL_ESTIMATE_CACHE_DIR"),
    "run": (*_SOCKET_ENV, "RUNTIME_DIRECTORY", "STATE_DIRECTORY", "AGENTCTL_O200K_PATH",
            "AGENTCTL_ESTIMATE_CACHE_DIR", "NO_COLOR"),
    "status": (*_SOCKET_ENV, "NO_COLOR"),
    "report": (*_SOCKET_ENV, "NO_COLOR"),
    "stop": _SOCKET_ENV,
    "wait": _SOCKET_ENV,
    "ls": (*_SOCKET_ENV, "RUNTIME_DIRECTORY"),
}


def _wrapped(lead: str, text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=lead, subsequent_indent=" " * 6, break_on_hyphens=False)


def examples_help(command: str = "") -> str:
    lines = ["examples:"]
    for line, why in EXAMPLES[command]:
        lines += [f"  {line}", f"      {why}"]
    return "\n".join(lines)


def environment_help(names: tuple[str, ...] | None = None, width: int = 79) -> str:
    """The environment section of `--help`: every variable, or only `names`."""
    lines = ["environment:"]
    for var in ENVIRONMENT:
        if names is None or var.name in names:
            lines += [f"  {var.name}", *_wrapped(" " * 6, var.meaning, width)]
    return "\n".join(lines)


def command_epilog(command: str) -> str:
    """A main subcommand's `--help` epilog: its examples, then the variables it reads."""
    return examples_help(command) + "\n\n" + environment_help(_COMMAND_ENV[command])


def environment_markdown() -> str:
    """The table as the README carries it (`python -m agentctl.cli_help --doc README.md`)."""
    from agentctl.doc_blocks import markdown_table

    return markdown_table(("variable", "meaning"), [(f"`{var.name}`", var.meaning) for var in ENVIRONMENT])


ENVIRONMENT_BEGIN = "<!-- environment:begin (generated by `python -m agentctl.cli_help --doc`) -->"
ENVIRONMENT_END = "<!-- environment:end -->"


if __name__ == "__main__":  # `python -m agentctl.cli_help [--doc PATH]`: print the table, or update the doc
    from agentctl.doc_blocks import doc_main

    doc_main(environment_markdown, ENVIRONMENT_BEGIN, ENVIRONMENT_END)
