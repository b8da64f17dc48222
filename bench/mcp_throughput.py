"""tools/call throughput and latency: agentctl's MCP endpoint vs a bare MCPServer on uvicorn.

Run:  .venv/bin/python bench/mcp_throughput.py [--seconds 5] [--concurrency 8] [--rounds 3] [--json PATH]

Each server runs in its own subprocess with the same trivial async tool (`echo`):
- bare:     `MCPServer.streamable_http_app()` served by uvicorn (whatever HTTP implementation uvicorn picks
            here; printed), no auth, no observation; once as shipped and once with TCP_NODELAY on its
            listener (the fair baseline: uvicorn sets no TCP_NODELAY, aiohttp does);
- agentctl: `McpEndpoint` mounted in an aiohttp AppRunner (the daemon's hosting), bearer auth, a real
            Ledger recording tool_call_observed for every call.
The load generator (this process) speaks raw HTTP with prebuilt bodies (aiohttp client), so the client
is cheap and the server is what is measured: legacy era (an initialized Mcp-Session-Id session, POST
tools/call, SSE response) and modern era (2026-07-28 self-contained POST). Latency is measured at
concurrency 1, throughput at --concurrency, and the server process's CPU time per request (psutil) is
reported too: on a small machine the client competes for CPU, and CPU per request is the steadier
number. Runs are interleaved across servers for --rounds rounds; medians are printed side by side
with agentctl/bare ratios.

Not a test: numbers depend on the machine. The issue's target: agentctl >= 0.95 of bare throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"


async def echo(text: str = "") -> str:
    """Return the text."""
    return text


# ---- servers (subprocesses) ---------------------------------------------------------------------------


def _listen_socket(nodelay: bool = False) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if nodelay:
        # Linux: accepted sockets inherit TCP_NODELAY from the listening socket.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


async def serve_bare(nodelay: bool) -> None:
    import logging

    import uvicorn
    from mcp.server import MCPServer

    server = MCPServer("bare")
    server.add_tool(echo, name="echo")
    logging.getLogger().handlers.clear()
    app = server.streamable_http_app()
    sock = _listen_socket(nodelay)
    config = uvicorn.Config(app, log_level="error", access_log=False, lifespan="on", loop="asyncio")
    uv = uvicorn.Server(config)
    task = asyncio.create_task(uv.serve(sockets=[sock]))
    while not uv.started:
        await asyncio.sleep(0.01)
    impl = getattr(config, "http_protocol_class", None)
    impl_name = getattr(impl, "__name__", str(config.http))
    delay = "TCP_NODELAY set on the listener" if nodelay else "as shipped: uvicorn sets no TCP_NODELAY"
    print(
        json.dumps({"port": sock.getsockname()[1], "token": None, "http": f"uvicorn {uvicorn.__version__} {impl_name}, {delay}"}),
        flush=True,
    )
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    uv.should_exit = True
    await task


async def serve_agentctl() -> None:
    import aiohttp
    from aiohttp import web

    from agentctl.evidence.contract.report import Identity
    from agentctl.evidence.ledger import Ledger, ServerSeed
    from agentctl.logs import quiet_third_party
    from agentctl.mcp_endpoint.server import McpEndpoint
    from agentctl.runtime import freeze_startup_heap

    quiet_third_party()
    ident = Identity(task_id="t", session_id="s", execution_id="e", instance_id="i", agent_id="a", agent_profile_id="p")
    ledger = Ledger(ident)
    endpoint = McpEndpoint(ledger, builtin_name="kandev", profile="task", backend_getter=lambda: None, estimator_loader=None)
    endpoint.server.add_tool(echo, name="echo")
    app = web.Application(client_max_size=1024 * 1024)
    endpoint.mount(app)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    sock = _listen_socket()
    site = web.SockSite(runner, sock)
    await site.start()
    port = sock.getsockname()[1]
    endpoint.set_listen("127.0.0.1", port)
    await endpoint.start()
    freeze_startup_heap()  # as the daemon does once started
    _, token = ledger.begin_attempt("manual", [ServerSeed(name="kandev", source="builtin", transport="http", target=None)])
    print(json.dumps({"port": port, "token": token, "http": f"aiohttp {aiohttp.__version__} + agentctl bridge"}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    row = ledger.history.current.servers[0] if ledger.history.current else None
    await endpoint.stop()
    await runner.cleanup()
    print(json.dumps({"tool_calls_observed": row.tool_calls if row else 0}), flush=True)


# ---- load generator ----------------------------------------------------------------------------------


class Target:
    def __init__(self, name: str, info: dict[str, Any]) -> None:
        self.name = name
        self.port = info["port"]
        self.token = info["token"]
        self.http = info["http"]
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def headers(self, **extra: str) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": ACCEPT, **extra}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        return h


def _call_body(era: str, i: int) -> bytes:
    params: dict[str, Any] = {"name": "echo", "arguments": {"text": "hi"}}
    if era == "modern":
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        }
    return json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}).encode()


async def _legacy_session(http: Any, target: Target) -> dict[str, str]:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
    }
    async with http.post(target.url, json=init, headers=target.headers()) as resp:
        assert resp.status == 200, resp.status
        sid = resp.headers["mcp-session-id"]
        await resp.read()
    headers = target.headers(**{"Mcp-Session-Id": sid, "MCP-Protocol-Version": LEGACY})
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    async with http.post(target.url, data=note, headers=headers) as resp:
        assert resp.status == 202, resp.status
    return headers


async def run_load(target: Target, era: str, seconds: float, concurrency: int) -> dict[str, float]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency * 2)
    async with aiohttp.ClientSession(connector=connector) as http:
        if era == "legacy":
            headers = await _legacy_session(http, target)
        else:
            headers = target.headers(**{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "echo"})
        latencies: list[float] = []
        count = 0
        errors = 0
        stop_at = 0.0

        async def worker(wid: int) -> None:
            nonlocal count, errors
            i = wid * 10_000_000
            while time.perf_counter() < stop_at:
                i += 1
                body = _call_body(era, i)
                t0 = time.perf_counter()
                async with http.post(target.url, data=body, headers=headers) as resp:
                    payload = await resp.read()
                    ok = resp.status == 200 and b'"isError":false' in payload.replace(b" ", b"")
                latencies.append(time.perf_counter() - t0)
                count += 1
                if not ok:
                    errors += 1

        # warm-up
        stop_at = time.perf_counter() + min(1.0, seconds / 3)
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        latencies.clear()
        count = errors = 0
        started = time.perf_counter()
        stop_at = started + seconds
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    q = statistics.quantiles(latencies, n=100) if len(latencies) >= 100 else [latencies[len(latencies) // 2]] * 99
    return {"rps": count / elapsed, "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000, "n": count, "errors": errors}


def start_server(kind: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"{kind} server failed to start: {proc.stderr.read() if proc.stderr else ''}")
    return proc, json.loads(line)


def stop_server(proc: subprocess.Popen[str]) -> str:
    try:
        out, _ = proc.communicate(input="", timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out.strip()


KINDS = ("bare", "bare-nodelay", "agentctl")


async def measure(target: Target, proc: subprocess.Popen[str], era: str, seconds: float, conc: int) -> dict[str, float]:
    """One load run plus the server process's CPU time per request (user + system)."""
    import psutil

    ps = psutil.Process(proc.pid)
    before = ps.cpu_times()
    result = await run_load(target, era, seconds, conc)
    after = ps.cpu_times()
    warm = min(1.0, seconds / 3)
    requests = result["n"] * (seconds + warm) / seconds  # the warm-up's requests, at the same rate
    cpu = (after.user - before.user) + (after.system - before.system)
    result["cpu_us"] = cpu / requests * 1e6 if requests else float("nan")
    return result


async def main_async(args: argparse.Namespace) -> None:
    servers = {kind: start_server(kind) for kind in KINDS}
    targets = {kind: Target(kind, info) for kind, (_, info) in servers.items()}
    runs: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    try:
        for round_ in range(args.rounds):
            for era in ("legacy", "modern"):
                for run, conc in (("lat", 1), ("tput", args.concurrency)):
                    order = KINDS if round_ % 2 == 0 else tuple(reversed(KINDS))  # interleaved: drift cancels
                    for kind in order:
                        proc = servers[kind][0]
                        result = await measure(targets[kind], proc, era, args.seconds, conc)
                        runs.setdefault((kind, era, run), []).append(result)
    finally:
        tails = {kind: stop_server(proc) for kind, (proc, _) in servers.items()}

    def med(kind: str, era: str, run: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[(kind, era, run)])

    print(
        f"# tools/call of a trivial tool; {args.rounds} interleaved rounds x {args.seconds:g}s per run, medians;"
        f" {os.cpu_count()} CPUs; python {sys.version.split()[0]}"
    )
    for kind in KINDS:
        print(f"# {kind}: {targets[kind].http}")
    if tails.get("agentctl"):
        print(f"# agentctl ledger after the runs: {tails['agentctl'].splitlines()[-1]}")
    header = f"{'era':<7} {'metric':<24} {'bare*':>9} {'bare':>9} {'agentctl':>9} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for era in ("legacy", "modern"):
        rows = [
            (f"throughput req/s (c={args.concurrency})", "tput", "rps"),
            ("throughput req/s (c=1)", "lat", "rps"),
            ("p50 ms (c=1)", "lat", "p50_ms"),
            ("p99 ms (c=1)", "lat", "p99_ms"),
            (f"p50 ms (c={args.concurrency})", "tput", "p50_ms"),
            (f"p99 ms (c={args.concurrency})", "tput", "p99_ms"),
            (f"server CPU us/req (c={args.concurrency})", "tput", "cpu_us"),
        ]
        for label, run, key in rows:
            shipped, bare, ours = (med(k, era, run, key) for k in KINDS)
            ratio = ours / bare if bare else float("nan")
            print(f"{era:<7} {label:<24} {shipped:>9.2f} {bare:>9.2f} {ours:>9.2f} {ratio:>7.3f}")
        errors = {k: sum(r["errors"] for run in ("lat", "tput") for r in runs[(k, era, run)]) for k in KINDS}
        if any(errors.values()):
            print(f"# {era}: failed calls {errors}")
    print("# bare* = uvicorn as shipped (Nagle + delayed ACK: ~40 ms per SSE response here, not comparable);")
    print("# bare  = the same server with TCP_NODELAY: the baseline of ratio = agentctl / bare.")
    print("# Target: throughput ratio >= 0.95. Latency and CPU ratios near 1.0 are parity (lower is better).")
    if args.json:
        write_json(args, runs, targets, tails)


def write_json(args: argparse.Namespace, runs: dict, targets: dict[str, Target], tails: dict[str, str]) -> None:
    """The medians, and the figures bench/run.py tabulates: agentctl against bare with TCP_NODELAY."""
    import _common as c

    keys = ("rps", "p50_ms", "p99_ms", "cpu_us")
    medians = {f"{kind}/{era}/{run}": {k: c.median(r[k] for r in rows) for k in keys}
               for (kind, era, run), rows in runs.items()}
    conc = args.concurrency
    figures = []
    for era in ("legacy", "modern"):
        ours, bare = medians[f"agentctl/{era}/tput"], medians[f"bare-nodelay/{era}/tput"]
        ours1, bare1 = medians[f"agentctl/{era}/lat"], medians[f"bare-nodelay/{era}/lat"]
        ref = "bare MCPServer, uvicorn"
        figures += [
            c.figure(f"MCP {era}: tools/call req/s (c={conc})", ours["rps"], bare["rps"], unit="req/s",
                     reference_name=ref, target=("ratio", ">=", 0.95)),
            # The p99 counterpart of ">= 0.95 of bare": no more than 1/0.95 of bare's latency.
            c.figure(f"MCP {era}: tools/call p99 (c=1)", ours1["p99_ms"], bare1["p99_ms"], unit="ms",
                     reference_name=ref, target=("ratio", "<=", round(1 / 0.95, 3))),
            c.figure(f"MCP {era}: tools/call p99 (c={conc})", ours["p99_ms"], bare["p99_ms"], unit="ms",
                     reference_name=ref, target=("ratio", "<=", round(1 / 0.95, 3))),
            c.figure(f"MCP {era}: server CPU us/call (c={conc})", ours["cpu_us"], bare["cpu_us"], unit="us",
                     reference_name=ref),
        ]
    errors = sum(r["errors"] for rows in runs.values() for r in rows)
    result = {"bench": "mcp_throughput", "params": {"seconds": args.seconds, "concurrency": conc, "rounds": args.rounds},
              "servers": {k: t.http for k, t in targets.items()}, "medians": medians, "failed_calls": errors,
              "agentctl_ledger": tails.get("agentctl", ""), "figures": figures, "machine": c.machine_info()}
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    parser.add_argument("--serve", choices=("bare", "bare-nodelay", "agentctl"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve in ("bare", "bare-nodelay"):
        asyncio.run(serve_bare(nodelay=args.serve == "bare-nodelay"))
    elif args.serve == "agentctl":
        asyncio.run(serve_agentctl())
    else:
        asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
