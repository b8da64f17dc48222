"""The compiled part of the build, which pyproject.toml (the rest of it) cannot declare without experimental tables.

The stdio witness's relay in C (agentctl/agent/witness_copy.c), on Python's limited API: one abi3 build serves every
CPython from 3.11. Optional: where no C compiler is there the build goes on without it, and the witness relays in
Python (agentctl/agent/witness_relay.py), slower, the same bytes.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("agentctl.agent.witness_copy", ["agentctl/agent/witness_copy.c"], py_limited_api=True, optional=True),
    ],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
