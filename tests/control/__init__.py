"""Tests of the control socket, its API, the client commands and the human rendering."""
