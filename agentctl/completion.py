"""`agentctl completion bash|zsh`: the tab-completion script, generated from this agentctl's own parser."""

from __future__ import annotations

import argparse

import shtab

from agentctl.cli import build_parser
from agentctl.cli_support import EXIT_OK, out


def cmd_completion(args: argparse.Namespace) -> int:
    script = shtab.complete(build_parser(), shell=args.shell)
    out(script if script.endswith("\n") else script + "\n")
    return EXIT_OK
