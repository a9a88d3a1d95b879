# One reproduction and one upstream fix per store/lookup finding of
# docs/store-lookup-agreement.md (docs/upstream-findings.md). Included by the
# Makefile; uses its PY.
#
#   make upstream-findings                          every finding, then all fixes at once (ALL)
#   make upstream-findings UPSTREAM_FINDINGS="L1 O1"   only those
#   make upstream-findings UPSTREAM_FINDINGS_ARGS="--cases 200"   more random cases
#   make upstream-findings-clean                    drop build/upstream/findings
#
# For each finding, upstream/findings/check.py builds the patched vLLM (a
# hard-linked copy in build/upstream/findings/site-<id>, the generated diff in
# build/upstream/findings/<id>.patch), and checks: the reproduction
# upstream/findings/<id>.py exits 1 on the stock vLLM and 0 patched, the
# agreement property holds on random cases patched, and vLLM's own tests of
# the touched area (sdist tree of scripts/vllm_upstream_tests.sh) that pass
# on stock pass patched. Fails if any of it does not hold.

UPSTREAM_FINDINGS ?=
UPSTREAM_FINDINGS_ARGS ?=

.PHONY: upstream-findings upstream-findings-clean

upstream-findings: setup
	$(PY) upstream/findings/check.py $(UPSTREAM_FINDINGS_ARGS) $(UPSTREAM_FINDINGS)

upstream-findings-clean:
	rm -rf build/upstream/findings
