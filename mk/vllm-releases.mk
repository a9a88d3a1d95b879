# ---- vLLM releases: 0.28.0-0.32.0 and 0.34.0 beside .venv's 0.33.0 -----------
# (included by the Makefile; its variables: PY, TEST_ENV, STAMP, LIB.) Each
# release is installed `--no-deps` from its PyPI wheel into
# build/releases/<version>/ and put first on PYTHONPATH over .venv (the same
# interpreter, CPU torch 2.13.0 and pure-Python packages: 0.28-0.32 pin that
# torch), so vLLM's real classes of that release answer. The differential
# suites run against them with fewer cases than `make test`, then a receipt
# build/matrix/vllm-<version>-cpython-3.11-x86_64.json (scripts/matrix/
# receipt.py). The offload lookup's suite runs where the plugin patches it
# (0.30+, swa_prefix_cache/vllm_adapter/known_sources.py), the data-parallel routing's on 0.32+.
RELEASES_DIR := build/releases
VLLM_RELEASES := 0.28.0 0.29.0 0.30.0 0.31.0 0.32.0 0.34.0
RELEASE_SUITES := fingerprint=tests/test_fingerprint.py \
	reference=tests/test_vllm_reference.py,tests/test_adapter.py \
	coordinators=tests/test_coordinators.py \
	hotpath=tests/test_hot_path.py,tests/test_full_hotpath.py,tests/test_stats_file.py
RELEASE_OFFLOAD_SUITE := offload=tests/test_connector_lookup.py,tests/test_offload_keys.py
# The data-parallel routing's suite, where the plugin patches it (0.32+).
RELEASE_DP_SUITE := dp=tests/test_dp_routing.py
# The lookup memory's, qualify's, the x86 Triton guard's and the host-tier
# replay's suites on releases newer than .venv's (0.34+: the map cleared in
# place, the pool's block ids, the CPU platform's "requires Triton" refusal,
# the offloading connector's changed outputs), other code's wrappers, and the
# corrected offload store filter with the store/lookup findings it fixes.
RELEASE_NEW_SUITES := memo=tests/test_lookup_memo.py qualify=tests/test_qualify.py \
	guard=tests/test_triton_guard.py tier=tests/test_host_tier.py wrappers=tests/test_foreign_wrappers.py \
	filter=tests/test_offload_filter.py,tests/test_reachable.py
RELEASE_ENV := PREFIX_CACHE_ADAPTER_CASES=4000 PREFIX_CACHE_COORDINATOR_CASES=800 \
	PREFIX_CACHE_GLUE_QUICK=1 PREFIX_CACHE_OFFLOAD_ADAPTER_CASES=2000

.PHONY: matrix-vllm release-qualify
# Two releases at a time: each run is one pytest process at a time (one
# core), they share nothing but .venv (read-only), and make check's time
# (CI allows 90 minutes) drops by ~4 minutes.
matrix-vllm:
	$(MAKE) --no-print-directory -j2 $(addprefix matrix-vllm-,$(VLLM_RELEASES))

# A release's install is kept between runs (make would delete its stamp as
# an intermediate file of the pattern rule below).
.PRECIOUS: $(RELEASES_DIR)/%/.stamp

# known-sources reads the installed sources (scripts/fingerprint_releases.py),
# so the wheel is not kept.
$(RELEASES_DIR)/%/.stamp: | $(STAMP)
	rm -rf $(RELEASES_DIR)/$*
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --target $(RELEASES_DIR)/$* vllm==$*
	$(call dedupe,$(RELEASES_DIR)/$*)
	touch $@

# Any release: make check runs the listed ones; scripts/release_qualify.py
# runs a new one with MATRIX_DIR set to its own output folder.
matrix-vllm-%: $(RELEASES_DIR)/%/.stamp lib ext
	mkdir -p $(MATRIX_DIR)
	@id=vllm-$*-cpython-3.11-$(MATRIX_ARCH); rm -f $(MATRIX_DIR)/$$id-*.xml; \
	start=$$(date +%s); status=0; suites=""; \
	extra=""; case $* in 0.28.*|0.29.*) ;; *) extra="$(RELEASE_OFFLOAD_SUITE)";; esac; \
	case $* in 0.28.*|0.29.*|0.30.*|0.31.*) ;; *) extra="$$extra $(RELEASE_DP_SUITE)";; esac; \
	case $* in 0.2*|0.30.*|0.31.*|0.32.*|0.33.*) ;; *) extra="$$extra $(RELEASE_NEW_SUITES)";; esac; \
	for suite in $(RELEASE_SUITES) $$extra; do name=$${suite%%=*}; files=$${suite#*=}; \
		echo "$$id: $$name: $${files//,/ }"; \
		PYTHONPATH=$(RELEASES_DIR)/$* $(TEST_ENV) $(RELEASE_ENV) $(PY) -m pytest -q -p no:cacheprovider \
			--junitxml=$(MATRIX_DIR)/$$id-$$name.xml $${files//,/ } 2>&1 | tail -n 3 || status=1; \
		suites="$$suites --suite $$name=$(MATRIX_DIR)/$$id-$$name.xml"; done; \
	PYTHONPATH=$(RELEASES_DIR)/$* $(PY) $(MATRIX_RECEIPT) --id $$id --out $(MATRIX_DIR)/$$id.json $$suites \
		--seconds $$(( $$(date +%s) - start )) || status=1; \
	echo "$$id: receipt $(MATRIX_DIR)/$$id.json ($$(( $$(date +%s) - start )) s)"; exit $$status

# What a new vLLM release needs before the plugin may serve it (docs/releases.md):
# its sources per binding against the newest checked release (applies, or per
# function cosmetic / code with the diff), the matrix suites on it, and the
# known_sources.py it would take, written to build/release-qualify/VERSION/.
release-qualify: setup
	@test -n "$(VERSION)" || { echo "usage: make release-qualify VERSION=X (a vLLM release, e.g. 0.34.0)"; exit 2; }
	$(PY) scripts/release_qualify.py $(VERSION)
