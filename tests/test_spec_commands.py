"""`agentctl spec check` validates a spec as `run` loads it and starts nothing; `spec schema` prints the schema
generated from the spec's structs (the committed docs/spec.schema.json is that output); `run` refuses a spec whose
agent workdir is missing before starting anything."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from agentctl.exit_codes import EXIT_NO_DAEMON, EXIT_OK
from agentctl.spec import spec_schema
from tests.conftest import REPO, agentctl_cmd, write_spec

CANARY = "CANARY-spec-check-5d1c"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(agentctl_cmd(*args), cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "NO_COLOR": "1", **(env or {})})


def test_spec_check_says_ok_in_one_line_of_names_without_a_value_of_the_spec(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, agent={"command": ["sh", "-c", CANARY], "env": {"K": CANARY}}, servers=[
        {"name": "fs", "type": "stdio", "command": ["npx", CANARY]},
        {"name": "docs", "type": "http", "url": f"https://docs.example/{CANARY}", "headers": {"X": CANARY}}])
    done = cli("spec", "check", str(spec))
    assert (done.returncode, done.stderr) == (EXIT_OK, "")
    assert done.stdout == (f"{spec}: ok: execution exec-test, task task-1; agent sh (acp); servers: kandev "
                           "(built-in), fs (stdio), docs (http)\n")
    assert not (tmp_path / "state").exists(), "nothing was started or written"


def test_spec_check_refuses_a_bad_spec_with_run_s_exit_code_and_one_line_naming_file_and_field(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, extra=f'\n[agent]\ncommand = ["sh"]\nprotocl = "{CANARY}"\n')
    done = cli("spec", "check", str(spec))
    assert done.returncode == EXIT_NO_DAEMON and done.stdout == ""
    assert done.stderr.startswith(f"agentctl: {spec}: agent") and "protocl" in done.stderr
    assert CANARY not in done.stderr and done.stderr.count("\n") == 1


def test_run_with_a_missing_agent_workdir_names_it_and_exits_2_before_starting_anything(tmp_path: Path) -> None:
    missing = tmp_path / "checkout"
    spec = write_spec(tmp_path, agent={"command": ["sh"], "workdir": str(missing)})
    runtime = tmp_path / "rt"
    for argv in (("spec", "check", str(spec)), ("run", str(spec)), ("serve", str(spec))):
        done = cli(*argv, env={"AGENTCTL_RUNTIME_DIR": str(runtime)})
        assert done.returncode == EXIT_NO_DAEMON, (argv, done.stderr)
        assert done.stderr == f"agentctl: {spec}: agent.workdir: directory '{missing}' does not exist\n", argv
    assert not runtime.exists() and not (tmp_path / "state").exists(), "no daemon was started"


def test_spec_schema_prints_the_generated_schema_and_the_committed_copy_is_current() -> None:
    done = cli("spec", "schema")
    assert done.returncode == EXIT_OK and json.loads(done.stdout) == spec_schema()
    committed = json.loads((REPO / "docs" / "spec.schema.json").read_text())
    assert committed == spec_schema(), "docs/spec.schema.json is stale: run `make schema`"


def test_an_editor_validating_with_the_schema_accepts_the_demo_and_flags_an_unknown_key() -> None:
    import tomllib

    import jsonschema

    validator = jsonschema.Draft202012Validator(spec_schema())
    demo = tomllib.loads((REPO / "examples" / "demo.toml").read_text())
    assert list(validator.iter_errors(demo)) == []
    demo["agent"]["protocl"] = "acp"
    [error] = validator.iter_errors(demo)
    assert "protocl" in error.message
