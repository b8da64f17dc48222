"""The committed JSON Schema in docs/ matches the contract (regenerate with `make schema`)."""

from __future__ import annotations

import json
import subprocess

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
    # 2: agent-reported evidence and the catalog hash (a new kind and Literal values old decoders refuse).
    assert CONTRACT_VERSION == 2
