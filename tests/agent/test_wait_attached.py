"""`agentctl wait --attached` for an executor driving `serve` (issue 30): the real CLI against a real daemon and the
shipped reference agent; GET /v1/attached and `/readyz?verbose` give the same answer, and readiness ignores it."""

from __future__ import annotations

import json
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from agentctl.exit_codes import EXIT_NOT_ATTACHED, EXIT_OK
from tests.agent.serve_support import (
    agent_spec,
    base_url,
    canary_http_server,
    cli,
    closed_port,
    http_get,
    reference_passthrough,
)
from tests.conftest import poll, write_spec


def test_wait_attached_holds_until_the_session_and_exits_0_once_the_builtin_server_is_active(tmp_path, serve):
    spec = agent_spec(tmp_path, servers="\n[mcp]\nbuiltin_required = true\n")
    daemon = serve(spec=spec)
    before = cli(daemon.socket, "wait", "--attached", "--timeout", "0.5")
    assert before.returncode == EXIT_NOT_ATTACHED, before.stderr
    assert before.stdout.splitlines() == ["required servers: waiting (the wait ended first)",
                                          "  kandev: required, waiting (no attempt yet)"]
    assert cli(daemon.socket, "session", "new").returncode == EXIT_OK
    done = cli(daemon.socket, "wait", "--attached", "--json")
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    gate = json.loads(done.stdout)
    assert (gate["state"], gate["servers"][0]["state"], gate["servers"][0]["source"]) == ("open", "attached", "builtin")
    status, health = http_get(base_url(daemon) + "/readyz?verbose")
    assert (status, health["ready"], health["required"]["state"]) == (200, True, "open")


def test_wait_attached_exits_with_the_gates_code_when_a_lazy_agent_leaves_the_builtin_server_unattached(
    tmp_path, serve
):
    spec = agent_spec(tmp_path, "--lazy", servers="\n[mcp]\nbuiltin_required = true\nrequired_timeout = 1\n")
    daemon = serve(spec=spec)
    assert cli(daemon.socket, "session", "new").returncode == EXIT_OK
    began = time.monotonic()
    done = cli(daemon.socket, "wait", "--attached", "--timeout", "60")
    took = time.monotonic() - began
    assert done.returncode == EXIT_NOT_ATTACHED, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["required servers: blocked", "  kandev: required, not attached after 1 s "
                                        "(delivered · connection unverified for 1 s)"]
    assert took < 30, f"the daemon's 1 s deadline ended the wait, not its 60 s ({took:.1f} s)"
    # A policy result, not the daemon's health: it stays ready and the row stays what the evidence says.
    status, health = http_get(base_url(daemon) + "/readyz?verbose")
    assert (status, health["ready"], health["required"]["state"]) == (200, True, "blocked")
    # The probe answers without a credential: the gate's state and times, never a server's name or evidence.
    assert set(health["required"]) == {"state", "timeout", "waited"}
    row = json.loads(cli(daemon.socket, "status", "--json").stdout)["current"]["servers"][0]
    assert (row["name"], row["status"]) == ("kandev", "delivered")
    # The report keeps the reading on the attempt (what the hub lists): the daemon writes it at the deadline.
    def blocked_kept() -> dict | None:
        kept = json.loads(cli(daemon.socket, "status", "--json").stdout)["current"].get("required")
        return kept if kept is not None and kept["state"] == "blocked" else None

    kept = poll(blocked_kept, timeout=20, what="the report to keep the blocked reading")
    assert [(s["name"], s["state"], s["policy"]) for s in kept["servers"]] == [
        ("kandev", "not_attached", "required, not attached after 1 s")]
    shown = cli(daemon.socket, "status").stdout
    assert "delivered · connection unverified" in shown  # the row says what the evidence says ...
    assert "  required   kandev: required, not attached after 1 s" in shown  # ... and the gate's reading beside it
    with urllib.request.urlopen(base_url(daemon) + "/metrics", timeout=10) as resp:
        scraped = {(s.name, s.labels.get("state")): s.value
                   for family in text_string_to_metric_families(resp.read().decode()) for s in family.samples}
    assert scraped[("agentctl_required_gate", "blocked")] == 1 and scraped[("agentctl_required_gate", "open")] == 0
    assert scraped[("agentctl_required_servers", "not_attached")] == 1


def test_wait_attached_without_a_daemon_says_so_with_its_own_code(short_tmp):
    done = cli(short_tmp / "nobody.sock", "wait", "--attached", "--timeout", "1")
    assert done.returncode == 2 and "agentctl:" in done.stderr


def test_a_passthrough_run_that_reports_nothing_blocks_a_required_third_party_server_at_once_saying_why(
    tmp_path, serve
):
    # Claude Code run interactively (no -p) prints no status of its servers: nothing could ever prove `docs`.
    workdir = tmp_path / "work"
    workdir.mkdir()
    server = canary_http_server(closed_port(), "41") + "required = true\n"
    spec = write_spec(tmp_path, f"[mcp]\nrequired_timeout = 60\n{server}", agent=reference_passthrough(workdir))
    daemon = serve(spec=spec)
    began = time.monotonic()
    done = cli(daemon.socket, "wait", "--attached", "--timeout", "60")
    assert done.returncode == EXIT_NOT_ATTACHED, done.stdout + done.stderr
    assert time.monotonic() - began < 30, "a run with no report blocks at once, not at the 60 s timeout"
    assert done.stdout.startswith("required servers: blocked\n  docs: required, cannot be proven attached "
                                  "(delivered · connection unverified; Claude Code runs interactively"), done.stdout
    assert "CANARY" not in done.stdout
