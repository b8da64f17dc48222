"""The reason-code registry is complete and the docs table cannot drift: every code agentctl's source can emit
(found by reading the source, tests/evidence/reason_scan.py) is registered with a meaning and an action, every
registered code is emitted somewhere, and docs/troubleshooting.md carries exactly the generated table."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentctl.evidence import reasons
from agentctl.upstream.protocol import ERROR_CODES
from tests.conftest import REPO
from tests.evidence.reason_scan import scan_package

DOC = REPO / "docs" / "troubleshooting.md"


@pytest.fixture(scope="module")
def scan():
    return scan_package()


def test_every_reason_code_the_source_can_emit_is_registered(scan) -> None:
    assert not scan.unreadable, "reason codes the scan cannot read (use a constant or list a producer):\n" + "\n".join(
        scan.unreadable)
    missing = {code: where for code, where in scan.codes.items() if code not in reasons.REASONS}
    assert not missing, f"add these to agentctl.evidence.reasons.TABLE: {missing}"


def test_every_upstream_error_code_is_registered_and_every_registered_code_is_emitted(scan) -> None:
    assert set(ERROR_CODES) <= set(reasons.REASONS)
    unused = set(reasons.REASONS) - set(scan.codes) - set(ERROR_CODES)
    assert not unused, f"registered but never emitted (remove them, or the scan misses an emitter): {unused}"
    assert len(scan.codes) >= 60, "the scan found suspiciously few codes"


def test_every_code_has_a_plain_meaning_and_an_action_and_a_known_surface() -> None:
    for reason in reasons.TABLE:
        assert reason.where in reasons.WHERE_TITLES, reason
        assert reason.meaning and reason.meaning == reason.meaning.strip() and not reason.meaning.endswith(".")
        assert reason.meaning[0].islower() and reason.code not in reason.meaning, reason.code
        assert reason.action.endswith("."), reason.code
        assert "|" not in reason.meaning + reason.action, "a pipe would break the Markdown table"


def test_meaning_says_the_registered_words_and_reads_an_unknown_code_as_words() -> None:
    assert reasons.meaning("no_supported_transport") == reasons.REASONS["no_supported_transport"].meaning
    assert reasons.meaning("some_future_code") == "some future code"
    assert reasons.meaning(None) == reasons.meaning("") == "no reason recorded"
    assert reasons.code("initialize_failed") == "initialize_failed"
    with pytest.raises(KeyError, match="not in agentctl.evidence.reasons.TABLE"):
        reasons.code("not_a_registered_code")


def test_the_troubleshooting_doc_carries_exactly_the_generated_table() -> None:
    text = DOC.read_text()
    start, end = text.index(reasons.BEGIN) + len(reasons.BEGIN) + 1, text.index(reasons.END)
    assert text[start:end] == reasons.markdown_table(), (
        "docs/troubleshooting.md is stale: run `make schema` (python -m agentctl.evidence.reasons --doc ...)")
    for code in reasons.REASONS:
        assert f"| `{code}` |" in text


def test_the_generator_rewrites_only_the_marked_block(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{reasons.BEGIN}\nold table\n{reasons.END}\nafter\n")
    subprocess.run([sys.executable, "-m", "agentctl.evidence.reasons", "--doc", str(doc)], check=True, cwd=REPO,
                   timeout=60)
    assert doc.read_text() == f"before\n{reasons.BEGIN}\n{reasons.markdown_table()}{reasons.END}\nafter\n"
    (tmp_path / "bare.md").write_text("no markers\n")
    done = subprocess.run([sys.executable, "-m", "agentctl.evidence.reasons", "--doc", str(tmp_path / "bare.md")],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode != 0 and "markers" in done.stderr


def test_the_scan_finds_codes_in_every_kind_of_position_and_flags_what_it_cannot_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "emit.py").write_text(textwrap.dedent('''
        CONSTANT = "from_a_constant"
        REASON_NAMED = "from_a_reason_constant"
        TABLE = {1: "from_a_dict_value"}

        class Failure(Exception):
            def __init__(self, code, text):
                self.code = code

        def record(kind, reason_code=None, summary=None):
            return {"reason_code": reason_code}

        def summarize(reason_code, text):
            return text

        def emit(flag, status, exc, dynamic):
            record("x", reason_code="from_a_keyword")
            record("x", "from_a_position")
            raise Failure(CONSTANT, "text")
            local = "from_a_local" if flag else "from_the_other_branch"
            record("x", reason_code=local or "from_an_or")
            record("x", reason_code=TABLE.get(status, "from_a_default"))
            record("x", reason_code=exc.reason_code)  # a pass-through
            summarize("never_emitted", "text").summary
            return {"reason_code": "from_a_dict_literal", "also": record("x", reason_code=f"{dynamic}_code")}
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    scan = scan_package(pkg)
    assert set(scan.codes) == {
        "from_a_constant", "from_a_reason_constant", "from_a_dict_value", "from_a_keyword", "from_a_position",
        "from_a_local", "from_the_other_branch", "from_an_or", "from_a_default", "from_a_dict_literal"}
    assert [u.split(": ", 1)[1] for u in scan.unreadable] == ["f'{dynamic}_code'"]
