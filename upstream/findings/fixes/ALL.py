"""Every fix at once: one combined patch per vLLM file.

check.py builds it from the per-finding fixes listed in ``COMBINE``. Where two
of them replace the same definition, this file gives the combined one
(``TARGETS`` / ``BASE`` here take precedence); check.py refuses a clash that
is not resolved here. The reproductions of every finding must pass on it,
vLLM's own tests too, and the agreement property must hold with no finding
left to explain a violation.
"""

COMBINE = ["L1", "L3", "O1"]
