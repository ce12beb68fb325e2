"""Where the compiled scheduler and event loop live, and whether they fit the sources on disk (see
:mod:`servebench.serving.native`, which builds them): small, since ``servebench.serving`` runs :func:`enable` on import.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from pathlib import Path

MODULES = ("scheduler", "simulate")  # servebench.serving's modules that are compiled, together
HERE = Path(__file__).resolve().parent
NATIVE_DIR = HERE / "_native"
STAMP = "stamp.json"
OFF_ENV = "SERVEBENCH_NATIVE"  # "0": never use the compiled modules


def build_stamp(folder: Path = HERE) -> dict[str, object]:
    """Return what a build is valid for: the compiled sources' SHA-256, the interpreter and the platform."""
    return {"python": sys.version, "platform": sysconfig.get_platform(),
            "sources": {m: hashlib.sha256((folder / f"{m}.py").read_bytes()).hexdigest() for m in MODULES}}


def built_for(native_dir: Path = NATIVE_DIR, folder: Path = HERE) -> bool:
    """Return whether ``native_dir`` holds a build of the sources now in ``folder``, for this interpreter."""
    try:
        stamp = json.loads((native_dir / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp == build_stamp(folder)


def enable(package_path: list[str]) -> bool:
    """Put the compiled modules first on ``package_path`` (``servebench.serving.__path__``) when they were built from
    the sources on disk and ``SERVEBENCH_NATIVE`` is not ``0``; return whether they were."""
    if os.environ.get(OFF_ENV, "1") == "0" or not built_for():
        return False
    package_path.insert(0, str(NATIVE_DIR))
    if str(NATIVE_DIR) not in sys.path:  # mypyc's runtime for the two modules is a top-level module beside them
        sys.path.append(str(NATIVE_DIR))
    return True


def active() -> bool:
    """Return whether the simulator in use is the compiled one."""
    from servebench.serving import simulate

    return Path(simulate.__file__).parent == NATIVE_DIR
