"""Owns the short-lived token-estimate helper process (`agentctl estimate-tokens`, hidden): it reads the texts of
a catalog on stdin, loads the o200k_base vocabulary, writes one count per text on stdout, and exits, so the
~80 MB vocabulary lives only as long as one catalog's counting and never in a daemon.

stdin:  {"v": 1, "texts": ["...", ...]}                   (at most MAX_REQUEST_BYTES)
stdout: {"v": 1, "method": ..., "encoding_sha256": ..., "counts": [n, ...]}, exit 0
        {"v": 1, "error": "encoding_unavailable"}, exit 3 (no usable o200k_base: not an error of the caller)
        anything else (bad request, out of memory, out of time): exit 2, nothing on stdout.

It bounds itself (address space, CPU time, a wall-clock alarm, a lower priority) before loading anything, so a runaway count
ends as a failed helper, never as a starved host; the daemon bounds it from outside too (a timeout).
Nothing it reads is ever written to stderr: a traceback would quote tool descriptions.
"""

from __future__ import annotations

import os
import resource
import signal
import sys

import msgspec

from agentctl.evidence.contract.report import TOKEN_ESTIMATE_METHOD

HELPER_PROTOCOL = 1
MAX_REQUEST_BYTES = 8 * 1024 * 1024
MAX_TEXTS = 1024
# Measured peak of one helper counting the built-in catalog: ~110 MB of address space, ~100 MB resident.
# Ten times that leaves room for a large catalog, and still stops a runaway long before it starves a host.
ADDRESS_SPACE_LIMIT = 1024 * 1024 * 1024
CPU_SECONDS = 30
WALL_SECONDS = 60
NICENESS = 10
EXIT_UNAVAILABLE = 3
EXIT_FAILED = 2


class Request(msgspec.Struct, forbid_unknown_fields=True):
    v: int
    texts: list[str]


class Response(msgspec.Struct, omit_defaults=True):
    v: int = HELPER_PROTOCOL
    method: str | None = None
    encoding_sha256: str | None = None
    counts: list[int] | None = None
    error: str | None = None


def _bound_self() -> None:
    for limit, value in ((resource.RLIMIT_AS, ADDRESS_SPACE_LIMIT), (resource.RLIMIT_CPU, CPU_SECONDS)):
        soft, hard = resource.getrlimit(limit)
        # Only ever lower a limit: an operator's tighter one stays.
        wanted = value if hard == resource.RLIM_INFINITY else min(value, hard)
        if soft == resource.RLIM_INFINITY or soft > wanted:
            resource.setrlimit(limit, (wanted, hard))
    signal.alarm(WALL_SECONDS)  # SIGALRM's default action ends the process
    # Background work: the daemon that started it, and its agent, are starting at the same moment.
    os.nice(NICENESS)


def _read_request() -> Request:
    data = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
    if len(data) > MAX_REQUEST_BYTES:
        raise ValueError("request too large")
    request = msgspec.json.decode(data, type=Request)
    if request.v != HELPER_PROTOCOL or len(request.texts) > MAX_TEXTS:
        raise ValueError("unsupported request")
    return request


def _write(response: Response) -> None:
    sys.stdout.buffer.write(msgspec.json.encode(response))
    sys.stdout.buffer.flush()


def main() -> int:
    try:
        _bound_self()
        request = _read_request()
        from agentctl.evidence.encoding import load_estimator_and_sha256

        loaded = load_estimator_and_sha256()
        if loaded is None:
            _write(Response(error="encoding_unavailable"))
            return EXIT_UNAVAILABLE
        estimator, sha256 = loaded
        counts = [estimator.count(text) for text in request.texts]
        _write(Response(method=TOKEN_ESTIMATE_METHOD, encoding_sha256=sha256, counts=counts))
        return 0
    except BaseException:  # MemoryError, a bad request, anything: an exit code says it, never a traceback
        return EXIT_FAILED


def run() -> None:
    """The process entry point (the hidden CLI verb and `python -m`); never returns."""
    code = main()
    sys.stdout.flush()
    os._exit(code)  # skip the interpreter's teardown of the vocabulary: nothing is left to clean up


if __name__ == "__main__":
    run()
