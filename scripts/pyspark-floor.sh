#!/usr/bin/env bash
# The Spark tests again under the lowest PySpark that pyproject.toml claims (X.Y of
# `pyspark>=X.Y` in the spark extra), so that claim is tested too, not only the newest
# release .venv resolves to. scripts/check.sh runs it in the full tier; it runs alone too.
#   ./scripts/pyspark-floor.sh          set up .venv-pyspark-floor if needed, run tests/spark
#   ./scripts/pyspark-floor.sh ARGS     pytest ARGS instead (say tests/spark/test_sink.py -x)
#   ./scripts/pyspark-floor.sh --install   only set up .venv-pyspark-floor
# tests/spark holds every test that starts Spark (but the end-to-end runs of the demo and
# the benchmark in test_examples.py and test_bench.py, which .venv's run covers) and the
# unit tests of the adapter's PySpark parts (schema, rows, options); its test_ranges.py
# uses no PySpark and is left out.
# .venv-pyspark-floor holds goflux[all,dev] with only pyspark pinned, to X.Y.* (its newest
# patch); everything else resolves as it does for a user. Re-installs only when
# pyproject.toml (and so the floor) changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
venv=.venv-pyspark-floor
floor="$("$PYTHON" - <<'EOF'
import re
import tomllib

with open("pyproject.toml", "rb") as f:
    extra = tomllib.load(f)["project"]["optional-dependencies"]["spark"]
floors = [m[1] for r in extra if (m := re.match(r"pyspark\s*>=\s*([0-9.]+)", r))]
if len(floors) != 1:
    raise SystemExit(f"no single pyspark>=X.Y in the spark extra: {extra}")
print(floors[0])
EOF
)"

if [ ! -x "$venv/bin/python" ]; then
    echo "goflux: creating $venv with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv "$venv"
fi
stamp="$venv/.goflux-installed"
want="$( (cat pyproject.toml; echo "pyspark==$floor.*") | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    echo "goflux: installing goflux[all,dev] with pyspark==$floor.* into $venv"
    start=$SECONDS
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -e ".[all,dev]" "pyspark==$floor.*"
    echo "$want" > "$stamp"
    echo "goflux: $venv installed in $((SECONDS - start)) s"
fi

if [ "${1:-}" = "--install" ]; then
    exit 0
fi
version="$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("pyspark"))')"
if [ "$#" -eq 0 ]; then
    set -- tests/spark --ignore=tests/spark/test_ranges.py
fi
echo "== pytest $* with pyspark $version (the floor of pyspark>=$floor; $venv)"
# (no cache provider: .pytest_cache, and so --lf, stay .venv's run's)
exec "$venv/bin/pytest" -p no:cacheprovider "$@"
