"""Entry point of the PyInstaller onedir build: undo the bootloader's environment changes, then run the CLI.

The bootloader prepends the bundle's `_internal` directory to LD_LIBRARY_PATH and sets `_PYI_*`
variables. The daemon hands its environment to the agent, so left alone, an agent (and everything it
runs) would load this bundle's libssl, libstdc++ and libpython instead of the host's, and a PyInstaller
built agent would mistake itself for a child of this one. This process no longer needs them: the loader
read LD_LIBRARY_PATH when it started, and the bundled extension modules are found through sys.path.
"""

import os
import sys


def _restore_environment() -> None:
    original = os.environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is not None:
        os.environ["LD_LIBRARY_PATH"] = original
    else:
        os.environ.pop("LD_LIBRARY_PATH", None)
    for name in [name for name in os.environ if name.startswith("_PYI_")]:
        del os.environ[name]


if __name__ == "__main__":
    _restore_environment()
    from agentctl.cli import main

    sys.exit(main())
