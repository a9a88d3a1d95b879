# make upstream-patch: the upstream pull request for a vLLM release, built and
# checked (docs/upstream.md). For release UPSTREAM_VLLM (default 0.33.0, the
# venv's; another release is installed --no-deps in build/releases/<version>
# by mk/vllm-releases.mk and put first on PYTHONPATH), writes
# build/upstream/vllm-<version>-swa-stride.patch from that release's files and
# the committed body upstream/swa_stride/find_longest_cache_hit.py (the diff is
# never committed: its context lines are vLLM's code), applies it with
# `patch -p1` to a hard-linked copy of that vLLM, then checks it:
# (a) 100,000 random lookups + every small input against vLLM's stock method
# (tests/test_upstream_patch.py), (b) that release's own tests (the set
# `make vllm-upstream-tests` runs, from its sdist, plugin off) stock vs
# patched, (c) the bench cells, stock vs patched. Included by the Makefile;
# uses its PY.
#
#   make upstream-patch                             the full check on 0.33.0
#   make upstream-patch UPSTREAM_VLLM=0.34.0         the same on 0.34.0
#   make upstream-patch-next                        the same on 0.34.0
#   make upstream-patch UPSTREAM_PATCH_SET=prefix   only the prefix-cache tests in (b)

UPSTREAM_PATCH_SET ?= full
UPSTREAM_VLLM ?= 0.33.0
# The release after the venv's, checked by upstream-patch-next.
UPSTREAM_VLLM_NEXT := 0.34.0

.PHONY: upstream-patch upstream-patch-next

# A release other than the venv's 0.33.0 is installed first (its stamp rule
# is in mk/vllm-releases.mk).
upstream-patch: setup $(if $(filter-out 0.33.0,$(UPSTREAM_VLLM)),build/releases/$(UPSTREAM_VLLM)/.stamp)
	PY="$(abspath $(PY))" UPSTREAM_PATCH_SET="$(UPSTREAM_PATCH_SET)" UPSTREAM_VLLM="$(UPSTREAM_VLLM)" \
		$(PY) upstream/check_patch.py

upstream-patch-next: setup build/releases/$(UPSTREAM_VLLM_NEXT)/.stamp
	PY="$(abspath $(PY))" UPSTREAM_PATCH_SET="$(UPSTREAM_PATCH_SET)" UPSTREAM_VLLM="$(UPSTREAM_VLLM_NEXT)" \
		$(PY) upstream/check_patch.py

# The BlockStored.block_offsets patch (mk/upstream-events.mk) on the same
# release: upstream/block_offsets/check_block_offsets.py reads UPSTREAM_VLLM too.
.PHONY: upstream-events-next
upstream-events-next: setup build/releases/$(UPSTREAM_VLLM_NEXT)/.stamp
	UPSTREAM_VLLM="$(UPSTREAM_VLLM_NEXT)" $(PY) upstream/block_offsets/check_block_offsets.py
