"""The load and probe processes of bench/hub_scale.py: many real Publishers (the daemon's own upstream code, on
real Ledgers) in one process, driven by lines on stdin and answering with JSON lines on stdout.

  load:  --publishers N Publishers, spread over the hubs' sockets. Says {"connected": N}; then for each
         `go SECONDS MODE` line it records evidence for SECONDS and answers {"done": ...} with the events it
         recorded and a digest of every session's final history (what the hub database must hold exactly);
         `stop` stops every Publisher (final snapshots) and exits. MODE is
           paced:    a realistic fleet: 4 in 10 publishers busy, a burst of BURST tool-call events every
                     BURST_EVERY s (random phase), a new attempt every ATTEMPT_EVERY events; the others idle
                     (heartbeats only) and open an attempt now and then;
           flat-out: the busy ones record as fast as the hub takes it (a burst, then a pause of 0-20 ms, and a
                     wait while their queue holds more than BACKLOG frames, so nothing is dropped and resynced).
  probe: PROBES_PER_HUB Publishers per hub (sessions probe-K) and one page stream (`/api/events`, what the page reads)
         on every hub. After `go`, PROBE_RATE times a second a probe opens an attempt on its hub and notes the
         time until every hub's stream shows that attempt id; `stop` answers {"latencies": [...]} (seconds
         per hub; null: not shown within GRACE s of the stop).

Only digests leave this process: no history, token or frame is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from agentctl.context import DaemonContext  # noqa: E402
from agentctl.evidence.contract.base import encode  # noqa: E402
from agentctl.evidence.contract.report import Identity  # noqa: E402
from agentctl.evidence.ledger import Ledger  # noqa: E402
from agentctl.upstream.publisher import Publisher  # noqa: E402
from bench.hub_ingest import SEEDS, SPEC  # noqa: E402

BURST = 10
BURST_EVERY = 2.0
ATTEMPT_EVERY = 150
IDLE_ATTEMPT_EVERY = 30.0  # seconds, on average, between an idle publisher's attempt opens
BACKLOG = 256
PROBE_RATE = 5.0
PROBES_PER_HUB = 2
GRACE = 10.0
CONNECT_TIMEOUT = 180.0
WAVE = 100


def say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def command() -> list[str]:
    line = await asyncio.to_thread(sys.stdin.readline)
    return line.split() or ["stop"]


def context(session: str, tmp: Path) -> DaemonContext:
    ident = Identity(task_id=f"task-{session[-1]}", session_id=session, execution_id=f"exec-{session}",
                     instance_id=f"inst-{session}", agent_id="agent", agent_profile_id="profile")
    return DaemonContext(spec=SPEC, ledger=Ledger(ident), state_dir=tmp, control_socket=tmp / "x.sock")


async def connect(sessions: list[str], sockets: list[str], tmp: Path) -> list[tuple[DaemonContext, Publisher]]:
    pubs = []
    deadline = time.monotonic() + CONNECT_TIMEOUT
    for n, sid in enumerate(sessions):
        ctx = context(sid, tmp)
        pub = Publisher(ctx, sockets[n % len(sockets)])
        pub.start()
        pubs.append((ctx, pub))
        if n % WAVE == WAVE - 1:
            # In waves: 2,000 connects at once overflow the hub's listen backlog (128), and a publisher that
            # meets a full backlog retries after its backoff (see bench/RESULTS.md); the figures start from a
            # connected fleet either way.
            while not all(p.connected for _, p in pubs) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
    while not all(p.connected for _, p in pubs):
        if time.monotonic() > deadline:
            raise SystemExit(f"only {sum(p.connected for _, p in pubs)} of {len(pubs)} publishers connected")
        await asyncio.sleep(0.05)
    return pubs


class Counts:
    def __init__(self) -> None:
        self.tool_calls = 0
        self.attempts = 0


def attempt(ctx: DaemonContext, counts: Counts) -> str:
    counts.attempts += 1
    return ctx.ledger.begin_attempt("session_new", SEEDS)[0]


async def busy(ctx: DaemonContext, pub: Publisher, until: float, paced: bool, counts: Counts) -> None:
    ledger = ctx.ledger
    current = ledger.current_attempt_id or attempt(ctx, counts)
    if paced:
        await asyncio.sleep(random.uniform(0, BURST_EVERY))
    while time.monotonic() < until:
        for _ in range(BURST if paced else 3 * BURST):
            if counts.tool_calls % ATTEMPT_EVERY == ATTEMPT_EVERY - 1:
                current = attempt(ctx, counts)
            ledger.record("tool_call_observed", current, "kandev", tool_name=f"tool_{counts.tool_calls % 13}",
                          outcome="ok")
            counts.tool_calls += 1
        if paced:
            await asyncio.sleep(BURST_EVERY * random.uniform(0.8, 1.2))
            continue
        await asyncio.sleep(random.uniform(0, 0.02))
        while pub.queued_evidence > BACKLOG and time.monotonic() < until:
            await asyncio.sleep(0.005)


async def idle(ctx: DaemonContext, until: float, counts: Counts) -> None:
    while True:
        wait = random.expovariate(1 / IDLE_ATTEMPT_EVERY)
        if time.monotonic() + wait >= until:
            return
        await asyncio.sleep(wait)
        attempt(ctx, counts)


def digest(ctx: DaemonContext) -> str:
    return hashlib.sha256(encode(ctx.ledger.history)).hexdigest()


async def load(args: argparse.Namespace, tmp: Path) -> None:
    sessions = [f"{args.prefix}-{n:05d}" for n in range(args.publishers)]
    pubs = await connect(sessions, args.sockets.split(","), tmp)
    for ctx, _ in pubs:
        ctx.ledger.begin_attempt("session_new", SEEDS)
    say({"connected": len(pubs)})
    while (cmd := await command())[0] == "go":
        seconds, mode = float(cmd[1]), cmd[2]
        counts = Counts()
        dropped0 = sum(p.dropped_events for _, p in pubs)
        started = time.monotonic()
        until = started + seconds
        await asyncio.gather(*(busy(ctx, pub, until, mode == "paced", counts) if n % 10 < 4
                               else idle(ctx, until, counts) for n, (ctx, pub) in enumerate(pubs)))
        # Every event recorded: tool calls, and an attempt's `configured` per seed.
        events = counts.tool_calls + counts.attempts * len(SEEDS)
        say({"done": {"events": events, "tool_calls": counts.tool_calls, "attempts": counts.attempts,
                      "seconds": round(time.monotonic() - started, 3),
                      "dropped": sum(p.dropped_events for _, p in pubs) - dropped0,
                      "digests": {ctx.ledger.identity.session_id: digest(ctx) for ctx, _ in pubs}}})
    await asyncio.gather(*(pub.stop() for _, pub in pubs))


async def watch(url: str, token: str, shown: dict[str, float], ready: asyncio.Event) -> None:
    """Follow one hub's page stream as the page does; note when each attempt id of a probe session first shows.
    A session this hub holds comes whole in a `session` event; one only the database holds (changed through
    another hub) comes as a bare `changed` event, on which the page reloads its window: so does this, and the
    probe shows when that answer holds it."""
    import aiohttp

    headers = {"Authorization": f"Bearer {token}"}

    def note(views: list[dict], now: float) -> None:
        for view in views:
            found = (view.get("attempt") or {}).get("attempt_id")
            if found and str(view.get("session_id", "")).startswith("probe-"):
                shown.setdefault(found, now)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
        async def reload() -> None:
            async with http.get(url + "api/sessions", params={"q": "probe-", "limit": "200"}, headers=headers) as r:
                body = await r.read()
            note(json.loads(body).get("sessions", []), time.monotonic())

        async with http.get(url + "api/events", headers=headers) as resp:
            resp.raise_for_status()
            ready.set()
            buf = b""
            # Chunks, not readline(): an event may be longer than any line limit.
            async for chunk in resp.content.iter_any():
                now = time.monotonic()
                *lines, buf = (buf + chunk).split(b"\n")
                changed = False
                for line in lines:
                    if line == b"event: changed":
                        changed = True
                    # The cheap test first: thousands of other sessions' updates pass through here.
                    elif line.startswith(b"data: ") and b'"session_id":"probe-' in line:
                        data = json.loads(line[6:])
                        note(data.get("sessions", [data]), now)
                if changed:
                    await reload()


def shown_after(sent: list[tuple[int, str, float]], views: list[dict[str, float]]) -> list[tuple[int, list]]:
    """Each probe's delay to each view. A view that skipped an attempt because a later one of the same session
    was already current (the stream sends a session's latest state) showed it when it showed the later one."""
    out: list[tuple[int, list]] = []
    seen_later: dict[int, list[float | None]] = {}
    for k, attempt_id, t0 in reversed(sent):
        later = seen_later.get(k, [None] * len(views))
        at = [min(x for x in (v.get(attempt_id), later[i]) if x is not None)
              if v.get(attempt_id) is not None or later[i] is not None else None for i, v in enumerate(views)]
        seen_later[k] = at
        out.append((k, [round(x - t0, 4) if x is not None else None for x in at]))
    return out[::-1]


async def probe(args: argparse.Namespace, tmp: Path) -> None:
    sockets = args.sockets.split(",")
    pages = [(page.split("|")[0], Path(page.split("|")[1]).read_text().strip()) for page in args.pages.split(",")]
    pubs = await connect([f"probe-{k}" for k in range(PROBES_PER_HUB * len(sockets))], sockets, tmp)
    views: list[dict[str, float]] = [{} for _ in pages]
    readies = [asyncio.Event() for _ in pages]
    watchers = [asyncio.create_task(watch(url, token, views[i], readies[i])) for i, (url, token) in enumerate(pages)]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 30)
    say({"connected": len(pubs)})
    sent: list[tuple[int, str, float]] = []  # (probe, attempt id, when opened)
    go = await command()
    if go[0] == "go":
        stopping = asyncio.create_task(command())
        k = 0
        while not stopping.done():
            ctx, _ = pubs[k % len(pubs)]
            sent.append((k % len(pubs), ctx.ledger.begin_attempt("session_new", SEEDS)[0], time.monotonic()))
            k += 1
            await asyncio.wait([stopping], timeout=random.uniform(0.5, 1.5) / PROBE_RATE)
        deadline = time.monotonic() + GRACE
        while time.monotonic() < deadline and not all(a in v for _, a, _ in sent[-len(pubs):] for v in views):
            await asyncio.sleep(0.05)
    for w in watchers:
        w.cancel()
    say({"latencies": [[k % len(sockets), lat] for k, lat in shown_after(sent, views)]})
    await asyncio.gather(*(pub.stop() for _, pub in pubs))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["load", "probe"])
    parser.add_argument("--sockets", required=True, help="the hubs' daemon sockets, comma-separated")
    parser.add_argument("--publishers", type=int, default=0)
    parser.add_argument("--prefix", default="load")
    parser.add_argument("--pages", default="", help="URL|TOKEN_FILE of every hub's page, comma-separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hubscale-w-") as tmp:
        asyncio.run((load if args.mode == "load" else probe)(args, Path(tmp)))


if __name__ == "__main__":
    main()
