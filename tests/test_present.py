"""agentctl.present is the one home of how evidence reads: every label and note is written there once, the
surfaces lay them out (the terminal in ANSI, the hub page in its stylesheet), and no surface keeps a copy."""

from __future__ import annotations

import ast
from pathlib import Path

from agentctl.evidence.contract.diagnostics import ChecklistStep
from agentctl.present.checklist import shown_steps, step_words
from agentctl.present.tones import STATE_TONES, reported_tone, state_tone

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "agentctl"
# Where labels live: the presentation core, and the two names a pure rule needs below it.
HOMES = [*sorted((PACKAGE / "present").glob("*.py")), PACKAGE / "evidence" / "display.py"]
MIN_LABEL = 12  # shorter strings ("failed", "grey") are words every module may spell
# The same words with another job: what an agent prints, parsed (not shown).
NOT_LABELS = {("agentctl/agent/clis/claude.py", "needs authentication")}


def _strings(path: Path) -> set[str]:
    """Every string constant of a module (docstrings left out: they may quote a label to explain it)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


def _labels() -> dict[str, Path]:
    """The whole labels and notes the homes define as module-level constants (a name bound to a string, or a
    table of them)."""
    found: dict[str, Path] = {}
    for path in HOMES:
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            parts = value.values if isinstance(value, ast.Dict) else [value]
            for part in parts:
                if (isinstance(part, ast.Constant) and isinstance(part.value, str) and len(part.value) >= MIN_LABEL
                        and " " in part.value):  # words people read, not a code or a step name
                    found[part.value] = path
    return found


def test_no_label_or_note_of_the_presentation_core_is_written_a_second_time_anywhere_in_agentctl():
    labels = _labels()
    assert len(labels) > 20, "the scan found the labels it checks"
    copies = []
    for path in sorted(set(PACKAGE.rglob("*.py")) - set(HOMES)):
        for text in _strings(path) & labels.keys():
            if (str(path.relative_to(REPO)), text) not in NOT_LABELS:
                copies.append(f"{path.relative_to(REPO)}: {text!r} (written in {labels[text].relative_to(REPO)})")
    for path in sorted((PACKAGE / "hub" / "static").glob("*.js")):
        source = path.read_text()
        copies += [f"{path.relative_to(REPO)}: {text!r}" for text in labels if text in source]
    assert not copies, "\n".join(copies)


def test_only_the_terminal_renderer_turns_a_tone_into_an_escape_and_the_page_never_turns_one_back():
    render = (PACKAGE / "control" / "render.py").read_text()
    assert "TONE_ANSI" in render
    for path in [*sorted((PACKAGE / "present").glob("*.py")), *sorted((PACKAGE / "hub").glob("*.py")),
                 *sorted((PACKAGE / "diagnostics").glob("*.py")), *sorted((PACKAGE / "probe").glob("*.py"))]:
        source = path.read_text()
        assert "\\x1b" not in source and "\x1b" not in source, path
        assert "GREEN" not in source and "STATE_COLORS" not in source, path


def test_every_display_state_has_one_tone_and_an_unknown_one_claims_nothing():
    assert set(STATE_TONES.values()) <= {"green", "amber", "red", "grey"}
    assert state_tone("active") == "green" and state_tone("failed") == "red"
    assert state_tone("configured") == "plain" and state_tone("a-state-from-a-newer-daemon") == "plain"
    assert [reported_tone(s) for s in ("connected", "failed", "needs_auth", "pending")] == [
        "green", "red", "red", "amber"]


def test_a_step_reads_the_same_on_both_surfaces_and_a_third_party_rows_unseen_steps_fold_into_one_line():
    from datetime import UTC, datetime

    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert step_words(ChecklistStep(step="tools_loaded", done=True, at=at)) == ("[x]", "tools loaded",
                                                                               "2026-01-02 03:04:05")
    assert step_words(ChecklistStep(step="failed", done=False)) == ("[ ]", "failed", "no attachment error")
    assert step_words(ChecklistStep(step="initialize", done=False)) == ("[ ]", "initialize", "not observed")
    steps = [ChecklistStep(step="delivered", done=True, at=at), ChecklistStep(step="initialize", done=False),
             ChecklistStep(step="used", done=False)]
    shown, note = shown_steps(steps, builtin=False)
    assert [s.step for s in shown] == ["delivered"]
    assert note == "[-] initialize, used: not observable: the agent connects to this server directly"
    assert shown_steps(steps, builtin=True) == (steps, None)
