"""The Makefile's two commands as the README gives them: `make test ARGS=...` runs pytest on that selection."""

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
    assert done.stdout.splitlines()[-1] == ".venv/bin/python -m pytest tests/evidence -k reducer"
    plain = subprocess.run(["make", "-n", "test"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert plain.stdout.splitlines()[-1].rstrip() == ".venv/bin/python -m pytest"
