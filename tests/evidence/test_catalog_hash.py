"""The built-in catalog's hash: stable over order and bounds, changed by any name, description or schema."""

from __future__ import annotations

import copy
import hashlib

import msgspec
import pytest

from agentctl.evidence.catalog import build_catalog, catalog_hash
from agentctl.evidence.contract.report import CATALOG_HASH_METHOD, MAX_CATALOG_TOOLS, MAX_DESCRIPTION_BYTES, ToolCatalog
from tests.evidence.test_catalog import schema_of_size, tool

TOOLS = [
    tool("get_task", "Fetch the task.", {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
    tool("add_comment", "Comment on the task.", {"type": "object", "properties": {"text": {"type": "string", "maxLength": 2000}}}),
    tool("ask_user", "Ask a question.", {"type": "object", "properties": {"options": {"anyOf": [{"type": "array"}, {"type": "null"}]}}}),
]


def test_the_hash_names_its_method_and_fits_the_contract() -> None:
    value = catalog_hash(TOOLS)
    assert value is not None and value.startswith(CATALOG_HASH_METHOD + ":")
    assert len(value.rsplit(":", 1)[1]) == 64
    decoded = msgspec.json.decode(msgspec.json.encode(ToolCatalog(hash=value)), type=ToolCatalog)
    assert decoded.hash == value


def test_the_algorithm_is_the_documented_one_so_hashes_compare_across_releases() -> None:
    tools = [{"name": "b", "description": "Ünïcode", "inputSchema": {"type": "object", "a": 1.0}},
             {"name": "a", "inputSchema": {"z": [1, 2], "b": True}}]
    canonical = '[["a",null,{"b":true,"z":[1,2]}],["b","Ünïcode",{"a":1,"type":"object"}]]'
    assert catalog_hash(tools) == f"{CATALOG_HASH_METHOD}:{hashlib.sha256(canonical.encode()).hexdigest()}"


def test_the_same_tools_in_another_order_and_with_reordered_schema_keys_hash_the_same() -> None:
    shuffled = [copy.deepcopy(TOOLS[i]) for i in (2, 0, 1)]
    shuffled[1]["inputSchema"] = dict(reversed(list(shuffled[1]["inputSchema"].items())))
    assert catalog_hash(shuffled) == catalog_hash(TOOLS)


def test_fields_outside_name_description_and_input_schema_do_not_change_it() -> None:
    decorated = copy.deepcopy(TOOLS)
    decorated[0]["annotations"] = {"readOnlyHint": True}
    decorated[0]["outputSchema"] = {"type": "object"}
    decorated[1]["title"] = "Add a comment"
    assert catalog_hash(decorated) == catalog_hash(TOOLS)


def _changed(edit) -> list[dict]:
    tools = copy.deepcopy(TOOLS)
    edit(tools)
    return tools


@pytest.mark.parametrize("edit", [
    pytest.param(lambda t: t[0].update(name="get_task2"), id="a_renamed_tool"),
    pytest.param(lambda t: t[1].update(description="Comment on the task!"), id="a_changed_description"),
    pytest.param(lambda t: t[1].pop("description"), id="a_removed_description"),
    pytest.param(lambda t: t[0]["inputSchema"]["required"].append("x"), id="a_new_required_field"),
    pytest.param(lambda t: t[1]["inputSchema"]["properties"]["text"].update(maxLength=2001), id="a_changed_bound"),
    pytest.param(lambda t: t[2].pop("inputSchema"), id="a_removed_schema"),
    pytest.param(lambda t: t.pop(), id="one_tool_fewer"),
    pytest.param(lambda t: t.append(tool("extra")), id="one_tool_more"),
    pytest.param(lambda t: t.append(copy.deepcopy(t[0])), id="a_duplicated_tool"),
])
def test_any_change_of_a_name_description_or_schema_changes_it(edit) -> None:
    assert catalog_hash(_changed(edit)) != catalog_hash(TOOLS)


def test_truncation_never_changes_it_and_differences_beyond_the_bounds_still_do() -> None:
    many = [tool(f"t{i:03d}", "d" * (MAX_DESCRIPTION_BYTES + 10)) for i in range(MAX_CATALOG_TOOLS + 20)]
    count, bounded = build_catalog(many, None)
    assert count == len(many) and bounded.truncated and bounded.tools[0].description_truncated
    assert bounded.hash == catalog_hash(many)
    # A difference past the description bound, and one in a tool the catalog does not keep: the stored
    # catalogs are identical, the hashes are not.
    tail = copy.deepcopy(many)
    tail[0]["description"] += "x"
    tail[-1]["inputSchema"] = {"type": "object", "properties": {"late": {"type": "string"}}}
    _, tail_bounded = build_catalog(tail, None)
    assert tail_bounded.tools == bounded.tools
    assert tail_bounded.hash != bounded.hash


def test_a_dropped_oversized_schema_still_counts_in_full() -> None:
    big = [tool("big", schema=schema_of_size(70 * 1024))]
    _, bounded = build_catalog(big, None)
    assert bounded.tools[0].schema_truncated and bounded.tools[0].input_schema is None
    bigger = copy.deepcopy(big)
    bigger[0]["inputSchema"]["description"] += "y"
    assert build_catalog(bigger, None)[1].hash != bounded.hash


def test_a_schema_that_is_not_json_gives_no_hash_rather_than_a_wrong_one() -> None:
    assert catalog_hash([tool("nan", schema={"type": "number", "default": float("nan")})]) is None
    deep: dict = {}
    node = deep
    for _ in range(5000):
        node["x"] = {}
        node = node["x"]
    assert catalog_hash([tool("deep", schema=deep)]) is None
    assert catalog_hash(["not a tool", tool("ok")]) == catalog_hash([tool("ok")])
