"""agentctl/ type-checks under mypy --strict with zero errors (pyproject.toml's [tool.mypy]): strict for every
module, an override only for a third-party module that ships no types, never an error code turned off, and every
`# type: ignore` naming the one error it silences."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO

CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
# Warm runs reuse it (git ignores it); a cold one takes about 25 s on one core.
CACHE = REPO / ".mypy_cache"


def mypy(*args: str, cache: Path = CACHE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
                           "--cache-dir", str(cache), "--no-error-summary", "--hide-error-context", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a cold mypy run is tens of seconds: outside the quick loop, which the developer's mypy covers
def test_agentctl_type_checks_under_mypy_strict_with_zero_errors():
    done = mypy()  # the files are the config's own: agentctl/
    assert done.returncode == 0, f"mypy --strict found errors:\n{done.stdout}{done.stderr}"


@pytest.mark.slow
def test_a_type_error_in_a_checked_module_is_reported(tmp_path):
    # The same configuration over one bad module must fail, so the zero above means the code was checked.
    bad = tmp_path / "bad.py"
    bad.write_text("def half(n):\n    return n / 2\n\n\ncount: int = 'three'\n")
    done = mypy(str(bad), cache=tmp_path / "cache")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[no-untyped-def]" in done.stdout  # strict: an unannotated function is an error
    assert "[assignment]" in done.stdout


def test_the_configuration_is_strict_everywhere_and_turns_no_error_code_off():
    assert CONFIG["strict"] is True
    assert CONFIG["files"] == ["agentctl"]
    assert "disable_error_code" not in CONFIG
    for override in CONFIG.get("overrides", []):
        # Only a third-party module without types may be told apart, and only so its import is not an error.
        assert set(override) == {"module", "ignore_missing_imports"}, override
        assert not any(name.startswith("agentctl") for name in override["module"]), override


def test_every_type_ignore_in_agentctl_names_its_error_code():
    bare = re.compile(r"#\s*type:\s*ignore(?!\[[a-z-]+(, *[a-z-]+)*\])")
    found = [f"{path.relative_to(REPO)}:{n}" for path in sorted((REPO / "agentctl").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if bare.search(line)]
    assert found == []
