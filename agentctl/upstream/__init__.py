"""Upstream: the frame protocol (protocol.py), the daemon's publisher and tool tunnel, and the reference hub."""
