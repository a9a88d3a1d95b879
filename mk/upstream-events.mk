# The BlockStored.block_offsets patch for vLLM 0.33.0 (docs/router-reports.md,
# "vLLM's side"): each hash a KV-cache store event lists gets the index of its
# block in the event's token_ids, so routers can place the sparse stores of
# sliding-window groups. Included by the Makefile; uses its PY.
#
#   make upstream-events    build the patch, apply it to a hard-linked copy of
#                           the installed vLLM, run vLLM's KV-event and
#                           prefix-caching tests stock vs patched (the new
#                           tests must pass patched and fail on stock), then
#                           kv_index on the patched vLLM
#
# Writes build/upstream/block_offsets/ (the generated .patch, the copies, the
# junit reports). upstream/block_offsets/check_block_offsets.py reuses
# upstream/findings/check.py's build and test-session functions.

.PHONY: upstream-events

upstream-events: setup
	$(PY) upstream/block_offsets/check_block_offsets.py
