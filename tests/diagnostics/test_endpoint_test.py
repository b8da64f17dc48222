"""Endpoint tests, run by a real daemon against real MCP servers (http, sse, stdio) and its own endpoint."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentctl import cli
from agentctl.diagnostics.endpoint_test import MAX_TIMEOUT, EndpointTestError
from agentctl.evidence.contract.report import MAX_SUMMARY_BYTES
from tests.diagnostics.conftest import (
    McpServerFixture,
    build_server,
    http_server,
    plain_app,
    running_daemon,
    serve_asgi,
    spec_text,
    stdio_server,
    wait_for_file_lines,
    wait_gone,
)


def _rows(status: dict) -> dict[str, dict]:
    return {row["name"]: row for row in status["current"]["servers"]}


# ---- only stored names, never a caller's target --------------------------------------------------------


async def test_an_unknown_name_is_refused_with_the_known_names_listed(short_dir: Path, mcp_server: McpServerFixture):
    spec = spec_text(short_dir / "state", http_server("web", mcp_server.url()))
    async with running_daemon(spec, short_dir / "c.sock") as d:
        status, body = await d.control.post("/v1/test-endpoint", {"name": "http://127.0.0.1:1/mcp"})
        assert status == 404
        assert body["reason_code"] == "unknown_server"
        assert "known: kandev, web" in body["error"]
        assert mcp_server.seen.paths == [], "nothing was contacted"


TARGET_FIELDS = [
    {"url": "http://127.0.0.1:1/mcp"},
    {"command": "/bin/sh"},
    {"headers": {"Authorization": "Bearer x"}},
    {"args": ["-c", "true"]},
    {"env": {"A": "b"}},
]


async def test_no_target_field_is_accepted_from_the_caller(short_dir: Path, mcp_server: McpServerFixture):
    spec = spec_text(short_dir / "state", http_server("web", mcp_server.url()))
    async with running_daemon(spec, short_dir / "c.sock") as d:
        for extra in TARGET_FIELDS:
            status, body = await d.control.post("/v1/test-endpoint", {"name": "web", **extra})
            assert status == 400, extra
            field = next(iter(extra))
            assert f"unknown field `{field}`" in body["error"]
            assert "only a server name and an optional timeout" in body["error"]
        assert mcp_server.seen.paths == []


async def test_the_timeout_is_bounded_to_60_seconds(short_dir: Path):
    async with running_daemon(spec_text(short_dir / "state"), short_dir / "c.sock") as d:
        for bad in (0, -1, MAX_TIMEOUT + 1):
            status, body = await d.control.post("/v1/test-endpoint", {"name": "kandev", "timeout": bad})
            assert status == 400 and body["reason_code"] == "bad_timeout", bad


# ---- only what the effective configuration delivers ----------------------------------------------------------


async def test_a_server_the_executor_policy_denies_is_refused_with_its_reason_and_never_starts(
    short_dir: Path, capsys: pytest.CaptureFixture[str]
):
    marker = short_dir / "started"
    servers = stdio_server("local", "stdio_server.py", env=f'{{PIDFILE = "{marker}"}}')
    spec = spec_text(short_dir / "state", servers + '\n[policy]\ntransports = ["http"]\n')
    sock = short_dir / "c.sock"
    async with running_daemon(spec, sock) as d:
        status, body = await d.control.post("/v1/test-endpoint", {"name": "local"})
        assert status == 409 and body["reason_code"] == "policy_denied", body
        assert "does not allow stdio" in body["error"]
        # The CLI names the reason and fails; the upstream callable answers a failed result with the code.
        code = await asyncio.to_thread(cli.main, ["test-endpoint", "local", "--socket", str(sock)])
        assert code == 1 and "policy_denied" in capsys.readouterr().err
        result = await d.ctx.endpoint_tester.upstream_test("local", None)
        assert result.succeeded is False and result.reason_code == "policy_denied"
        # After an attempt too: the policy holds whatever the attempt's rows say.
        await d.control.post("/v1/session/new")
        status, body = await d.control.post("/v1/test-endpoint", {"name": "local"})
        assert status == 409 and body["reason_code"] == "policy_denied"
        # Policy allows http: the built-in server is still tested.
        status, body = await d.control.post("/v1/test-endpoint", {"name": "kandev"})
        assert status == 200 and body["result"]["succeeded"] is True, body
        assert "local" not in d.ctx.endpoint_tester.last_pids
    assert not marker.exists(), "the denied command never ran"


async def test_the_built_in_server_is_refused_when_policy_allows_neither_http_nor_sse(short_dir: Path):
    spec = spec_text(short_dir / "state", '\n[policy]\ntransports = ["stdio"]\n')
    async with running_daemon(spec, short_dir / "c.sock") as d:
        status, body = await d.control.post("/v1/test-endpoint", {"name": "kandev"})
        assert status == 409 and body["reason_code"] == "policy_denied", body


async def test_a_server_the_current_attempt_filtered_is_refused_with_that_reason(short_dir: Path):
    marker = short_dir / "started"
    servers = stdio_server("local", "stdio_server.py", env=f'{{PIDFILE = "{marker}"}}')
    async with running_daemon(spec_text(short_dir / "state", servers), short_dir / "c.sock") as d:
        ctx = d.ctx
        attempt_id, _ = ctx.open_attempt("manual")
        ctx.ledger.record("delivered", attempt_id, "kandev")
        # What a receiver that cannot take stdio records (a passthrough CLI's strategy).
        ctx.ledger.record("filtered", attempt_id, "local", reason_code="stdio_unsupported_by_strategy",
                          summary="this CLI cannot express a stdio server")
        status, body = await d.control.post("/v1/test-endpoint", {"name": "local"})
        assert status == 409 and body["reason_code"] == "stdio_unsupported_by_strategy", body
        assert "cannot express a stdio server" in body["error"]
    assert not marker.exists(), "the filtered command never ran"


# ---- http and sse with the stored headers ----------------------------------------------------------------


async def test_http_and_sse_tests_use_the_stored_headers_and_store_the_result_beside_the_row(
    short_dir: Path, mcp_server: McpServerFixture
):
    servers = http_server("web", mcp_server.url(), headers='{Authorization = "Bearer stored-web-token"}')
    servers += http_server("feed", mcp_server.sse_url(), transport="sse", headers='{Authorization = "Bearer stored-sse"}')
    async with running_daemon(spec_text(short_dir / "state", servers), short_dir / "c.sock") as d:
        await d.control.post("/v1/session/new")
        for name, token in (("web", "Bearer stored-web-token"), ("feed", "Bearer stored-sse")):
            mcp_server.seen.auth.clear()
            status, body = await d.control.post("/v1/test-endpoint", {"name": name})
            assert status == 200, body
            result = body["result"]
            assert result["succeeded"] is True and result["tool_count"] == 3
            assert 0 < result["latency_ms"] < 10_000
            assert body["stored"] is True and body["attempt_id"] == d.ctx.ledger.current_attempt_id
            assert mcp_server.seen.auth and set(mcp_server.seen.auth) == {token}
        rows = _rows(await d.control.get("/v1/status"))
        assert rows["web"]["endpoint_test"]["succeeded"] is True
        assert rows["feed"]["endpoint_test"]["tool_count"] == 3


async def test_a_refusing_server_is_a_test_failure_with_a_reason_code(short_dir: Path, mcp_server: McpServerFixture):
    async with serve_asgi(plain_app(401, b"no")) as port:
        servers = http_server("locked", f"http://127.0.0.1:{port}/mcp")
        async with running_daemon(spec_text(short_dir / "state", servers), short_dir / "c.sock") as d:
            status, body = await d.control.post("/v1/test-endpoint", {"name": "locked"})
    assert status == 200
    result = body["result"]
    assert result["succeeded"] is False and result["reason_code"] == "unauthorized"
    assert "HTTP 401" in result["summary"]
    assert body["stored"] is False, "no attempt yet: nothing to store beside"


# ---- reachability never promotes status ---------------------------------------------------------------------


async def test_a_successful_test_does_not_promote_any_row(short_dir: Path, mcp_server: McpServerFixture):
    servers = http_server("web", mcp_server.url())
    async with running_daemon(spec_text(short_dir / "state", servers), short_dir / "c.sock") as d:
        ctx = d.ctx
        attempt_id, _ = ctx.open_attempt("manual")
        for name in ("kandev", "web"):
            ctx.ledger.record("delivered", attempt_id, name)
        before = _rows(await d.control.get("/v1/status"))
        assert {n: r["status"] for n, r in before.items()} == {"kandev": "delivered", "web": "delivered"}
        for name in ("kandev", "web"):
            status, body = await d.control.post("/v1/test-endpoint", {"name": name})
            assert status == 200 and body["result"]["succeeded"] is True, body
        # The endpoint folds evidence through loop.call_soon (FIFO): one more call_soon turn runs after
        # anything the self-tests scheduled, so what was going to be recorded has been by then.
        turn = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(turn.set_result, None)
        await turn
        after = await d.control.get("/v1/status")
        rows = _rows(after)
        # The daemon contacting its own endpoint is not the agent attaching: delivered stays delivered.
        assert rows["kandev"]["status"] == "delivered" and rows["web"]["status"] == "delivered"
        assert "initialize_observed_at" not in rows["kandev"] and "tool_count" not in rows["kandev"]
        assert rows["kandev"]["endpoint_test"]["tool_count"] >= 1
        assert after["rejected_events"] == 0, "the self-test's evidence is dropped, not counted as rejected"
        history = await d.control.get("/v1/report")
        assert history.get("http_refusals", []) == []
        assert not any(e["kind"] == "initialize_observed" for e in history["current"]["evidence"])
        assert len(ctx.ledger.tokens.all_tokens()) == 1, "the self-test credential was forgotten"


# ---- one at a time per server --------------------------------------------------------------------------------


async def test_a_second_concurrent_test_of_the_same_server_is_refused(short_dir: Path):
    pidfile = short_dir / "pids"
    servers = stdio_server("slow", "tree_server.py", str(pidfile), "hang")
    async with running_daemon(spec_text(short_dir / "state", servers), short_dir / "c.sock") as d:
        first = asyncio.create_task(d.control.post("/v1/test-endpoint", {"name": "slow", "timeout": 1.5}))
        await wait_for_file_lines(pidfile, 3)
        status, body = await d.control.post("/v1/test-endpoint", {"name": "slow"})
        assert status == 409 and body["reason_code"] == "already_running"
        assert "already running" in body["error"]
        # Another server is not blocked by it.
        status, body = await d.control.post("/v1/test-endpoint", {"name": "kandev"})
        assert status == 200 and body["result"]["succeeded"] is True
        status, body = await first
        assert status == 200 and body["result"]["reason_code"] == "timeout"


# ---- stdio: the whole tree is gone on every exit path -----------------------------------------------------------


async def test_stdio_success_lists_the_tools_and_leaves_no_process(short_dir: Path):
    pidfile = short_dir / "pids"
    servers = stdio_server("local", "stdio_server.py", env=f'{{PIDFILE = "{pidfile}"}}')
    async with running_daemon(spec_text(short_dir / "state", servers), short_dir / "c.sock") as d:
        status, body = await d.control.post("/v1/test-endpoint", {"name": "local"})
        assert status == 200 and body["result"]["succeeded"] is True, body
        assert body["result"]["tool_count"] == 2
        [pid] = await wait_for_file_lines(pidfile, 1)
        assert pid == d.ctx.endpoint_tester.last_pids["local"]
        assert await wait_gone([pid]) == []


async def test_stdio_error_exit_kills_the_children_it_left_behind(short_dir: Path):
    pidfile = short_dir / "pids"
    servers = stdio_server("broken", "tree_server.py", str(pidfile), "exit")
    async with running_daemon(spec_text(short_dir / "state", servers), short_dir / "c.sock") as d:
        status, body = await d.control.post("/v1/test-endpoint", {"name": "broken", "timeout": 5})
        result = body["result"]
        assert result["succeeded"] is False and result["reason_code"] == "process_exited"
        assert "code 7" in result["summary"]
        assert result["latency_ms"] < 4000, "an exited server is noticed at once, not at the timeout"
        pids = await wait_for_file_lines(pidfile, 3)
        # Leader, its child (same group) and a setsid grandchild that escaped the group: all gone.
        assert await wait_gone(pids) == []


async def test_stdio_timeout_answers_within_the_bound_and_kills_the_tree(short_dir: Path):
    pidfile = short_dir / "pids"
    servers = stdio_server("stuck", "tree_server.py", str(pidfile), "hang")
    async with running_daemon(spec_text(short_dir / "state", servers), short_dir / "c.sock") as d:
        loop = asyncio.get_running_loop()
        started = loop.time()
        # 3 s: the server's tree writes its pids only once its own interpreter is up, which under load can
        # take more than a second (a shorter bound would kill it before the test can know its pids).
        status, body = await d.control.post("/v1/test-endpoint", {"name": "stuck", "timeout": 3})
        elapsed = loop.time() - started
        assert body["result"]["reason_code"] == "timeout"
        assert "within 3 s" in body["result"]["summary"]
        assert 3.0 <= elapsed < 6.0
        assert await wait_gone(await wait_for_file_lines(pidfile, 3)) == []


async def test_stdio_garbage_on_stdout_is_not_an_answer(short_dir: Path):
    pidfile = short_dir / "pids"
    servers = stdio_server("noisy", "tree_server.py", str(pidfile), "garbage")
    async with running_daemon(spec_text(short_dir / "state", servers), short_dir / "c.sock") as d:
        status, body = await d.control.post("/v1/test-endpoint", {"name": "noisy", "timeout": 3})
        assert body["result"]["reason_code"] == "timeout"
        assert await wait_gone(await wait_for_file_lines(pidfile, 3)) == []


async def test_stdio_cancellation_kills_the_tree(short_dir: Path):
    pidfile = short_dir / "pids"
    servers = stdio_server("stuck", "tree_server.py", str(pidfile), "hang")
    async with running_daemon(spec_text(short_dir / "state", servers), short_dir / "c.sock") as d:
        tester = d.ctx.endpoint_tester
        task = asyncio.create_task(tester.test("stuck", 30))
        pids = await wait_for_file_lines(pidfile, 3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await wait_gone(pids) == []
        # The lock is released: the next test of the same server runs.
        pidfile.unlink()
        again = await tester.test("stuck", 3)
        assert again.result.reason_code == "timeout"
        assert await wait_gone(await wait_for_file_lines(pidfile, 3)) == []


async def test_a_missing_command_is_a_test_failure(short_dir: Path):
    servers = '[[mcp.servers]]\nname = "gone"\ntype = "stdio"\ncommand = "/nonexistent/agentctl-test-server"\n'
    async with running_daemon(spec_text(short_dir / "state", servers), short_dir / "c.sock") as d:
        status, body = await d.control.post("/v1/test-endpoint", {"name": "gone"})
        assert status == 200 and body["result"]["reason_code"] == "command_not_found"


# ---- bounds -----------------------------------------------------------------------------------------------------


async def test_outputs_stay_bounded_with_a_huge_catalog_and_a_huge_error(short_dir: Path):
    big = build_server(tool_count=300)

    async with serve_asgi(big.streamable_http_app()) as port, serve_asgi(plain_app(500, b"E" * 100_000)) as bad_port:
        servers = http_server("big", f"http://127.0.0.1:{port}/mcp") + http_server(
            "loud", f"http://127.0.0.1:{bad_port}/mcp"
        )
        async with running_daemon(spec_text(short_dir / "state", servers), short_dir / "c.sock") as d:
            await d.control.post("/v1/session/new")
            _, ok = await d.control.post("/v1/test-endpoint", {"name": "big"})
            _, bad = await d.control.post("/v1/test-endpoint", {"name": "loud"})
            diagnostics = await d.control.get("/v1/diagnostics")
    assert ok["result"]["tool_count"] == 300, "the full count, whatever the catalog bound"
    assert bad["result"]["succeeded"] is False
    assert len(bad["result"]["summary"].encode()) <= MAX_SUMMARY_BYTES
    assert "E" * 50 not in bad["result"]["summary"]
    import json

    assert len(json.dumps(diagnostics)) < 20_000, "diagnostics hold no catalog and no raw answer"


# ---- the upstream entry point ------------------------------------------------------------------------------------


async def test_the_upstream_callable_answers_refusals_as_failed_results(short_dir: Path):
    async with running_daemon(spec_text(short_dir / "state"), short_dir / "c.sock") as d:
        result = await d.ctx.endpoint_tester.upstream_test("nope", None)
        assert result.succeeded is False and result.reason_code == "unknown_server"
        assert "known: kandev" in result.summary
        result = await d.ctx.endpoint_tester.upstream_test("kandev", 5)
        assert result.succeeded is True and result.tool_count >= 1
        with pytest.raises(EndpointTestError):
            await d.ctx.endpoint_tester.test("kandev", 61)
