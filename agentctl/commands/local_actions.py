"""The commands that need no daemon: `agentctl schema` (the JSON Schema of one surface of the contract) and
`agentctl recover` (put back what killed daemons left in the state directory)."""

from __future__ import annotations

import argparse
import importlib
import json

from agentctl.agent.passthrough.recovery import recover
from agentctl.cli_support import EXIT_FAILED, EXIT_OK
from agentctl.evidence.store import resolve_state_dir
from agentctl.safetext import neutralize


def cmd_schema(args: argparse.Namespace) -> int:
    module = importlib.import_module(f"agentctl.evidence.contract.{args.surface}")  # one of the parser's choices
    schema = module.history_schema() if args.surface == "report" else module.schema()
    print(json.dumps(schema, indent=2, sort_keys=True))
    return EXIT_OK


def cmd_recover(args: argparse.Namespace) -> int:
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
