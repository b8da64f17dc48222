"""The Makefile's two commands as the README gives them: `make test ARGS=...` runs pytest on that selection, on
every core, the `serial` tests alone after the rest (tests/run_suite.py)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import REPO


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_passes_args_to_pytest_as_the_selection() -> None:
    # Run under `make test` (as CI does), the inherited MAKELEVEL would make this make print "Entering/Leaving
    # directory" lines around what it runs: start it as a top-level make.
    env = {k: v for k, v in os.environ.items() if k not in ("ARGS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    # -n: what make would run, without running the suite. The venv step is shown too when it is out of date.
    done = subprocess.run(["make", "-n", "test", "ARGS=tests/evidence -k reducer"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == ".venv/bin/python tests/run_suite.py --jobs auto tests/evidence -k reducer"
    plain = subprocess.run(["make", "-n", "test", "JOBS=1"], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=60)
    assert plain.stdout.splitlines()[-1].rstrip() == ".venv/bin/python tests/run_suite.py --jobs 1"


def test_the_suite_runs_the_parallel_tests_on_workers_then_the_serial_ones_alone() -> None:
    import sys

    # --collect-only: each phase lists what it would run, without running it. test_signals.py is serial (it
    # measures a stop's timing), test_dsn.py is not.
    done = subprocess.run([sys.executable, "tests/run_suite.py", "--jobs", "2", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "tests/daemon/test_signals.py", "tests/test_dsn.py"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    phases = done.stdout.split(" tests collected")
    assert len(phases) == 3, done.stdout
    parallel, serial = phases[0], phases[1]
    assert "tests/test_dsn.py::" in parallel and "tests/daemon/test_signals.py::" not in parallel
    assert "tests/daemon/test_signals.py::" in serial and "tests/test_dsn.py::" not in serial


def test_a_selection_with_nothing_serial_in_it_is_a_pass_not_no_tests() -> None:
    import sys

    done = subprocess.run([sys.executable, "tests/run_suite.py", "--jobs", "1", "-q", "-p", "no:cacheprovider",
                           "tests/test_dsn.py", "-k", "masking"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    nothing = subprocess.run([sys.executable, "tests/run_suite.py", "--jobs", "1", "-q", "-p", "no:cacheprovider",
                              "tests/test_dsn.py", "-k", "no_such_test_anywhere"], cwd=REPO, capture_output=True,
                             text=True, timeout=300)
    assert nothing.returncode == 5, nothing.stdout[-2000:]
