# Sourced by demo.sh and check.sh: create .venv and install goflux with every extra.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail

PYTHON="${PYTHON:-python3}"
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "goflux: $PYTHON not found; install Python 3.11+ or set PYTHON=/path/to/python3.11" >&2
    exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "goflux: needs Python 3.11+, but $PYTHON is $("$PYTHON" --version 2>&1)" >&2
    echo "        set PYTHON=/path/to/python3.11 (or newer) and run again" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    echo "goflux: creating .venv with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.goflux-installed
want="$(cat pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    echo "goflux: installing goflux[all,dev,bench] into .venv (first run takes a minute)"
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[all,dev,bench]"
    echo "$want" > "$stamp"
fi

