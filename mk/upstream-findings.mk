# One reproduction and one upstream fix per store/lookup finding of
# docs/store-lookup-agreement.md (docs/upstream-findings.md). Included by the
# Makefile; uses its PY.
#
#   make upstream-findings                          every finding, then all fixes at once (ALL)
#   make upstream-findings UPSTREAM_FINDINGS="L1 O1"   only those
#   make upstream-findings UPSTREAM_FINDINGS_ARGS="--cases 200"   more random cases
#   make upstream-findings-next                     the same on vLLM 0.34.0 (not in make check)
#   make upstream-findings UPSTREAM_VLLM=0.34.0      the same
#   make upstream-findings-clean                    drop build/upstream/findings
#
# For each finding, upstream/findings/check.py builds the patched vLLM (a
# hard-linked copy in build/upstream/findings/site-<id>, the generated diff in
# build/upstream/findings/<id>.patch), and checks: the reproduction
# upstream/findings/<id>.py exits 1 on the stock vLLM and 0 patched, the
# agreement property holds on random cases patched, and vLLM's own tests of
# the touched area (sdist tree of scripts/vllm_upstream_tests.sh) that pass
# on stock pass patched. Fails if any of it does not hold.
#
# Another release (UPSTREAM_VLLM, as make upstream-patch: installed --no-deps
# in build/releases/<version> by mk/vllm-releases.mk, its sdist tests in
# build/vllm-upstream/vllm-<version>) is checked the same way, in
# build/upstream/findings/vllm-<version>: each fix whose BASE digests name
# that release (RELEASES) or its own fixes/<version with _>/<id>.py; a fix
# refused there (REFUSED: which vLLM function changed) is said so and only
# its reproduction runs, on stock.

UPSTREAM_FINDINGS ?=
UPSTREAM_FINDINGS_ARGS ?=
# UPSTREAM_VLLM and UPSTREAM_VLLM_NEXT come from mk/upstream-patch.mk.

.PHONY: upstream-findings upstream-findings-next upstream-findings-clean

upstream-findings: setup $(if $(filter-out 0.33.0,$(UPSTREAM_VLLM)),build/releases/$(UPSTREAM_VLLM)/.stamp)
	UPSTREAM_VLLM="$(UPSTREAM_VLLM)" $(PY) upstream/findings/check.py $(UPSTREAM_FINDINGS_ARGS) $(UPSTREAM_FINDINGS)

upstream-findings-next: setup build/releases/$(UPSTREAM_VLLM_NEXT)/.stamp
	UPSTREAM_VLLM="$(UPSTREAM_VLLM_NEXT)" $(PY) upstream/findings/check.py $(UPSTREAM_FINDINGS_ARGS) $(UPSTREAM_FINDINGS)

upstream-findings-clean:
	rm -rf build/upstream/findings
