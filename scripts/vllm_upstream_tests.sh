#!/usr/bin/env bash
# A vLLM release's own unit tests for the prefix cache, run twice on the CPU:
# with our SWA lookup patched in (swa_prefix_cache.vllm_adapter.install(Mode.ON)) and without
# it, then compared test by test (scripts/vllm_upstream/compare_runs.py).
# Fails if a test that passes without the plugin does not pass with it, if
# the runs differ in any other way, or if no patched lookup ever ran.
# Tests failing both ways are listed by cause (vllm_upstream/known_failures.py,
# docs/vllm-upstream-tests.md).
#
# Usage: scripts/vllm_upstream_tests.sh [PYTEST PATHS, relative to the sdist root]
#   PY=...                  python of the project venv (default .venv/bin/python)
#   VLLM_UPSTREAM_SET=full  (default) all of tests/v1/core and
#                           tests/v1/kv_connector/unit/offloading_connector
#   VLLM_UPSTREAM_SET=prefix  only the four prefix-cache paths (PREFIX_TESTS)
#   VLLM_UPSTREAM_JOBS=1    run the two sessions one after the other
#                           (default: side by side when there are 2+ cores)
#   VLLM_UPSTREAM_TIMEOUT   seconds per pytest session (default 1200)
#   VLLM_UPSTREAM_VERSION   the release whose sdist tests run (default 0.33.0,
#                           .venv's); another one runs on that release's wheel
#                           installed --no-deps in build/releases/<version>
#                           (mk/vllm-releases.mk), put first on PYTHONPATH
#
# vLLM's tests are fetched at test time into build/vllm-upstream/ (git-ignored,
# never committed) and reused by later runs; see fetch_sdist below.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
case $PY in /*) ;; *) PY=$ROOT/$PY ;; esac
VLLM_VERSION=${VLLM_UPSTREAM_VERSION:-0.33.0}
HERE=$ROOT/scripts/vllm_upstream
WORK=$ROOT/build/vllm-upstream
SRC=$WORK/vllm-$VLLM_VERSION   # tests/, pyproject.toml, PKG-INFO of the sdist
SITE=$WORK/site-packages       # test-only imports (scripts/vllm_upstream/requirements.txt)
OUT=$WORK/results-$VLLM_VERSION
# The vLLM the tests import: .venv's own, or a release installed beside it.
OVERLAY=""
if [[ $VLLM_VERSION != "$("$PY" -c 'import importlib.metadata as m; print(m.version("vllm"))')" ]]; then
    OVERLAY=$ROOT/build/releases/$VLLM_VERSION
    if [[ ! -f $OVERLAY/.stamp ]]; then
        echo "vllm-upstream: vLLM $VLLM_VERSION is not installed in ${OVERLAY#"$ROOT"/} (make $OVERLAY/.stamp)" >&2
        exit 2
    fi
fi

FULL_TESTS=(
    tests/v1/core
    tests/v1/kv_connector/unit/offloading_connector
)
PREFIX_TESTS=(
    tests/v1/core/test_single_type_kv_cache_manager.py
    tests/v1/core/test_prefix_caching.py
    tests/v1/core/prefix_cache
    tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py
)
# Not runnable here: each runs a whole engine on a model's real weights
# (and tokenizer), which nothing may download at test time. Ignored, and said
# so below. test_hybrid_prefix_cache_hit_rate.py's imports (tests/utils.py:
# anthropic, httpx, ...) are not installed either.
IGNORED=(
    "tests/v1/core/prefix_cache/test_hybrid_prefix_cache_hit_rate.py|serves Qwen/Qwen3.5-0.8B with real weights through an OpenAI server (needs the hub and a GPU)"
    "tests/v1/core/test_scheduler_e2e.py|generates with LLM(hmellor/tiny-random-LlamaForCausalLM): needs its weights and tokenizer from the hub"
    "tests/v1/core/test_reset_prefix_cache_e2e.py|generates with an LLMEngine on Qwen/Qwen3-0.6B and compares outputs: needs its weights and tokenizer from the hub"
)

log() { printf '%s\n' "vllm-upstream: $*"; }

# --- 1. vLLM's sdist test tree, fetched once --------------------------------
# `pip download --no-binary :all:` fetches vllm-0.33.0.tar.gz from the index
# and unpacks it, then fails preparing its metadata (the build needs
# setuptools-rust, CMake and CUDA-era packages), so nothing reaches -d. With
# --no-build-isolation (no build env to install) and --no-clean, the unpacked
# tree stays under TMPDIR, which points at a scratch folder here. If some pip
# ever does save the tarball to -d, that is unpacked instead. Only KEPT is
# kept (tests/, pyproject.toml for pytest's markers, PKG-INFO, and the data
# files tests read from outside tests/): the sdist's vllm/ source must not
# shadow the installed vLLM. A cached copy made with another KEPT is fetched
# again; the old copy stays until the new one is complete.
fetch_sdist() {
    # (inside the function: upstream/swa_stride/fetch_vllm_tests.sh runs it alone)
    local -a KEPT=(
        tests
        pyproject.toml
        PKG-INFO
        # 0.34.0's tests/v1/core/test_prompt_block_hash_vectors.py: the Rust
        # frontend's prompt block hashes, which the engine's must equal
        rust/src/engine-core-client/src/tests/prompt_block_hash_vectors.json
    )
    if [[ -f $SRC/.complete && $(cat "$SRC/.complete") == "${KEPT[*]}" ]]; then
        log "vLLM $VLLM_VERSION sdist tests: reusing the cached copy in ${SRC#"$ROOT"/} (no download)"
        return
    fi
    mkdir -p "$WORK"
    rm -rf "$SRC.partial"
    local scratch tree="" pkg
    scratch=$(mktemp -d "$WORK/fetch.XXXXXX")
    mkdir -p "$scratch/tmp" "$scratch/dl"
    log "fetching the vLLM $VLLM_VERSION sdist with pip (47 MB; pip's metadata step is expected to fail)"
    if TMPDIR=$scratch/tmp "$PY" -m pip download --no-deps --no-binary :all: \
        --no-build-isolation --no-clean --no-input --disable-pip-version-check \
        -d "$scratch/dl" "vllm==$VLLM_VERSION" >"$scratch/pip.log" 2>&1; then
        log "pip download succeeded"
    else
        log "pip download exited non-zero (expected: metadata preparation); looking for the unpacked tree"
    fi
    if [[ -f $scratch/dl/vllm-$VLLM_VERSION.tar.gz ]]; then
        mkdir -p "$scratch/x"
        tar xzf "$scratch/dl/vllm-$VLLM_VERSION.tar.gz" -C "$scratch/x"
    fi
    while IFS= read -r pkg; do
        if grep -qx "Name: vllm" "$pkg" && grep -qx "Version: $VLLM_VERSION" "$pkg" \
            && [[ -d $(dirname "$pkg")/tests/v1/core ]]; then
            tree=$(dirname "$pkg")
            break
        fi
    done < <(find "$scratch/x" "$scratch/tmp" -maxdepth 3 -name PKG-INFO 2>/dev/null)
    if [[ -z $tree ]]; then
        log "ERROR: no vLLM $VLLM_VERSION source tree with tests/ found; pip said:"
        tail -n 30 "$scratch/pip.log" >&2
        rm -rf "$scratch"
        exit 1
    fi
    mkdir -p "$SRC.partial"
    for pkg in "${KEPT[@]}"; do
        if [[ -e $tree/$pkg ]]; then
            (cd "$tree" && cp -r --parents "$pkg" "$SRC.partial/")
        fi
    done
    rm -rf "$scratch"
    echo "${KEPT[*]}" >"$SRC.partial/.complete"
    rm -rf "$SRC"
    mv "$SRC.partial" "$SRC"
    log "vLLM $VLLM_VERSION sdist tests cached in ${SRC#"$ROOT"/}"
}

# --- 2. test-only imports, into a folder of their own -------------------------
install_test_deps() {
    local want have=""
    want=$(sha256sum "$HERE/requirements.txt" | cut -d' ' -f1)
    [[ -f $SITE/.stamp ]] && have=$(cat "$SITE/.stamp")
    if [[ $want == "$have" ]]; then
        return
    fi
    rm -rf "$SITE"
    log "installing test-only imports into ${SITE#"$ROOT"/}"
    "$PY" -m pip install --quiet --no-deps --no-input --disable-pip-version-check \
        --target "$SITE" -r "$HERE/requirements.txt"
    echo "$want" >"$SITE/.stamp"
}

fetch_sdist
install_test_deps

if (($# > 0)); then
    TESTS=("$@")
else
    case ${VLLM_UPSTREAM_SET:-full} in
        full) SET_TESTS=("${FULL_TESTS[@]}") ;;
        prefix) SET_TESTS=("${PREFIX_TESTS[@]}") ;;
        *) log "ERROR: VLLM_UPSTREAM_SET must be full or prefix, got '$VLLM_UPSTREAM_SET'"; exit 2 ;;
    esac
    TESTS=()
    for t in "${SET_TESTS[@]}"; do
        if [[ -e $SRC/$t ]]; then TESTS+=("$t"); else log "not in the $VLLM_VERSION sdist, skipped: $t"; fi
    done
fi
IGNORE_ARGS=()
for entry in "${IGNORED[@]}"; do
    path=${entry%%|*}
    if [[ -e $SRC/$path ]]; then
        IGNORE_ARGS+=("--ignore=$path")
        log "NOT RUN: $path: ${entry#*|}"
    fi
done

# --- 3. offline Hugging Face cache: config.json only, of each model id ------
# the tests name (hf_offline_cache.py: facebook/opt-125m, Qwen/Qwen3-0.6B,
# llava-hf/llava-1.5-7b-hf, ...); no weights, no tokenizer, nothing fetched.
HF_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vllm-upstream-hf.XXXXXX")
# vLLM's own cache (VLLM_CACHE_ROOT: the model registry's inspected-model
# cache, modelinfos/) is fresh for each session too: what the tests can
# import must not depend on what another venv once inspected into ~/.cache.
VLLM_CACHE_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vllm-upstream-cache.XXXXXX")
trap 'rm -rf "$HF_TMP" "$VLLM_CACHE_TMP"' EXIT
"$PY" "$HERE/hf_offline_cache.py" "$HF_TMP" >/dev/null
log "offline HF cache (config.json only): $("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import hf_offline_cache as h; print(", ".join(h.MODELS))' "$HERE")"

# --- 4. the two sessions --------------------------------------------------------
rm -rf "$OUT"
mkdir -p "$OUT"
# Bytecode goes to build/vllm-upstream/pycache (not into the sdist tree or the
# venv) and is kept between runs: test_kv_cache_planning.py's
# test_is_kv_cache_spec_uniform imports vLLM in a `python -O` subprocess with
# a 60 s timeout, and without cached .opt-1.pyc files that import compiles
# vLLM, torch and transformers from source (40 s on a loaded 2-core machine,
# a timeout in one run and not the other would read as a difference).
# PYTHONDONTWRITEBYTECODE (set in some environments) is cleared for that.
run_session() { # $1 = on|off
    local mode=$1 rc=0
    (
        cd "$SRC"
        export PYTHONPATH=${OVERLAY:+$OVERLAY:}$HERE:$SITE \
            VLLM_UPSTREAM_PLUGIN=$mode SWA_PREFIX_CACHE_MODE=$mode \
            VLLM_UPSTREAM_REPORT=$OUT/$mode.json \
            VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
            HF_HOME=$HF_TMP HF_HUB_DISABLE_TELEMETRY=1 VLLM_NO_USAGE_STATS=1 \
            VLLM_CACHE_ROOT=$VLLM_CACHE_TMP/$mode \
            PYTHONPYCACHEPREFIX=$WORK/pycache PYTHONDONTWRITEBYTECODE=
        timeout --kill-after=30 "${VLLM_UPSTREAM_TIMEOUT:-1200}" \
            "$PY" -m pytest -q -rfE -p vllm_upstream_plugin -p no:cacheprovider \
            --rootdir="$SRC" -c "$SRC/pyproject.toml" \
            --junitxml="$OUT/$mode.xml" --durations=5 \
            "${IGNORE_ARGS[@]}" "${TESTS[@]}"
    ) >"$OUT/$mode.log" 2>&1 || rc=$?
    echo "$rc" >"$OUT/$mode.rc"
}

# Compile those .opt-1.pyc files once, before the timed subprocess needs them.
(cd "$SRC" && PYTHONPATH=$OVERLAY PYTHONPYCACHEPREFIX=$WORK/pycache PYTHONDONTWRITEBYTECODE= VLLM_TARGET_DEVICE=cpu \
    "$PY" -O -c 'import vllm.v1.core.kv_cache_planning, vllm.v1.kv_cache_interface') \
    >/dev/null 2>&1 || log "warning: could not pre-compile vLLM's bytecode for python -O"
log "running ${#TESTS[@]} test path(s) with the plugin (on) and without (off): ${TESTS[*]}"
jobs_wanted=${VLLM_UPSTREAM_JOBS:-$(( $(nproc) >= 2 ? 2 : 1 ))}
start=$SECONDS
if ((jobs_wanted >= 2)); then
    run_session on &
    pid_on=$!
    run_session off &
    pid_off=$!
    wait "$pid_on" "$pid_off"
else
    run_session on
    run_session off
fi
for mode in on off; do
    log "pytest, plugin $mode (exit $(cat "$OUT/$mode.rc"), log ${OUT#"$ROOT"/}/$mode.log):"
    # (each failing test is listed once, by cause, by compare_runs.py below)
    grep -E '^=+ .*(passed|failed|error).* =+$|^[0-9]+ (passed|failed)|vllm_upstream_plugin:' \
        "$OUT/$mode.log" | sed 's/^/    /' || true
done
log "both sessions took $((SECONDS - start)) s"

# --- 5. compare ---------------------------------------------------------------
echo
"$PY" "$HERE/compare_runs.py" "$OUT/on.xml" "$OUT/on.json" "$OUT/off.xml" "$OUT/off.json"
