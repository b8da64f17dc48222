"""The whole suite on every core: first every test not marked `serial` in parallel (pytest-xdist), then the
`serial` ones alone, one at a time. Serial tests measure boundedness or timing under attack (a stalled upstream
never blocks recording for more than 0.1 s, 1,100 idle connections leave /readyz answering, a second signal
during start-up...) or load the whole machine themselves (building the wheel, a module of real agents with
canaries): run beside another worker they would measure that worker. tests/conftest.py says which are.

Usage: python tests/run_suite.py [--jobs N|auto] [PYTEST ARGS...]; exit status: pytest's, the worse phase."""

from __future__ import annotations

import os
import subprocess
import sys

NO_TESTS = 5  # pytest's exit status when a selection holds no test: fine for one phase, not for both


def main(argv: list[str]) -> int:
    jobs = os.environ.get("JOBS", "auto")
    if argv[:1] == ["--jobs"] and len(argv) > 1:
        jobs, argv = argv[1], argv[2:]
    pytest = [sys.executable, "-m", "pytest"]
    marker = _marker(argv)
    rest = _without_marker(argv)
    parallel = subprocess.call([*pytest, "-n", jobs, "-m", _and("not serial", marker), *rest])
    if parallel not in (0, NO_TESTS):
        print(f"run_suite: the parallel phase failed (exit {parallel}); the serial phase runs anyway", file=sys.stderr)
    serial = subprocess.call([*pytest, "-p", "no:xdist", "-m", _and("serial", marker), *rest])
    if parallel == serial == NO_TESTS:
        return NO_TESTS
    return max(code for code in (parallel, serial) if code != NO_TESTS)


def _marker(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "-m" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:]
    return None


def _without_marker(argv: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "-m":
            skip = True
        elif not (arg.startswith("-m") and len(arg) > 2):
            out.append(arg)
    return out


def _and(ours: str, theirs: str | None) -> str:
    return ours if theirs is None else f"({ours}) and ({theirs})"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
