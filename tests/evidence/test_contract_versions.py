"""Contract version 3 beside versions 1 and 2: new readers read old reports unchanged; old readers refuse new ones.

`data/report_v1.json` is a report written by agentctl 0.1.0 (contract 1): `agentctl run examples/demo.toml`
with the reference agent, commit 8bbd6b9. `data/contract_v1.py.txt` is that release's
agentctl/evidence/contract.py, verbatim, so the old reader's behaviour is tested with the old types
themselves rather than described. `data/report_v2.json` and `data/contract_v2.py.txt` are the same for the
last commit of contract 2 (9860542, `agentctl run examples/demo.toml --prompt hello`).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from agentctl.evidence import reducer
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import (
    CONTRACT_VERSION,
    READABLE_CONTRACT_VERSIONS,
    AttachmentHistory,
    EvidenceEvent,
    decode_history,
)
from agentctl.evidence.store import ReportCorrupt, read_report, report_path

DATA = Path(__file__).parent / "data"
V1_REPORT = DATA / "report_v1.json"
V1_EXECUTION = "exec-v1-demo"


V2_REPORT = DATA / "report_v2.json"


def _old_contract(version: int) -> Iterator[types.ModuleType]:
    name = f"agentctl_contract_v{version}"
    module = types.ModuleType(name)
    sys.modules[name] = module  # msgspec resolves the structs' annotations through their module
    try:
        exec(compile((DATA / f"contract_v{version}.py.txt").read_text(), f"contract_v{version}.py", "exec"),
             module.__dict__)
        assert module.CONTRACT_VERSION == version
        yield module
    finally:
        del sys.modules[name]


@pytest.fixture(scope="module")
def v1() -> Iterator[types.ModuleType]:
    yield from _old_contract(1)


@pytest.fixture(scope="module")
def v2() -> Iterator[types.ModuleType]:
    yield from _old_contract(2)


def _report(history: AttachmentHistory, server: str, **fields) -> EvidenceEvent:
    ident, attempt = history.identity, history.current
    return EvidenceEvent(
        kind="agent_reported", occurred_at=attempt.updated_at, task_id=ident.task_id, session_id=ident.session_id,
        execution_id=ident.execution_id, instance_id=ident.instance_id, attempt_id=attempt.attempt_id,
        server=server, report_source="claude:stream-json-init", **fields,
    )


def _state_dir_with(tmp_path: Path, data: bytes, execution: str = V1_EXECUTION) -> Path:
    target = report_path(tmp_path, execution)
    target.parent.mkdir(parents=True)
    target.write_bytes(data)
    return tmp_path


def test_this_release_reads_versions_1_2_and_3() -> None:
    assert CONTRACT_VERSION == 3 and READABLE_CONTRACT_VERSIONS == (1, 2, 3)


def test_a_version_2_report_reads_with_the_new_code_unchanged(tmp_path: Path) -> None:
    original = V2_REPORT.read_bytes()
    execution = decode_history(original).identity.execution_id
    history = read_report(_state_dir_with(tmp_path, original, execution), execution)
    assert history.version == 2 and history.agent is not None and history.agent.state == "exited"
    assert {row.name: row.status for row in history.current.servers} == {"kandev": "active", "docs": "delivered"}
    assert encode(history) == original.rstrip(b"\n")


def test_a_version_1_report_reads_with_the_new_code_unchanged(tmp_path: Path) -> None:
    original = V1_REPORT.read_bytes()
    history = read_report(_state_dir_with(tmp_path, original), V1_EXECUTION)
    assert history.version == 1
    rows = {row.name: row for row in history.current.servers}
    assert (rows["kandev"].status, rows["docs"].status) == ("active", "delivered")
    assert all(r.status_source == "observed" and r.reported is None and r.catalog_hash is None for r in rows.values())
    # Nothing is added on the way through: re-encoded, it is the same document, byte for byte.
    assert encode(history) == original.rstrip(b"\n")


def test_a_version_1_report_folds_new_evidence_by_the_new_rules() -> None:
    history = decode_history(V1_REPORT.read_bytes())
    assert reducer.apply(history, _report(history, "docs", reported_state="failed")) == "applied"
    row = reducer.find_row(history.current, "docs")
    assert (row.status, row.status_source, row.reason_code) == ("failed", "reported", "agent_reported_failed")


@pytest.mark.parametrize("version", [4, 0, -1, 2**40])
def test_a_report_of_a_version_this_release_does_not_read_is_refused_by_its_version(tmp_path: Path, version: int) -> None:
    data = V1_REPORT.read_bytes().replace(b'"version":1', f'"version":{version}'.encode(), 1)
    with pytest.raises(ReportCorrupt, match=r"contract version (-?\d+|unknown); this agentctl reads versions 1, 2, 3"):
        read_report(_state_dir_with(tmp_path, data), V1_EXECUTION)


def test_a_newer_report_with_fields_this_release_does_not_know_is_refused_by_version_not_by_field(tmp_path: Path) -> None:
    data = V1_REPORT.read_bytes().replace(b'"version":1', b'"version":4', 1).replace(
        b'"last_seq":', b'"something_new":true,"last_seq":', 1)
    with pytest.raises(ReportCorrupt, match="contract version 4") as caught:
        read_report(_state_dir_with(tmp_path, data), V1_EXECUTION)
    assert "something_new" not in str(caught.value)


def _v2_report(*, with_report: bool) -> bytes:
    history = decode_history(V1_REPORT.read_bytes())
    history.version = 2
    if with_report:
        assert reducer.apply(history, _report(history, "docs", reported_state="connected", tool_count=2)) == "applied"
    return encode(history)


def test_the_0_1_0_reader_decodes_a_v2_report_without_new_evidence_and_its_version_check_refuses_it(v1) -> None:
    old = v1.decode_history(_v2_report(with_report=False))
    # agentctl 0.1.0's read_report refuses `version > CONTRACT_VERSION` ("this agentctl reads up to 1").
    assert old.version == 2 > v1.CONTRACT_VERSION


def test_the_0_1_0_reader_refuses_a_v2_report_with_agent_reported_evidence_and_never_misreads_it(v1) -> None:
    data = _v2_report(with_report=True)
    with pytest.raises(msgspec.ValidationError, match="agent_reported|Object contains unknown field"):
        v1.decode_history(data)



def _v3_report(**agent: object) -> bytes:
    history = decode_history(V2_REPORT.read_bytes())
    history.version = CONTRACT_VERSION
    history.agent = msgspec.structs.replace(history.agent, **agent)
    return encode(history)


def test_the_contract_2_reader_refuses_a_v3_report_by_its_version_never_by_a_field(v2) -> None:
    # A field that contract 2's last commit knows, and one it does not: the refusal names the version alike.
    for data in (_v3_report(terminal=True), _v3_report()):
        with pytest.raises(v2.UnreadableVersion, match=r"^contract version 3; this agentctl reads versions 1, 2$"):
            v2.decode_history(data)


def test_the_contract_2_reader_reads_the_v2_fixture_this_release_reads(v2) -> None:
    assert v2.encode(v2.decode_history(V2_REPORT.read_bytes())) == encode(decode_history(V2_REPORT.read_bytes()))
