"""`agentctl run` with a third-party stdio server behind agentctl's witness (issue 30, section 2): the shipped
reference agent spawns the witness in the server's place; the row says what the witness saw; a required
witnessed server that cannot start stops the prompt at once."""

from __future__ import annotations

from agentctl.exit_codes import EXIT_NOT_ATTACHED, EXIT_OK
from tests.agent.witness_support import (
    CANARY,
    PY_SERVER,
    filesystem_server,
    persisted,
    python,
    row,
    run_prompt,
    stdio_server,
    witness_agent_spec,
)


async def test_a_required_python_server_behind_the_witness_reads_active_observed_by_the_witness_with_its_tools(
    tmp_path, short_tmp
):
    servers = "\n[mcp]\nrequired_timeout = 30\n" + stdio_server("fx", [python(), str(PY_SERVER)], required=True)
    spec = witness_agent_spec(tmp_path, servers)
    _, code, text, _ = await run_prompt(spec, short_tmp / "r.sock", prompt='CALL add {"a": 2, "b": 3}')
    assert code == EXIT_OK, text
    assert "fx: required, attached (active · observed by agentctl's witness)" in text, text
    fx = row(persisted(text), "fx")
    assert (fx.status, fx.status_source, fx.observed_by, fx.tool_count) == ("active", "observed", "witness", 2)
    assert fx.server_info is not None and fx.server_info.name == "stdio-fixture"
    assert fx.catalog is not None and sorted(t.name for t in fx.catalog.tools) == ["add", "ping"]
    assert fx.catalog_hash is not None and fx.catalog_hash.startswith("sha256:")
    assert (fx.tool_calls, fx.last_tool) == (1, "add")
    assert fx.target is not None and "mcp-witness" not in fx.target, "the row names the server, not the witness"
    assert CANARY not in text
    for path in (tmp_path / "state").rglob("*"):
        assert not path.is_file() or CANARY.encode() not in path.read_bytes(), f"the env canary reached {path}"


async def test_a_required_witnessed_server_that_cannot_start_stops_the_prompt_at_once_and_says_why(
    tmp_path, short_tmp
):
    servers = "\n[mcp]\nrequired_timeout = 60\n" + stdio_server(
        "gone", [str(tmp_path / "no-such-server")], required=True)
    spec = witness_agent_spec(tmp_path, servers)
    _, code, text, took = await run_prompt(spec, short_tmp / "r.sock")
    assert code == EXIT_NOT_ATTACHED, text
    assert "prompt sent" not in text
    assert "gone: required, failed (failed, exited with code 127 · observed by agentctl's witness: the server could not be started: " \
           "No such file or directory)" in text, text
    assert took < 30, f"a server that cannot start blocks at once, not after the 60 s timeout ({took:.1f} s)"
    gone = row(persisted(text), "gone")
    assert (gone.status, gone.observed_by, gone.exit_code, gone.reason_code) == (
        "failed", "witness", 127, "witness_server_not_started")


async def test_the_npm_filesystem_server_behind_the_witness_reads_active_with_its_tools_and_its_call_counted(
    tmp_path, short_tmp
):
    server = filesystem_server()
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "note.txt").write_text("hello")
    spec = witness_agent_spec(tmp_path, stdio_server("files", [str(server), str(shared)], required=True))
    _, code, text, _ = await run_prompt(spec, short_tmp / "r.sock",
                                        prompt='CALL list_allowed_directories {}')
    assert code == EXIT_OK, text
    files = row(persisted(text), "files")
    assert (files.status, files.observed_by) == ("active", "witness"), text
    assert files.tool_count is not None and files.tool_count >= 10
    assert files.server_info is not None and "filesystem" in files.server_info.name
    assert (files.tool_calls, files.last_tool, files.tool_errors) == (1, "list_allowed_directories", 0)
    assert "files: required, attached (active · observed by agentctl's witness)" in text
