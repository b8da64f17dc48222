"""Behaviour of the bounded tool catalog and its offline o200k_base token estimates."""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec
import pytest

from agentctl.evidence import encoding as encoding_mod
from agentctl.evidence.catalog import TokenEstimator, build_catalog, load_estimator
from agentctl.evidence.contract.report import (
    MAX_CATALOG_SCHEMA_BYTES,
    MAX_CATALOG_TOOLS,
    MAX_DESCRIPTION_BYTES,
    MAX_SCHEMA_BYTES,
    TOKEN_ESTIMATE_METHOD,
)

# The encoding ships in the package, so none of these tests depends on anything outside the repo.
O200K_FILE = Path(encoding_mod.__file__).parent / "data" / "o200k_base.tiktoken"


@pytest.fixture(scope="module")
def estimator(tmp_path_factory: pytest.TempPathFactory) -> TokenEstimator:
    cache = tmp_path_factory.mktemp("tiktoken-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(cache))
        mp.delenv(encoding_mod.ENV_O200K_PATH, raising=False)
        est = load_estimator()
    assert est is not None
    assert list(cache.iterdir()) == [], "loading the packaged file writes nothing to tiktoken's cache"
    return est


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import tiktoken.load

    def refuse(blobpath: str) -> bytes:
        if "://" in blobpath:
            raise AssertionError(f"network fetch attempted: {blobpath}")
        with open(blobpath, "rb") as f:
            return f.read()

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)


def tool(name: str, description: str = "does things", schema: dict | None = None) -> dict:
    return {
        "name": name,
        "description": description,
        "inputSchema": schema if schema is not None else {"type": "object", "properties": {}},
    }


def schema_of_size(n: int) -> dict:
    """An input schema whose compact JSON is exactly n bytes."""
    base = len(msgspec.json.encode({"type": "object", "description": ""}))
    schema = {"type": "object", "description": "x" * (n - base)}
    assert len(msgspec.json.encode(schema)) == n
    return schema


# --- estimator -------------------------------------------------------------------------------------------


def test_hello_world_encodes_to_two_tokens_with_the_packaged_file(estimator: TokenEstimator) -> None:
    assert estimator.count("hello world") == 2
    assert estimator._encoding.encode_ordinary("hello world") == [24912, 2375]


def test_special_token_text_in_a_definition_is_counted_not_refused(estimator: TokenEstimator) -> None:
    assert estimator.count("<|endoftext|>") > 1


def test_estimate_counts_the_whole_definition_json(estimator: TokenEstimator) -> None:
    definition = {
        "name": "get_task",
        "title": "Get task",
        "description": "Fetch the current task",
        "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
        "outputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    }
    _, cat = build_catalog([definition], estimator)
    expected = estimator.count(msgspec.json.encode(definition).decode())
    assert cat.tools[0].token_estimate == expected
    # More than what the summary keeps: title, outputSchema and annotations count too.
    core = {k: definition[k] for k in ("name", "description", "inputSchema")}
    assert expected > estimator.count(msgspec.json.encode(core).decode())
    assert cat.estimator == TOKEN_ESTIMATE_METHOD
    assert cat.estimator_unavailable_reason is None


def test_estimate_is_taken_before_truncation(estimator: TokenEstimator) -> None:
    definition = tool("big", description="é" * 2048, schema=schema_of_size(MAX_SCHEMA_BYTES + 1))
    _, cat = build_catalog([definition], estimator)
    summary = cat.tools[0]
    assert summary.description_truncated and summary.schema_truncated
    assert summary.token_estimate == estimator.count(msgspec.json.encode(definition).decode())


def test_load_estimator_uses_the_env_path_when_no_path_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_network: None
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    named = tmp_path / "ranks.tiktoken"
    named.write_bytes(O200K_FILE.read_bytes())
    monkeypatch.setenv(encoding_mod.ENV_O200K_PATH, str(named))
    est = load_estimator()
    assert est is not None and est.count("hello world") == 2


def test_a_named_file_that_is_wrong_is_refused_even_though_the_package_has_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # An operator who names a file gets that file or no estimates, never a silent substitute.
    named = tmp_path / "ranks.tiktoken"
    named.write_bytes(O200K_FILE.read_bytes()[:-100])
    monkeypatch.setenv(encoding_mod.ENV_O200K_PATH, str(named))
    assert load_estimator() is None


def test_the_packaged_file_is_the_genuine_o200k_base_that_tiktoken_expects() -> None:
    data = encoding_mod.packaged_ranks()
    assert hashlib.sha256(data).hexdigest() == encoding_mod.PACKAGED_SHA256
    assert encoding_mod._o200k_recipe().expected_hash == encoding_mod.PACKAGED_SHA256
    assert len(data.splitlines()) == 199_998


def test_a_file_with_the_wrong_hash_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    bogus = tmp_path / "o200k_base.tiktoken"
    bogus.write_bytes(b"aGVsbG8= 0\n")
    assert load_estimator(str(bogus)) is None


def damage_the_packaged_file(monkeypatch: pytest.MonkeyPatch) -> None:
    # A damaged installation cannot be produced without writing into the installed package, so the
    # packaged bytes are swapped for the same bytes with one rank changed.
    damaged = O200K_FILE.read_bytes().replace(b" 1000\n", b" 1001\n", 1)
    monkeypatch.setattr(encoding_mod, "packaged_ranks", lambda: damaged)


def test_a_damaged_packaged_file_is_refused_and_tiktokens_cache_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_network: None
) -> None:
    damage_the_packaged_file(monkeypatch)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(encoding_mod.ENV_O200K_PATH, raising=False)
    assert load_estimator() is None, "damaged package and empty cache: no estimator"
    cache_file = encoding_mod._o200k_cache_path(encoding_mod._o200k_recipe().source)
    assert cache_file is not None and Path(cache_file).parent == tmp_path
    Path(cache_file).write_bytes(O200K_FILE.read_bytes())
    est = load_estimator()
    assert est is not None and est.count("hello world") == 2


def test_recipe_comes_from_tiktoken_without_touching_its_module(no_network: None) -> None:
    from tiktoken_ext import openai_public

    before = openai_public.load_tiktoken_bpe
    recipe = encoding_mod._o200k_recipe()
    assert openai_public.load_tiktoken_bpe is before
    assert recipe.source.endswith("o200k_base.tiktoken")
    assert len(recipe.expected_hash) == 64
    assert "<|endoftext|>" in recipe.special_tokens and recipe.pat_str


# --- bounds ----------------------------------------------------------------------------------------------


def test_200_tools_keep_128_sorted_by_name_with_full_count_and_truncated_flag() -> None:
    tools = [tool(f"tool_{i:03d}") for i in reversed(range(200))]
    count, cat = build_catalog(tools, None)
    assert count == 200
    assert len(cat.tools) == MAX_CATALOG_TOOLS
    names = [t.name for t in cat.tools]
    assert names == sorted(names) == [f"tool_{i:03d}" for i in range(MAX_CATALOG_TOOLS)]
    assert cat.truncated


def test_a_catalog_within_bounds_is_not_marked_truncated() -> None:
    count, cat = build_catalog([tool("b"), tool("a")], None)
    assert count == 2 and [t.name for t in cat.tools] == ["a", "b"]
    assert not cat.truncated and not cat.schemas_truncated
    assert not any(t.description_truncated or t.schema_truncated for t in cat.tools)


def test_2kib_multibyte_description_is_cut_on_a_utf8_boundary_within_1024_bytes() -> None:
    description = "ab" + "€" * 700  # 2 + 2100 bytes; 3-byte characters straddle byte 1024
    _, cat = build_catalog([tool("t", description=description)], None)
    summary = cat.tools[0]
    cut = summary.description.encode("utf-8")
    assert summary.description_truncated
    assert len(cut) <= MAX_DESCRIPTION_BYTES
    assert len(cut) > MAX_DESCRIPTION_BYTES - 3
    assert description.startswith(summary.description)


def test_oversized_schema_is_dropped_with_a_marker() -> None:
    tools = [
        tool("big", schema=schema_of_size(MAX_SCHEMA_BYTES + 1)),
        tool("fits", schema=schema_of_size(MAX_SCHEMA_BYTES)),
    ]
    _, cat = build_catalog(tools, None)
    big, fits = cat.tools
    assert big.input_schema is None and big.schema_truncated
    assert fits.input_schema is not None and not fits.schema_truncated
    # One oversized schema is a per-tool bound, not the catalog budget.
    assert not cat.schemas_truncated


def test_total_schema_budget_is_enforced() -> None:
    per_tool = MAX_SCHEMA_BYTES  # 8 of these fill the 512 KiB budget exactly
    tools = [tool(f"t{i:02d}", schema=schema_of_size(per_tool)) for i in range(10)]
    tools.append(tool("t99", schema={"type": "object"}))  # small, but after the budget ran out
    _, cat = build_catalog(tools, None)
    kept = [t for t in cat.tools if t.input_schema is not None]
    assert [t.name for t in kept] == [f"t{i:02d}" for i in range(8)]
    assert sum(len(msgspec.json.encode(t.input_schema)) for t in kept) <= MAX_CATALOG_SCHEMA_BYTES
    dropped = [t for t in cat.tools if t.input_schema is None]
    assert [t.name for t in dropped] == ["t08", "t09", "t99"]
    assert all(t.schema_truncated for t in dropped)
    assert cat.schemas_truncated


def test_no_estimator_means_no_estimates_and_a_reason_never_a_character_count() -> None:
    _, cat = build_catalog([tool("a", description="x" * 400), tool("b")], None)
    assert cat.estimator is None
    assert cat.estimator_unavailable_reason == "encoding_unavailable"
    assert all(t.token_estimate is None for t in cat.tools)
    assert b"token_estimate" not in msgspec.json.encode(cat)
