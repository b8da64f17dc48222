"""The control socket of a real `agentctl serve` reached by another uid, through the real CLI run as nobody:
refused by the filesystem as the daemon sets it up, and by the peer-credential check (403) when the test
loosens the permissions; either way nothing is disclosed and the daemon goes on serving its own user."""

from __future__ import annotations

import pytest

from tests.agent.serve_support import base_url, cli_json, http_get, serving, status
from tests.conftest import write_spec
from tests.control.control_support import is_root
from tests.reliability.faults_support import NOBODY, cli_as, mcp_config, open_attempt


@pytest.mark.skipif(not is_root(), reason="needs root to run the CLI as uid 65534 (nobody)")
def test_another_uid_is_refused_by_the_socket_permissions_then_by_peer_credentials_and_learns_nothing(
    tmp_path, short_tmp
):
    sock = short_tmp / "run" / "c.sock"
    with serving(write_spec(tmp_path), sock) as daemon:
        token = open_attempt(sock)["headers"]["Authorization"].split()[1]

        denied = cli_as(NOBODY, "status", "--json", "--socket", str(sock))
        assert denied.returncode != 0 and "permission denied" in denied.stderr
        assert "exec-test" not in denied.stdout

        # TEST-ONLY: open the path and the socket to everyone, so only the daemon's own check stands.
        for path, mode in ((short_tmp, 0o755), (sock.parent, 0o755), (sock, 0o666)):
            path.chmod(mode)
        for args in (("status", "--json"), ("mcp-config", "--json"), ("stop",)):
            refused = cli_as(NOBODY, *args, "--socket", str(sock))
            assert refused.returncode != 0 and "HTTP 403" in refused.stderr, (args, refused.stderr)
            assert token not in refused.stdout + refused.stderr and "exec-test" not in refused.stdout

        # The refused stop never ran: the daemon is ready (readyz turns 503 once a stop is requested).
        assert http_get(base_url(daemon) + "/readyz")[0] == 200
        assert status(sock)["ready"] and mcp_config(sock)["headers"]["Authorization"].endswith(token)
        assert cli_json(sock, "health")["live"]
        assert daemon.proc.poll() is None
        assert daemon.stop() == 0
