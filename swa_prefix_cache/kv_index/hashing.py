"""vLLM's block-hash chain, transcribed (no vLLM import).

From vllm/v1/core/kv_cache_utils.py (0.33.0): ``NONE_HASH = hash_fn(seed)``
(``init_none_hash``); block ``j``'s hash is ``hash_fn((parent, tuple(tokens),
extra_keys))`` over the ``hash_block_size`` tokens of block ``j``, with
``parent`` = block ``j - 1``'s hash or ``NONE_HASH`` (``hash_block_tokens``),
for every full block of the prompt (``get_request_block_hasher``); a plain
prompt (no LoRA, multimodal input, cache salt or prompt embeddings) has
``extra_keys`` None. ``sha256`` pickles its input (highest protocol),
``sha256_cbor`` encodes it as canonical CBOR (vllm/utils/hashing.py).

Events carry each hash as vLLM's ``ExternalBlockHash``: the bytes, or (the
default, ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``) their low 64 bits as an
int (``maybe_convert_block_hash``). ``event_key`` maps both to the int, so
the index stores one kind of key whatever the replica publishes.
tests/test_kv_index.py checks these against vLLM's own functions.

This is the reference chain. ``KVIndex``'s native core computes the sha256
chain in C (swa_prefix_cache/kv_index/glue/kvindex_module.c: the same pickle bytes, SHA-NI
when the CPU has it), and declines to this one for what it does not encode
(ints beyond [-2**63, 2**64), a block pickle past one 64 KiB frame);
sha256_cbor stays here, in Python, and NONE_HASH is computed here once per
replica.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Sequence
from typing import Any

_MASK64 = (1 << 64) - 1


def _sha256(obj: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def _sha256_cbor(obj: Any) -> bytes:
    import cbor2

    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


HASH_FUNCTIONS: dict[str, Callable[[Any], bytes]] = {
    "sha256": _sha256,
    "sha256_cbor": _sha256_cbor,
}


def none_hash(hash_algo: str, seed: str) -> bytes:
    """vLLM's ``NONE_HASH`` for ``hash_algo`` and the replica's seed."""
    return HASH_FUNCTIONS[hash_algo](seed)


def prompt_block_hashes(
    token_ids: Sequence[int], hash_block_size: int, hash_algo: str, seed: str
) -> list[bytes]:
    """The prompt's block hashes, one per full block of ``hash_block_size``
    tokens (``Request.block_hashes`` of a plain prompt)."""
    hash_fn = HASH_FUNCTIONS[hash_algo]
    parent = none_hash(hash_algo, seed)
    hashes: list[bytes] = []
    for start in range(0, len(token_ids) - hash_block_size + 1, hash_block_size):
        parent = hash_fn((parent, tuple(token_ids[start:start + hash_block_size]), None))
        hashes.append(parent)
    return hashes


def event_key(block_hash: bytes | int) -> int:
    """The int an event carries for ``block_hash`` (vLLM's
    ``maybe_convert_block_hash`` with int hashes on): an int stays, bytes
    become their low 64 bits, big-endian."""
    if type(block_hash) is int:
        return block_hash
    if isinstance(block_hash, (bytes, bytearray)):
        return int.from_bytes(block_hash, byteorder="big") & _MASK64
    raise TypeError(f"block hash must be bytes or int, not {type(block_hash).__name__}")
