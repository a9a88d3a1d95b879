# make upstream-patch: the upstream pull request for vLLM 0.33.0, built and
# checked (docs/upstream.md). Writes
# build/upstream/vllm-0.33.0-swa-stride.patch from the installed vLLM and the
# committed body upstream/swa_stride/find_longest_cache_hit.py (the diff is
# never committed: its context lines are vLLM's code), applies it with
# `patch -p1` to a hard-linked copy of the installed vLLM, then checks it:
# (a) 100,000 random lookups + every small input against vLLM's stock method
# (tests/test_upstream_patch.py), (b) vLLM's own tests (the set
# `make vllm-upstream-tests` runs, plugin off) stock vs patched, (c) the bench
# cells, stock vs patched. Included by the Makefile; uses its PY.
#
#   make upstream-patch                          the full check
#   make upstream-patch UPSTREAM_PATCH_SET=prefix   only the prefix-cache tests in (b)

UPSTREAM_PATCH_SET ?= full

.PHONY: upstream-patch

upstream-patch: setup
	PY="$(abspath $(PY))" UPSTREAM_PATCH_SET="$(UPSTREAM_PATCH_SET)" \
		$(PY) upstream/check_patch.py
