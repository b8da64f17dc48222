"""The systemd units and the hub page's drop-in: they verify cleanly, and each one's own command line works
under systemd's environment.

`systemd-analyze verify` needs the ExecStart binary to exist, so the units are verified from a temporary
copy with /usr/local/bin/agentctl replaced by this venv's real `agentctl` console script (a drop-in goes in
`<unit>.d/` beside the copy, where verify reads it). No systemd runs here as PID 1, so the page's network
settings (PrivateNetwork=, IPAddressDeny=) are checked as directives, and the drop-in's command line is run.
The sd_notify protocol itself (READY=1, WATCHDOG=1, STOPPING=1 in order) is covered for a plain
`agentctl serve` in tests/daemon/test_lifecycle.py; here the same notifications are checked for the
exact ExecStart line, directories and environment that agentctl@.service gives the daemon.
"""

from __future__ import annotations

import contextlib
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
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentctl.evidence.store import read_report
from agentctl.spec import AgentSpec, DaemonSpec
from agentctl.hub.web import is_loopback, parse_listen
from tests.conftest import REPO, spec_toml

UNITS = sorted((REPO / "systemd").glob("*.service"))
EXECUTION_UNIT = REPO / "systemd" / "agentctl@.service"
HUB_UNIT = REPO / "systemd" / "agentctl-hub.service"
PAGE_DROP_IN = REPO / "systemd" / "agentctl-hub-page.conf"
POSTGRES_DROP_IN = REPO / "systemd" / "agentctl-hub-postgres.conf"
INSTALLED_BINARY = "/usr/local/bin/agentctl"


def venv_agentctl() -> Path:
    path = Path(sys.executable).parent / "agentctl"
    if not path.is_file():
        pytest.skip(f"no agentctl console script beside {sys.executable} (install the package first)")
    return path


def render(unit: Path, target: Path) -> Path:
    text = unit.read_text()
    assert INSTALLED_BINARY in text, f"{unit.name} should run {INSTALLED_BINARY}"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text.replace(INSTALLED_BINARY, str(venv_agentctl())))
    return target


def verify(unit: Path) -> str:
    """What `systemd-analyze verify` says about a rendered unit (and the drop-ins beside it): "" when clean."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    result = subprocess.run(
        [tool, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60, cwd=unit.parent
    )
    # verify exits 0 on unknown keys and only warns: any output at all is a defect in the unit.
    assert result.returncode == 0 or (result.stdout + result.stderr).strip(), "verify failed without a word"
    return (result.stdout + result.stderr).strip()


def directives(unit: Path, *drop_ins: Path) -> dict[str, list[str]]:
    """`Key=value` lines of the [Service] section, repeated keys kept in order, the drop-ins applied after
    the unit as systemd applies them: an empty assignment resets what came before."""
    found: dict[str, list[str]] = {}
    for path in (unit, *drop_ins):
        section = None
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line
                continue
            if section == "[Service]":
                key, _, value = line.partition("=")
                if value:
                    found.setdefault(key, []).append(value)
                else:
                    found[key] = []
    return found


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(s|min)?", value)
    assert match, f"unexpected time span {value!r}"
    return float(match.group(1)) * (60 if match.group(2) == "min" else 1)


def test_the_units_are_the_execution_template_and_the_hub():
    assert [u.name for u in UNITS] == ["agentctl-hub.service", "agentctl@.service"]


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_each_unit_passes_systemd_analyze_verify_without_a_warning(unit, tmp_path):
    output = verify(render(unit, tmp_path / unit.name))
    assert not output, output


def test_the_hub_with_the_page_drop_in_passes_systemd_analyze_verify_without_a_warning(tmp_path):
    render(PAGE_DROP_IN, tmp_path / f"{HUB_UNIT.name}.d" / "page.conf")
    output = verify(render(HUB_UNIT, tmp_path / HUB_UNIT.name))
    assert not output, output


def test_the_hub_with_the_postgresql_drop_in_passes_verify_and_reads_its_dsn_from_a_credential(tmp_path):
    render(POSTGRES_DROP_IN, tmp_path / f"{HUB_UNIT.name}.d" / "postgres.conf")
    output = verify(render(HUB_UNIT, tmp_path / HUB_UNIT.name))
    assert not output, output
    found = directives(HUB_UNIT, POSTGRES_DROP_IN)
    assert found["LoadCredential"] == ["hub-dsn:/etc/agentctl/hub.dsn"]
    command = found["ExecStart"][-1].split()
    assert command[command.index("--db-file") + 1] == "%d/hub-dsn" and "--db" not in command
    assert "AF_INET" in found["RestrictAddressFamilies"][-1] and found["PrivateNetwork"][-1] == "no"


def test_systemd_analyze_verify_reads_the_drop_in_beside_the_unit(tmp_path):
    """The control for the test above: a defect planted in the drop-in is reported, so a clean verify of the
    hub with its drop-in really covered the drop-in."""
    drop_in = render(PAGE_DROP_IN, tmp_path / f"{HUB_UNIT.name}.d" / "page.conf")
    drop_in.write_text(drop_in.read_text() + "NoSuchDirective=yes\n")
    output = verify(render(HUB_UNIT, tmp_path / HUB_UNIT.name))
    assert "page.conf" in output and "NoSuchDirective" in output, output


def test_execution_unit_outlasts_the_daemons_own_shutdown_bound():
    unit = directives(EXECUTION_UNIT)
    assert unit["Type"] == ["notify"] and unit["KillMode"] == ["mixed"]
    bound = DaemonSpec().shutdown_timeout + AgentSpec(command=["x"]).stop_grace
    assert seconds(unit["TimeoutStopSec"][0]) >= 2 * bound
    assert seconds(unit["WatchdogSec"][0]) >= 10, "the daemon pings at half the interval; keep it relaxed"


def test_execution_unit_has_a_private_runtime_dir_per_instance_one_state_dir_for_all_and_the_agreed_hardening():
    unit = directives(EXECUTION_UNIT)
    assert unit["RuntimeDirectory"] == ["agentctl/%i"] and unit["RuntimeDirectoryMode"] == ["0700"]
    # Not agentctl/%i: the daemon adds <execution_id>/ itself, and the task store is shared by design.
    assert unit["StateDirectory"] == ["agentctl"] and unit["StateDirectoryMode"] == ["0700"]
    assert unit["UMask"] == ["0077"]
    assert unit["NoNewPrivileges"] == ["yes"] and unit["PrivateTmp"] == ["yes"]
    assert unit["ProtectSystem"] == ["strict"] and any("workspaces/%i" in p for p in unit["ReadWritePaths"])
    assert "AF_PACKET" not in unit["RestrictAddressFamilies"][0]
    assert unit["LoadCredential"] == ["spec.toml:/etc/agentctl/%i.toml"]


def test_the_documented_offline_report_command_reads_where_the_unit_writes():
    state = "/var/lib/" + directives(EXECUTION_UNIT)["StateDirectory"][0]  # %S of a system unit
    docs = {path: path.read_text() for path in (REPO / "systemd" / "README.md", REPO / "README.md")}
    commands = re.findall(r"agentctl report --state-dir (\S+) --execution (\S+)", docs[REPO / "systemd" / "README.md"])
    assert commands and all(directory == state for directory, _ in commands), commands
    for path, text in docs.items():
        assert not re.search(r"/var/lib/agentctl/([^/\s`]+)/\1/", text), f"{path.name} repeats the execution id"


def test_each_unit_sets_a_descriptor_limit_its_full_connection_caps_fit_under():
    from agentctl.control.socket import CONTROL_CONNECTIONS
    from agentctl.daemon.app import MCP_CONNECTIONS
    from agentctl.listener_guard import connection_caps
    from agentctl.hub.hub import DAEMON_CONNECTIONS, PAGE_CONNECTIONS

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


@dataclass
class Instance:
    """One instance of agentctl@.service as systemd would set it up under `root`: its directories made,
    its spec in place as the credential, its ExecStart line and environment ready to run."""

    name: str
    argv: list[str]
    env: dict[str, str]
    runtime_dir: Path
    state_dir: Path

    def start(self) -> tuple[subprocess.Popen, dict]:
        proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env, cwd="/")
        ready = json.loads(proc.stdout.readline() or b"null")
        if not ready:
            proc.wait(timeout=30)
            pytest.fail(f"{self.name} did not start: {proc.stderr.read().decode()}")
        return proc, ready


def instance(root: Path, name: str, **env: str) -> Instance:
    unit = directives(EXECUTION_UNIT)
    creds = root / "credentials" / f"agentctl@{name}.service"  # %d is per unit, like systemd's
    specifiers = {
        "i": name, "t": str(root / "run"), "S": str(root / "state"), "C": str(root / "cache"), "d": str(creds),
        "%": "%",
    }
    runtime_dir = Path(_expand("%t/" + unit["RuntimeDirectory"][0], specifiers))
    state_dir = Path(_expand("%S/" + unit["StateDirectory"][0], specifiers))
    cache_dir = Path(_expand("%C/" + unit["CacheDirectory"][0], specifiers))
    for directory in (runtime_dir, state_dir, cache_dir, creds):
        directory.mkdir(parents=True, mode=0o700, exist_ok=True)  # what systemd creates before ExecStart
    credential, _, _source = unit["LoadCredential"][0].partition(":")
    (creds / credential).write_text(spec_toml(execution_id=name))
    argv = shlex.split(_expand(unit["ExecStart"][0], specifiers))
    assert argv[0] == INSTALLED_BINARY
    argv[0] = str(venv_agentctl())
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("NOTIFY_SOCKET", "WATCHDOG_"))}
    for assignment in unit.get("Environment", []):
        key, _, value = assignment.partition("=")
        full_env[key] = _expand(value, specifiers)
    full_env.update(
        RUNTIME_DIRECTORY=str(runtime_dir),
        STATE_DIRECTORY=str(state_dir),
        CACHE_DIRECTORY=str(cache_dir),
        CREDENTIALS_DIRECTORY=str(creds),
        **env,
    )
    return Instance(name, argv, full_env, runtime_dir, state_dir)


def test_execution_unit_command_line_under_systemds_environment_notifies_in_order_and_persists(short_tmp):
    """The daemon started exactly as agentctl@exec-unit.service would start it (spec as a credential,
    socket under RuntimeDirectory, report under StateDirectory), with a NOTIFY_SOCKET of the test's own."""
    unit = directives(EXECUTION_UNIT)
    notify_path = short_tmp / "notify.sock"
    # systemd would pass WatchdogSec (30 s); a short interval makes the first ping arrive at once.
    daemon = instance(short_tmp, "exec-unit", NOTIFY_SOCKET=str(notify_path), WATCHDOG_USEC="200000")

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify_path))
    listener.settimeout(15)
    proc = None
    messages: list[str] = []
    try:
        proc, ready = daemon.start()
        control = daemon.runtime_dir / "control.sock"
        assert ready["control_socket"] == str(control) and ready["execution_id"] == daemon.name
        assert oct(control.stat().st_mode & 0o777) == "0o600"
        _recv_until(listener, messages, "WATCHDOG=1")
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        _recv_until(listener, messages, "STOPPING=1")
        assert proc.wait(timeout=seconds(unit["TimeoutStopSec"][0])) == 0
        assert time.monotonic() - started < DaemonSpec().shutdown_timeout
    finally:
        listener.close()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
    kinds = [m.splitlines()[0] for m in messages]
    assert kinds[0] == "READY=1" and kinds.index("WATCHDOG=1") < kinds.index("STOPPING=1")
    assert not control.exists(), "the control socket is removed before systemd removes RuntimeDirectory"
    report = read_report(daemon.state_dir, daemon.name)
    assert report.identity.instance_id == ready["instance_id"]
    # /var/lib/agentctl/<execution>/report.json: the execution id once, not once per directory level.
    [written] = (short_tmp / "state").rglob("report.json")
    assert written == short_tmp / "state" / "agentctl" / daemon.name / "report.json"
    assert oct(written.parent.stat().st_mode & 0o777) == "0o700"


def test_two_instances_share_the_state_directory_each_with_its_own_report_and_one_task_store(short_tmp):
    daemons = [instance(short_tmp, name) for name in ("exec-a", "exec-b")]
    assert daemons[0].state_dir == daemons[1].state_dir and daemons[0].runtime_dir != daemons[1].runtime_dir
    procs = []
    try:
        started = [daemon.start() for daemon in daemons]  # both running at once
        procs = [proc for proc, _ in started]
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        assert [proc.wait(timeout=30) for proc in procs] == [0, 0]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for daemon, (_, ready) in zip(daemons, started, strict=True):
        assert read_report(daemon.state_dir, daemon.name).identity.instance_id == ready["instance_id"]
    state = daemons[0].state_dir
    assert sorted(p.name for p in state.iterdir() if p.is_dir()) == ["exec-a", "exec-b"]
    assert (state / "tasks.sqlite3").is_file()


@contextlib.contextmanager
def running(argv: list[str], env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen, dict]]:
    """A process that prints one JSON ready line; killed on the way out if the test did not stop it."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd="/")
    try:
        ready = json.loads(proc.stdout.readline() or b"null")
        if not ready:
            proc.wait(timeout=30)
            pytest.fail(f"{argv[1:3]} did not start: {proc.stderr.read().decode()}")
        yield proc, ready
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def hub_command(root: Path, *drop_ins: Path) -> tuple[dict[str, list[str]], list[str], Path, Path]:
    """The hub's merged directives, its ExecStart line for this venv, and its runtime and state dirs (made)."""
    unit = directives(HUB_UNIT, *drop_ins)
    specifiers = {"t": str(root / "run"), "S": str(root / "state"), "C": str(root / "cache"), "%": "%"}
    runtime_dir = Path(_expand("%t/" + unit["RuntimeDirectory"][0], specifiers))
    state_dir = Path(_expand("%S/" + unit["StateDirectory"][0], specifiers))
    for directory in (runtime_dir, state_dir):
        directory.mkdir(parents=True, mode=0o700)
    [exec_start] = unit["ExecStart"]
    argv = shlex.split(_expand(exec_start, specifiers))
    assert argv[0] == INSTALLED_BINARY
    argv[0] = str(venv_agentctl())
    return unit, argv, runtime_dir, state_dir


def test_hub_unit_command_line_serves_its_socket_and_keeps_its_databases_in_the_state_directory(short_tmp):
    unit, argv, runtime_dir, state_dir = hub_command(short_tmp)
    with running(argv) as (proc, ready):
        hub_socket = Path(ready["socket"])
        assert hub_socket.parent == runtime_dir and oct(hub_socket.stat().st_mode & 0o777) == "0o600"
        assert Path(ready["db"]).parent == state_dir and Path(ready["tasks_db"]).parent == state_dir
        assert "http" not in ready, "the unit alone serves no page"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=seconds(unit["TimeoutStopSec"][0])) == 0
    assert not hub_socket.exists()


# What the page's drop-in may change; everything else of the hub unit stays as it is.
PAGE_CHANGES = {"PrivateNetwork", "RestrictAddressFamilies", "IPAddressDeny", "IPAddressAllow", "ExecStart"}


def _option(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, f"{name} once in {argv}"
    return argv[argv.index(name) + 1]


def test_the_page_drop_in_opens_loopback_tcp_only_and_adds_only_the_page_to_the_command_line():
    unit = directives(HUB_UNIT)
    merged = directives(HUB_UNIT, PAGE_DROP_IN)
    assert unit["PrivateNetwork"] == ["yes"] and unit["RestrictAddressFamilies"] == ["AF_UNIX"]
    assert merged["PrivateNetwork"][-1] == "no", "a single-valued setting: the last assignment wins"
    assert merged["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"], "reset, then TCP added; no netlink"
    assert merged["IPAddressDeny"] == ["any"] and merged["IPAddressAllow"] == ["localhost"]
    assert {k: v for k, v in merged.items() if k not in PAGE_CHANGES} == \
        {k: v for k, v in unit.items() if k not in PAGE_CHANGES}

    [base] = unit["ExecStart"]
    [page] = merged["ExecStart"]
    argv = shlex.split(page)
    http, token_file = _option(argv, "--http"), _option(argv, "--token-file")
    host, port = parse_listen(http)
    assert is_loopback(host) and port > 0, "a fixed loopback port, one a person can open"
    # The token from a file in the hub's own 0700 state directory, so the ready line (the journal) holds none.
    assert Path(token_file).parent == Path("%S") / unit["StateDirectory"][0]
    assert [a for a in argv if a not in ("--http", http, "--token-file", token_file)] == shlex.split(base)


def test_the_hub_started_by_the_page_drop_in_serves_the_page_with_the_token_of_its_file_and_never_prints_it(short_tmp):
    unit, argv, _runtime_dir, state_dir = hub_command(short_tmp, PAGE_DROP_IN)
    # Any free port here: the drop-in's fixed one may be taken on a shared machine.
    argv[argv.index("--http") + 1] = "127.0.0.1:0"
    token_file = Path(_option(argv, "--token-file"))
    with running(argv) as (proc, ready):
        assert token_file.parent == state_dir and oct(token_file.stat().st_mode & 0o777) == "0o600"
        token = token_file.read_text().strip()
        assert token and token not in json.dumps(ready) and "#token" not in ready["page"]
        status = ready["http"] + "api/status"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(status, timeout=10)
        assert refused.value.code == 401
        request = urllib.request.Request(status, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200 and "sessions" in json.loads(answer.read())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=seconds(unit["TimeoutStopSec"][0])) == 0
        assert token not in proc.stderr.read().decode()
    # A restart keeps the token (and so the address a person bookmarked).
    with running(argv) as (proc, _ready):
        assert token_file.read_text().strip() == token
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=seconds(unit["TimeoutStopSec"][0])) == 0
