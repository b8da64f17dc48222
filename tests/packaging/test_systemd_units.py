"""The systemd units: they verify cleanly, and each unit's own command line works under systemd's environment.

`systemd-analyze verify` needs the ExecStart binary to exist, so the units are verified from a temporary
copy with /usr/local/bin/agentctl replaced by this venv's real `agentctl` console script.
The sd_notify protocol itself (READY=1, WATCHDOG=1, STOPPING=1 in order) is covered for a plain
`agentctl serve` in tests/daemon/test_lifecycle.py; here the same notifications are checked for the
exact ExecStart line, directories and environment that agentctl@.service gives the daemon.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentctl.evidence.store import read_report
from agentctl.spec import AgentSpec, DaemonSpec
from tests.conftest import REPO

UNITS = sorted((REPO / "systemd").glob("*.service"))
INSTALLED_BINARY = "/usr/local/bin/agentctl"


def venv_agentctl() -> Path:
    path = Path(sys.executable).parent / "agentctl"
    if not path.is_file():
        pytest.skip(f"no agentctl console script beside {sys.executable} (install the package first)")
    return path


def render(unit: Path, directory: Path) -> Path:
    text = unit.read_text()
    assert INSTALLED_BINARY in text, f"{unit.name} should run {INSTALLED_BINARY}"
    target = directory / unit.name
    target.write_text(text.replace(INSTALLED_BINARY, str(venv_agentctl())))
    return target


def directives(unit: Path) -> dict[str, list[str]]:
    """`Key=value` lines of the [Service] section, repeated keys kept in order."""
    found: dict[str, list[str]] = {}
    section = None
    for raw in unit.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(s|min)?", value)
    assert match, f"unexpected time span {value!r}"
    return float(match.group(1)) * (60 if match.group(2) == "min" else 1)


def test_the_units_are_the_execution_template_and_the_hub():
    assert [u.name for u in UNITS] == ["agentctl-hub.service", "agentctl@.service"]


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_each_unit_passes_systemd_analyze_verify_without_a_warning(unit, tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    rendered = render(unit, tmp_path)
    result = subprocess.run(
        [tool, "verify", "--man=no", str(rendered)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    # verify exits 0 on unknown keys and only warns: any output at all is a defect in the unit.
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr


def test_execution_unit_outlasts_the_daemons_own_shutdown_bound():
    unit = directives(REPO / "systemd" / "agentctl@.service")
    assert unit["Type"] == ["notify"] and unit["KillMode"] == ["mixed"]
    bound = DaemonSpec().shutdown_timeout + AgentSpec(command=["x"]).stop_grace
    assert seconds(unit["TimeoutStopSec"][0]) >= 2 * bound
    assert seconds(unit["WatchdogSec"][0]) >= 10, "the daemon pings at half the interval; keep it relaxed"


def test_execution_unit_has_private_per_instance_dirs_and_the_agreed_hardening():
    unit = directives(REPO / "systemd" / "agentctl@.service")
    assert unit["RuntimeDirectory"] == ["agentctl/%i"] and unit["RuntimeDirectoryMode"] == ["0700"]
    assert unit["StateDirectory"] == ["agentctl/%i"] and unit["StateDirectoryMode"] == ["0700"]
    assert unit["UMask"] == ["0077"]
    assert unit["NoNewPrivileges"] == ["yes"] and unit["PrivateTmp"] == ["yes"]
    assert unit["ProtectSystem"] == ["strict"] and any("workspaces/%i" in p for p in unit["ReadWritePaths"])
    assert "AF_PACKET" not in unit["RestrictAddressFamilies"][0]
    assert unit["LoadCredential"] == ["spec.toml:/etc/agentctl/%i.toml"]


def test_each_unit_sets_a_descriptor_limit_its_full_connection_caps_fit_under():
    from agentctl.control.socket import CONTROL_CONNECTIONS
    from agentctl.daemon.app import MCP_CONNECTIONS
    from agentctl.listener_guard import connection_caps
    from agentctl.upstream.hub import DAEMON_CONNECTIONS, PAGE_CONNECTIONS

    wanted = {
        "agentctl@.service": {"mcp": MCP_CONNECTIONS, "control": CONTROL_CONNECTIONS},
        "agentctl-hub.service": {"hub": DAEMON_CONNECTIONS, "page": PAGE_CONNECTIONS},
    }
    for unit in UNITS:
        (limit,) = directives(unit)["LimitNOFILE"]
        assert limit.isdigit(), f"{unit.name}: one number, soft and hard alike"
        assert connection_caps(int(limit), wanted[unit.name]) == wanted[unit.name], unit.name


def _expand(value: str, specifiers: dict[str, str]) -> str:
    return re.sub(r"%(.)", lambda m: specifiers[m.group(1)], value)


def _recv_until(listener: socket.socket, messages: list[str], wanted: str) -> None:
    while not any(m.splitlines()[0] == wanted for m in messages):
        messages.append(listener.recv(4096).decode())


def test_execution_unit_command_line_under_systemds_environment_notifies_in_order_and_persists(short_tmp):
    """The daemon started exactly as agentctl@exec-unit.service would start it (spec as a credential,
    socket under RuntimeDirectory, report under StateDirectory), with a NOTIFY_SOCKET of the test's own."""
    unit = directives(REPO / "systemd" / "agentctl@.service")
    instance = "exec-unit"
    roots = {name: short_tmp / name for name in ("run", "state", "cache", "creds")}
    specifiers = {
        "i": instance, "t": str(roots["run"]), "S": str(roots["state"]),
        "C": str(roots["cache"]), "d": str(roots["creds"]), "%": "%",
    }
    runtime_dir = Path(_expand("%t/" + unit["RuntimeDirectory"][0], specifiers))
    state_dir = Path(_expand("%S/" + unit["StateDirectory"][0], specifiers))
    for directory in (runtime_dir, state_dir, roots["cache"], roots["creds"]):
        directory.mkdir(parents=True, mode=0o700)  # what systemd creates before ExecStart
    credential, _, _source = unit["LoadCredential"][0].partition(":")
    (roots["creds"] / credential).write_text(
        f'[identity]\ntask_id = "t"\nsession_id = "s"\nagent_id = "a"\nagent_profile_id = "p"\n'
        f'execution_id = "{instance}"\n'
    )

    argv = shlex.split(_expand(unit["ExecStart"][0], specifiers))
    assert argv[0] == INSTALLED_BINARY
    argv[0] = str(venv_agentctl())
    notify_path = short_tmp / "notify.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOTIFY_SOCKET", "WATCHDOG_"))}
    for assignment in unit.get("Environment", []):
        key, _, value = assignment.partition("=")
        env[key] = _expand(value, specifiers)
    env.update(
        RUNTIME_DIRECTORY=str(runtime_dir),
        STATE_DIRECTORY=str(state_dir),
        CACHE_DIRECTORY=_expand("%C/agentctl", specifiers),
        CREDENTIALS_DIRECTORY=str(roots["creds"]),
        NOTIFY_SOCKET=str(notify_path),
        # systemd would pass WatchdogSec (30 s); a short interval makes the first ping arrive at once.
        WATCHDOG_USEC="200000",
    )

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify_path))
    listener.settimeout(15)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd="/")
    messages: list[str] = []
    try:
        ready = json.loads(proc.stdout.readline() or b"null")
        assert ready, proc.stderr.read().decode()
        control = runtime_dir / "control.sock"
        assert ready["control_socket"] == str(control) and ready["execution_id"] == instance
        assert oct(control.stat().st_mode & 0o777) == "0o600"
        _recv_until(listener, messages, "WATCHDOG=1")
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        _recv_until(listener, messages, "STOPPING=1")
        assert proc.wait(timeout=seconds(unit["TimeoutStopSec"][0])) == 0
        assert time.monotonic() - started < DaemonSpec().shutdown_timeout
    finally:
        listener.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    kinds = [m.splitlines()[0] for m in messages]
    assert kinds[0] == "READY=1" and kinds.index("WATCHDOG=1") < kinds.index("STOPPING=1")
    assert not control.exists(), "the control socket is removed before systemd removes RuntimeDirectory"
    report = read_report(state_dir, instance)
    assert report.identity.instance_id == ready["instance_id"]


def test_hub_unit_command_line_serves_its_socket_and_keeps_its_databases_in_the_state_directory(short_tmp):
    unit = directives(REPO / "systemd" / "agentctl-hub.service")
    specifiers = {"t": str(short_tmp / "run"), "S": str(short_tmp / "state"), "C": str(short_tmp / "cache"), "%": "%"}
    runtime_dir = Path(_expand("%t/" + unit["RuntimeDirectory"][0], specifiers))
    state_dir = Path(_expand("%S/" + unit["StateDirectory"][0], specifiers))
    for directory in (runtime_dir, state_dir):
        directory.mkdir(parents=True, mode=0o700)
    argv = shlex.split(_expand(unit["ExecStart"][0], specifiers))
    assert argv[0] == INSTALLED_BINARY
    argv[0] = str(venv_agentctl())
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    try:
        ready = json.loads(proc.stdout.readline() or b"null")
        assert ready, proc.stderr.read().decode()
        hub_socket = Path(ready["socket"])
        assert hub_socket.parent == runtime_dir and oct(hub_socket.stat().st_mode & 0o777) == "0o600"
        assert Path(ready["db"]).parent == state_dir and Path(ready["tasks_db"]).parent == state_dir
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=seconds(unit["TimeoutStopSec"][0])) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not hub_socket.exists()
