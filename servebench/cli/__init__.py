"""The ``servebench`` command line: the typer app (``core``) and one module per command domain.

Importing the package registers every command module's commands on ``core.app``; the command modules
import ``core`` only, never this package, so there is no cycle.

Before numpy is first imported, the CLI asks OpenBLAS for no worker threads (unless the user set
``OPENBLAS_NUM_THREADS``): no command multiplies large matrices, and at import numpy's and scipy's
OpenBLAS each start a thread per core that spins waiting for work, 0.2-0.3 s of CPU per command
on this 2-core machine (``docs/scale.md``).

Every usage error (a bad option value, a missing option, an unknown command) is one line on stderr,
``error: ...``, and exit code 2, as servebench's own errors are: typer would draw click's usage text
and a boxed panel of several lines (``OneLineUsageErrors``).
"""

import importlib
import os
import pkgutil
from collections.abc import Callable
from typing import Any, TypeVar

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import typer
from typer.core import TyperGroup

from servebench.cli.core import app, console, emit_json, main
from servebench.output.safetext import safe_text

T = TypeVar("T")


def usage_line(exc: typer.TyperException) -> str:
    """Return a usage error as one line: click's message, then where the command's help is.

    >>> usage_line(typer.BadParameter("must be at least 1"))
    'Invalid value: must be at least 1'
    """
    text = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    if ctx is not None and ctx.command.get_help_option(ctx) is not None:
        text += f" (see '{ctx.command_path} {ctx.help_option_names[0]}')"
    return safe_text(text)


def _one_line(call: Callable[[], T]) -> T:
    try:
        return call()
    except typer.TyperException as exc:  # click's exceptions (typer's copy of click) derive from it
        if type(exc).__name__ == "NoArgsIsHelpError":
            raise  # 'servebench' alone prints the help, as before (typer itself tells it by name)
        typer.echo(f"error: {usage_line(exc)}", err=True)
        raise typer.Exit(exc.exit_code) from None


class OneLineUsageErrors(TyperGroup):
    """The app's group: a usage error anywhere in a command line is one line on stderr and its exit code (2).

    Both the group's own options and a command's (parsed inside ``invoke``) pass through here, so the
    rule holds for every command, and for a test's ``CliRunner`` as for ``main``.
    """

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        return _one_line(lambda: super(OneLineUsageErrors, self).make_context(info_name, args, parent, **extra))

    def invoke(self, ctx: Any) -> Any:
        return _one_line(lambda: super(OneLineUsageErrors, self).invoke(ctx))


app.info.cls = OneLineUsageErrors

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["OneLineUsageErrors", "app", "console", "emit_json", "main", "usage_line"]
