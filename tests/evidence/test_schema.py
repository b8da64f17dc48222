"""The committed JSON Schema in docs/ matches the contract (regenerate with `make schema`)."""

from __future__ import annotations

import importlib
import json
import subprocess

import msgspec
import pytest

from agentctl.evidence.contract.report import CONTRACT_VERSION, history_schema
from tests.conftest import REPO, agentctl_cmd

SCHEMA_FILE = REPO / "docs" / "report.schema.json"


def test_committed_schema_matches_the_contract_types():
    committed = json.loads(SCHEMA_FILE.read_text())
    assert committed == history_schema(), "docs/report.schema.json is stale: run `make schema`"


def test_agentctl_schema_prints_the_same_schema():
    out = subprocess.run(agentctl_cmd("schema"), capture_output=True, text=True, timeout=30, cwd=REPO, check=True)
    assert json.loads(out.stdout) == history_schema()


def test_schema_names_every_status_and_evidence_kind():
    text = json.dumps(history_schema())
    for word in ("configured", "filtered", "unavailable", "delivered", "connected", "active", "failed",
                 "session_accepted", "initialize_observed", "tools_list_observed", "tool_call_observed",
                 "explicit_error", "connection_closed", "attempt_superseded", "agent_reported",
                 "needs_auth", "pending", "disabled", "cancelled", "observed", "reported"):
        assert f'"{word}"' in text
    # 3: what 2 gained after its bump (notices, connections, terminal, authentication) and bounded free text.
    assert CONTRACT_VERSION == 3


SURFACES = ("control", "diagnostics", "probe", "hub")


@pytest.mark.parametrize("surface", SURFACES)
def test_each_surfaces_committed_schema_is_generated_from_its_module_alone(surface):
    module = importlib.import_module(f"agentctl.evidence.contract.{surface}")
    schema = module.schema()
    assert json.loads((REPO / "docs" / f"{surface}.schema.json").read_text()) == schema, (
        f"docs/{surface}.schema.json is stale: run `make schema`")
    # Its roots are exactly the structs its module defines: a struct moved to another surface moves its root.
    own = {name for name, value in vars(module).items() if isinstance(value, type)
           and issubclass(value, msgspec.Struct) and value.__module__ == module.__name__ and not name.startswith("_")}
    assert {ref["$ref"].rsplit("/", 1)[1] for ref in schema["anyOf"]} == own


def test_agentctl_schema_prints_each_surface_and_refuses_an_unknown_one():
    for surface in SURFACES:
        out = subprocess.run(agentctl_cmd("schema", surface), capture_output=True, text=True, timeout=30, cwd=REPO,
                             check=True)
        assert json.loads(out.stdout) == importlib.import_module(f"agentctl.evidence.contract.{surface}").schema()
    bad = subprocess.run(agentctl_cmd("schema", "nope"), capture_output=True, text=True, timeout=30, cwd=REPO)
    assert bad.returncode != 0 and "invalid choice: 'nope'" in bad.stderr


def test_every_free_text_field_of_a_report_has_a_bound_in_the_schema():
    defs = history_schema()["$defs"]
    free_text = {("AgentNotice", "title"), ("AgentNotice", "description"), ("ErrorSummary", "summary"),
                 ("ServerRow", "summary"), ("AgentReport", "summary"), ("EvidenceEvent", "summary"),
                 ("EndpointTestResult", "summary"), ("AgentState", "name"), ("AgentState", "version"),
                 ("AgentState", "exit_reason"), ("AgentState", "report_note"), ("AgentState", "auth_note"),
                 ("ClientInfo", "name"), ("ClientInfo", "version"), ("ToolSummary", "description")}
    for struct, field in sorted(free_text):
        prop = defs[struct]["properties"][field]
        options = prop.get("anyOf", [prop])
        assert any("maxLength" in o for o in options), f"{struct}.{field} has no bound"
