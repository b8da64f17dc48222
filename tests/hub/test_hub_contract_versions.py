"""The hub reads daemons of every readable contract version: a 0.1.0 daemon (contract 1) and one of contract 2
keep reporting to a new hub; a daemon of a version the hub cannot read is refused with `contract_mismatch`,
never misread; a foreign report whose free text is longer than the contract's bound is refused by its path."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import CONTRACT_VERSION, MAX_SUMMARY_BYTES, AgentNotice, decode_history
from agentctl.upstream import protocol as P
from tests.upstream.support import RawClient, eventually

DATA = Path(__file__).resolve().parents[1] / "evidence" / "data"
REPORTS = {1: DATA / "report_v1.json", 2: DATA / "report_v2.json"}


async def _hello(client: RawClient, identity, version: int) -> None:
    await client.send(P.frame(P.HelloFrame, identity=identity, daemon_version="0.1.0", contract_version=version,
                              heartbeat_ms=10_000))


@pytest.mark.parametrize("version", sorted(REPORTS))
async def test_an_older_contracts_daemon_is_read_and_its_report_kept_as_sent(hub, version) -> None:
    history = decode_history(REPORTS[version].read_bytes())
    assert history.version == version < CONTRACT_VERSION
    client = await RawClient.connect(hub.socket_path)
    await _hello(client, history.identity, version)
    await client.send(P.frame(P.SnapshotFrame, history=history))

    def stored():
        report = hub.report(history.identity.session_id)
        return report is not None and report.history is not None and encode(report.history) == encode(history)

    await eventually(stored, what=f"the contract-{version} snapshot stored")
    await client.close()


async def test_a_daemon_of_a_contract_version_the_hub_cannot_read_is_refused_by_name(hub) -> None:
    history = decode_history(REPORTS[1].read_bytes())
    client = await RawClient.connect(hub.socket_path)
    await _hello(client, history.identity, CONTRACT_VERSION + 1)
    frames = await client.recv_until_closed()
    assert [f.code for f in frames] == ["contract_mismatch"]
    assert frames[0].message == f"contract version {CONTRACT_VERSION + 1}; this hub reads versions 1, 2, 3"
    assert hub.report(history.identity.session_id) is None


@pytest.mark.parametrize("field", ["title", "description"])
async def test_a_snapshot_with_an_over_long_notice_text_is_refused_by_its_path_and_never_stored(hub, field) -> None:
    history = decode_history(REPORTS[2].read_bytes())
    history.version = CONTRACT_VERSION
    canary = "CANARY-" + "x" * MAX_SUMMARY_BYTES  # one a daemon's own bound would have cut
    notice = AgentNotice(severity="warning", title="ok", occurred_at=history.current.started_at)
    history.current.notices = [msgspec.structs.replace(notice, **{field: canary})]
    history.current.notice_count = 1
    client = await RawClient.connect(hub.socket_path)
    await _hello(client, history.identity, CONTRACT_VERSION)
    await client.send(P.frame(P.SnapshotFrame, history=history))  # encoding checks no bound: a hostile daemon's
    frames = await client.recv_until_closed()
    assert [f.code for f in frames] == ["malformed_frame"]
    assert f"$.history.current.notices[0].{field}" in frames[0].message
    assert f"length <= {MAX_SUMMARY_BYTES}" in frames[0].message and "CANARY" not in frames[0].message
    assert hub.report(history.identity.session_id).history is None  # the hello was taken, the snapshot was not
    # The hub goes on: the same daemon with its text within the bound is stored.
    history.current.notices = [notice]
    again = await RawClient.connect(hub.socket_path)
    await _hello(again, history.identity, CONTRACT_VERSION)
    await again.send(P.frame(P.SnapshotFrame, history=history))
    await eventually(lambda: hub.report(history.identity.session_id).history is not None,
                     what="the bounded snapshot stored")
    await again.close()


async def test_frames_of_a_newer_daemon_with_frame_level_fields_this_hub_does_not_know_are_taken(hub) -> None:
    # The upstream protocol's promise (docs/contract.md): an optional frame field needs no bump, so a daemon
    # that adds one is read by a hub from before it, as long as its payloads are of a readable contract.
    history = decode_history(REPORTS[2].read_bytes())
    hello = P.frame(P.HelloFrame, identity=history.identity, daemon_version="9.9.9", contract_version=2,
                    heartbeat_ms=10_000)
    client = await RawClient.connect(hub.socket_path)
    for frame in (hello, P.frame(P.SnapshotFrame, history=history)):
        await client.send(P.encode_frame(frame).replace(b"{", b'{"added_later":{"x":1},', 1))
    await eventually(lambda: (r := hub.report(history.identity.session_id)) is not None and r.history is not None
                     and encode(r.history) == encode(history), what="the snapshot stored")
    await client.close()


async def test_a_recorded_contract_2_daemons_frames_replayed_into_the_hub_end_in_its_last_snapshot(hub) -> None:
    lines = (Path(__file__).parent / "data" / "frames_v2.ndjson").read_bytes().splitlines(keepends=True)
    last = msgspec.json.decode(lines[-1])["history"]
    assert last["version"] == 2 and last["agent"]["state"] == "exited"
    history = decode_history(msgspec.json.encode(last))
    client = await RawClient.connect(hub.socket_path)
    for line in lines:
        await client.send(line)

    def stored():
        report = hub.report(history.identity.session_id)
        return report is not None and report.history is not None and encode(report.history) == encode(history)

    # A refused frame closes the connection (malformed_frame, contract_mismatch): the last line is taken only
    # when every line before it was.
    await eventually(stored, what="the recorded daemon's last snapshot stored as sent")
    await client.close()
