"""The ``servebench`` command line: the typer app (``core``) and one module per command domain.

Importing the package registers every command module's commands on ``core.app``; the command modules
import ``core`` only, never this package, so there is no cycle.
"""

import importlib
import pkgutil

from servebench.cli.core import app, console, emit_json, main

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["app", "console", "emit_json", "main"]
