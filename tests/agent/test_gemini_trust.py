"""Gemini CLI's folder trust as agentctl decides it: the pure rule table, then the reader over a real file tree.

The same decisions are checked against the installed Gemini CLI in tests/clis/test_gemini_trust_cli.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentctl.agent.clis.gemini import TrustDecision, _secure_system_file, TrustInputs, decide, decide_for, parse_jsonc, skip_trust_in
from agentctl.evidence.reasons import REASONS

WS = "/w/ws/proj"


def _inputs(rules: dict | str | None = None, **kw) -> TrustInputs:
    text = rules if isinstance(rules, str) or rules is None else json.dumps(rules)
    return TrustInputs(workdir=kw.pop("workdir", WS), trusted_folders=text, **kw)


def _settings(enabled) -> str:
    return json.dumps({"security": {"folderTrust": {"enabled": enabled}}})


@pytest.mark.parametrize(("rules", "trusted", "rule"), [
    pytest.param(None, False, None, id="no_file_is_untrusted"),
    pytest.param({}, False, None, id="no_rule_is_untrusted"),
    pytest.param({WS: "TRUST_FOLDER"}, True, WS, id="the_folder_itself"),
    pytest.param({"/w/ws": "TRUST_FOLDER"}, True, "/w/ws", id="a_trusted_folder_holds_its_subfolders"),
    pytest.param({"/w/ws/pro": "TRUST_FOLDER"}, False, None, id="a_name_prefix_is_not_a_parent"),
    pytest.param({WS + "/sub": "TRUST_FOLDER"}, False, None, id="a_trusted_subfolder_does_not_trust_its_parent"),
    pytest.param({WS + "/other": "TRUST_PARENT"}, True, WS + "/other", id="trust_parent_trusts_the_rules_parent"),
    pytest.param({WS: "TRUST_PARENT"}, True, WS, id="trust_parent_on_the_folder_itself"),
    pytest.param({"/w/ws": "TRUST_FOLDER", WS: "DO_NOT_TRUST"}, False, WS, id="the_longest_rule_wins_distrust"),
    pytest.param({"/w/ws": "DO_NOT_TRUST", WS: "TRUST_FOLDER"}, True, WS, id="the_longest_rule_wins_trust"),
    pytest.param({"/w/ws": "DO_NOT_TRUST", WS + "/x": "TRUST_PARENT"}, True, WS + "/x",
                 id="length_is_the_rules_own_path_not_its_parent"),
    pytest.param({"/w/ws/": "TRUST_FOLDER"}, True, "/w/ws", id="a_trailing_slash_is_dropped"),
    pytest.param({"../proj": "TRUST_FOLDER"}, True, WS, id="a_relative_rule_resolves_from_the_working_directory"),
    pytest.param({"..": "TRUST_FOLDER"}, True, "/w/ws", id="dot_dot_resolves_like_node"),
    pytest.param({"/": "TRUST_FOLDER"}, True, "/", id="the_root_holds_everything"),
    pytest.param('// a comment\n{"/w/ws": /* inline */ "TRUST_FOLDER"}', True, "/w/ws", id="comments_are_allowed"),
])
def test_the_trusted_folders_rules(rules, trusted, rule) -> None:
    decision = decide(_inputs(rules))
    assert (decision.trusted, decision.rule) == (trusted, rule)
    assert decision.source == ("file" if rule else "default")


def test_a_relative_rule_naming_the_folder_by_its_own_name_means_a_subfolder_of_it() -> None:
    assert decide(_inputs({"proj": "TRUST_FOLDER"})) == TrustDecision(False, "default")
    assert decide(_inputs({".": "TRUST_FOLDER"})) == TrustDecision(True, "file", WS)


@pytest.mark.parametrize(("text", "says"), [
    pytest.param('{"/w/ws": "YES"}', "invalid trust level", id="an_unknown_level"),
    pytest.param('{"/w/ws": "TRUST_FOLDER",}', "not valid JSON", id="a_trailing_comma_as_for_gemini"),
    pytest.param("[]", "not a valid JSON object", id="not_an_object"),
    pytest.param('{"/w": NaN}', "not valid JSON", id="nan_is_not_json"),
    pytest.param('{"/w/ws": "TRUST_FOLDER"', "not valid JSON", id="cut_short"),
])
def test_a_trusted_folders_file_gemini_cannot_read_stops_the_cli_so_nothing_is_decided(text, says) -> None:
    decision = decide(_inputs(text, trusted_folders_path="/h/.gemini/trustedFolders.json"))
    assert decision.trusted is None and decision.source == "error"
    assert decision.error.startswith("/h/.gemini/trustedFolders.json: ") and says in decision.error


def test_a_string_with_slashes_is_not_a_comment() -> None:
    assert parse_jsonc('{"a": "http://x//y /* z */"} // c') == {"a": "http://x//y /* z */"}
    assert parse_jsonc('{"a\\"//": 1}') == {'a"//': 1}


@pytest.mark.parametrize(("kw", "expected"), [
    pytest.param({"user_settings": _settings(False)}, (True, "setting"), id="user_settings_switch_it_off"),
    pytest.param({"system_defaults": _settings(False)}, (True, "setting"), id="system_defaults_switch_it_off"),
    pytest.param({"system_defaults": _settings(False), "user_settings": _settings(True)}, (False, "default"),
                 id="user_settings_override_system_defaults"),
    pytest.param({"user_settings": _settings(False), "system_settings": _settings(True)}, (False, "default"),
                 id="system_settings_override_the_user"),
    pytest.param({"user_settings": _settings(None)}, (False, "default"), id="null_is_the_default"),
    pytest.param({"user_settings": _settings("false")}, (True, "setting"), id="the_schema_turns_the_string_false_off"),
    pytest.param({"user_settings": _settings("FaLsE")}, (True, "setting"), id="in_any_letter_case"),
    pytest.param({"user_settings": _settings(" false")}, (False, "default"), id="untrimmed_it_is_a_truthy_string"),
    pytest.param({"system_defaults": _settings(False), "user_settings": _settings("TRUE")}, (False, "default"),
                 id="the_string_true_is_on"),
    pytest.param({"user_settings": _settings("no")}, (False, "default"), id="any_other_string_is_truthy_in_js"),
    pytest.param({"user_settings": _settings("")}, (True, "setting"), id="the_empty_string_is_falsy_in_js"),
    pytest.param({"user_settings": _settings(0)}, (True, "setting"), id="zero_is_falsy_in_js"),
    pytest.param({"user_settings": _settings(-0.0)}, (True, "setting"), id="minus_zero_is_falsy_in_js"),
    pytest.param({"user_settings": _settings(0.5)}, (False, "default"), id="a_nonzero_number_is_truthy"),
    pytest.param({"user_settings": _settings([])}, (False, "default"), id="an_empty_array_is_truthy_in_js"),
    pytest.param({"user_settings": _settings({})}, (False, "default"), id="an_empty_object_is_truthy_in_js"),
    pytest.param({"user_settings": '{"security": 1}'}, (False, "default"), id="a_non_object_on_the_way_is_default"),
    pytest.param({"user_settings": "// mine\n" + _settings(False)}, (True, "setting"), id="settings_with_comments"),
])
def test_the_folder_trust_setting(kw, expected) -> None:
    decision = decide(_inputs(None, **kw))
    assert (decision.trusted, decision.source) == expected


def test_a_settings_file_that_is_not_an_object_stops_the_cli() -> None:
    for text in ("[1]", "{", '"x"'):
        decision = decide(_inputs(None, user_settings=text))
        assert decision.trusted is None and decision.error.startswith("user settings: ")


@pytest.mark.parametrize(("env", "skip", "expected"), [
    pytest.param({"GEMINI_CLI_TRUST_WORKSPACE": "true"}, False, (True, "env"), id="the_variable_trusts"),
    pytest.param({"GEMINI_CLI_TRUST_WORKSPACE": "1"}, False, (None, "error"), id="only_the_word_true_counts_so_the_broken_file_decides"),
    pytest.param({"GEMINI_CLI_TRUST_WORKSPACE": "false"}, False, (False, "env"), id="false_distrusts_despite_a_rule"),
    pytest.param({}, True, (True, "flag"), id="skip_trust_trusts"),
    pytest.param({"GEMINI_CLI_TRUST_WORKSPACE": "false"}, True, (True, "flag"), id="skip_trust_overwrites_false"),
    pytest.param({"GEMINI_RESTRICTED_MODE": "true"}, True, (False, "env"), id="restricted_mode_beats_everything"),
])
def test_the_per_session_overrides_come_before_every_file(env, skip, expected) -> None:
    decision = decide(_inputs({WS: "TRUST_FOLDER"} if expected == (False, "env") else "{broken",
                              env=env, skip_trust=skip, user_settings=_settings(True)))
    assert (decision.trusted, decision.source) == expected


def test_a_switched_off_setting_trusts_even_with_a_broken_trusted_folders_file() -> None:
    assert decide(_inputs("{broken", user_settings=_settings(False))) == TrustDecision(True, "setting")


def test_symlinks_resolve_on_both_sides_through_the_injected_realpath() -> None:
    links = {"/link/proj": WS, "/alias": "/w/ws"}
    assert decide(_inputs({"/w/ws": "TRUST_FOLDER"}, workdir="/link/proj"), lambda p: links.get(p, p)).trusted
    assert decide(_inputs({"/alias": "TRUST_FOLDER"}), lambda p: links.get(p, p)).rule == "/alias"
    assert decide(_inputs({"/alias": "TRUST_FOLDER"})).trusted is False


@pytest.mark.parametrize(("argv", "skip"), [
    (["--skip-trust"], True), (["-p", "hi", "--skipTrust"], True), (["--skip-trust=true"], True),
    (["--skip-trust=false"], False), (["--", "--skip-trust"], False), (["--skip-trusted"], False), ([], False),
])
def test_skip_trust_is_read_from_the_arguments(argv, skip) -> None:
    assert skip_trust_in(argv) is skip


def test_the_reader_finds_the_files_gemini_reads_and_follows_symlinks(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws" / "proj"
    (home / ".gemini").mkdir(parents=True)
    ws.mkdir(parents=True)
    (tmp_path / "link").symlink_to(ws)
    env = {"HOME": str(home), "GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(tmp_path / "system.json")}
    assert decide_for(tmp_path / "link", env) == TrustDecision(False, "default")
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(tmp_path / "ws"): "TRUST_FOLDER"}))
    assert decide_for(tmp_path / "link", env).trusted is True
    (tmp_path / "system.json").write_text(_settings(False))
    (tmp_path / "system-defaults.json").write_text(_settings(False))
    assert decide_for(ws, env).source == "file", "system files in a folder others can write are skipped, as by Gemini"
    (tmp_path / "system-defaults.json").unlink()
    moved = tmp_path / "elsewhere.json"
    moved.write_text("{}")
    assert decide_for(ws, {**env, "GEMINI_CLI_TRUSTED_FOLDERS_PATH": str(moved)}).trusted is False
    gem_home = tmp_path / "gemhome"
    (gem_home / ".gemini").mkdir(parents=True)
    (gem_home / ".gemini" / "settings.json").write_text(_settings(False))
    assert decide_for(ws, {**env, "GEMINI_CLI_HOME": str(gem_home)}).source == "setting"


def test_a_system_file_counts_only_when_root_owns_it_and_every_folder_above_it_and_no_one_else_can_write(
    tmp_path: Path,
) -> None:
    root_owned = Path("/etc/hostname")  # root's, 0644, in root's /etc and /: as a system settings file must be
    if root_owned.stat().st_uid != 0 or Path("/etc").stat().st_uid != 0:
        pytest.skip("this system's /etc is not root's")
    assert _secure_system_file(root_owned) and _secure_system_file(Path("/etc/../etc/hostname"))
    mine = tmp_path / "settings.json"
    mine.write_text("{}")
    assert not _secure_system_file(mine), "/tmp is writable by others"
    assert not _secure_system_file(Path("/etc")), "a folder is not a settings file"
    assert not _secure_system_file(tmp_path / "missing.json")


def test_the_reader_reports_an_unreadable_file_as_an_error_and_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".gemini" / "trustedFolders.json").mkdir(parents=True)  # a directory where the file should be
    before = sorted(os.walk(tmp_path))
    decision = decide_for(tmp_path, {"HOME": str(home), "GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(tmp_path / "s")})
    assert decision.trusted is None and "IsADirectoryError" in decision.error
    assert sorted(os.walk(tmp_path)) == before


@pytest.mark.parametrize("kind", ["fifo", "deep", "long_number", "huge"])
def test_a_hostile_trusted_folders_file_is_an_error_decision_never_a_hang_or_a_crash(tmp_path: Path, kind) -> None:
    # The agent runs as the same user and can write Gemini's own files too.
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    folders = home / ".gemini" / "trustedFolders.json"
    if kind == "fifo":
        os.mkfifo(folders)  # read with a plain open(), this blocked the daemon's start for good
    else:
        folders.write_text({"deep": "[" * 200_000 + "]" * 200_000, "long_number": '{"a": ' + "9" * 5_000 + "}",
                            "huge": '{"a": "' + "x" * (5 << 20) + '"}'}[kind])
    decision = decide_for(tmp_path, {"HOME": str(home), "GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(tmp_path / "s")})
    assert decision.trusted is None and decision.source == "error" and "\n" not in decision.error
    assert decision.error.endswith({"fifo": "(OSError: not a regular file)", "deep": "it is nested deeper than 64 levels",
                                    "long_number": "it holds a number longer than 100 characters",
                                    "huge": "(OSError: larger than 4194304 bytes)"}[kind]), decision.error


def test_the_untrusted_folder_reason_is_registered_and_says_how_to_trust_the_folder() -> None:
    reason = REASONS["untrusted_folder"]
    assert reason.where == "row" and "trustedFolders.json" in reason.action and "--skip-trust" in reason.action


def test_gemini_over_acp_is_recognized_by_its_declared_name_before_its_program_name() -> None:
    from agentctl.agent.clis.gemini import is_gemini

    assert is_gemini("gemini-cli", ["npx", "@google/gemini-cli", "--acp"])
    assert not is_gemini("agentctl-reference-agent", ["/usr/bin/gemini", "--acp"]), "the declared name decides"
    assert is_gemini(None, ["/opt/bin/gemini", "--acp"]) and not is_gemini(None, ["gemini-wrapper"])


def test_over_acp_an_untrusted_decision_filters_every_planned_server_and_any_other_leaves_the_plan() -> None:
    from agentctl.agent.delivery import DeliveryPlan, Planned
    from agentctl.agent.clis.gemini import filter_untrusted
    from agentctl.agent.clis.gemini import TrustDecision

    def plan() -> DeliveryPlan:
        return DeliveryPlan([Planned("kandev", "http", "http://h", {}), Planned("docs", "stdio", "docs", {})])

    untrusted = plan()
    filter_untrusted(untrusted, TrustDecision(False, "default"))
    assert untrusted.delivered == [] and {(o.name, o.reason_code) for o in untrusted.filtered} == {
        ("kandev", "untrusted_folder"), ("docs", "untrusted_folder")}
    assert "Trust folder" in untrusted.filtered[0].summary and "--skip-trust" in untrusted.filtered[0].summary
    for decision in (TrustDecision(True, "file", rule="/w"), TrustDecision(None, "error", error="bad file")):
        kept = plan()
        filter_untrusted(kept, decision)
        assert [p.name for p in kept.delivered] == ["kandev", "docs"] and kept.filtered == []
