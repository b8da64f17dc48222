"""Redaction by fragment: what each way of mangling a secret leaves visible (before and after), the fragment
length N that ordinary text can live with, and the cost per 256-byte summary with 0, 10 and 100 secrets.

Run:  .venv/bin/python bench/redact_fragments.py [--before main] [--rounds 2000] [--repeat 3] [--json PATH]

"Before" is the sanitizer of another git revision (default `main`), exported to a temporary directory and run
in its own interpreter; "after" is this tree's. Both summarize the same texts; every output is measured here
with this tree's normalized view (agentctl.evidence.fragments.normalize): a cell of the table is the longest
run of the secret (as written, reversed or ROT13, case-folded) still readable in the output. 0 means nothing
of it is left; anything below N is what the chosen N allows by design.

N is measured as over-redaction: 200 random secrets and 200 passphrases built from the corpus's own words
(the worst case: every word of them occurs in the text) are registered, and the share of ordinary lines
(README, CHANGELOG, docs/, and agent-like messages) that would lose a fragment is counted for each N.

The cost is the median time of `summarize()` on a 256-byte agent error, with 0, 10 and 100 registered
secrets, before and after; the ratio to the MCP request path uses the modern-era server CPU per tools/call
from bench/RESULTS.md (this script does not start a daemon).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# `--worker ROOT` measures the sanitizer of the tree at ROOT: it must come first on the path.
TREE = sys.argv[sys.argv.index("--worker") + 1] if "--worker" in sys.argv else str(REPO)
sys.path.insert(0, TREE)

# A 256-byte agent error: a URL, a path, a JSON fragment and prose, the common case with no secret in it.
SUMMARY_TEXT = (
    'MCP server "docs" failed: POST https://mcp.example.com/mcp returned 502 Bad Gateway after 3 retries; '
    'see /var/log/agent/mcp.log for details. {"code":-32603,"message":"upstream closed the stream"} '
    "The session continues without this server's tools; the agent will retry later."
)[:256]
# The slow path: an agent's error as JSON with escapes and a percent-encoded URL (every window is decoded).
ESCAPED_TEXT = (
    '{"error":"MCP server \\u0022docs\\u0022 failed: POST https:\\/\\/mcp.example.com\\/mcp%3Fq%3D1 returned '
    '502 \\u2014 Bad Gateway after 3 retries; see \\/var\\/log\\/agent\\/mcp.log","code":-32603,"data":'
    '{"detail":"upstream closed the stream \\u00e9t\\u00e9 %E2%80%94 the session continues without its tools"}}'
)[:256]
MCP_CPU_US_PER_CALL = 1098.8  # bench/RESULTS.md: "MCP modern: server CPU us/call (c=8)"


# "N": SUMMARY_TEXT with N secrets registered; "N escaped": ESCAPED_TEXT.
TIMINGS = ("0", "10", "100", "100 escaped")


def _worker() -> None:
    """Runs in the interpreter whose sys.path[0] is the tree being measured: summarize the given texts."""
    from agentctl.evidence.sanitize import summarize
    from agentctl.evidence.secret_registry import SecretRegistry

    job = json.load(sys.stdin)
    outputs = [summarize("x", text, SecretRegistry([secret])).summary for secret, text in job["cells"]]
    timings = {}
    for key in TIMINGS:
        count, _, escaped = key.partition(" ")
        text = ESCAPED_TEXT if escaped else SUMMARY_TEXT
        registry = SecretRegistry(job["secrets"][: int(count)])
        summarize("x", text, registry)  # compile once, as the daemon does per registry version
        samples = []
        for _ in range(job["rounds"]):
            t0 = time.perf_counter()
            summarize("x", text, registry)
            samples.append(time.perf_counter() - t0)
        samples.sort()
        timings[key] = samples[len(samples) // 2] * 1e6
    json.dump({"outputs": outputs, "timings": timings}, sys.stdout)


def _run_tree(root: Path, job: dict) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", str(root)], input=json.dumps(job),
                          capture_output=True, text=True, check=True, cwd=root)
    return json.loads(proc.stdout)


def _export(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "agentctl"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _corpus() -> list[str]:
    from agentctl.testing.secret_forms import ORDINARY_MESSAGES

    lines = list(ORDINARY_MESSAGES)
    for path in [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]:
        lines += [line for line in path.read_text().splitlines() if len(line.strip()) >= 20]
    return lines


def _over_redaction(lines: list[str], sizes: list[int]) -> dict[str, dict[int, float]]:
    from agentctl.evidence import fragments

    rng = random.Random(26)
    alphabet = string.ascii_letters + string.digits
    randoms = ["".join(rng.choice(alphabet) for _ in range(33)) for _ in range(200)]
    words = sorted({w.lower() for line in lines for w in re.findall(r"[A-Za-z]{4,8}", line)})
    phrases = ["-".join(rng.choice(words) for _ in range(4)) + f"-{rng.randrange(1000, 9999)}" for _ in range(200)]
    out: dict[str, dict[int, float]] = {"random33": {}, "passphrase": {}}
    saved = fragments.RANDOM_FRAGMENT, fragments.WORDLIKE_FRAGMENT
    try:
        for size in sizes:
            fragments.RANDOM_FRAGMENT = fragments.WORDLIKE_FRAGMENT = size
            for name, secrets in (("random33", randoms), ("passphrase", phrases)):
                matcher = fragments.FragmentMatcher(secrets)
                hit = sum(matcher.search(line) for line in lines)
                out[name][size] = 100.0 * hit / len(lines)
    finally:
        fragments.RANDOM_FRAGMENT, fragments.WORDLIKE_FRAGMENT = saved
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="main", help="git revision of the sanitizer to compare with")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3, help="alternated runs of each tree")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from agentctl.evidence.fragments import RANDOM_FRAGMENT, WORDLIKE_FRAGMENT, fragment_length
    from agentctl.testing.secret_forms import FORMS, SHAPES, longest_run, mangle

    rng = random.Random(7)
    secrets = ["".join(rng.choice(string.ascii_letters + string.digits) for _ in range(33)) for _ in range(100)]
    cells = [(secret, mangle(form, secret)) for form in FORMS for secret in SHAPES.values()]
    job = {"cells": cells, "secrets": secrets, "rounds": args.rounds}
    with tempfile.TemporaryDirectory(prefix="redact-before-") as tmp:
        old = _export(args.before, Path(tmp))
        # Alternated, and the fastest median of each kept: the machine's other load only ever adds time.
        runs = [(_run_tree(old, job), _run_tree(REPO, job)) for _ in range(args.repeat)]
    before, after = runs[0]
    for key in TIMINGS:
        before["timings"][key] = min(b["timings"][key] for b, _ in runs)
        after["timings"][key] = min(a["timings"][key] for _, a in runs)

    print(f"longest readable run of the secret per form x shape (N: {RANDOM_FRAGMENT} random, "
          f"{WORDLIKE_FRAGMENT} word-like; short6 is matched whole only); before -> after")
    names = list(SHAPES)
    print(f"{'form':18}" + "".join(f"{name:>16}" for name in names))
    table: dict[str, dict[str, list[int]]] = {}
    index = 0
    for form in FORMS:
        row = table.setdefault(form, {})
        for name in names:
            secret, _ = cells[index]
            row[name] = [longest_run(before["outputs"][index], secret), longest_run(after["outputs"][index], secret)]
            index += 1
        print(f"{form:18}" + "".join(f"{row[n][0]:>9} -> {row[n][1]:<3}" for n in names))
    allowed = {name: min(fragment_length(secret), len(secret)) - 1 for name, secret in SHAPES.items()}
    leaks = sum(row[n][1] > allowed[n] for row in table.values() for n in names)
    print(f"cells leaking a run of N or more after: {leaks}; "
          f"before: {sum(row[n][0] > allowed[n] for row in table.values() for n in names)}")

    sizes = [5, 6, 7, 8, 10, 12, 14]
    lines = _corpus()
    over = _over_redaction(lines, sizes)
    print(f"\nover-redaction: % of {len(lines)} ordinary lines that lose a fragment, by N")
    print(f"{'secrets':12}" + "".join(f"{'N=' + str(n):>8}" for n in sizes))
    for name, row in over.items():
        print(f"{name:12}" + "".join(f"{row[n]:>8.2f}" for n in sizes))

    print(f"\nsummarize() of a {len(SUMMARY_TEXT.encode())}-byte error (escaped: a {len(ESCAPED_TEXT.encode())}-byte "
          f"JSON error full of escapes), median of {args.rounds}")
    for count in TIMINGS:
        b, a = before["timings"][count], after["timings"][count]
        print(f"  {count:>11} secrets: before {b:7.1f} us, after {a:7.1f} us, ratio {a / b:5.2f}, "
              f"{100 * a / MCP_CPU_US_PER_CALL:4.1f}% of an MCP tools/call's server CPU ({MCP_CPU_US_PER_CALL} us)")
    if args.json:
        import bench._common as c

        figures = [c.figure(f"summarize() of a 256-byte error, {n} secrets", after["timings"][n],
                            before["timings"][n], unit="us", reference_name=f"the sanitizer of {args.before}")
                   for n in TIMINGS]
        figures += [c.figure(f"the same, {n} secrets, against an MCP tools/call's server CPU", after["timings"][n],
                             MCP_CPU_US_PER_CALL, unit="us", reference_name="bench/RESULTS.md (modern, c=8)",
                             target=("ratio", "<=", 0.25)) for n in TIMINGS[1:]]
        figures.append(c.figure("forms x shapes cells leaking a run of N or more", leaks, target=("value", "<=", 0)))
        args.json.write_text(json.dumps({"bench": "redact_fragments", "figures": figures, "table": table,
                                         "over_redaction": over, "before": before["timings"],
                                         "after": after["timings"]}, indent=1))


if __name__ == "__main__":
    _worker() if "--worker" in sys.argv else main()
