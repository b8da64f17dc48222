"""The layering is declared once (pyproject.toml's [tool.importlinter]) and checked here with import-linter's own
`lint-imports`: packages layered from the entry points down to the pure core, a pure core with no I/O, no
import cycles; docs/architecture.md shows the same layers. And no component handle is typed `Any`."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = {contract["id"]: contract for contract in CONFIG["contracts"]}


def lint_imports(*args: str) -> subprocess.CompletedProcess[str]:
    assert LINT_IMPORTS.is_file(), f"{LINT_IMPORTS} is missing: install the test extra (make .venv/.installed)"
    return subprocess.run([str(LINT_IMPORTS), "--no-logo", "--no-cache", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_every_import_contract_is_kept():
    done = lint_imports()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in done.stdout


def test_an_import_against_the_layers_breaks_the_check(tmp_path):
    # agentctl.logs imports agentctl.safetext: declaring safetext the higher layer must be reported broken,
    # so a kept contract above means the imports were read, not skipped.
    config = tmp_path / "reversed.toml"
    config.write_text('[tool.importlinter]\nroot_package = "agentctl"\n\n[[tool.importlinter.contracts]]\n'
                      'id = "reversed"\nname = "reversed"\ntype = "layers"\n'
                      'layers = ["agentctl.safetext", "agentctl.logs"]\n')
    done = lint_imports(str(config))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "agentctl.logs is not allowed to import agentctl.safetext" in done.stdout


def test_the_layers_and_the_no_cycles_rule_hold_without_a_declared_exception():
    # The CLI commands live above cli_support (agentctl.commands), not beside the control server under it.
    assert CONTRACTS["layers"].get("ignore_imports", []) == []
    assert CONTRACTS["no-cycles"].get("ignore_imports", []) == []


def test_the_layers_cover_every_top_level_module_and_package():
    layered = {name.strip() for layer in CONTRACTS["layers"]["layers"] for name in re.split(r"[|:]", layer)}
    children = {p.stem for p in (REPO / "agentctl").glob("*.py") if p.name != "__init__.py"}
    children |= {p.parent.name for p in (REPO / "agentctl").glob("*/__init__.py")}
    assert CONTRACTS["layers"]["exhaustive"] is True
    assert layered == children


def test_the_architecture_doc_shows_the_contracts_layers_in_order():
    text = (REPO / "docs" / "architecture.md").read_text()
    block = text[text.index("```text\n") + len("```text\n"):]
    block = block[:block.index("```")]
    assert [line.strip() for line in block.splitlines() if line.strip()] == CONTRACTS["layers"]["layers"], (
        "docs/architecture.md's layer diagram differs from pyproject.toml's [tool.importlinter] layers")
    for ignored in CONTRACTS["layers"].get("ignore_imports", []):
        importer = ignored.split(" -> ")[0]
        assert f"`{importer}`" in text, f"docs/architecture.md does not explain the exception for {importer}"


# ---- no component handle is typed Any -----------------------------------------------------------------------

# Names that hold one of the daemon's or the hub's components (or the aiohttp app and runner they serve on). A
# database or peer connection may stay `Any`: SQLite and psycopg share no type.
HANDLE_NAMES = {"ctx", "context", "agent", "endpoint", "publisher", "tester", "supervisor", "hub", "store",
                "ledger", "backend", "manager", "runner", "journal", "app"}


def any_typed_handles(source: str) -> list[str]:
    """Parameters, attributes and variables named for a component (`ctx`, `self._runner`) annotated `Any`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.arg):
            name, annotation = node.arg, node.annotation
        elif isinstance(node, ast.AnnAssign):
            target = node.target
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            annotation = node.annotation
        else:
            continue
        if annotation is not None and ast.unparse(annotation).strip("'\"") == "Any" and name.strip("_") in HANDLE_NAMES:
            found.append(f"line {node.lineno}: {name}")
    return found


@pytest.mark.parametrize("path", sorted((REPO / "agentctl").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_no_component_handle_is_typed_any(path):
    assert any_typed_handles(path.read_text()) == []


def test_the_any_handle_check_catches_parameters_and_attributes():
    source = ("def f(ctx: Any, n: Any, agent: 'Any'):\n    pass\n"
              "class C:\n    def __init__(self):\n        self._runner: Any = None\n        self.count: Any = 0\n")
    assert any_typed_handles(source) == ["line 1: ctx", "line 1: agent", "line 5: _runner"]
