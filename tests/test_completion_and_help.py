"""Shell completion generated from the parser (real bash completes through the generated function, real zsh loads
the script), and `--help` with examples and an environment section that names every AGENTCTL_* variable the
code reads, as the README does."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agentctl import cli_help
from agentctl.cli import build_parser
from agentctl.cli_support import FILE_COMPLETION
from tests.conftest import REPO, agentctl_cmd

MAIN_COMMANDS = ["serve", "run", "status", "report", "stop", "ls"]


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("completion")
    made = {}
    for shell in ("bash", "zsh"):
        done = subprocess.run(agentctl_cmd("completion", shell), cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout.endswith("\n"), done.stderr
        made[shell] = directory / ("_agentctl" if shell == "zsh" else "agentctl.bash")
        made[shell].write_text(done.stdout)
    return made


def bash_complete(script: Path, *words: str) -> list[str]:
    """What bash offers for the command line `words` (the last is the word being completed), through the
    function the script registers for `agentctl` with `complete -F`."""
    quoted = " ".join(f"'{w}'" for w in words)
    program = (f"source '{script}'\n"
               "fn=$(complete -p agentctl | sed -E 's/.*-F ([^ ]+) .*/\\1/')\n"
               f"COMP_WORDS=({quoted}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\n"
               "COMP_LINE=\"${COMP_WORDS[*]}\"; COMP_POINT=${#COMP_LINE}\n"
               "\"$fn\" agentctl \"${COMP_WORDS[COMP_CWORD]}\" \"${COMP_WORDS[COMP_CWORD-1]}\"\n"
               "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def test_bash_completes_commands_options_and_choices_from_the_parser(scripts: dict[str, Path]) -> None:
    assert set(bash_complete(scripts["bash"], "agentctl", "st")) == {"status", "stop", "stderr"}
    assert {"ls", "ps", "completion"} <= set(bash_complete(scripts["bash"], "agentctl", ""))
    assert bash_complete(scripts["bash"], "agentctl", "stop", "--w") == ["--wait"]
    assert {"--socket", "--execution", "--json", "--timeout"} <= set(bash_complete(scripts["bash"], "agentctl", "status", "--"))
    assert bash_complete(scripts["bash"], "agentctl", "completion", "") == ["bash", "zsh"]
    assert set(bash_complete(scripts["bash"], "agentctl", "serve", "--log-level", "")) == {
        "debug", "info", "warning", "error"}


def test_the_spec_argument_is_completed_as_a_file(scripts: dict[str, Path], tmp_path: Path) -> None:
    import shtab

    assert FILE_COMPLETION.items() <= shtab.FILE.items()  # spelt out, but shtab's own
    (tmp_path / "exec-spec.toml").write_text("")
    assert bash_complete(scripts["bash"], "agentctl", "run", str(tmp_path / "exec-")) == [str(tmp_path / "exec-spec.toml")]


def _zsh() -> str:
    zsh = shutil.which("zsh")
    if zsh is None:
        if os.environ.get("AGENTCTL_REQUIRE_ZSH"):
            pytest.fail("zsh is not installed (.ci/run installs Debian's zsh package)")
        pytest.skip("zsh is not installed (apt-get install zsh; .ci/run does)")
    return zsh


# Types each line given after the fpath directory ($1), then TAB, into one real interactive zsh on a pty (zsh/zpty)
# with the script on its fpath, and prints the candidates the completion system offers for each line (a compadd
# wrapper reports them on the terminal between << >>), one line per candidate, a line "--" after each command
# line. Each read loop is bounded (at most 200 rounds of 50 ms) and ends once the candidates came and 0.3 s passed
# with no more output.
ZSH_CAPTURE = r"""
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "fpath=($1 \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w z 'compadd () { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return $?; fi; typeset -a __hits; builtin compadd -A __hits "$@"; (( $#__hits )) && print -n -- "<<${(j:>><<:)__hits}>>" >&2; builtin compadd "$@" }'
zpty -w z 'exec 2>/dev/tty; PROMPT=; RPROMPT='
zpty -w z "print -r -- READY"
zpty -r z line '*READY*'
for typed in "${@[2,-1]}"; do
  zpty -n -w z "$typed"$'\t'
  out=
  integer i=0 quiet=0
  while (( i++ < 200 && quiet < 6 )); do
    if zpty -r -t z chunk; then out+=$chunk; quiet=0; else [[ $out == *'>>'* ]] && (( quiet++ )); sleep 0.05; fi
  done
  print -l -- ${${(M)${(s:>>:)out}##*<<*}//*<</} --
  zpty -n -w z $'\C-u'
done
zpty -d z
"""


def zsh_complete(script: Path, *lines: str) -> list[set[str]]:
    capture = script.parent / "capture.zsh"
    capture.write_text(ZSH_CAPTURE)
    done = subprocess.run([_zsh(), "-f", str(capture), str(script.parent), *lines], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "HOME": str(script.parent)})
    assert done.returncode == 0, done.stderr
    offered: list[set[str]] = [set()]
    for word in (w.strip() for w in done.stdout.splitlines()):
        if word == "--":
            offered.append(set())
        elif word:
            offered[-1].add(word)
    return offered[:-1]


def test_zsh_completes_commands_options_and_choices_through_the_completion_system(scripts: dict[str, Path]) -> None:
    assert zsh_complete(scripts["zsh"], "agentctl st", "agentctl stop --w", "agentctl completion ") == [
        {"status", "stderr", "stop"}, {"--wait"}, {"bash", "zsh"}]


def test_zsh_loads_the_script_from_fpath_and_it_lists_every_command(scripts: dict[str, Path]) -> None:
    zsh = _zsh()
    script = scripts["zsh"]
    assert subprocess.run([zsh, "-n", str(script)], capture_output=True, timeout=30).returncode == 0
    program = (f"fpath=('{script.parent}' $fpath); autoload -Uz compinit && compinit -u -D\n"
               "print -r -- \"registered=$_comps[agentctl]\"\n"
               f"eval \"$(<'{script}')\"\n"  # the other documented way: defines the functions, registers them
               "print -r -- \"evaluated=$_comps[agentctl]\"; whence -w _shtab_agentctl_commands _shtab_agentctl\n")
    done = subprocess.run([zsh, "-f", "-c", program], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "HOME": str(script.parent)})
    assert done.returncode == 0, done.stderr
    assert "registered=_agentctl" in done.stdout and "evaluated=_shtab_agentctl" in done.stdout
    assert "_shtab_agentctl_commands: function" in done.stdout and "_shtab_agentctl: function" in done.stdout
    top = build_parser()._subparsers._group_actions[0].choices  # argparse has no public walk of its subparsers
    listed = set(re.findall(r"^    ([a-z][a-z-]*):'", script.read_text(), re.M))
    assert set(top) <= listed, set(top) - listed


# ---- --help ------------------------------------------------------------------------------------------------

# AGENTCTL_ names in the code that are not for the user to set: what agentctl puts into its children's
# environment, test switches, the prefix itself.
NOT_USER_SETTINGS = {"AGENTCTL_", "AGENTCTL_MCP_BEARER_TOKEN", "AGENTCTL_MCP_HEADER_", "AGENTCTL_PROBE_CREDENTIAL",
                     "AGENTCTL_ENDPOINT_TEST", "AGENTCTL_TEST_PAUSE_AT", "AGENTCTL_TEST_PAUSE_FILE",
                     # set by agentctl's delivery for the stdio bridge and witness it hands an agent, never by a user
                     "AGENTCTL_BRIDGE_URL", "AGENTCTL_BRIDGE_TOKEN", "AGENTCTL_WITNESS_URL", "AGENTCTL_WITNESS_TOKEN"}


def variables_read_by_the_code() -> set[str]:
    found: set[str] = set()
    for path in (REPO / "agentctl").rglob("*.py"):
        if "testing" in path.relative_to(REPO / "agentctl").parts:
            continue  # the shipped demo agent and servers read their own switches
        found |= set(re.findall(r"AGENTCTL_[A-Z0-9_]*", path.read_text()))
    return found - NOT_USER_SETTINGS


def test_the_environment_section_names_every_agentctl_variable_the_code_reads() -> None:
    read = variables_read_by_the_code()
    assert {"AGENTCTL_SOCKET", "AGENTCTL_RUNTIME_DIR", "AGENTCTL_HUB_DB"} <= read  # the scan finds them
    documented = {var.name for var in cli_help.ENVIRONMENT}
    assert read <= documented, f"add to agentctl.cli_help.ENVIRONMENT: {sorted(read - documented)}"
    assert {name for name in documented if name.startswith("AGENTCTL_")} <= read, "a documented variable nobody reads"


def test_the_top_level_help_has_examples_the_environment_and_the_exit_codes() -> None:
    done = subprocess.run(agentctl_cmd("--help"), capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0
    text = done.stdout
    assert text.index("examples:") < text.index("environment:") < text.index("exit codes (every command):")
    assert cli_help.environment_help() in text
    for var in cli_help.ENVIRONMENT:
        assert f"\n  {var.name}\n" in text


@pytest.mark.parametrize("command", MAIN_COMMANDS)
def test_each_main_command_help_has_examples_and_the_variables_it_reads(command: str, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([command, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert "examples:\n  agentctl " in text and "environment:\n  AGENTCTL_SOCKET\n" in text
    assert all(line.startswith("agentctl ") for line, _ in cli_help.EXAMPLES[command]
               if not line.startswith(("AGENTCTL_", "source")))
    assert all(len(line) <= 80 for line in text.splitlines()), "help lines fit a terminal"


def test_the_readme_carries_exactly_the_generated_environment_table_and_documents_log_level_and_prompt() -> None:
    text = (REPO / "README.md").read_text()
    start = text.index(cli_help.ENVIRONMENT_BEGIN) + len(cli_help.ENVIRONMENT_BEGIN) + 1
    assert text[start:text.index(cli_help.ENVIRONMENT_END)] == cli_help.environment_markdown(), (
        "README.md is stale: run `make schema` (python -m agentctl.cli_help --doc README.md)")
    assert "agentctl serve SPEC --log-level" in text and "agentctl prompt TEXT" in text
    for command in ("ls", "stop --wait", "completion bash"):
        assert f"agentctl {command}" in text
