#!/usr/bin/env bash
# servebench developer entry point.
#   ./dev.sh app    set up (once) and open the dashboard on the sample data, on 127.0.0.1 only
#                   (.streamlit/config.toml); extra args go to streamlit: --server.address 0.0.0.0 shares it
#   ./dev.sh test   set up (once), lint (ruff), and run the whole test suite (extra args go to pytest); CI runs this
#   ./dev.sh fast   lint, then the fast selection: no slow, browser, engine, server, process or app tests (README)
#   ./dev.sh lint   ruff: pyflakes, pycodestyle and import order (pyproject.toml); ./dev.sh lint --fix mends what it can
#   ./dev.sh native compile the simulator's loop with mypyc (servebench.serving.native); setup does it when a C
#                   compiler is present and the build is missing or older than the sources
# Setup is idempotent: the virtual environment is rebuilt only when requirements.txt or pyproject.toml change.
set -euo pipefail
cd "$(dirname "$0")"

VENV=.venv
PY="$VENV/bin/python"

setup() {
  local stamp="$VENV/.servebench-stamp"
  local want
  want=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ ! -x "$PY" ]; then
    python3 -m venv "$VENV"
  fi
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$PY" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
    # this machine's pip config names local mirrors that may be absent; drop only those warnings
    "$PY" -m pip install --quiet -r requirements.txt 2> >(grep -v "^WARNING: Location 'file://" >&2)
    "$PY" -m pip install --quiet --no-deps -e . 2> >(grep -v "^WARNING: Location 'file://" >&2)
    echo "$want" > "$stamp"
  fi
  # the compiled simulator: about 30 s, once per change of its sources; without a C compiler it stays Python
  if command -v cc >/dev/null 2>&1 && ! "$PY" -m servebench.serving.native status >/dev/null 2>&1; then
    echo "compiling the simulator's loop (servebench.serving.native, about 30 s)..." >&2
    "$PY" -m servebench.serving.native build >/dev/null || echo "warning: the simulator stays Python (above: why)" >&2
  fi
  # the package's bytecode, as an installed package has it: where PYTHONDONTWRITEBYTECODE is set (as on this project's
  # machines) every command compiled every module it imported again, about 0.1 s of each
  "$PY" -m compileall -q servebench >/dev/null
}

browser() {
  # The browser tests drive Debian's Chromium; install it when we can (root with apt), else they skip.
  if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) \
      >/dev/null 2>&1 || echo "warning: could not install chromium; browser tests will be skipped" >&2
  fi
}

cmd="${1:-}"
shift || true
case "$cmd" in
  app)
    setup
    exec "$VENV/bin/streamlit" run app.py "$@"
    ;;
  native)
    setup  # builds it when missing or stale
    "$PY" -m servebench.serving.native status || exec "$PY" -m servebench.serving.native build  # else: say why
    ;;
  lint)
    setup
    exec "$VENV/bin/ruff" check . "$@"
    ;;
  test)
    setup
    browser
    "$VENV/bin/ruff" check .
    exec "$PY" -m pytest "$@"
    ;;
  fast)
    setup
    "$VENV/bin/ruff" check .
    exec "$PY" -m pytest -m "not slow and not browser and not engine and not server and not process and not app" "$@"
    ;;
  *)
    echo "usage: ./dev.sh app | test [pytest args] | fast [pytest args] | lint [ruff args] | native" >&2
    exit 2
    ;;
esac
