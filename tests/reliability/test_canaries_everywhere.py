"""Canary secrets planted everywhere a secret enters one execution (spec headers, env, args, URL user info,
path, query and fragment; the prompt; tool arguments and results; the agent's stderr; the attempts' bearer
tokens) reach no sink: no persisted file, no upstream frame outside the tool tunnel, not the hub's database,
no CLI output, not the hub page's API, not the daemon's or the hub's log at the default level. Neither do
their parts when an agent or a server echoes them alone and in another case (a bare bearer token, the value
of a `--flag=value` argument, a URL's user, password, path segment, query value or fragment, an env value):
every search is case-insensitive. Nor do the live tokens sent inside malformed HTTP requests (which aiohttp's
parser quotes) to the MCP port, the control socket and the hub page: those are logged by type, route and
status only.

One scenario (tests/reliability/scenario.py, real processes and sockets) runs once for the module; each
test searches one sink, so a failure names it. The exemptions are the documented ones, each checked to
really hold the canary so the zero-hit results are not vacuous:
- `agentctl stderr` and the page's agent output: the agent's own output, shown on request, never stored;
- `agentctl mcp-config`: the attempt's bearer token, printed because it was asked for (marked SECRET);
- `agentctl prompt`: the agent's answers, which quote the tool results it got (that is the conversation);
- `tool_call`/`tool_result` frames carry the built-in tool's arguments and results to the backend that runs
  them, and the hub's task store (a separate file from its evidence database) keeps what the tools wrote;
  `stderr_result` carries agent output when the upstream asks (docs/upstream-protocol.md, "The tool
  tunnel", "On-demand requests" and "Privacy"). Even there, no spec value, prompt or token may appear.
"""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus, unquote

import pytest

from agentctl.evidence.sanitize import REDACTED
from tests.reliability.scenario import (
    ALL,
    PARTS,
    PROMPT,
    SPEC,
    STDERR,
    TP_ARG,
    TP_RESULT,
    Sinks,
    hits,
    run_scenario,
)

TOOL_DATA = frozenset({"tool_arg"})                    # the built-in tool's argument, echoed in its results
ANSWERS = frozenset({"tool_arg", "tp_arg", "tp_result"})  # what the agent's answers quote


@pytest.fixture(scope="module")
def run() -> Sinks:
    return run_scenario()


def _canaries(run: Sinks) -> dict[str, str]:
    return {**ALL, **run.tokens}


def _leaks(run: Sinks, items: dict[str, bytes], allowed: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    canaries = _canaries(run)
    found = {where: [name for name in hits(data, canaries) if name not in allowed] for where, data in items.items()}
    return {where: names for where, names in found.items() if names}


def _files(run: Sinks, *prefixes: str) -> dict[str, bytes]:
    return {name: data for name, data in run.files.items() if name.startswith(prefixes)}


def test_the_search_finds_a_canary_in_any_encoding_a_leak_could_take():
    for name, value in ALL.items():
        for text in (value, quote(value, safe=""), quote_plus(value), json.dumps(value), unquote(value)):
            assert name in hits(f"before {text} after".encode(), ALL), (name, text)
        for prefix in (b"", b"x", b"xy"):  # base64 inside a larger value, at each alignment
            assert name in hits(b"Basic " + base64.b64encode(prefix + value.encode()), ALL), (name, prefix)
    basic = base64.b64encode(f"{SPEC['user']}:{unquote(SPEC['password'])}".encode())
    assert {"user", "password"} <= set(hits(basic, ALL))
    for part, value in PARTS.items():  # every part the echoes quote alone, as given and case-swapped
        for text in (value, value.swapcase(), value.upper()):
            assert hits(f"x {text} y".encode(), ALL), (part, text)
    assert hits(b"exec-canary inst_0123456789abcdef0123456789abcdef att_0123abcd", ALL) == []


def test_the_agent_and_the_servers_really_echoed_every_part_alone_and_in_another_case(run):
    echoed = run.cli["stderr (again)"]  # the echoing agent's own stderr line, shown on request only
    for part, value in PARTS.items():
        if part not in ("server flag value", "refusing server env"):
            assert f"[{value}] [{value.swapcase()}]" in echoed, part
    # Where those echoes went, redacted: the refused load's summary and each named server's row.
    load = run.cli["session load " + json.loads(run.cli["report --json (again)"])["current"]["acp_session_id"]]
    assert f"session_rejected (load refused, agent settings [{REDACTED}] [{REDACTED}]" in load
    status = run.cli["status (again)"]
    assert f"web refused [{REDACTED}] [{REDACTED}]" in status and f"dead refused [{REDACTED}]" in status
    local = json.loads(run.cli["test-endpoint refusing-local --json --timeout 20"])["result"]
    assert local["reason_code"] == "initialize_failed"
    assert local["summary"].startswith(f"initialize failed: MCP error -32001: refused: settings [{REDACTED}] [")


def test_the_canaries_really_reached_the_servers_the_agent_and_the_exempt_outputs(run):
    seen = run.seen
    assert f"Bearer {SPEC['header']}" in seen.auth and SPEC["header2"] in seen.api_keys
    basic = base64.b64encode(f"{SPEC['user']}:{unquote(SPEC['password'])}".encode()).decode()
    assert f"Basic {basic}" in seen.auth and SPEC["sse_header"] in seen.api_keys
    assert any(SPEC["path"] in path for path in seen.paths)
    assert run.agent_environ.get("AGENT_SECRET") == SPEC["agent_env"]

    # The agent wrote its stderr canary, and the stdio server (started by the agent) printed its env canary.
    for output in (run.cli["stderr"], run.web["POST api/sessions/session-1/agent-output"]):
        assert STDERR in output and {"stderr", "server_env"} <= set(hits(output.encode(), ALL))
    assert run.tokens["attempt 1 token"] in run.cli["mcp-config --json"]
    assert run.tokens["attempt 2 token"] in run.cli["mcp-config --json (again)"]
    assert run.tokens["attempt 1 token"] != run.tokens["attempt 2 token"]

    answers = {argv: out for argv, out in run.cli.items() if argv.startswith("prompt ")}
    assert len(answers) == 4 and all("[end_turn]" in out for out in answers.values()), answers
    assert any(f"Called web/lookup: {TP_ARG} is {TP_RESULT}" in out for out in answers.values())
    assert any("Called kandev/get_task" in out and "tool_arg" in hits(out.encode(), ALL) for out in answers.values())
    assert not any(PROMPT in out for out in answers.values())


def test_no_persisted_file_under_the_state_dir_holds_a_canary(run):
    state = _files(run, "state/")
    names = {name.split("@")[0] for name in state}
    assert {"state/exec-canary/report.json", "state/tasks.sqlite3"} <= names, names
    report = json.loads(run.files["state/exec-canary/report.json@after"])
    assert report["current"]["origin"] == "session_load"
    echoed = {row["name"]: row["summary"] for row in report["current"]["servers"] if row["status"] == "failed"}
    assert {"web", "events", "dead", "local", "refusing"} <= set(echoed) and all(REDACTED in s for s in echoed.values())
    assert [attempt["origin"] for attempt in report["previous"]] == ["reset", "session_new"]
    assert b"connect_failed" in run.files["state/exec-canary/report.json@after"], "failure evidence was stored"
    assert _leaks(run, state) == {}

    known = ("state/", "hub.sqlite3", "hub.tasks.sqlite3", "daemon.log", "hub.log")
    assert [name for name in run.files if not name.startswith(known)] == [], "a file no test searches"


def test_the_hub_database_holds_no_canary_and_its_task_store_only_the_tool_argument(run):
    db = _files(run, "hub.sqlite3")
    assert {"hub.sqlite3@after", "hub.sqlite3-wal@hub-running"} <= set(db)
    stored = b"".join(data for name, data in db.items() if name.endswith("@after"))  # the WAL, if not checkpointed
    assert b"exec-canary" in stored and b"initialize_failed" in stored, "the history and its failures were stored"
    assert _leaks(run, db) == {}

    tasks = _files(run, "hub.tasks.sqlite3")
    assert any("tool_arg" in hits(data, ALL) for data in tasks.values()), "the hub's backend ran the tool"
    assert _leaks(run, tasks, allowed=TOOL_DATA) == {}


def test_upstream_frames_carry_tool_data_only_in_tool_frames_and_agent_output_only_when_asked(run):
    by_type: dict[str, list[bytes]] = {}
    for _, line in run.frames:
        by_type.setdefault(json.loads(line)["type"], []).append(line)
    assert {"hello", "snapshot", "evidence", "agent", "tool_call", "tool_result", "endpoint_test",
            "endpoint_test_result", "stderr_read", "stderr_result"} <= set(by_type), sorted(by_type)
    assert any("tool_arg" in hits(line, ALL) for line in by_type["tool_call"]), "the tunnel carried the argument"
    assert any("tool_arg" in hits(line, ALL) for line in by_type["tool_result"]), "and the result quoting it"
    assert any(b"connect_failed" in line for line in by_type["endpoint_test_result"])

    # What the agent wrote on stderr, as `agentctl stderr` showed it: stderr_result may carry exactly that.
    agent_output = frozenset(hits(run.cli["stderr"].encode(), ALL))
    assert "stderr" in agent_output and any("stderr" in hits(line, ALL) for line in by_type["stderr_result"])
    allowed = {"tool_call": TOOL_DATA, "tool_result": TOOL_DATA, "stderr_result": agent_output}
    for kind, lines in by_type.items():
        leaks = _leaks(run, {f"{kind} #{n}": line for n, line in enumerate(lines)}, allowed.get(kind, frozenset()))
        assert leaks == {}, kind


def test_no_cli_output_holds_a_canary_except_stderr_mcp_config_and_the_agents_answers(run):
    exempt = ("stderr", "mcp-config")
    outputs = {argv: out.encode() for argv, out in run.cli.items() if not argv.startswith(exempt)}
    assert len(outputs) >= 30, sorted(outputs)
    diagnostics = " ".join(run.cli["diagnostics"].split())
    assert "test failed: could not connect to the server" in diagnostics and "· connect_failed" in diagnostics
    # The refusing server's own words (quoting its URL and credentials) reached the summary, redacted.
    assert "MCP error -32001: refused POST <redacted>?<redacted> (authorization: Basic <redacted>" \
        in run.cli["test-endpoint refusing --json --timeout 20"]
    assert "reachable from the daemon" in run.cli["status"]
    assert json.loads(run.cli["status --json"])["upstream"]["state"] == "connected"
    assert "exec-canary" in run.cli["hub report session-1 --db <run>/hub.sqlite3"]
    answers = {argv: out for argv, out in outputs.items() if argv.startswith("prompt ")}
    others = {argv: out for argv, out in outputs.items() if argv not in answers}
    assert _leaks(run, answers, allowed=ANSWERS) == {}
    assert _leaks(run, others) == {}


def test_the_hub_page_api_holds_no_canary_except_the_agent_output_it_was_asked_for(run):
    views = {route: text.encode() for route, text in run.web.items() if "agent-output" not in route}
    assert len(views) == 14, sorted(views)  # 10 views, and 4 of them again after the echo
    assert "session_rejected" in run.web["GET api/sessions/session-1/history (after the echo)"]
    assert "connect_failed" in run.web['POST api/sessions/session-1/test-endpoint {"server": "dead"}']
    assert _leaks(run, views) == {}


def test_the_daemon_and_hub_logs_at_the_default_level_hold_no_canary(run):
    logs = _files(run, "daemon.log", "hub.log")
    daemon_log = logs["daemon.log@after"].decode()
    assert "endpoint test of dead: connect_failed" in daemon_log and " INFO " in daemon_log
    assert "execution exec-canary connected" in logs["hub.log@after"].decode()
    # Malformed requests carrying the live tokens were refused and logged by type, route and status only.
    for where, log in (("daemon", daemon_log), ("hub page", logs["hub.log@after"].decode())):
        for kind in ("LineTooLong", "BadHttpMessage"):
            assert f"{where}: refused a malformed request: {kind} on (unparsed), status 400" in log, (where, kind)
        assert "Error handling request" not in log
    assert _leaks(run, logs) == {}
