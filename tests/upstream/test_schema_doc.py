"""docs/upstream-protocol.md carries the JSON Schema generated from the frame types (regenerate its block with
`python -m agentctl.upstream.protocol --doc docs/upstream-protocol.md`), and names every frame type and error code."""

from __future__ import annotations

import json
import re
import subprocess

from agentctl.upstream import protocol as P
from tests.conftest import REPO, agentctl_cmd

DOC = REPO / "docs" / "upstream-protocol.md"


def _committed_schema() -> dict:
    match = re.search(r"<!-- schema:begin -->\s*```json\n(.*?)\n```\s*<!-- schema:end -->", DOC.read_text(), re.S)
    assert match, "schema block markers missing from docs/upstream-protocol.md"
    return json.loads(match.group(1))


def test_the_documented_schema_matches_the_frame_types():
    assert _committed_schema() == P.frames_schema(), (
        "docs/upstream-protocol.md is stale: run `python -m agentctl.upstream.protocol --doc docs/upstream-protocol.md`"
    )


def test_agentctl_hub_schema_prints_the_same_schema():
    out = subprocess.run(agentctl_cmd("hub", "schema"), capture_output=True, text=True, timeout=60, cwd=REPO, check=True)
    assert json.loads(out.stdout) == P.frames_schema()


def test_the_doc_names_every_frame_type_error_code_and_limit():
    text = DOC.read_text()
    schema = P.frames_schema()["$defs"]
    tags = {d["properties"]["type"]["enum"][0] for name, d in schema.items() if name.endswith("Frame") and "properties" in d}
    assert len(tags) == 12
    for tag in tags:
        assert f"`{tag}`" in text, tag
    for code in P.ERROR_CODES:
        assert f"`{code}`" in text, code
    assert "1 MiB" in text and f"`v` is not {P.PROTOCOL_VERSION}" in text
