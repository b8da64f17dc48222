"""Upstream, the daemon's side: the frame protocol (protocol.py, which the hub speaks too), the publisher and the tool tunnel."""
