# The routers users put in front of vLLM, reproduced on their stock PyPI
# packages (docs/router-reports.md). Included by the Makefile; uses its
# PEERS_VENV / PEERS_STAMP and E2E_PY.
#
#   make upstream-routers          vllm-router kv_aware and Dynamo's indexer on every
#                                  fixture: sliding-window ones mis-scored (exit 1), the
#                                  full-attention control exact (exit 0), as documented
#   make upstream-routers-record   record the fixtures again from live vLLM servers
#                                  (the e2e venv; about 6 minutes; commit the result)
#
# upstream/routers/check_routers.py runs in a network namespace with loopback only
# (unshare -n): Dynamo's indexer binds its HTTP port on every interface and
# has no option to bind one.

.PHONY: upstream-routers upstream-routers-record

upstream-routers: $(PEERS_STAMP)
	unshare -n sh -c 'ip link set lo up && exec $(PEERS_VENV)/bin/python upstream/routers/check_routers.py'

upstream-routers-record: setup-e2e
	$(E2E_PY) upstream/routers/record.py
