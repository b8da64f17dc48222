"""Runs inside the agentctl zipapp before agentctl is imported: refuse an interpreter the bundle was not built for.

The zipapp carries compiled extension modules (aiohttp, msgspec, pydantic-core, ...) for one CPython
minor version and platform; another interpreter would fail later with an obscure ImportError.
packaging/build.py writes the build's values over the two placeholders below.
"""

import platform
import sys

BUILT_FOR = (0, 0)  # (major, minor) of the CPython that built the zipapp
BUILT_MACHINE = ""  # platform.machine() of the build host

if sys.implementation.name != "cpython" or sys.version_info[:2] != BUILT_FOR or platform.machine() != BUILT_MACHINE:
    here = f"{sys.implementation.name} {sys.version_info[0]}.{sys.version_info[1]} on {platform.machine()}"
    sys.stderr.write(
        f"agentctl: this zipapp needs CPython {BUILT_FOR[0]}.{BUILT_FOR[1]} on {BUILT_MACHINE}, not {here}; "
        f"run it with python{BUILT_FOR[0]}.{BUILT_FOR[1]} or use the PyInstaller build\n"
    )
    sys.exit(2)
