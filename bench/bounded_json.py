"""Bounded JSON parsing (agentctl/agent/bounded_json.py): what reading a workspace file costs, ordinary or hostile.

Run:  .venv/bin/python bench/bounded_json.py [--rounds 5] [--json PATH]

In one process, interleaved rounds (medians):
- an ordinary 4 MiB configuration (many servers), and the same with a comment per server, through
  `bounded_json.loads`, against the standard library's `json.loads` of the plain text (what the workspace
  merge used before);
- the worst texts of the size bound (4 MiB of `[`, of unclosed `/*`, of unclosed `"\\`, of digits), each until
  it is refused, against the same reference: the bound holds if each stays within a small multiple of an
  ordinary parse (a backtracking or recursive reader takes hours or crashes on them).

Not a test: numbers depend on the machine. Targets: none in the issue ("parse with bounds"); reported as measured.
"""

from __future__ import annotations

import argparse
import json
import time

import _common as c

from agentctl.agent import bounded_json

SIZE = bounded_json.MAX_BYTES - 1024


def ordinary() -> tuple[str, str]:
    """A large but ordinary configuration, with and without its comments."""
    servers, plain = [], []
    i = 0
    size = 0
    while size < SIZE - 200:
        entry = f'"srv-{i}": {{"command": "/usr/bin/server", "args": ["--port", "{i}"], "env": {{"K": "v{i}"}}}}'
        servers.append(f"// server {i}\n    {entry}")
        plain.append(entry)
        size += len(servers[-1]) + 2
        i += 1
    return ('{"mcpServers": {\n' + ",\n".join(servers) + "\n}}", '{"mcpServers": {' + ",".join(plain) + "}}")


HOSTILE = {
    "4 MiB of [": "[" * SIZE,
    "4 MiB of unclosed /*": "/*" * (SIZE // 2),
    '4 MiB of unclosed "\\': '"\\' * (SIZE // 2),
    "4 MiB of digits": "9" * SIZE,
}


def timed(fn, text: str) -> float:
    started = time.perf_counter()
    try:
        fn(text)
    except ValueError:
        pass  # bounded_json.Unparseable: the hostile texts are refused, which is what is timed
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    commented, plain = ordinary()
    assert json.loads(plain) == bounded_json.loads(commented), "the same configuration, read within the bounds"
    cases = {"ordinary 4 MiB configuration": plain, "the same with a comment per server": commented, **HOSTILE}
    samples: dict[str, list[float]] = {name: [] for name in [*cases, "reference"]}
    for _round, name in c.interleaved(args.rounds, list(samples)):
        if name == "reference":
            samples[name].append(timed(json.loads, plain))
        else:
            samples[name].append(timed(bounded_json.loads, cases[name]))
    reference = c.median(samples["reference"])
    figures = [c.figure(f"{name}: bounded_json.loads", c.median(samples[name]), reference, unit="s",
                        reference_name="json.loads, ordinary 4 MiB") for name in cases]
    c.emit({"bench": "bounded_json", "figures": figures}, args.json)


if __name__ == "__main__":
    main()
