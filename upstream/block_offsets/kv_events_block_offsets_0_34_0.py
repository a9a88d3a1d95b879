"""BlockStored.block_offsets on vLLM 0.34.0: the change of
kv_events_block_offsets.py (0.33.0), carried onto 0.34.0's definitions by a
rename table over that one body.

0.34.0 renamed two BlockPool helpers (``generate_event_extra_keys`` and
``get_lookahead_token_ids``) and appends the group id to a block hash as a
precomputed suffix in ``cache_full_blocks``; ``RENAMES`` makes exactly those
edits to the 0.33.0 body (each must still match it), ``BASE`` holds
0.34.0's digests of the definitions replaced. upstream/findings/check.py's
``load_fix`` applies the table (``RENAME_OF``) and splices the result into
vLLM 0.34.0 by ``ast`` (upstream/block_offsets/check_block_offsets.py), as for 0.33.0.
"""

RENAME_OF = "kv_events_block_offsets"
RENAMES = [
    ("self._generate_event_extra_keys(", "self.generate_event_extra_keys("),
    ("self._lookahead_token_ids(", "self.get_lookahead_token_ids("),
    (
        """        # The chunk of the event's token_ids each published hash covers:
""",
        """        # Appended per block below: much cheaper than packing the group id each time.
        group_suffix = make_block_hash_with_group_id(BlockHash(b""), kv_cache_group_id)
        # The chunk of the event's token_ids each published hash covers:
""",
    ),
    (
        """            block_hash_with_group_id = make_block_hash_with_group_id(
                block_hash, kv_cache_group_id
            )
""",
        """            block_hash_with_group_id = BlockHashWithGroupId(block_hash + group_suffix)
""",
    ),
]
BASE = {
    "BlockStored": "fd0f9ea5b323f0287edbe0c519e0ca3c7f0d7c5c3336b7403bdf2e176a613ae3",
    "BlockPool.cache_full_blocks": "63cf161ec456f980316dbfbf999760b60d6ac7dc712930243d6f7d521c922fd6",
    "BlockPool._build_block_stored_event": "7c411cf76e419226b0505f1fa526992230a48604c26f38ce4d53fe67f2aebe1d",
    "BlockPool.emit_cached_block_events": "b1ffb5899936381aeb9ff72d764e9af69a0b039c0fc27933e9b82d4fc6ef5061",
    "BlockPool.cache_partial_block": "3d038bcda660bf4158997d176aee4ba225c85c2eecc71475b2b20574d9208bcc",
}
