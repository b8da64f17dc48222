"""docs/upstream-protocol.schema.json is the JSON Schema generated from the frame types (regenerate it with
`make schema`), and docs/upstream-protocol.md links it and names every frame type and error code."""

from __future__ import annotations

import json
import subprocess

from agentctl.upstream import protocol as P
from tests.conftest import REPO, agentctl_cmd

DOC = REPO / "docs" / "upstream-protocol.md"
SCHEMA_FILE = REPO / "docs" / "upstream-protocol.schema.json"


def test_the_committed_frames_schema_matches_the_frame_types():
    assert json.loads(SCHEMA_FILE.read_text()) == P.frames_schema(), (
        "docs/upstream-protocol.schema.json is stale: run `make schema`"
    )


def test_agentctl_hub_schema_prints_the_committed_schema_byte_for_byte():
    out = subprocess.run(agentctl_cmd("hub", "schema"), capture_output=True, text=True, timeout=60, cwd=REPO, check=True)
    assert json.loads(out.stdout) == P.frames_schema()
    assert out.stdout == SCHEMA_FILE.read_text(), "`make schema` writes what `agentctl hub schema` prints"


def test_the_doc_names_every_frame_type_error_code_and_limit():
    text = DOC.read_text()
    schema = P.frames_schema()["$defs"]
    tags = {d["properties"]["type"]["enum"][0] for name, d in schema.items() if name.endswith("Frame") and "properties" in d}
    assert len(tags) == 14
    for tag in tags:
        assert f"`{tag}`" in text, tag
    for code in P.ERROR_CODES:
        assert f"`{code}`" in text, code
    assert "1 MiB" in text and f"`v` is not {P.PROTOCOL_VERSION}" in text


def test_the_doc_is_prose_that_links_the_schema_instead_of_repeating_it():
    text = DOC.read_text()
    assert "](upstream-protocol.schema.json)" in text
    assert '"$defs"' not in text and len(text.splitlines()) < 400
