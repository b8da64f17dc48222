"""The hub reads daemons of every readable contract version: a 0.1.0 daemon (contract 1) keeps reporting to a
new hub; a daemon of a version the hub cannot read is refused with `contract_mismatch`, never misread."""

from __future__ import annotations

from pathlib import Path

from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import CONTRACT_VERSION, decode_history
from agentctl.upstream import protocol as P
from tests.upstream.support import RawClient, eventually

V1_REPORT = Path(__file__).resolve().parents[1] / "evidence" / "data" / "report_v1.json"


async def _hello(client: RawClient, identity, version: int) -> None:
    await client.send(P.frame(P.HelloFrame, identity=identity, daemon_version="0.1.0", contract_version=version,
                              heartbeat_ms=10_000))


async def test_a_contract_1_daemon_is_read_and_its_report_kept_as_sent(hub) -> None:
    history = decode_history(V1_REPORT.read_bytes())
    client = await RawClient.connect(hub.socket_path)
    await _hello(client, history.identity, 1)
    await client.send(P.frame(P.SnapshotFrame, history=history))

    def stored():
        report = hub.report(history.identity.session_id)
        return report is not None and report.history is not None and encode(report.history) == encode(history)

    await eventually(stored, what="the contract-1 snapshot stored")
    await client.close()


async def test_a_daemon_of_a_contract_version_the_hub_cannot_read_is_refused_by_name(hub) -> None:
    history = decode_history(V1_REPORT.read_bytes())
    client = await RawClient.connect(hub.socket_path)
    await _hello(client, history.identity, CONTRACT_VERSION + 1)
    frames = await client.recv_until_closed()
    assert [f.code for f in frames] == ["contract_mismatch"]
    assert frames[0].message == f"contract version {CONTRACT_VERSION + 1}; this hub reads versions 1, 2"
    assert hub.report(history.identity.session_id) is None
