"""A small stdlib-only client for the control socket (`http.client` over AF_UNIX).

No aiohttp here: `import aiohttp` alone costs about 0.2 s, and `agentctl status` / `agentctl health`
should answer at once.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from pathlib import Path
from typing import Any


class ControlError(Exception):
    """Talking to the daemon failed; the message is one line for the CLI."""


class ControlUnavailable(ControlError):
    """Could not connect at all: no socket file, nobody listening, or not allowed to connect."""


class ControlProtocolError(ControlError):
    """Connected, but the exchange failed: timeout, connection dropped, or a response that is not JSON."""


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(os.fspath(self._unix_path))
        except BaseException:
            sock.close()
            raise
        self.sock = sock


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
    def __init__(self, path: Path, timeout: float = 5.0) -> None:
        self.path = Path(path)
        self.timeout = timeout

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        return self._request("GET", path)

    def post(self, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        return self._request("POST", path, body)

    def _request(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        conn = _UnixHTTPConnection(self.path, self.timeout)
        try:
            try:
                conn.connect()
            except OSError as exc:
                raise _connect_error(self.path, exc) from None
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Accept": "application/json"}
            if payload is not None:
                headers["Content-Type"] = "application/json"
            try:
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                status = response.status
                raw = response.read()
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

    def stream(self, path: str, body: Any = None, timeout: float | None = None):
        """POST and yield each JSON line of an NDJSON response as it arrives (the prompt stream).

        `timeout` bounds each read, not the whole stream: an agent may think for a while between updates.
        """
        conn = _UnixHTTPConnection(self.path, timeout if timeout is not None else self.timeout)
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
                    raw = response.read()
                    try:
                        data = json.loads(raw) if raw else {}
                    except ValueError:
                        data = {}
                    yield {"type": "error", "http_status": response.status, **(data if isinstance(data, dict) else {})}
                    return
                for line in response:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        item = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(item, dict):
                        yield item
            except TimeoutError:
                raise ControlProtocolError(f"the agentctl daemon at {self.path} stopped answering {path}") from None
            except (OSError, http.client.HTTPException) as exc:
                why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                raise ControlProtocolError(f"the connection to the agentctl daemon failed during {path}: {why}") from None
        finally:
            conn.close()
