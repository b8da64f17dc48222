"""The CLI's client for the control socket: `http.client` over AF_UNIX, answers decoded into contract structs.

Every request has a total deadline (connect, send, status line, headers and body together: a peer that answers a
byte at a time cannot stretch it) and a bounded answer size (the declared length is checked before anything is
read), so whatever listens on a socket in the runtime dir cannot hang or exhaust `ls`, `status`, `health`, `stop`.

No aiohttp here: `import aiohttp` alone costs about 0.2 s, and `agentctl status` / `agentctl health`
should answer at once; msgspec and the contract cost about 30 ms.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from agentctl.unix_socket import peer_cred
from agentctl.evidence.contract.control import ControlError, PromptStreamItem
from agentctl.evidence.decode_errors import describe_decode_error

T = TypeVar("T")

# The largest answer read (a report of a long execution is a few MiB at most); a bigger one is refused unread.
MAX_ANSWER = 32 * 1024 * 1024
# The longest line of a prompt stream.
MAX_STREAM_LINE = 4 * 1024 * 1024


class ControlClientError(Exception):
    """Talking to the daemon failed; the message is one line for the CLI."""


class ControlUnavailable(ControlClientError):
    """Could not connect at all: no socket file, nobody listening, or not allowed to connect."""


class ControlProtocolError(ControlClientError):
    """Connected, but the exchange failed: timeout, connection dropped, or an answer this contract cannot read."""


class ControlRefused(ControlClientError):
    """The daemon answered with a refusal: `error` is its ControlError (status, reason code, one line)."""

    def __init__(self, route: str, error: ControlError) -> None:
        message = f"the daemon refused {route} (HTTP {error.status})" + (f": {error.error}" if error.error else "")
        super().__init__(message)
        self.route = route
        self.error = error


class _DeadlineSocket(socket.socket):
    """A socket whose every send and receive gets only what is left of one deadline (a socket timeout alone
    bounds each call, and a peer that sends a byte just before each expires keeps a reader forever)."""

    deadline = float("inf")
    per_call: float | None = None  # a bound of each call besides (the prompt stream's wait between lines)

    def _left(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self.settimeout(min(left, self.per_call) if self.per_call else left)

    def recv_into(self, *args: Any, **kwargs: Any) -> int:
        self._left()
        return super().recv_into(*args, **kwargs)

    def recv(self, *args: Any, **kwargs: Any) -> bytes:
        self._left()
        return super().recv(*args, **kwargs)

    def sendall(self, *args: Any, **kwargs: Any) -> None:
        self._left()
        return super().sendall(*args, **kwargs)


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._unix_path = path
        self.peer_pid: int | None = None
        self.deadline = time.monotonic() + timeout

    def connect(self) -> None:
        sock = _DeadlineSocket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.deadline = self.deadline
        sock.settimeout(max(0.001, self.deadline - time.monotonic()))
        try:
            sock.connect(os.fspath(self._unix_path))
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        cred = peer_cred(sock)  # the kernel's word for who listens: the daemon's pid, not a claim of its own
        self.peer_pid = cred[0] if cred and cred[0] > 0 else None


def _connect_error(path: Path, exc: OSError) -> ControlUnavailable:
    if isinstance(exc, FileNotFoundError):
        why = "no socket there (is the daemon running?)"
    elif isinstance(exc, ConnectionRefusedError):
        why = "nobody is listening (stale socket: the daemon is gone)"
    elif isinstance(exc, PermissionError):
        why = "permission denied (the control socket serves only the daemon's user and root)"
    elif isinstance(exc, TimeoutError):
        why = "timed out connecting"
    elif isinstance(exc, NotADirectoryError):
        why = "a parent of the path is not a directory"
    else:
        why = exc.strerror or str(exc) or type(exc).__name__
    return ControlUnavailable(f"cannot connect to the agentctl daemon at {path}: {why}")


class ControlClient:
    """Requests to one daemon's control socket. `call` and `stream` answer contract structs (a refusal raises
    ControlRefused with the daemon's ControlError); `get` and `post` answer the raw JSON object."""

    def __init__(self, path: Path, timeout: float = 5.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.peer_pid: int | None = None  # the pid serving the socket at the last connection, when known

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        return self._json("GET", path)

    def post(self, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        return self._json("POST", path, body)

    def call(self, method: str, path: str, kind: type[T], body: Any = None, ok: tuple[int, ...] = (200,)) -> T:
        """The answer decoded as `kind`; ControlRefused when the status is not in `ok`."""
        status, raw = self._request(method, path, body)
        if status not in ok:
            raise ControlRefused(path, _refusal(status, raw))
        try:
            return msgspec.json.decode(raw, type=kind)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            why = describe_decode_error(exc).text(limit=200)
            raise ControlProtocolError(
                f"the agentctl daemon at {self.path} answered {method} {path} with a body this agentctl cannot read "
                f"({why}); is it another agentctl version?"
            ) from None

    def _json(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        status, raw = self._request(method, path, body)
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            raise ControlProtocolError(
                f"the agentctl daemon at {self.path} answered {method} {path} with HTTP {status} and a body that is not JSON"
            ) from None
        if not isinstance(data, dict):
            raise ControlProtocolError(
                f"the agentctl daemon at {self.path} answered {method} {path} with JSON that is not an object"
            )
        return status, data

    def _request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        conn = _UnixHTTPConnection(self.path, self.timeout)
        try:
            try:
                conn.connect()
            except OSError as exc:
                raise _connect_error(self.path, exc) from None
            self.peer_pid = conn.peer_pid
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Accept": "application/json"}
            if payload is not None:
                headers["Content-Type"] = "application/json"
            try:
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                return response.status, self._bounded_body(method, path, response)
            except TimeoutError:
                raise ControlProtocolError(
                    f"the agentctl daemon at {self.path} did not answer {method} {path} within {self.timeout:g} s"
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                raise ControlProtocolError(
                    f"the connection to the agentctl daemon at {self.path} failed during {method} {path}: {why}"
                ) from None
        finally:
            conn.close()

    def _bounded_body(self, method: str, path: str, response: http.client.HTTPResponse) -> bytes:
        """The whole body, refused (before any of it is read when its length is declared) past MAX_ANSWER."""
        declared = response.length  # None when chunked or until the connection closes
        if declared is not None and declared <= MAX_ANSWER:
            return response.read()  # exactly that much (a shorter body is IncompleteRead)
        if declared is None:
            body = bytearray()
            while piece := response.read1(65536):
                body += piece
                # A chunk declares its size too (http.client keeps what is left of it as `chunk_left`).
                if len(body) + (getattr(response, "chunk_left", None) or 0) > MAX_ANSWER:
                    break
            else:
                return bytes(body)
        raise ControlProtocolError(
            f"the agentctl daemon at {self.path} answered {method} {path} with more than {MAX_ANSWER // (1 << 20)} MiB "
            f"({declared if declared is not None else 'an unbounded number of'} bytes); is it an agentctl daemon?"
        )

    def stream(self, path: str, body: Any = None, timeout: float | None = None) -> Iterator[PromptStreamItem]:
        """POST and yield each line of an NDJSON answer as it arrives (the prompt stream); ControlRefused when
        the daemon refuses before streaming. A line this contract cannot read is skipped.

        The request and the answer's head must come within the client's timeout; then `timeout` bounds each
        read, not the whole stream (an agent may think for a while between updates), and each line is bounded.
        """
        conn = _UnixHTTPConnection(self.path, self.timeout)
        try:
            try:
                conn.connect()
            except OSError as exc:
                raise _connect_error(self.path, exc) from None
            payload = json.dumps(body).encode() if body is not None else None
            try:
                conn.request("POST", path, body=payload, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                if response.status != 200:
                    raise ControlRefused(path, _refusal(response.status, self._bounded_body("POST", path, response)))
                assert isinstance(conn.sock, _DeadlineSocket)
                conn.sock.deadline = float("inf")
                conn.sock.per_call = timeout if timeout is not None else self.timeout
                while line := response.readline(MAX_STREAM_LINE + 1):
                    if len(line) > MAX_STREAM_LINE and not line.endswith(b"\n"):
                        raise ControlProtocolError(f"the agentctl daemon at {self.path} answered {path} with a line "
                                                   f"over {MAX_STREAM_LINE // (1 << 20)} MiB")
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        yield _stream_item.decode(line)
                    except (msgspec.DecodeError, msgspec.ValidationError):
                        continue
            except TimeoutError:
                raise ControlProtocolError(f"the agentctl daemon at {self.path} stopped answering {path}") from None
            except (OSError, http.client.HTTPException) as exc:
                why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                raise ControlProtocolError(f"the connection to the agentctl daemon failed during {path}: {why}") from None
        finally:
            conn.close()


_stream_item = msgspec.json.Decoder(PromptStreamItem)
_control_error = msgspec.json.Decoder(ControlError)


def _refusal(status: int, raw: bytes) -> ControlError:
    """The daemon's ControlError; an answer of another shape is still a refusal with this status."""
    try:
        error = _control_error.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ControlError(error="", reason_code="unexpected_answer", status=status)
    error.status = status  # the status line is the truth; the body only repeats it
    return error
