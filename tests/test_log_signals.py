"""Log lines where operators' tools look: an ISO 8601 timestamp on every line, `--log-format json` for log
shippers, journald priorities when stderr is the journal, and the notable transitions logged once (ready only
when ready, the agent's end, every server failed, the upstream lost and regained), with no secret in any line.
Real `agentctl serve` processes, a real hub and real sockets."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

from agentctl.context import Readiness
from agentctl.daemon.transitions import Transitions
from agentctl.evidence.contract.report import Identity
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from agentctl.hub.hub import Hub
from agentctl.spec import parse_spec
from tests.conftest import agentctl_cmd, eventually, poll, spec_toml, write_spec

CANARIES = {"url": "CANARYurl-s3cret", "env": "CANARYenv-s3cret", "arg": "CANARYarg-s3cret"}
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _canary_spec(short_dir: Path, agent_exit: int | None = None) -> Path:
    """A spec whose server URL, agent env and agent argument each carry a canary; the agent (when asked for)
    exits at once with `agent_exit`, before it is ever ready."""
    agent = None
    if agent_exit is not None:
        agent = {"protocol": "acp", "env": {"AGENT_TOKEN": CANARIES["env"]},
                 "command": [sys.executable, "-c", f"import sys; sys.exit({agent_exit})", CANARIES["arg"]]}
    return write_spec(short_dir, execution_id="exec-logs", agent=agent,
                      servers=[{"name": "docs", "type": "http", "url": f"http://127.0.0.1:1/{CANARIES['url']}/mcp"}])


def _run_serve(short_dir: Path, spec: Path, *args: str, env: dict[str, str] | None = None,
               stderr_path: Path | None = None) -> subprocess.Popen:
    stderr_path = stderr_path or short_dir / "daemon.log"
    with stderr_path.open("wb") as stderr:
        return subprocess.Popen(agentctl_cmd("serve", str(spec), "--socket", str(short_dir / "c.sock"), *args),
                                stdout=subprocess.PIPE, stderr=stderr, env={**os.environ, **(env or {})})


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=30)
    proc.stdout.close()


def _no_canary(text: str) -> None:
    for where, canary in CANARIES.items():
        assert canary not in text, where


def test_json_lines_carry_an_iso_time_level_logger_and_message_and_the_agents_end_but_never_ready(short_dir):
    """The agent exits (code 3) before it is ever ready: one warning says so, and no line says "ready"."""
    log = short_dir / "daemon.log"
    proc = _run_serve(short_dir, _canary_spec(short_dir, agent_exit=3), "--log-format", "json")
    try:
        assert proc.stdout.readline(), log.read_text()  # the ready line: the daemon serves, the agent is gone
        poll(lambda: "not stopped by agentctl" in log.read_text(), what="the agent's end in the log")
    finally:
        _stop(proc)
    text = log.read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines and all(set(line) == {"time", "level", "logger", "message"} for line in lines), text
    assert all(ISO.match(line["time"]) and datetime.fromisoformat(line["time"]) for line in lines)
    ended = [line for line in lines if line["message"].startswith("agent pid ")]
    assert len(ended) == 1 and ended[0]["level"] == "WARNING", text
    assert re.fullmatch(r"agent pid \d+ exited with code 3, not stopped by agentctl", ended[0]["message"])
    assert not [line for line in lines if " ready (execution" in line["message"]], text
    assert [line for line in lines if "not ready yet (agent: " in line["message"]], text
    _no_canary(text)


def test_text_lines_start_with_an_iso_timestamp_and_a_ready_daemon_says_ready_once(short_dir):
    log = short_dir / "daemon.log"
    proc = _run_serve(short_dir, _canary_spec(short_dir))
    try:
        assert proc.stdout.readline(), log.read_text()
        poll(lambda: " ready (execution exec-logs)" in log.read_text(), what="the ready line")
    finally:
        _stop(proc)
    text = log.read_text()
    for line in text.splitlines():
        stamp, rest = line.split(" ", 1)
        assert ISO.match(stamp) and rest.startswith("agentctl "), line
    assert text.count("ready (execution") == 1
    _no_canary(text)


def test_lines_carry_journald_priorities_only_when_stderr_is_the_journals_stream(short_dir):
    """systemd sets JOURNAL_STREAM to the device and inode of the stream it gave the service; journald itself
    is not here, so stderr is a file whose numbers are given the same way (what the daemon checks is that
    its stderr is that stream, and a priority prefix on every line)."""
    spec = _canary_spec(short_dir, agent_exit=3)
    outputs = {}
    for case in ("journal", "inherited"):
        path = short_dir / f"{case}.log"
        path.touch()
        st = os.stat(path)
        stream = f"{st.st_dev}:{st.st_ino}" if case == "journal" else f"{st.st_dev}:{st.st_ino + 1}"
        proc = _run_serve(short_dir, spec, env={"JOURNAL_STREAM": stream}, stderr_path=path)
        try:
            assert proc.stdout.readline(), path.read_text()
            poll(lambda p=path: "not stopped by agentctl" in p.read_text(), what="the agent's end")
        finally:
            _stop(proc)
        outputs[case] = path.read_text().splitlines()
    journal = outputs["journal"]
    assert journal and all(re.match(r"^<[2-7]>\d{4}-", line) for line in journal), journal
    assert [line for line in journal if line.startswith("<4>") and "exited with code 3" in line]
    assert [line for line in journal if line.startswith("<6>") and "not ready yet" in line]
    assert not [line for line in outputs["inherited"] if line.startswith("<")], outputs["inherited"]


def test_every_server_of_an_attempt_failing_is_one_warning_with_reason_codes_and_no_server_name(caplog):
    ident = Identity(task_id="t", session_id="s", execution_id="e", instance_id="i", agent_id="a",
                     agent_profile_id="p")
    ledger = Ledger(ident)
    ctx = SimpleNamespace(ledger=ledger, readiness=Readiness(checks={"agent": True}), identity=ident)
    transitions = Transitions(ctx)
    caplog.set_level(logging.INFO, logger="agentctl")
    transitions.start()
    names = ["CANARYsrv-a", "CANARYsrv-b"]
    seeds = [ServerSeed(name=n, source="profile", transport="http", target="http://127.0.0.1:1") for n in names]
    for _ in range(2):  # a second attempt that fails whole is news again
        attempt, _token = ledger.begin_attempt("manual", seeds)
        ledger.record("explicit_error", attempt, names[0], reason_code="connect_failed", summary="CANARYsummary")
        assert not [r for r in caplog.records if "every server" in r.getMessage()][1:], "one failed: not yet"
        for _repeat in range(2):  # a failure seen twice is still one line
            ledger.record("explicit_error", attempt, names[1], reason_code="auth_required", summary="CANARYsummary")
    transitions.close()
    lines = [r for r in caplog.records if "every server" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.WARNING]
    assert lines[0].getMessage() == "every server of the current attempt failed (2: auth_required, connect_failed)"
    assert "CANARY" not in caplog.text
    assert [r.getMessage() for r in caplog.records].count("agentctl 0.1.0 ready (execution e)") == 1


async def test_the_upstream_lost_is_one_warning_for_the_whole_outage_and_its_return_one_line(short_dir, caplog,
                                                                                             in_process_daemon):
    hub_sock = short_dir / "hub" / "hub.sock"
    caplog.set_level(logging.INFO, logger="agentctl")
    hub = Hub(hub_sock, short_dir / "hub.sqlite3")
    await hub.start()
    daemon = await in_process_daemon(parse_spec(spec_toml(execution_id="exec-up", state_dir=f"{short_dir}/state",
                                                          upstream=str(hub_sock)).encode()))
    publisher = daemon.ctx.upstream
    try:
        await eventually(lambda: publisher.connected, what="the first connection")
        await hub.stop()
        connects = publisher.connects
        # Several reconnect attempts fail while the hub is away (its socket is gone).
        await eventually(lambda: not publisher.connected, what="the loss")
        hub = Hub(hub_sock, short_dir / "hub.sqlite3")
        await hub.start()
        await eventually(lambda: publisher.connects > connects, timeout=20, what="the reconnection")
    finally:
        await daemon.stop()
        await hub.stop()
    messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("agentctl.upstream")]
    lost = [m for m in messages if m[1].startswith("upstream lost")]
    assert lost == [(logging.WARNING, "upstream lost (connection_lost); buffering evidence and reconnecting")] or \
        lost == [(logging.WARNING, "upstream lost (closed_by_upstream); buffering evidence and reconnecting")], messages
    assert not [m for m in messages if "unreachable" in m[1]], "the outage was already told"
    regained = [m for m in messages if m[1].startswith("upstream regained after ")]
    assert len(regained) == 1 and regained[0][0] == logging.INFO, messages


def test_run_shows_the_agents_end_once_in_its_own_output_and_logs_it_only_when_asked_for_info(short_dir):
    spec = write_spec(short_dir, execution_id=None, agent={
        "protocol": "passthrough", "strategy": "none", "command": [sys.executable, "-c", "raise SystemExit(1)"]})
    outputs = {}
    for level in ("warning", "info"):
        done = subprocess.run(agentctl_cmd("run", str(spec), "--log-level", level), capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 1, done.stdout + done.stderr
        outputs[level] = done.stdout + done.stderr
    assert outputs["warning"].count("exited with code 1, not stopped by agentctl") == 0, outputs["warning"]
    assert "the agent exited with code 1" in outputs["warning"]
    assert outputs["info"].count("exited with code 1, not stopped by agentctl") == 1, outputs["info"]
