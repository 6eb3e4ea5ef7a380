#!/usr/bin/env bash
# The package as a stranger gets it: build the sdist and, from it, the wheel; install the
# wheel into a fresh virtualenv outside the repository; run goflux there. A file missing
# from the package, a dependency missing from pyproject.toml, or a command that ends in
# a traceback without its extra fails this. scripts/check.sh runs it in the full tier,
# beside the test runs; it runs alone too:
#   ./scripts/wheel-check.sh
# Steps, in a temporary directory (deleted at the end):
#   1. python -m build: the sdist, then the wheel built from the sdist;
#      both must hold the files a user needs (py.typed, LICENSE, ...)
#   2. pip install the wheel, no extras: goflux --version runs, and goflux demo says in
#      one line which extras to install and exits 2 (no traceback)
#   3. pip install the wheel with [all]: goflux --version, one example from examples/,
#      and goflux demo (small: 60 orders), which must pass its 9 checks
# Installs come from pip's cache after the first run (the same packages as .venv's).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

PYTHON="${PYTHON:-python3}"
BUILD_PYTHON="${BUILD_PYTHON:-.venv/bin/python}"  # has `build` (the dev extra)
EXAMPLE=jetstream_orders.py
export PIP_DISABLE_PIP_VERSION_CHECK=1
unset PYTHONPATH NATS_URL VIRTUAL_ENV

work="$(mktemp -d "${TMPDIR:-/tmp}/goflux-wheel-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
step() { echo "-- wheel check ($((SECONDS - start)) s): $*"; }
fail() { echo "wheel check FAILED: $*" >&2; exit 1; }

step "building the sdist and the wheel"
"$BUILD_PYTHON" -m build --outdir "$work/dist" . > "$work/build.log" 2>&1 \
    || { cat "$work/build.log"; fail "python -m build"; }
wheel="$(echo "$work"/dist/goflux-*.whl)"
sdist="$(echo "$work"/dist/goflux-*.tar.gz)"
[ -f "$wheel" ] && [ -f "$sdist" ] || fail "no wheel or sdist in $work/dist"
"$BUILD_PYTHON" - "$wheel" "$sdist" <<'EOF' || fail "a file is missing from the package"
import sys
import tarfile
import zipfile

wheel, sdist = sys.argv[1:]
in_wheel = set(zipfile.ZipFile(wheel).namelist())
in_sdist = {name.split("/", 1)[1] for name in tarfile.open(sdist).getnames() if "/" in name}
licence = "goflux-{}.dist-info/licenses/LICENSE".format(wheel.rsplit("/", 1)[1].split("-")[1])
wanted_in_wheel = ["goflux/py.typed", "goflux/cli/__init__.py", licence]
wanted_in_sdist = ["pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "goflux/py.typed"]
missing = [f"wheel: {name}" for name in wanted_in_wheel if name not in in_wheel]
missing += [f"sdist: {name}" for name in wanted_in_sdist if name not in in_sdist]
if missing:
    sys.exit("missing: " + ", ".join(missing))
print(f"{len(in_wheel)} files in the wheel, {len(in_sdist)} in the sdist")
EOF

step "a fresh virtualenv outside the repository, the wheel without extras"
"$PYTHON" -m venv "$work/venv"
mkdir "$work/run"
cd "$work/run"  # not the repository: `import goflux` must find the installed package
"$work/venv/bin/python" -m pip install --quiet "$wheel"
bin="$work/venv/bin"
"$bin/goflux" --version
status=0
"$bin/goflux" demo > "$work/out" 2> "$work/err" || status=$?
cat "$work/err"
if [ "$status" -ne 2 ] || [ -s "$work/out" ] || [ "$(wc -l < "$work/err")" -ne 1 ] \
    || ! grep -q "pip install 'goflux\[" "$work/err"; then
    fail "without extras, goflux demo should print one line naming the extras and exit 2 (exit $status)"
fi

step "the wheel with [all]"
"$bin/python" -m pip install --quiet "goflux[all] @ file://$wheel"
"$bin/goflux" --version
step "examples/$EXAMPLE"
cp "$repo/examples/$EXAMPLE" .
"$bin/python" "$EXAMPLE" > "$work/out" || { cat "$work/out"; fail "examples/$EXAMPLE"; }
grep -q "handled 5, failed 1, redelivered 1, undecodable 1" "$work/out" \
    || { cat "$work/out"; fail "examples/$EXAMPLE printed something else"; }
echo "examples/$EXAMPLE: $(tail -1 "$work/out")"
step "goflux demo --orders 60"
status=0
"$bin/goflux" demo --orders 60 --master "local[2]" > "$work/out" 2> "$work/err" || status=$?
tail -n 15 "$work/out"
if [ "$status" -ne 0 ] || [ "$(grep -c '\[ok\]' "$work/out")" -ne 9 ]; then
    tail -n 30 "$work/err"
    fail "goflux demo exited $status with $(grep -c '\[ok\]' "$work/out") of 9 checks"
fi
step "passed"
