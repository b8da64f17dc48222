"""peer_cred / peer_allowed: the one SO_PEERCRED check every Unix socket of agentctl uses (control API,
upstream publisher, hub), on real connected socket pairs."""

from __future__ import annotations

import os
import socket

from agentctl.unix_socket import peer_allowed, peer_cred


def test_a_connected_unix_socket_names_this_process_and_our_user_is_allowed():
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        assert peer_cred(left) == (os.getpid(), os.getuid(), os.getgid())
        assert peer_allowed(peer_cred(right)[1])
    finally:
        left.close()
        right.close()


def test_an_unknown_peer_or_another_user_is_refused():
    assert peer_cred(None) is None
    closed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    closed.close()
    assert peer_cred(closed) is None  # a closed socket: unknown, fail closed
    assert not peer_allowed(None)
    other = next(uid for uid in range(1000, 70000) if uid not in (os.getuid(), os.geteuid()))
    assert not peer_allowed(other)
    assert peer_allowed(0)  # root may always
