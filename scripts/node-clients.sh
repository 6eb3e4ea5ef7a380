# Sourced by check.sh (not demo.sh: the main job needs no Node.js).
# Clients of another language the tests talk to (nats.js for the micro service protocol,
# the official AsyncAPI parser): installed from the npm registry's lock file, again only
# when it changed.
if ! command -v npm >/dev/null 2>&1; then
    echo "goflux: npm not found; the tests need Node.js 18+ with npm (tests/node)" >&2
    exit 1
fi
node_stamp=tests/node/node_modules/.goflux-installed
node_want="$(sha256sum tests/node/package-lock.json | cut -d' ' -f1)"
if [ "$(cat "$node_stamp" 2>/dev/null || true)" != "$node_want" ]; then
    echo "goflux: installing the Node.js test clients into tests/node/node_modules"
    npm ci --prefix tests/node --no-audit --no-fund --loglevel=error
    echo "$node_want" > "$node_stamp"
fi
