#!/usr/bin/env bash
# A vLLM release's sdist tests (VLLM_UPSTREAM_VERSION, default 0.33.0) and
# their test-only imports, fetched exactly as
# `make vllm-upstream-tests` fetches them: the functions fetch_sdist and
# install_test_deps and the paths they use are read from
# scripts/vllm_upstream_tests.sh and run here, without its test sessions.
# Both reuse build/vllm-upstream/ when it is already there.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SCRIPT=$ROOT/scripts/vllm_upstream_tests.sh
PY=${PY:-$ROOT/.venv/bin/python}
case $PY in /*) ;; *) PY=$ROOT/$PY ;; esac

log() { printf '%s\n' "upstream-patch: $*"; }

for var in VLLM_VERSION HERE WORK SRC SITE; do
    line=$(grep -E "^$var=" "$SCRIPT" || true)
    [[ -n $line ]] || { log "ERROR: no $var= in $SCRIPT"; exit 1; }
    eval "$line"
done
for fn in fetch_sdist install_test_deps; do
    body=$(sed -n "/^$fn() {/,/^}/p" "$SCRIPT")
    [[ -n $body ]] || { log "ERROR: no function $fn in $SCRIPT"; exit 1; }
    eval "$body"
done

fetch_sdist
install_test_deps
echo "$SRC"
echo "$SITE"
