"""Outside text shown to people (agentctl.safetext): control, bidi and line-separator characters become
visible escapes in log and error lines, and spaces or escapes in renderings; JSON is never touched."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentctl.evidence.contract.report import ClientInfo, ToolSummary
from agentctl.safetext import neutralize, neutralize_data

UNSAFE = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))] + [
    "\u061c", "\u200e", "\u200f", "\u2028", "\u2029", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))]


def _clean(text: str) -> bool:
    return not any(ch in text for ch in UNSAFE)


def test_every_control_bidi_and_line_separator_character_is_written_as_a_visible_escape() -> None:
    assert neutralize("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert neutralize("id\nagentctl INFO forged") == "id\\x0aagentctl INFO forged"
    assert neutralize("\u202eevil\u2066x\x85\x7f") == "\\u202eevil\\u2066x\\x85\\x7f"
    for ch in UNSAFE:
        assert _clean(neutralize(f"a{ch}b")), repr(ch)
        assert _clean(neutralize(f"a{ch}b", spaces=True)), repr(ch)
    assert neutralize("tab\tnew\nline", spaces=True) == "tab new line"
    assert neutralize("plain ü ✓ text") == "plain ü ✓ text"


@given(st.text())
def test_neutralized_text_is_clean_and_neutralizing_twice_changes_nothing(text: str) -> None:
    once = neutralize(text)
    assert _clean(once) and neutralize(once) == once
    assert _clean(neutralize(text, spaces=True))


def test_data_is_neutralized_everywhere_keys_and_structs_included_and_clean_data_is_kept_as_is() -> None:
    clean = ClientInfo(name="agent", version="1")
    assert neutralize_data(clean) is clean
    dirty = {"na\x1bme": [ClientInfo(name="a\x1b[31m", version="1\n2"), ("x\u202e",)], "n": 3}
    assert neutralize_data(dirty) == {"na\\x1bme": [ClientInfo(name="a\\x1b[31m", version="1 2"), ("x\\u202e",)], "n": 3}
    assert dirty["na\x1bme"][0].name == "a\x1b[31m"  # the input is never changed in place


def test_a_tool_description_keeps_its_line_breaks_for_the_renderer_to_lay_out() -> None:
    tool = ToolSummary(name="t\x1b", description="First line.\n\x1b[2JSecond line.")
    assert neutralize_data(tool) == ToolSummary(name="t\\x1b", description="First line.\n\\x1b[2JSecond line.")
    assert neutralize_data({"description": "a\nb\tc"}) == {"description": "a\nb c"}
