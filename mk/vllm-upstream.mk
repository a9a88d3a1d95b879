# vLLM 0.33.0's own scheduler / KV-cache unit tests, run with our plugin active and
# without it, compared test by test (scripts/vllm_upstream_tests.sh).
# vLLM's test tree is fetched at test time into build/vllm-upstream/ and
# reused by later runs. Included by the Makefile; uses its PY and VENV.
#
#   make vllm-upstream-tests                       all of tests/v1/core and
#                                                  tests/v1/kv_connector/unit/offloading_connector
#   make vllm-upstream-tests VLLM_UPSTREAM_SET=prefix   only the four prefix-cache paths
#   make vllm-upstream-tests VLLM_UPSTREAM_TESTS="tests/v1/core/test_prefix_caching.py"
#   make vllm-upstream-clean                       drop the cached sdist tests
# See docs/vllm-upstream-tests.md (what runs, what fails both ways and why).

VLLM_UPSTREAM_TESTS ?=
VLLM_UPSTREAM_SET ?= full

.PHONY: vllm-upstream-tests vllm-upstream-clean

# `ext`: the plugin serves with the native extension (the default core), so
# a stale swa_prefix_cache/core/_hotpath*.so must be rebuilt before vLLM runs on it.
vllm-upstream-tests: setup ext
	PY="$(abspath $(PY))" VLLM_UPSTREAM_SET="$(VLLM_UPSTREAM_SET)" \
		bash scripts/vllm_upstream_tests.sh $(VLLM_UPSTREAM_TESTS)

# The same on the newest release beside .venv's (installed --no-deps in
# build/releases/, mk/vllm-releases.mk): its own sdist tests, its own classes.
# 0.34.0 refuses configs on x86 without Triton; both runs pass over that one
# guard (scripts/vllm_upstream/triton_guard.py) and say so.
VLLM_UPSTREAM_NEXT := 0.34.0

.PHONY: vllm-upstream-tests-next
vllm-upstream-tests-next: setup ext build/releases/$(VLLM_UPSTREAM_NEXT)/.stamp
	PY="$(abspath $(PY))" VLLM_UPSTREAM_SET="$(VLLM_UPSTREAM_SET)" \
		VLLM_UPSTREAM_VERSION=$(VLLM_UPSTREAM_NEXT) \
		bash scripts/vllm_upstream_tests.sh $(VLLM_UPSTREAM_TESTS)

vllm-upstream-clean:
	rm -rf build/vllm-upstream
