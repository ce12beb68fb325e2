"""The simulator's loop compiled: the scheduler and the event loop built with mypyc, used only for the sources on disk.

A simulation is millions of small calls between the event loop (:mod:`servebench.serving.simulate`) and the
scheduler (:mod:`servebench.serving.scheduler`): about 300 Python calls a request, whatever the batch. mypyc compiles
both modules, as they are, to C extensions whose calls between them are C calls; their results are the same to the
bit (``tests/test_native.py``), and a million ``paged_chat`` requests took 45 s instead of 84 s here (docs/scale.md).

``python -m servebench.serving.native build`` (``./dev.sh native``; ``./dev.sh`` builds it once when a C compiler
is present) compiles a copy of the package in a temporary folder and keeps the two extensions, and mypyc's runtime
they share, in ``servebench/serving/_native/`` with a stamp: each source's SHA-256, the interpreter and the platform.
:func:`servebench.serving.compiled.enable` (run by ``servebench.serving``'s ``__init__``) puts that folder first on the package's path only when
the stamp matches the sources beside it, so an edited source is never shadowed by an older build; it then runs as
Python until the next build. ``SERVEBENCH_NATIVE=0`` keeps the Python (the test suite sets it, so that every test
runs the code it reads; ``tests/test_native.py`` compares the two in child processes).
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

from servebench.errors import ConfigError
from servebench.serving.compiled import HERE, MODULES, NATIVE_DIR, STAMP, build_stamp, built_for


def build(native_dir: Path = NATIVE_DIR) -> Path:
    """Compile :data:`MODULES` with mypyc into ``native_dir`` (replacing what it held); return it.

    Raises ConfigError naming what is missing: mypy (which brings mypyc) or a C compiler's failure.
    """
    import shutil
    import subprocess
    import tempfile

    try:
        import mypyc  # noqa: F401
    except ImportError:
        raise ConfigError("building the compiled simulator needs mypyc: pip install mypy (requirements.txt pins it)") \
            from None
    package = HERE.parent
    with tempfile.TemporaryDirectory(prefix="sb-native-") as tmp:
        root = Path(tmp)
        shutil.copytree(package, root / package.name, ignore=shutil.ignore_patterns("__pycache__", "_native", "*.so"))
        sources = [str(Path(package.name, "serving", f"{m}.py")) for m in MODULES]
        done = subprocess.run([sys.executable, "-m", "mypyc", "--ignore-missing-imports", "--follow-imports=silent",
                               *sources], cwd=root, capture_output=True, text=True)
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = [root / package.name / "serving" / f"{m}{suffix}" for m in MODULES]
        runtime = sorted(root.glob(f"*__mypyc{suffix}"))
        if done.returncode != 0 or not all(p.is_file() for p in built) or len(runtime) != 1:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise ConfigError(f"mypyc could not compile {', '.join(sources)} (exit {done.returncode}):\n{tail}")
        if native_dir.exists():
            shutil.rmtree(native_dir)
        native_dir.mkdir(parents=True)
        for path in [*built, *runtime]:
            shutil.copy2(path, native_dir / path.name)
        # the stamp of the copy compiled, not of the sources now on disk: an edit during the build is not stamped as built
        (native_dir / STAMP).write_text(json.dumps(build_stamp(root / package.name / "serving"), indent=2) + "\n")
    return native_dir


def main(argv: list[str] | None = None) -> int:
    """``build``: compile (or say why not); ``status``: whether a build for these sources is present."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["build"]:
        try:
            where = build()
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"compiled {', '.join(MODULES)} into {where}")
        return 0
    if args == ["status"]:
        ok = built_for()
        print("built for these sources" if ok else "not built for these sources")
        return 0 if ok else 1
    print("usage: python -m servebench.serving.native build|status", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
