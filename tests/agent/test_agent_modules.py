"""One module per agent CLI (agentctl/agent/clis/): each exports one `AGENT` holding all agentctl knows of that
agent, the registry is built from the modules, and no agent's facts live anywhere else."""

from __future__ import annotations

import ast
import importlib
import sys
import textwrap
from pathlib import Path
from typing import get_args

import pytest

from agentctl import spec
from agentctl.agent import clis
from agentctl.agent.agent_cli import AgentCli
from agentctl.evidence import display

ROOT = Path(clis.__file__).parents[2]  # the agentctl package
AGENTS_DIR = ROOT / "agent" / "clis"
# Where an agent's name may appear outside its module. The spec and the row wording are pure layers below the
# agent layer (they cannot import the registry), so they keep a copy of the names, held equal to the registry by
# test_the_copies_kept_by_the_pure_layers_equal_the_registry. agentctl/testing is the reference agent standing in
# for real CLIs in tests, not agentctl's knowledge of them.
MIRRORS = {("spec.py", "StrategyName"), ("spec.py", "REPORTING_STRATEGIES"), ("evidence/display.py", "REPORTERS")}
NOT_AGENTCTL = ("testing",)


def test_every_agent_module_exports_one_agent_registered_under_its_module_name():
    names = clis.module_names()
    assert {"claude", "codex", "cursor", "gemini", "kiro", "opencode"} <= set(names)
    for name in names:
        agent = importlib.import_module(f"agentctl.agent.clis.{name}").AGENT
        assert isinstance(agent, AgentCli) and agent.name == name and clis.get(name) is agent
        assert agent.display_name and name in agent.reporters, "its own report sources are named by it"
    parts = [part for agent in clis.agents() for part in agent.reporters]
    assert len(parts) == len(set(parts)), "a report source's agent part belongs to one module"
    assert clis.get(None) is None and clis.get("aider") is None and clis.get("agent_cli") is None


def _names_in_tables(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, string, what holds it) for each string constant that is a dict key, an element of a tuple, list
    or set literal, a side of a comparison or a whole assigned value, with the name it is assigned to."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            owner = next((t.id for t in targets if isinstance(t, ast.Name)), "")
            for inner in ast.walk(node.value) if node.value is not None else ():
                inner.owner = owner  # type: ignore[attr-defined]
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            held = list(node.keys)
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            held = list(node.elts)
        elif isinstance(node, ast.Compare):
            held = [node.left, *node.comparators]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            held = [node.value]
        else:
            continue
        for item in held:
            if isinstance(item, ast.Constant) and isinstance(item.value, str):
                found.append((item.lineno, item.value, getattr(node, "owner", "")))
    return found


def agent_facts_outside_their_modules(root: Path, names: set[str]) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root)
        if path.is_relative_to(AGENTS_DIR) or where.parts[0] in NOT_AGENTCTL:
            continue
        for line, value, owner in _names_in_tables(ast.parse(path.read_text(), str(path))):
            if value in names and (where.as_posix(), owner) not in MIRRORS:
                out.append(f"{where}:{line}: {value!r}")
    return out


def test_no_agents_name_is_a_key_or_a_case_anywhere_outside_its_module():
    names = set(clis.module_names()) | set(clis.reporters())
    assert agent_facts_outside_their_modules(ROOT, names) == []


def test_the_scan_finds_an_agents_name_used_as_a_table_key_or_a_case(tmp_path):
    # The scan itself can fail: a table keyed by a strategy name, or a branch on one, is found wherever it is.
    (tmp_path / "hints.py").write_text(textwrap.dedent('''
        TABLE = {"claude": "Claude Code"}
        def pick(strategy):
            return strategy == "gemini" or strategy in ("codex",)
    '''))
    assert sorted(agent_facts_outside_their_modules(tmp_path, {"claude", "codex", "gemini"})) == [
        "hints.py:2: 'claude'", "hints.py:4: 'codex'", "hints.py:4: 'gemini'"]


def test_the_copies_kept_by_the_pure_layers_equal_the_registry():
    assert get_args(spec.StrategyName) == clis.strategy_names()
    reporting = tuple(agent.name for agent in clis.agents() if agent.strategy and agent.plan_report)
    assert tuple(sorted(spec.REPORTING_STRATEGIES)) == reporting
    assert display.REPORTERS == clis.reporters()


NEW_AGENT = '''
"""A made-up CLI, to show that adding an agent is adding its module."""
from agentctl.agent.agent_cli import AgentCli
from agentctl.agent.passthrough.base import CliReceiver, plan_materialization
from agentctl.agent.refusal_hints import RefusalHint
from agentctl.agent.reported.feed import ReportPlan


class Strategy:
    name = "zzagent"
    receiver = CliReceiver(frozenset({"http"}))

    def materialize(self, req):
        return plan_materialization(req, self.receiver)


AGENT = AgentCli(
    name="zzagent", display_name="ZZ Agent", strategy=Strategy(), reporters={"zzagent": "ZZ Agent"},
    refusal_hints=(RefusalHint("zz_refused", ("zz says no",), "ZZ Agent refused."),),
    plan_report=lambda argv: ReportPlan(source="zzagent:status") if "--status" in argv else None,
    no_report="ZZ Agent prints no status without --status",
)
'''


@pytest.fixture
def one_more_agent_module(tmp_path, monkeypatch):
    """A module dropped beside the real ones (a directory added to the package's path: the real tree is
    never written), with the registry's caches cleared before and after."""
    (tmp_path / "zzagent.py").write_text(NEW_AGENT)
    monkeypatch.setattr(clis, "__path__", [*clis.__path__, str(tmp_path)])
    clis.module_names.cache_clear()
    clis.agents.cache_clear()
    yield
    sys.modules.pop("agentctl.agent.clis.zzagent", None)
    clis.module_names.cache_clear()
    clis.agents.cache_clear()


def test_a_new_agent_is_one_module_and_every_table_then_knows_it(one_more_agent_module):
    assert "zzagent" in clis.strategy_names() and clis.get_strategy("zzagent").name == "zzagent"
    assert any(hint.cause == "zz_refused" for hint in clis.refusal_table())
    assert clis.reporters()["zzagent"] == "ZZ Agent"
    assert clis.plan_report("zzagent", ["zz", "--status"]).source == "zzagent:status"
    assert clis.plan_report("zzagent", ["zz"]).note == "ZZ Agent prints no status without --status"
