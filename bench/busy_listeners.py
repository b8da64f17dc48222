"""The hub page's probes while another uid asks for large answers and reads nothing, and the time a daemon takes
to reach a hub held by 800 peers that only say hello.

Run:  .venv/bin/python bench/busy_listeners.py [--rounds 3] [--seconds 15] [--probes 100] [--peers 800] [--json PATH]

Busy connections: a real `agentctl hub serve --http` under the unit's `LimitNOFILE=8192` (prlimit). The
attacker is another uid (nobody, through setpriv, the system's python3: tests/reliability/hostile.py): 400
connections, each pipelining 4 GETs of the vendored xterm.js (488 KB; no gzip asked) and never reading a
byte, reopening each one the hub closes (up to 200 a second). Quiet and attacked phases alternate on the same
hub (--rounds each); in each phase --probes rounds over --seconds (past the 10 s write deadline), each round a
`/readyz` and an authorised `/api/status` on fresh connections as a probe makes them. Latency per probe;
a probe refused or unanswered (5 s) is retried once after a second (as a probe's failure threshold does)
and counted, its latency including the retry (or the time to give up, when the retry fails too).

Hello-only peers: a hub under `prlimit --nofile=1024` (its daemon cap 744, below the 800), the same uid
(what an agent in the shipped layout is) holding 800 connections that each say one hello with a forged
identity and `heartbeat_ms` 3,600,000 and reconnect when closed. A real daemon is started, and timed from
its ready line to its history in the hub's database; the same against an idle hub for reference.

Needs root (setpriv, prlimit); without it the script says so and reports nothing. Not a test: numbers
depend on the machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import time
from pathlib import Path

import _common as c

from tests.reliability.hostile import Flood, forged_hello, pipelined
from tests.upstream.procs import hub_history

HUB_NOFILE = 8192
ATTACKERS = 400
REACH_TIMEOUT = 120.0


def start_hub(directory: Path, nofile: int, *extra: str) -> tuple[subprocess.Popen, dict]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "hub.log", "ab") as log:
        proc = c.spawn(["prlimit", f"--nofile={nofile}", c.AGENTCTL, "hub", "serve", "--socket",
                        str(directory / "hub.sock"), "--db", str(directory / "hub.sqlite3"), *extra],
                       stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, cwd=c.REPO)
    return proc, json.loads(c.read_line(proc, 60))


def probe(host: str, port: int, path: str, headers: dict[str, str]) -> tuple[float, int]:
    """(seconds to a 200 answer or to giving up, attempts: 1, 2, or 3 for unanswered twice)."""
    t0 = time.perf_counter()
    for attempt in (1, 2):
        conn = http.client.HTTPConnection(host, port, timeout=5)
        try:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                return time.perf_counter() - t0, attempt
        except OSError:
            pass
        finally:
            conn.close()
        if attempt == 1:
            time.sleep(1.0)  # the refusal's Retry-After
    return time.perf_counter() - t0, 3


def page_phase(host: str, port: int, token: str, attacked: bool, args: argparse.Namespace) -> dict:
    flood = Flood(f"{host}:{port}", ATTACKERS, "noread", reopen_rate=200,
                  payload=pipelined("/vendor/xterm/xterm.js", port, 4)) if attacked else None
    out: dict = {"readyz_s": [], "status_s": [], "retries": 0, "unanswered": 0}
    try:
        if flood is not None:
            flood.start()
            c.wait_until(lambda: flood.latest.get("opened", 0) >= ATTACKERS, 60, "the attacker's connections")
        began = time.monotonic()
        interval = args.seconds / args.probes
        for n in range(args.probes):
            for key, path, headers in (("readyz_s", "/readyz", {}),
                                       ("status_s", "/api/status", {"Authorization": f"Bearer {token}"})):
                seconds, attempts = probe(host, port, path, headers)
                out[key].append(seconds)
                out["retries"] += attempts == 2
                out["unanswered"] += attempts == 3
            pause = began + (n + 1) * interval - time.monotonic()
            if pause > 0:
                time.sleep(pause)  # the probes' pace, not a wait for an outcome
        out["flood"] = flood.latest if flood is not None else {}
        return out
    finally:
        if flood is not None:
            flood.stop()


def time_to_reach(directory: Path, peers: int) -> float | None:
    """Seconds from a daemon's ready line to its history in the hub's database, with `peers` hello-only peers;
    None when it took longer than REACH_TIMEOUT."""
    hub, _ = start_hub(directory, 1024)
    flood = None
    daemon = None
    try:
        if peers:
            hello = forged_hello()
            flood = Flood(str(directory / "hub.sock"), peers, "idle", reopen_rate=200, uid=os.getuid(), payload=hello)
            flood.start()
            c.wait_until(lambda: flood.latest.get("bytes_sent", 0) >= peers * len(hello), 60, "every hello sent")
        spec = directory / "spec.toml"
        upstream = f"[upstream]\nsocket = {json.dumps(str(directory / 'hub.sock'))}\n"
        spec.write_text(c.spec_text(directory / "state", extra=upstream))
        with open(directory / "daemon.log", "ab") as log:
            daemon = c.spawn([c.AGENTCTL, "serve", str(spec), "--socket", str(directory / "d.sock")],
                             stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, cwd=c.REPO)
        c.read_line(daemon, 120)
        t0 = time.perf_counter()
        try:
            execution = c.wait_until(lambda: hub_history(directory / "hub.sqlite3", "session-bench-1"),
                                     REACH_TIMEOUT, "the daemon's history at the hub", interval=0.02)
        except TimeoutError:
            return None
        assert execution["identity"]["execution_id"] == "bench-1"
        return time.perf_counter() - t0
    finally:
        if flood is not None:
            flood.stop()
        c.end_all([p for p in (daemon, hub) if p is not None])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", type=int, default=800, help="hello-only peers holding the hub")
    parser.add_argument("--probes", type=int, default=100, help="probe rounds per page phase")
    parser.add_argument("--seconds", type=float, default=15.0, help="how long each page phase probes")
    parser.add_argument("--rounds", type=int, default=3, help="phases of each kind, interleaved")
    args = c.root_bench_args(parser, "busy_listeners")
    if args is None:
        return
    phases: dict[str, list[dict]] = {"quiet": [], "attacked": []}
    reach: dict[str, list[float | None]] = {"idle hub": [], "held hub": []}
    print(f"# busy listeners: nobody pipelines 4 xterm.js GETs on {ATTACKERS} connections and reads nothing (hub "
          f"page under RLIMIT_NOFILE {HUB_NOFILE}); {args.peers} hello-only peers of the hub's uid (hub under 1,024)")
    with c.temp_dir("busy-") as d:
        hub, ready = start_hub(d / "page", HUB_NOFILE, "--http", "127.0.0.1:0")
        try:
            host, port = ready["http"].split("//", 1)[1].rstrip("/").rsplit(":", 1)
            token = ready["page"].split("#token=", 1)[1]
            for _, name in c.interleaved(args.rounds, ("quiet", "attacked")):
                phases[name].append(page_phase(host, int(port), token, name == "attacked", args))
        finally:
            c.end(hub)
        for n, name in c.interleaved(args.rounds, ("idle hub", "held hub")):
            reach[name].append(time_to_reach(d / f"reach-{n}-{name.split()[0]}", args.peers if name == "held hub" else 0))

    def reached(times: list[float | None]) -> float | None:
        return None if None in times else c.median(times) * 1000  # type: ignore[arg-type]

    def p(name: str, key: str, q: int) -> float:
        return c.percentile([v for ph in phases[name] for v in ph[key]], q) * 1000

    retries = sum(ph["retries"] for ph in phases["attacked"])
    unanswered = sum(ph["unanswered"] for ph in phases["attacked"])
    probes = sum(len(ph["readyz_s"]) + len(ph["status_s"]) for ph in phases["attacked"])
    print(f"#   attacked: {retries} of {probes} probes answered only when retried, {unanswered} not even then "
          "(their time is the time to give up)")
    result = {"bench": "busy_listeners", "params": vars(args) | {"nofile": HUB_NOFILE, "attackers": ATTACKERS},
              "phases": phases, "reach_s": reach}
    result["figures"] = [
        c.figure("hub page /readyz p50, another uid pipelining xterm.js unread", p("attacked", "readyz_s", 50),
                 p("quiet", "readyz_s", 50), unit="ms", reference_name="no attack"),
        c.figure("hub page /readyz p99, the same", p("attacked", "readyz_s", 99), p("quiet", "readyz_s", 99),
                 unit="ms", reference_name="no attack", target=("value", "<=", 1000.0)),
        c.figure("authorised /api/status p99, the same", p("attacked", "status_s", 99), p("quiet", "status_s", 99),
                 unit="ms", reference_name="no attack", target=("value", "<=", 1000.0)),
        c.figure("probes answered only when retried under the attack", retries, unit="", note=f"of {probes}"),
        c.figure("probes unanswered twice under the attack", unanswered, unit="", note=f"of {probes}",
                 target=("value", "<=", 0)),
        c.figure(f"daemon ready to its history at a hub held by {args.peers} hello-only peers (median)",
                 reached(reach["held hub"]), reached(reach["idle hub"]), unit="ms", reference_name="idle hub",
                 target=("value", "<=", 5000.0), note=f"- : not within {REACH_TIMEOUT:g} s"),
    ]
    c.emit(result, args.json)


if __name__ == "__main__":
    main()
