"""Fix of O1 for vLLM 0.34.0: the change of ``fixes/O1.py`` (see there),
carried onto 0.34.0's ``_reachable_store_block_mask`` by a rename table over
that one body.

0.34.0's method differs from 0.33.0's only in ``use_eagle`` (off with
lookahead block hashes); ``RENAMES`` keeps that line as 0.34.0 has it and
``BASE`` holds 0.34.0's digest of the method. The lookup still asks
``get_sliding_window_size_in_chunks`` = ``max(cdiv(W, c), cdiv(W - 1 +
extra, c))`` stored chunks in a row, so the store mask's window is
``max(W + 1, W + extra)`` tokens.
"""

RENAME_OF = "O1"
RENAMES = [
    (
        "use_eagle=group_config.is_eagle_group,",
        "use_eagle=(group_config.is_eagle_group and not self.use_lookahead_block_hashes),",
    ),
]
BASE = {
    "OffloadingConnectorScheduler._reachable_store_block_mask": "c446d0712bd26844685c5f7a36330c3115d42775723abbee0b5b6bdbe6c2c0da",
}
# The release whose definition hashes to BASE.
RELEASES = ("0.34.0",)
