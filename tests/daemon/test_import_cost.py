"""What a daemon loads and keeps: the ACP SDK (~8 MB, ~0.4 s of pydantic schema) only once an ACP agent starts;
the start-up heap frozen out of the garbage collector once started."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import REPO, write_spec

# A fresh interpreter: this test process has long imported the SDK through other tests.
_PROBE = textwrap.dedent(
    """
    import asyncio, gc, sys
    from agentctl.cli import main  # noqa: F401  (the console script's module, as `agentctl serve` loads it)
    from agentctl.daemon.app import Daemon
    from agentctl.spec import load_spec

    async def go():
        daemon = Daemon(load_spec(sys.argv[1]), socket_path=sys.argv[2])
        await daemon.start()
        before = "acp" in sys.modules
        frozen = gc.get_freeze_count()
        await daemon.stop()
        return before, frozen

    before, frozen = asyncio.run(go())
    print(f"frozen={frozen}", "acp-before" if before else "no-acp", "acp-after" if "acp" in sys.modules else "")
    """
)


def _run(spec, sock) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(spec), str(sock)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    frozen, *imports = proc.stdout.split()
    # The SDKs' schemas and modules (~100,000 objects) are out of reach of every later full collection.
    assert int(frozen.removeprefix("frozen=")) > 50_000, frozen
    return imports


def test_a_daemon_without_an_acp_agent_never_imports_the_acp_sdk(tmp_path, short_tmp):
    assert _run(write_spec(tmp_path), short_tmp / "c.sock") == ["no-acp"]


def test_a_daemon_with_an_acp_agent_imports_the_sdk_when_it_starts_the_agent(tmp_path, short_tmp):
    spec = write_spec(tmp_path, '[agent]\ncommand = ["agentctl-reference-agent"]\nprotocol = "acp"\n')
    assert _run(spec, short_tmp / "c.sock") == ["acp-before", "acp-after"]
