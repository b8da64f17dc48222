"""The project's license metadata: an SPDX expression with its file, a build backend that reads it, and a wheel
built the way `make dist` builds it that carries both and makes setuptools print no warning.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from agentctl import __version__
from tests.conftest import REPO
from tests.packaging.support import load_build_module

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# The Apache License 2.0 as published (the text at apache.org and Debian's common-licenses/Apache-2.0).
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
# The first setuptools that reads `license = "<SPDX>"` and `license-files` (PEP 639).
FIRST_SPDX_SETUPTOOLS = "77.0.0"
# What setuptools prints when the metadata uses a form it is phasing out (the install-time banner).
BANNER = re.compile(r"deprecat|SetuptoolsWarning|BuildBackendWarning", re.IGNORECASE)


def pinned(name: str) -> str:
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.lower().startswith(f"{name}=="):
            return line.partition("==")[2]
    raise AssertionError(f"constraints.txt pins no {name}")


def test_the_license_is_an_spdx_expression_naming_the_license_file():
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert not any(c.startswith("License ::") for c in project.get("classifiers", [])), \
        "license classifiers are superseded by the SPDX expression"


def test_the_license_file_is_the_apache_license_2_0_verbatim():
    assert hashlib.sha256((REPO / "LICENSE").read_bytes()).hexdigest() == APACHE_2_0_SHA256


def test_the_build_backend_floor_reads_spdx_licenses_and_admits_the_pinned_setuptools():
    [setuptools] = [Requirement(r) for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")]
    assert setuptools.specifier.contains(FIRST_SPDX_SETUPTOOLS) and not setuptools.specifier.contains("76.1.0")
    assert setuptools.specifier.contains(pinned("setuptools"))


def test_the_wheel_builds_without_a_setuptools_warning_and_carries_the_license(tmp_path):
    if os.environ.get("AGENTCTL_SKIP_PACKAGING") == "1":
        pytest.skip("AGENTCTL_SKIP_PACKAGING=1: wheel build skipped (CI always runs it)")
    build = load_build_module()
    src = build.copy_sources(tmp_path / "src")  # exactly what `make dist` builds the wheel from
    # Verbose: pip shows the backend's output only then, and says which setuptools it installed.
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--build-constraint", str(build.CONSTRAINTS),
         "--wheel-dir", str(tmp_path / "out"), str(src)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    installed = re.search(r"Successfully installed (.*)", output)
    assert installed and f"setuptools-{pinned('setuptools')}" in installed.group(1).split(), "the pinned backend built it"
    assert not BANNER.findall(output), "\n".join(line for line in output.splitlines() if BANNER.search(line))

    wheel = tmp_path / "out" / build.wheel_name()
    with zipfile.ZipFile(wheel) as archive:
        info = f"agentctl-{__version__}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode().split("\n\n", 1)[0].splitlines()
        assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata
        assert not [line for line in metadata if line.startswith("License:")], "no legacy free-text License field"
        assert archive.read(f"{info}/licenses/LICENSE") == (REPO / "LICENSE").read_bytes()
        # The page's vendored terminal widget is package data too, with its own license beside it.
        vendored = {name.rpartition("/")[2] for name in archive.namelist()
                    if name.startswith("agentctl/hub/static/vendor/xterm/")}
        assert vendored == {"xterm.js", "xterm.css", "LICENSE", "README.md"}


def test_a_build_whose_c_compiler_fails_still_makes_the_wheel_and_its_witness_relays_in_python(tmp_path):
    if os.environ.get("AGENTCTL_SKIP_PACKAGING") == "1":
        pytest.skip("AGENTCTL_SKIP_PACKAGING=1: wheel build skipped (CI always runs it)")
    build = load_build_module()
    src = build.copy_sources(tmp_path / "src")
    # `false` as the compiler: every compile fails, as on a host with no C toolchain.
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--build-constraint", str(build.CONSTRAINTS),
         "--wheel-dir", str(tmp_path / "out"), str(src)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env={**os.environ, "CC": "false"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    wheel = tmp_path / "out" / build.wheel_name()
    unpacked = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        assert not [n for n in archive.namelist() if n.startswith("agentctl/agent/witness_copy") and n.endswith(".so")]
        archive.extractall(unpacked)
    # That package's witness, spawned on a real pipe: it relays every byte, in Python.
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from agentctl.agent import witness_relay as w;"
            "assert not w.compiled(); from agentctl.agent import mcp_witness; mcp_witness.main(sys.argv[2:])")
    payload = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n' + b"x" * 100_000 + b"\n"
    witness = subprocess.run([sys.executable, "-c", code, str(unpacked), "srv", "--", "cat"], input=payload,
                             capture_output=True, timeout=60, cwd=tmp_path)
    assert witness.returncode == 0, witness.stderr
    assert witness.stdout == payload


def test_the_vendored_xterm_is_the_recorded_release_unmodified_with_its_license():
    vendor = REPO / "agentctl" / "hub" / "static" / "vendor" / "xterm"
    readme = (vendor / "README.md").read_text()
    assert "`@xterm/xterm` 6.0.0" in readme, "the version is recorded"
    for name in ("xterm.js", "xterm.css", "LICENSE"):
        digest = hashlib.sha256((vendor / name).read_bytes()).hexdigest()
        assert f"`{name}`" in readme and digest in readme, f"{name}: its sha256 is not the one recorded"
    assert "Permission is hereby granted, free of charge" in (vendor / "LICENSE").read_text()  # MIT


def test_the_makefile_s_editable_install_prints_no_setuptools_banner(tmp_path):
    if os.environ.get("AGENTCTL_SKIP_PACKAGING") == "1":
        pytest.skip("AGENTCTL_SKIP_PACKAGING=1: editable build skipped (CI always runs it)")
    # The install line of `make .venv/.installed` (what a fresh `make demo` runs), as written, without the
    # dependencies (they are not built here): the editable build is what prints setuptools' banner.
    makefile = (REPO / "Makefile").read_text().replace("\\\n", " ")
    [line] = [ln.strip() for ln in makefile.splitlines() if "pip install" in ln and "-e '.[test]'" in ln]
    build = load_build_module()
    src = build.copy_sources(tmp_path / "src")
    for name in ("constraints.txt", "Makefile"):
        (src / name).write_bytes((REPO / name).read_bytes())
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    # The Makefile's step before it: a pip that knows --build-constraint.
    subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
                   check=True, capture_output=True, timeout=300)
    command = line.replace("$(BIN)", str(tmp_path / "venv" / "bin")) + " --no-deps"
    result = subprocess.run(["sh", "-c", command], cwd=src, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Editable installation" not in output and not BANNER.findall(output), output
