"""Tests for agent supervision and the stderr window."""
