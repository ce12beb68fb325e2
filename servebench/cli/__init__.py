"""The ``servebench`` command line: the typer app (``core``) and one module per command domain.

Importing the package registers every command module's commands on ``core.app``; the command modules
import ``core`` only, never this package, so there is no cycle.

Before numpy is first imported, the CLI asks OpenBLAS for no worker threads (unless the user set
``OPENBLAS_NUM_THREADS``): no command multiplies large matrices, and at import numpy's and scipy's
OpenBLAS each start a thread per core that spins waiting for work, 0.2-0.3 s of CPU per command
on this 2-core machine (``docs/scale.md``).
"""

import importlib
import os
import pkgutil

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from servebench.cli.core import app, console, emit_json, main

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["app", "console", "emit_json", "main"]
