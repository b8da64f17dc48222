"""A passthrough CLI that fails explains itself: its last lines of output as a person reads them and a hint from
its strategy's own table (then the ACP refusals' table), shown by `agentctl run` on its stderr only.

The texts below are what the pinned CLIs printed with no key (tests/clis/test_failed_cli_explains.py runs them
for real); the rate-limit texts cannot be produced without a key and an exhausted quota, so they are the CLIs'
documented messages, matched here as pure data.
"""

from __future__ import annotations

import io
import json
import sys

import pytest

from agentctl.agent import clis
from agentctl.agent.clis import refusal_table, strategy_names
from agentctl.agent.clis.claude import readable_lines
from agentctl.agent.passthrough.explain import explain_failure, strip_colour
from agentctl.daemon.app import Daemon
from agentctl.daemon.run import run_main_job
from agentctl.exit_codes import EXIT_FAILED, EXIT_OK
from agentctl.spec_loader import load_spec
from tests.agent.serve_support import assert_recorded_nowhere
from tests.conftest import write_spec
from tests.passthrough.support import agent_section

CANARY = "OUTPUT-CANARY-3f9a1c"
CLAUDE_INIT = json.dumps({"type": "system", "subtype": "init", "cwd": "/w", "tools": ["Bash"] * 200,
                          "mcp_servers": [{"name": "kandev", "status": "connected"}]})
CLAUDE_NO_LOGIN = json.dumps({"type": "assistant", "error": "authentication_failed", "is_api_error_message": True,
                              "message": {"content": [{"type": "text", "text": "Not logged in · Please run /login"}]}})
CLAUDE_RESULT = json.dumps({"type": "result", "subtype": "success", "is_error": True, "terminal_reason": "api_error",
                            "result": "Not logged in · Please run /login"})


def hint_for(strategy: str, reason: str, lines: list[str]) -> str | None:
    chosen = clis.get(strategy)
    told = explain_failure(reason, lines, hints=chosen.failure_hints, readable=chosen.readable_lines,
                           fallback=refusal_table())
    return told.hint.cause if told.hint else None


def test_claude_codes_stream_json_events_read_as_words_with_an_error_said_once():
    lines = readable_lines([CLAUDE_INIT, CLAUDE_NO_LOGIN, CLAUDE_RESULT, "plain text", '{"cut in its mid'])
    assert lines == [
        "[system/init]",
        "[assistant: authentication_failed] Not logged in · Please run /login",
        "[result/success: is_error, api_error]",
        "plain text",
        '{"cut in its mid',
    ]


CASES = [
    ("claude", "exited with code 1", [CLAUDE_INIT, CLAUDE_NO_LOGIN, CLAUDE_RESULT], "not_logged_in"),
    ("claude", "exited with code 1", ["Not logged in · Please run /login"], "not_logged_in"),
    ("claude", "exited with code 1",
     ['API Error: 429 {"type":"error","error":{"type":"rate_limit_error","message":"..."}}'], "rate_limited"),
    ("claude", "exited with code 1", ["Claude AI usage limit reached|1767225600"], "rate_limited"),
    ("gemini", "exited with code 41", ["Please set an Auth method in your /h/.gemini/settings.json or specify one of "
                                       "the following environment variables before running: GEMINI_API_KEY"],
     "api_key_missing"),
    ("gemini", "exited with code 41", [], "api_key_missing"),  # its exit code alone says it
    ("gemini", "exited with code 55", ["\x1b[31mGemini CLI is not running in a trusted directory. To proceed, "
                                       "either use `--skip-trust`\x1b[0m"], "untrusted_folder"),
    ("gemini", "exited with code 1", ["[API Error: RESOURCE_EXHAUSTED: Quota exceeded for quota metric]"],
     "rate_limited"),
    ("codex", "exited with code 1", ['WARNING: proceeding, even though we could not create PATH aliases: CODEX_HOME '
                                     'points to "/x", but that path does not exist',
                                     'Error finding codex home: CODEX_HOME points to "/x", but that path does not '
                                     'exist'], "home_missing"),
    ("codex", "exited with code 1", ["ERROR: unexpected status 401 Unauthorized: Missing bearer authentication"],
     "not_logged_in"),
    ("codex", "exited with code 1", ["ERROR: You've hit your usage limit. Try again later."], "rate_limited"),
    ("opencode", "exited with code 1", ["\x1b[0m", "> build · big-pickle", "\x1b[0m",
                                        "\x1b[91m\x1b[1mError: \x1b[0mCannot connect to API: Unable to connect. Is "
                                        "the computer able to access the url?"], "provider_unreachable"),
    ("opencode", "exited with code 1", ["Error: AI_APICallError: Rate limit exceeded"], "rate_limited"),
]


@pytest.mark.parametrize("strategy, reason, lines, cause", CASES)
def test_a_known_cli_failure_gets_the_hint_for_its_cause(strategy, reason, lines, cause):
    assert hint_for(strategy, reason, lines) == cause


def test_an_unknown_failure_gets_no_hint_and_an_exit_code_of_another_cli_means_nothing():
    assert hint_for("claude", "exited with code 2", ["something else went wrong"]) is None
    assert hint_for("codex", "exited with code 41", []) is None  # 41 is Gemini CLI's, not Codex's


def test_the_last_lines_are_shown_without_colour_codes_or_blank_lines():
    window = [f"line {n}" for n in range(8)] + ["\x1b[0m", "   ", "\x1b[91mError:\x1b[0m boom\x07"]
    told = explain_failure("exited with code 1", window, last=3)
    assert told.lines == ["line 6", "line 7", "Error: boom\x07"], "a bell is not paint: neutralize shows it"
    assert strip_colour("\x1b]0;title\x07text\x1b[2K") == "text"


def test_every_strategys_hints_are_one_line_with_unique_causes_and_lower_case_patterns():
    for name in strategy_names():
        hints = clis.get(name).failure_hints
        assert len({h.cause for h in hints}) == len(hints), name
        for hint in hints:
            assert hint.text and "\n" not in hint.text
            assert hint.patterns and all(p == p.lower() for p in hint.patterns)


# -- `agentctl run`, with a real process standing in for a CLI that fails --------------------------------------

FAILING_CLI = [sys.executable, "-c",
               "import sys; print('reading profile " + CANARY + "'); print('Not logged in · Please run /login'); "
               "print('\\x1b[31mtrace ' + '" + CANARY + "' + '\\x1b]0;evil\\x07', file=sys.stderr); sys.exit(1)"]


async def test_run_explains_a_failed_passthrough_cli_on_stderr_and_records_none_of_its_output(
    tmp_path, short_tmp, capsys, caplog
):
    workdir = tmp_path / "work"
    workdir.mkdir()
    spec = write_spec(tmp_path, agent_section("claude", FAILING_CLI, workdir, servers=False))
    daemon = Daemon(load_spec(spec), socket_path=short_tmp / "c.sock")
    out = io.StringIO()
    assert await run_main_job(daemon, out=out) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "agentctl: the agent exited with code 1\nwarning: recent agent output may contain sensitive data" in err
    # Its stdout and its stderr (two pipes: their order is the kernel's), colour and title codes dropped.
    for line in (f"reading profile {CANARY}", "Not logged in · Please run /login", f"trace {CANARY}"):
        assert f"  | {line}\n" in err, err
    assert "\x1b" not in err and "evil" not in err
    assert "hint: Claude Code is not logged in: set ANTHROPIC_API_KEY in [agent] env" in err
    assert CANARY not in out.getvalue(), "the agent's output goes to stderr, not the progress lines"
    assert_recorded_nowhere(daemon, CANARY, caplog.text)


async def test_run_says_nothing_more_when_a_passthrough_cli_succeeds(tmp_path, short_tmp, capsys):
    workdir = tmp_path / "work"
    workdir.mkdir()
    command = [sys.executable, "-c", "print('Not logged in, but done anyway')"]
    spec = write_spec(tmp_path, agent_section("claude", command, workdir, servers=False))
    daemon = Daemon(load_spec(spec), socket_path=short_tmp / "c.sock")
    assert await run_main_job(daemon, out=io.StringIO()) == EXIT_OK
    assert "hint:" not in capsys.readouterr().err
