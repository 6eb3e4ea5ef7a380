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

# pip's output as a line per stage, not its few hundred lines (all of them go to $1, and
# are shown if pip fails): resolving and downloading, building, installing.
goflux_pip_stages() {
    local line seen=0 count
    while IFS= read -r line; do
        printf '%s\n' "$line" >> "$1"
        line="${line#"${line%%[![:space:]]*}"}"  # without its indent
        case "$line" in
            Collecting*|Obtaining*)
                seen=$((seen + 1))
                if [ "$seen" -eq 1 ] || [ $((seen % 25)) -eq 0 ]; then
                    echo "goflux:   resolving and downloading ($seen so far, $((SECONDS - started)) s)"
                fi ;;
            "Building wheel for "*": started"|"Building editable for "*": started")
                line="${line%% (*}"
                echo "goflux:   building ${line#Building } ($((SECONDS - started)) s)" ;;
            "Installing collected packages:"*)
                count=$(( $(printf '%s' "${line#*:}" | tr -cd ',' | wc -c) + 1 ))
                echo "goflux:   installing $count packages ($((SECONDS - started)) s; PySpark, the largest, takes a while)" ;;
        esac
    done
}

if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    echo "goflux: installing goflux and its dev dependencies, goflux[all,dev,bench], into .venv"
    echo "goflux: (about 2 minutes on a fresh machine, 1 with pip's cache; later runs skip this)"
    started=$SECONDS
    pip_log="$(mktemp)"
    if ! .venv/bin/python -m pip install --quiet --upgrade pip \
        || ! .venv/bin/python -m pip install --progress-bar off -e ".[all,dev,bench]" 2>&1 \
            | goflux_pip_stages "$pip_log"; then
        tail -n 40 "$pip_log" >&2
        rm -f "$pip_log"
        echo "goflux: pip failed (its last lines above)" >&2
        exit 1
    fi
    rm -f "$pip_log"
    echo "$want" > "$stamp"
    echo "goflux: installed in $((SECONDS - started)) s"
fi

