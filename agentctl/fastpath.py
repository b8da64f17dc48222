"""The exec probe's fast path: `agentctl health [--ready] [--json]` and `agentctl status --json` pointed at one
daemon (--socket, --execution or $AGENTCTL_SOCKET), answered with one raw HTTP/1.1 request over the control socket and printing exactly what the full
commands print.

An exec probe runs every few seconds in every pod; the full CLI spends most of a call on imports (argparse's
parser tree, `http.client` with `email` and `ssl`). Only the stdlib's `json` and `socket` and agentctl's socket
location rules (agentctl.control.socket, so they are written once) are imported here; the contract (msgspec)
only for --json, where the answer is decoded and printed exactly as the full command does.

`run(argv)` answers an exit code, or None for anything it does not reproduce byte for byte (another flag, no
socket named, a daemon that cannot be reached or refuses, a body it would not accept, a degraded or
not-ready daemon without --json): the full CLI then runs the command as if this module did not exist.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from agentctl.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_UNHEALTHY

# What the full client uses (agentctl.control.client's default --timeout).
TIMEOUT = 5.0
MAX_ANSWER = 1 << 20  # a health or status answer is a few KiB; anything bigger goes to the full client

_ROUTES = {"health": "/v1/health", "status": "/v1/status"}
_VALUE_FLAGS = ("--socket", "--execution")


def run(argv: list[str]) -> int | None:
    """The exit code of the command in `argv` (printed as the full CLI would), or None to use the full CLI."""
    options = _parse(argv)
    if options is None:
        return None
    command, flags, values = options
    from agentctl.control.socket import named_socket
    from agentctl.unix_socket import ControlSocketError

    try:
        path = named_socket(values.get("--socket"), values.get("--execution"))
    except ControlSocketError:
        return None
    if path is None:
        return None  # discovery of the one live daemon (and stale-socket clean-up) stays with the full CLI
    route = _ROUTES[command]
    answer = _get(path, route)
    if answer is None:
        return None
    if isinstance(answer, str):  # "timeout"
        # The full client would wait as long again: say what it says, with its exit code.
        from agentctl.safetext import neutralize

        message = f"the agentctl daemon at {path} did not answer GET {route} within {TIMEOUT:g} s"
        print(f"agentctl: {neutralize(message)}", file=sys.stderr)
        return EXIT_UNHEALTHY if command == "health" else EXIT_FAILED
    status, body = answer
    if status != 200:
        return None
    if "--json" in flags:
        return _print_decoded(command, flags, body)
    return _health_line(body, "--ready" in flags)


def _parse(argv: list[str]) -> tuple[str, set[str], dict[str, str]] | None:
    """(command, flags, {--socket/--execution: value}) for the shapes handled here, else None."""
    if not argv or argv[0] not in _ROUTES:
        return None
    command, flags, values = argv[0], set(), {}
    allowed = {"--json", "--ready"} if command == "health" else {"--json"}
    rest = iter(argv[1:])
    for token in rest:
        name, eq, value = token.partition("=")
        if name in _VALUE_FLAGS:
            if not eq:
                value = next(rest, "")
            # Empty, repeated or flag-like values have their own meaning (or error) in the full parser.
            if not value or value.startswith("-") or name in values:
                return None
            values[name] = value
        elif token in allowed and token not in flags:
            flags.add(token)
        else:
            return None
    if command == "status" and "--json" not in flags:
        return None  # the text rendering (colour, layout) stays with the full CLI
    return command, flags, values


def _get(path: os.PathLike[str], route: str) -> tuple[int, bytes] | str | None:
    """(status, body) of GET `route`, "timeout" when the daemon stopped answering, None when the exchange was
    anything else (the full client then reports it in its own words)."""
    request = (f"GET {route} HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n"
               "Connection: close\r\n\r\n").encode()
    # One deadline for the whole exchange: a timeout per recv alone lets a peer that sends a byte at a time
    # keep the probe for ever.
    deadline = time.monotonic() + TIMEOUT
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT)
    try:
        try:
            sock.connect(os.fspath(path))
        except OSError:
            return None
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(request)
            raw = bytearray()
            while len(raw) <= MAX_ANSWER:
                left = deadline - time.monotonic()
                if left <= 0:
                    return "timeout"
                sock.settimeout(left)
                chunk = sock.recv(65536)
                if not chunk:
                    break
                raw += chunk
                parsed = _response(raw)
                if parsed is not None:
                    return parsed if parsed[0] >= 0 else None
        except TimeoutError:
            return "timeout"
        except OSError:
            return None
        return None
    finally:
        sock.close()


def _response(raw: bytes | bytearray) -> tuple[int, bytes] | None:
    """(status, body) once `raw` holds a whole HTTP/1.1 answer with a Content-Length, (-1, b"") once its head
    declares a body over MAX_ANSWER or a chunked one (for the full client), else None."""
    head, sep, body = bytes(raw).partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        return None
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"transfer-encoding":
            return -1, b""  # not how a daemon answers these: the full client reads it, bounded
        if name == b"content-length" and value.strip().isdigit():
            length = int(value.strip())
    if length is not None and length > MAX_ANSWER:
        return -1, b""  # bigger than any health or status answer: the full client says so, unread
    if length is None or len(body) < length:
        return None
    return int(parts[1]), body[:length]


def _print_decoded(command: str, flags: set[str], body: bytes) -> int | None:
    """--json: the answer decoded as the contract's struct and printed as `print_json` prints it."""
    import msgspec

    from agentctl.evidence.contract.control import HealthResponse, StatusResponse

    kind = HealthResponse if command == "health" else StatusResponse
    try:
        decoded = msgspec.json.decode(body, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    code = EXIT_OK
    if isinstance(decoded, HealthResponse):
        code = EXIT_OK if (decoded.ready if "--ready" in flags else decoded.live) else EXIT_UNHEALTHY
    return _write(json.dumps(msgspec.to_builtins(decoded), indent=2, ensure_ascii=False) + "\n", code)


def _health_line(body: bytes, ready_mode: bool) -> int | None:
    """Without --json: the one line for a plainly live (or ready) daemon, or for one that is not live; anything
    that needs more words (degraded, not ready and why) is rendered by the full CLI."""
    if _color():
        return None
    try:
        health = json.loads(body.decode("utf-8"))  # bytes would also be read as UTF-16 or -32; msgspec would not
    except ValueError:  # UnicodeDecodeError included
        return None
    if not valid_health(health):
        return None
    if not ready_mode:
        return _write("live\n", EXIT_OK) if health["live"] else _write("not live\n", EXIT_UNHEALTHY)
    if health["ready"] and not health.get("degraded"):
        return _write("ready\n", EXIT_OK)
    return None


def _color() -> bool:
    """Whether the full CLI would colour its line (agentctl.control.render.use_color's rule)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return sys.stdout.isatty()
    except (ValueError, OSError, AttributeError):
        return False


# HealthResponse as the full client's decoder accepts it (unknown keys are ignored there, so here too); a test
# holds these tables to the contract's structs.
_HEALTH_REQUIRED = {"live": bool, "ready": bool, "stopping": bool, "checks": dict}
_CHECK_FIELDS = {"ok": (bool,), "detail": (str, type(None))}
_AGENT_STATES = ("starting", "running", "exited")
_AGENT_FIELDS = {"state": (str,), "start_failure": (str, type(None)), "exit_code": (int, type(None)),
                 "exit_signal": (int, type(None)), "stopped_by_daemon": (bool, type(None))}


def _typed(value: object, kinds: tuple[type, ...]) -> bool:
    # JSON true/false decode to bool, a subclass of int: an int field must not take one, as msgspec refuses it.
    return type(value) in kinds


def valid_health(data: object) -> bool:
    """Whether the full client would decode `data` (a JSON value) as a HealthResponse. A body with a required-server
    gate is left to the full client (False), whatever its shape."""
    if not isinstance(data, dict):
        return False
    if any(not _typed(data.get(name), (kind,)) for name, kind in _HEALTH_REQUIRED.items()):
        return False
    for name, check in data["checks"].items():
        if not isinstance(check, dict) or "ok" not in check:
            return False
        if any(key in check and not _typed(check[key], kinds) for key, kinds in _CHECK_FIELDS.items()):
            return False
    if data.get("required") is not None:
        return False  # the required-server gate's shape is the full client's to check (and to print)
    degraded = data.get("degraded", {})
    if not isinstance(degraded, dict) or any(type(v) is not str for v in degraded.values()):
        return False
    agent = data.get("agent")
    if agent is None:
        return True
    if not isinstance(agent, dict) or agent.get("state") not in _AGENT_STATES:
        return False
    return all(key not in agent or _typed(agent[key], kinds) for key, kinds in _AGENT_FIELDS.items())


def _write(text: str, code: int) -> int:
    """`text` on stdout (a reader that went away is fine, as in the full CLI); returns `code`."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
    return code
