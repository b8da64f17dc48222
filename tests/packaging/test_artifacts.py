"""Smoke test of the release artifacts: `packaging/build.py` builds each one, and each runs from an empty directory.

Built once per test run into a temporary dist/ (the build venv is cached in build/packaging/, so only the
first run on a machine installs the build tools). Each artifact runs with a minimal environment that
holds neither this repository nor its venv: the zipapp on a bare CPython venv (no site-packages), the
PyInstaller build with no Python on PATH at all. `--version`, then `run` on the bundled example spec, to
completion, including the bundled reference agent the example names.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import pytest

from agentctl import __version__
from agentctl.evidence.encoding import PACKAGED_SHA256
from agentctl.evidence.store import read_report
from tests.conftest import REPO
from tests.packaging.support import load_build_module

DEMO = REPO / "examples" / "demo.toml"
ENCODING = "agentctl/evidence/data/o200k_base.tiktoken"
BUILD_TIMEOUT = 900  # a cold build venv on a busy 2-core machine; warm builds take well under a minute

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT + 300)


build = load_build_module()
RELAY = "agentctl/agent/witness_copy.abi3.so"


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    if os.environ.get("AGENTCTL_SKIP_PACKAGING") == "1":
        pytest.skip("AGENTCTL_SKIP_PACKAGING=1: artifact builds skipped (CI always runs them)")
    out = tmp_path_factory.mktemp("dist")
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(REPO / "packaging" / "build.py"), "all", "--out", str(out)],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT, cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    print(f"\nartifacts built in {time.monotonic() - started:.0f} s:\n{result.stdout}")
    return out


@pytest.fixture(scope="module")
def shiv_root(tmp_path_factory) -> Path:
    """One $SHIV_ROOT for the zipapp tests: the archive unpacks (and compiles) once, as on a real host."""
    return tmp_path_factory.mktemp("shiv")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _minimal_env(home: Path, path: str, **extra: str) -> dict[str, str]:
    return {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", "NO_COLOR": "1", **extra}


def _run_demo(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    version = subprocess.run([*argv, "--version"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.strip() == f"agentctl {__version__}", version.stderr
    # The demo names no state dir: $STATE_DIRECTORY (as systemd sets it) keeps this run's inside `cwd`.
    run = subprocess.run([*argv, "run", str(DEMO)], cwd=cwd, env={**env, "STATE_DIRECTORY": str(cwd / "state")},
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    [report_file] = (cwd / "state").glob("*/report.json")
    history = read_report(cwd / "state", report_file.parent.name)
    rows = {row.name: row.status for row in history.current.servers}
    # The bundled reference agent really started and attached: the built-in server is active.
    assert history.agent.name == "agentctl-reference-agent"
    assert rows == {"kandev": "active", "docs": "delivered"}


def test_wheel_carries_both_console_scripts_and_the_reference_agent(dist):
    wheel = dist / build.wheel_name()
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read(f"agentctl-{__version__}.dist-info/entry_points.txt").decode()
    assert {"agentctl/cli.py", "agentctl/bundled.py", "agentctl/testing/reference_agent.py", "agentctl/py.typed"} <= names
    assert "agentctl/hub/static/index.html" in names, "the hub's page ships in the wheel"
    assert {"agentctl/hub/static/vendor/xterm/xterm.js", "agentctl/hub/static/vendor/xterm/xterm.css",
            "agentctl/hub/static/vendor/xterm/LICENSE"} <= names, "the page's terminal widget ships with its license"
    assert ENCODING in names, "token estimates need no network: the encoding ships in the wheel"
    assert RELAY in names, "the witness's compiled relay ships in the wheel (one abi3 build)"
    assert not any("__pycache__" in name or name.startswith("tests/") for name in names)
    assert "agentctl = agentctl.cli:main" in entry_points
    assert "agentctl-reference-agent = agentctl.testing.reference_agent:main" in entry_points


def test_zipapp_runs_the_demo_from_an_empty_directory_on_a_bare_cpython(dist, shiv_root, tmp_path):
    pyz = dist / build.zipapp_name()
    bare = tmp_path / "bare-python"
    # A CPython with nothing installed: neither agentctl, its dependencies nor agentctl-reference-agent.
    venv.EnvBuilder(with_pip=False, symlinks=True).create(bare)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = _minimal_env(tmp_path, f"{bare / 'bin'}:/usr/bin:/bin", SHIV_ROOT=str(shiv_root))
    # Started by its own shebang (`/usr/bin/env python3.X`), which finds the bare interpreter on PATH.
    _run_demo([str(pyz)], empty, env)
    [unpacked] = shiv_root.glob("*/site-packages")
    tag = sys.implementation.cache_tag
    assert (unpacked / "agentctl" / "__pycache__" / f"cli.{tag}.pyc").is_file(), "unpacked with compiled bytecode"
    assert _sha256(unpacked / ENCODING) == PACKAGED_SHA256, "the zipapp carries the encoding, intact"
    _assert_relay_loads([str(bare / "bin" / "python"), "-c"], unpacked, empty, env)


def _assert_relay_loads(python: list[str], site: Path, cwd: Path, env: dict[str, str]) -> None:
    """The artifact's witness relays in C: its relay module imports from what the artifact carries."""
    code = "from agentctl.agent import witness_relay as w; print(w.compiled(), w.witness_copy.__file__)"
    probe = subprocess.run([*python, code], env={**env, "PYTHONPATH": str(site)}, cwd=cwd, capture_output=True,
                           text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    loaded, path = probe.stdout.split()
    assert loaded == "True" and Path(path).is_relative_to(site), probe.stdout


def test_zipapp_refuses_another_cpython_with_one_clear_line(dist, shiv_root, tmp_path):
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [shutil.which(f"python3.{minor}") for minor in range(8, 20) if minor != sys.version_info[1]]
    candidates += sorted(str(p) for p in pyenv_root.glob("versions/*/bin/python3.*") if p.name[8:].isdigit())
    other = None
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[1])"], capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() != str(sys.version_info[1]):
            other = candidate
            break
    if other is None:
        pytest.skip("no CPython of another minor version on PATH or under pyenv")
    env = _minimal_env(tmp_path, "/usr/bin:/bin", SHIV_ROOT=str(shiv_root))
    result = subprocess.run([other, str(dist / build.zipapp_name()), "--version"], env=env, capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("agentctl: this zipapp needs CPython 3.") and len(result.stderr.splitlines()) == 1


def test_onedir_runs_the_demo_from_an_empty_directory_with_no_python_on_path(dist, tmp_path):
    binary = dist / build.onedir_name() / "agentctl"
    empty = tmp_path / "empty"
    empty.mkdir()
    env = _minimal_env(tmp_path, "/nonexistent")
    _run_demo([str(binary)], empty, env)
    pages = list((dist / build.onedir_name()).rglob("agentctl/hub/static/index.html"))
    assert pages, "the frozen build carries the hub's page"
    [encoding] = (dist / build.onedir_name()).rglob(ENCODING)
    assert _sha256(encoding) == PACKAGED_SHA256, "the frozen build carries the encoding, intact"
    assert list((dist / build.onedir_name()).rglob(RELAY.rpartition("/")[2])), "the frozen build carries the relay"


def test_readme_install_section_names_what_the_build_makes():
    readme = (REPO / "README.md").read_text()
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    for text in ("make dist", build.zipapp_name(), build.onedir_name(), "systemctl start agentctl@", "SHIV_ROOT"):
        assert text in install, f"README install section should mention {text}"
