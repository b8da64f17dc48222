"""The /v1 control API on a real socket: routes, the TCP and peer-uid guard, stop, and the stdlib client
used from another process."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from agentctl.control.client import ControlClient, ControlProtocolError, ControlUnavailable
from agentctl.control.server import install_control_routes
from agentctl.control.socket import cleanup_socket_path, prepare_socket_path, start_unix_site
from agentctl.evidence.contract.report import decode_history
from tests.control.control_support import (
    EXECUTION_ID, TEST_CTX_KEY, Served, is_root, make_ctx, seed_attempt, serve_app,
)

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534


async def unix_request(path: Path, method: str, route: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(path))) as session:
        async with session.request(method, f"http://localhost{route}") as resp:
            assert resp.content_type == "application/json"
            return resp.status, await resp.json()


async def run_python(code: str, *args: str) -> tuple[int, str, str]:
    """Run `python -c code` as a separate process while this loop keeps serving."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(REPO),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    return proc.returncode, out.decode(), err.decode()


# -- routes -------------------------------------------------------------------------------------------


async def test_status_reports_identity_readiness_and_current_attempt(served: Served) -> None:
    ctx = served.ctx
    attempt_id = seed_attempt(ctx)
    ctx.readiness.set("mcp_listener", True)
    ctx.readiness.set("control_socket", True)
    status, body = await unix_request(served.socket_path, "GET", "/v1/status")
    assert status == 200
    assert set(body) == {"identity", "ready", "checks", "current", "report_path", "mcp_url", "rejected_events",
                         "upstream", "agent", "degraded", "required"}
    assert body["upstream"] is None, "no [upstream] in the spec"
    assert body["required"] is None, "no server is required"
    assert body["agent"] is None and body["degraded"] == {}, "no [agent]; nothing degraded"
    assert body["identity"]["execution_id"] == EXECUTION_ID
    assert body["ready"] is True
    assert body["checks"] == {"mcp_listener": True, "control_socket": True}
    assert body["current"]["attempt_id"] == attempt_id
    rows = {row["name"]: row for row in body["current"]["servers"]}
    assert rows["kandev"]["status"] == "active" and rows["kandev"]["tool_count"] == 7
    assert rows["github"]["status"] == "delivered"
    assert body["mcp_url"] == "http://127.0.0.1:40123/mcp"
    assert body["report_path"].endswith("/report.json")
    assert body["rejected_events"] == 0


async def test_status_before_any_attempt_has_null_current(served: Served) -> None:
    served.ctx.mcp_url = None
    served.ctx.report_path = None
    status, body = await unix_request(served.socket_path, "GET", "/v1/status")
    assert status == 200
    assert body["current"] is None and body["mcp_url"] is None and body["report_path"] is None
    assert body["ready"] is False  # no checks registered yet


async def test_report_is_the_whole_history_in_the_contract_shape(served: Served) -> None:
    first = seed_attempt(served.ctx)
    second = seed_attempt(served.ctx)
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(served.socket_path))) as session:
        async with session.get("http://localhost/v1/report") as resp:
            assert resp.status == 200
            raw = await resp.read()
    history = decode_history(raw)  # strict contract decode: unknown fields would fail
    assert history.current is not None and history.current.attempt_id == second
    assert [a.attempt_id for a in history.previous] == [first]


async def test_health_is_live_and_reports_readiness_checks(served: Served) -> None:
    served.ctx.readiness.set("upstream", False, "connecting")
    status, body = await unix_request(served.socket_path, "GET", "/v1/health")
    assert status == 200
    assert body["live"] is True and body["ready"] is False
    # The one readiness shape (as /readyz?verbose): each check with its detail.
    assert body["checks"] == {"upstream": {"ok": False, "detail": "connecting"}}


async def test_stop_answers_202_then_triggers_the_stop_event(served: Served) -> None:
    ctx = served.ctx
    assert not ctx.stop_event.is_set()
    status, body = await unix_request(served.socket_path, "POST", "/v1/stop")
    assert status == 202 and body == {"stopping": True}
    await asyncio.wait_for(ctx.stop_event.wait(), timeout=5)
    assert ctx.readiness.stopping and not ctx.readiness.ready


async def test_unknown_route_and_wrong_method_answer_json(served: Served) -> None:
    status, body = await unix_request(served.socket_path, "GET", "/v1/nope")
    assert status == 404 and "error" in body
    status, body = await unix_request(served.socket_path, "POST", "/v1/status")
    assert status == 405 and "error" in body
    status, body = await unix_request(served.socket_path, "GET", "/v1/stop")
    assert status == 405 and "error" in body
    assert not served.ctx.stop_event.is_set()


async def test_a_failing_handler_logs_its_type_and_keeps_the_traceback_for_debug(
    short_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A /v1 route that raises stands in for a bug in a handler; its text quotes "the request body".
    canary = "BODY-CANARY-5e2a"

    async def boom(request: web.Request) -> web.Response:
        raise RuntimeError(f"could not use {canary}")

    path = short_dir / "control.sock"
    app = web.Application()
    app[TEST_CTX_KEY] = make_ctx(tmp_path, path)
    install_control_routes(app, TEST_CTX_KEY)
    app.router.add_get("/v1/boom", boom)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    prepare_socket_path(path)
    await start_unix_site(runner, path)
    try:
        caplog.set_level(logging.INFO, logger="agentctl")
        assert await unix_request(path, "GET", "/v1/boom") == (
            500, {"error": "internal error", "reason_code": "internal_error", "status": 500})
        (line,) = [r for r in caplog.records if r.name == "agentctl.control.server"]
        assert line.getMessage() == "control request GET /v1/boom failed (RuntimeError)" and line.exc_info is None
        assert canary not in caplog.text and "Traceback" not in caplog.text
        caplog.clear()
        caplog.set_level(logging.DEBUG, logger="agentctl")
        assert (await unix_request(path, "GET", "/v1/boom"))[0] == 500
        assert "Traceback" in caplog.text and canary in caplog.text  # DEBUG is where a developer looks
    finally:
        await runner.cleanup()
        cleanup_socket_path(path)


async def test_control_routes_do_not_exist_over_tcp(served: Served) -> None:
    base = f"http://127.0.0.1:{served.tcp_port}"
    async with aiohttp.ClientSession() as session:
        for method, route in [("GET", "/v1/status"), ("GET", "/v1/report"), ("GET", "/v1/health"), ("POST", "/v1/stop")]:
            async with session.request(method, base + route) as resp:
                assert resp.status == 404, route
                assert "error" in await resp.json()
        # The same app still serves its other routes over TCP.
        async with session.get(base + "/livez") as resp:
            assert resp.status == 200
    # The stop route never ran over TCP (404 above), so nothing could have scheduled a stop.
    assert not served.ctx.stop_event.is_set()


# -- foreign peers --------------------------------------------------------------------------------------

_AS_NOBODY = """
import json, os, sys
from pathlib import Path
from agentctl.control.client import ControlClient, ControlUnavailable  # imported while still root
os.setgroups([])
os.setgid({uid})
os.setuid({uid})
assert os.getuid() == {uid} and os.geteuid() == {uid}
try:
    status, body = ControlClient(Path(sys.argv[1]), timeout=5).get(sys.argv[2])
except ControlUnavailable as exc:
    print(json.dumps({{"unavailable": str(exc)}}))
else:
    print(json.dumps({{"status": status, "body": body}}))
""".format(uid=NOBODY)


@pytest.mark.skipif(not is_root(), reason="needs root to run a child process as uid 65534 (nobody)")
async def test_foreign_uid_gets_403_before_any_handler_and_is_counted_and_logged_once(tmp_path: Path, caplog) -> None:
    # TEST-ONLY SETUP: a 0755 directory and a 0666 socket, so a foreign uid can get through the
    # filesystem permissions at all; the real daemon uses 0700 + 0600 (see the next test). This is what
    # proves the peer-credential check in the middleware stands on its own.
    d = Path(tempfile.mkdtemp(prefix="actl-", dir="/tmp"))
    try:
        d.chmod(0o755)
        path = d / "control.sock"
        ctx = make_ctx(tmp_path, path)
        s = await serve_app(ctx, path, prepare=False)
        try:
            os.chmod(path, 0o666)
            for route in ("/v1/status", "/v1/report", "/v1/health"):
                code, out, err = await run_python(_AS_NOBODY, str(path), route)
                assert code == 0, err
                result = json.loads(out)
                assert result["status"] == 403, result
                assert "forbidden" in result["body"]["error"]
            # The handler for stop never ran.
            code, out, err = await run_python(
                _AS_NOBODY.replace(".get(sys.argv[2])", ".post(sys.argv[2])"), str(path), "/v1/stop"
            )
            assert code == 0, err
            assert json.loads(out)["status"] == 403
            # The guard answered before any handler: nothing could have scheduled a stop.
            assert not ctx.stop_event.is_set()
            # Four refusals, visible in diagnostics by route/method/status; one log line for the uid.
            refusals = [(r.route, r.method, r.status, r.count) for r in ctx.ledger.history.http_refusals]
            assert refusals == [("control", "GET", 403, 3), ("control", "POST", 403, 1)]
            warned = [r.getMessage() for r in caplog.records if r.name == "agentctl.control.server"]
            assert warned == [f"refused a control request from uid {NOBODY}: only the daemon's own user and root "
                              "may use the control socket"]
            # Root (and the daemon's own uid) are let through on the same socket.
            status, _body = await unix_request(path, "GET", "/v1/health")
            assert status == 200
        finally:
            await s.runner.cleanup()
            cleanup_socket_path(path)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(not is_root(), reason="needs root to run a child process as uid 65534 (nobody)")
async def test_foreign_uid_cannot_even_connect_with_the_real_permissions(served: Served) -> None:
    code, out, err = await run_python(_AS_NOBODY, str(served.socket_path), "/v1/status")
    assert code == 0, err
    assert "permission denied" in json.loads(out)["unavailable"]


# -- the stdlib client ----------------------------------------------------------------------------------

_CLIENT_OUT_OF_PROCESS = """
import json, sys
from pathlib import Path
from agentctl.control.client import ControlClient
import agentctl.commands.daemon_commands  # the CLI side must stay light too
assert "aiohttp" not in sys.modules, "the control client must not import aiohttp"
client = ControlClient(Path(sys.argv[1]))
status, health = client.get("/v1/health")
_, report = client.get("/v1/report")
stop_status, stop = client.post("/v1/stop")
print(json.dumps({"health": [status, health], "execution": report["identity"]["execution_id"],
                  "stop": [stop_status, stop]}))
"""


async def test_client_works_from_another_process_without_aiohttp(served: Served) -> None:
    code, out, err = await run_python(_CLIENT_OUT_OF_PROCESS, str(served.socket_path))
    assert code == 0, err
    result = json.loads(out)
    assert result["health"][0] == 200 and result["health"][1]["live"] is True
    assert result["execution"] == EXECUTION_ID
    assert result["stop"] == [202, {"stopping": True}]
    await asyncio.wait_for(served.ctx.stop_event.wait(), timeout=5)


def test_client_missing_socket_is_unavailable_with_a_clear_message(short_dir: Path) -> None:
    path = short_dir / "nothing.sock"
    with pytest.raises(ControlUnavailable) as info:
        ControlClient(path).get("/v1/health")
    assert str(info.value) == f"cannot connect to the agentctl daemon at {path}: no socket there (is the daemon running?)"


def test_client_stale_socket_is_unavailable(short_dir: Path) -> None:
    path = short_dir / "stale.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()
    with pytest.raises(ControlUnavailable, match="nobody is listening"):
        ControlClient(path).get("/v1/health")


def test_client_times_out_on_a_daemon_that_never_answers(short_dir: Path) -> None:
    path = short_dir / "mute.sock"
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(str(path))
    mute.listen(1)  # accepts connections (backlog) but never answers
    try:
        with pytest.raises(ControlProtocolError, match="did not answer"):
            ControlClient(path, timeout=0.3).get("/v1/health")
    finally:
        mute.close()
