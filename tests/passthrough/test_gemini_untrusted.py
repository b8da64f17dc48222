"""The gemini strategy in a folder Gemini CLI does not trust: every server `filtered` (`untrusted_folder`) with how
to trust it, nothing written, the user's Gemini files never touched; trusted (a rule, `--skip-trust`, the
environment) it delivers as before. Real layouts on disk: a throw-away HOME and workspace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentctl.agent.clis import get_strategy
from agentctl.agent.passthrough.base import MaterializeRequest
from agentctl.agent.passthrough.workspace import cleanup
from agentctl.evidence.reasons import meaning
from tests.passthrough.support import CANARIES, request, spec_for, tree

ALL = ["kandev", "docs", "events", "fs"]


def _layout(tmp_path: Path, rule: str | None) -> tuple[Path, dict[str, str], Path]:
    home, workdir = tmp_path / "home", tmp_path / "root" / "proj"
    (home / ".gemini").mkdir(parents=True)
    workdir.mkdir(parents=True)
    folders = home / ".gemini" / "trustedFolders.json"
    if rule is not None:
        folders.write_text(json.dumps({str(workdir): rule}))
    return workdir, {"HOME": str(home), "PATH": "/usr/bin:/bin"}, home


def _materialize(spec, workdir: Path, environ: dict[str, str]):
    base = request(spec, workdir)
    req = MaterializeRequest(base.spec, base.builtin, base.workdir, base.tmpdir, environ=environ)
    return get_strategy("gemini").materialize(req)


@pytest.mark.parametrize(("rule", "why"), [
    (None, "no rule in Gemini's trusted-folders file covers it"),
    ("DO_NOT_TRUST", "a DO_NOT_TRUST rule in the trusted-folders file covers it"),
])
def test_in_an_untrusted_folder_every_server_is_filtered_with_how_to_trust_it_and_nothing_is_written(tmp_path, rule, why):
    workdir, environ, home = _layout(tmp_path, rule)
    before = tree(home)
    mat = _materialize(spec_for("gemini"), workdir, environ)
    assert mat.delivered == [] and mat.restores == [] and mat.files == []
    assert {o.name: o.reason_code for o in mat.filtered} == dict.fromkeys(ALL, "untrusted_folder")
    summary = mat.filtered[0].summary
    assert why in summary and "Trust folder" in summary and "--skip-trust" in summary
    assert str(workdir) not in summary and not any(c in summary for c in CANARIES)
    assert "Gemini CLI does not trust the working directory" in meaning("untrusted_folder")
    assert tree(workdir) == [] and tree(home) == before, "nothing written: not the workspace, not the user's Gemini files"


@pytest.mark.parametrize("how", ["rule", "flag", "spec_env"])
def test_a_folder_gemini_trusts_gets_its_servers_delivered(tmp_path, how):
    workdir, environ, _ = _layout(tmp_path, "TRUST_FOLDER" if how == "rule" else None)
    spec = spec_for("gemini", command=["gemini", "--skip-trust"] if how == "flag" else None,
                    extra='env = { GEMINI_CLI_TRUST_WORKSPACE = "true" }\n' if how == "spec_env" else "")
    mat = _materialize(spec, workdir, environ)
    assert [e.name for e in mat.delivered] == ALL and mat.filtered == []
    assert set(json.loads((workdir / ".gemini" / "settings.json").read_text())["mcpServers"]) == set(ALL)
    cleanup(mat)
    assert tree(workdir) == []


def test_restricted_mode_in_the_inherited_environment_distrusts_even_a_trusted_folder(tmp_path):
    workdir, environ, _ = _layout(tmp_path, "TRUST_FOLDER")
    mat = _materialize(spec_for("gemini"), workdir, {**environ, "GEMINI_RESTRICTED_MODE": "true"})
    assert mat.delivered == [] and {o.reason_code for o in mat.filtered} == {"untrusted_folder"}
    assert "the environment distrusts it" in mat.filtered[0].summary
