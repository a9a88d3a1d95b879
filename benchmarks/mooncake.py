"""The Mooncake FAST'25 conversation trace as prompts of token ids.

The trace (``benchmarks/data/mooncake-fast25/``: its README and license
are beside it) gives each
request its arrival time, input and output lengths and its prefix sharing
as one id per 512-token block. A prompt is made by giving every block id a
fixed token sequence (drawn from a generator seeded by the id alone) and
cutting the concatenation to the request's input length, so any two
requests share exactly the prefix the trace says they share, and vLLM's own
block hashing finds that sharing at every block size dividing the trace's
block.

``scale`` shrinks a request for the tiny models of e2e/: a trace block
becomes ``512 // scale`` tokens and every length is divided by ``scale``
(rounded up), so the sharing is kept block for block.

Stdlib only: the e2e harness and the benchmarks both import it.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

TRACE_BLOCK = 512  # tokens per hash id in the trace
DEFAULT_TRACE = Path(__file__).resolve().parent / "data" / "mooncake-fast25" / "conversation_trace.jsonl"


@dataclass(frozen=True)
class TraceRequest:
    timestamp_ms: int  # arrival, from the trace's start
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def _field(row: dict, name: str, where: str) -> int:
    value = row.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{where}: {name} must be a non-negative int, got {value!r}")
    return value


def load(path: Path = DEFAULT_TRACE, limit: int | None = None,
         max_input: int | None = None) -> list[TraceRequest]:
    """The first ``limit`` requests of the trace (all when None); with
    ``max_input``, of those whose prompt is at most that many tokens (the
    trace cut to short prompts: the rest are left out, arrival times kept)."""
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
    if max_input is not None and (type(max_input) is not int or max_input < 1):
        raise ValueError(f"max_input must be a positive int or None, got {max_input!r}")
    requests: list[TraceRequest] = []
    with Path(path).open() as lines:
        for number, line in enumerate(lines, 1):
            if limit is not None and len(requests) >= limit:
                break
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not JSON ({exc})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{where}: a trace line must be an object")
            ids = row.get("hash_ids")
            if not isinstance(ids, list) or not all(
                    isinstance(i, int) and not isinstance(i, bool) for i in ids):
                raise ValueError(f"{where}: hash_ids must be a list of ints")
            request = TraceRequest(_field(row, "timestamp", where),
                                   _field(row, "input_length", where),
                                   _field(row, "output_length", where), tuple(ids))
            if -(-request.input_length // TRACE_BLOCK) > len(ids):
                raise ValueError(f"{where}: input_length {request.input_length} needs more "
                                 f"than its {len(ids)} block ids")
            if max_input is not None and request.input_length > max_input:
                continue
            requests.append(request)
    return requests


@lru_cache(maxsize=1 << 16)
def block_tokens(block_id: int, tokens: int, first: int, last: int) -> tuple[int, ...]:
    """The fixed token ids of one trace block: seeded by the block id only."""
    rng = random.Random(f"mooncake-block-{block_id}")
    return tuple(rng.randint(first, last) for _ in range(tokens))


def prompt_ids(request: TraceRequest, *, scale: int = 1, first: int, last: int,
               max_tokens: int | None = None) -> list[int]:
    """The request's prompt: its blocks' tokens cut to ``input_length /
    scale`` (rounded up), then to ``max_tokens``."""
    if not isinstance(scale, int) or scale < 1 or TRACE_BLOCK % scale:
        raise ValueError(f"scale must be a positive int dividing {TRACE_BLOCK}, got {scale!r}")
    if not (isinstance(first, int) and isinstance(last, int) and 0 <= first <= last):
        raise ValueError(f"first and last must be token ids with first <= last, got {first!r}, {last!r}")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"max_tokens must be a positive int or None, got {max_tokens!r}")
    length = -(-request.input_length // scale)
    if max_tokens is not None:
        length = min(length, max_tokens)
    per_block = TRACE_BLOCK // scale
    ids: list[int] = []
    for block_id in request.hash_ids[:-(-length // per_block)]:
        ids += block_tokens(block_id, per_block, first, last)
    return ids[:length]


def output_tokens(request: TraceRequest, *, scale: int = 1, cap: int | None = None) -> int:
    """The request's output length divided by ``scale`` (at least 1, at most ``cap``)."""
    n = max(1, -(-request.output_length // scale))
    return n if cap is None else min(n, cap)


def conversation_key(request: TraceRequest) -> int | None:
    """The block id that names a request's conversation: its second block
    (the first is the system prompt every request shares); None for a
    request of one block, which shares nothing beyond that."""
    return request.hash_ids[1] if len(request.hash_ids) > 1 else None


def instance_share(requests: list[TraceRequest], instances: int, instance: int) -> list[TraceRequest]:
    """The requests one of ``instances`` serving instances gets when a router
    keeps each conversation on one instance (session affinity, what a
    prefix-aware router converges to): a conversation goes to the instance
    its key hashes to, a one-block request to ``index % instances``."""
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise ValueError(f"instances must be a positive int, got {instances!r}")
    if isinstance(instance, bool) or not isinstance(instance, int) or not 0 <= instance < instances:
        raise ValueError(f"instance must be an int in [0, {instances}), got {instance!r}")
    share = []
    for k, request in enumerate(requests):
        key = conversation_key(request)
        if key is None:
            home = k % instances
        else:
            digest = hashlib.blake2b(str(key).encode(), digest_size=8).digest()
            home = int.from_bytes(digest, "little") % instances
        if home == instance:
            share.append(request)
    return share


def prefix_ceiling(prompts: list[tuple[tuple[int, ...], int]], block: int) -> list[int]:
    """Per prompt ``(hash_ids, tokens)``, in arrival order, the most tokens
    a prefix cache that kept every earlier prompt could serve it: the
    longest prefix it shares with any earlier prompt (``d`` common leading
    trace blocks share ``min(d * 512, both lengths)`` tokens), cut to whole
    ``block``-token blocks and to at most ``tokens - 1`` (a prompt always
    computes its last token), as vLLM's prefix cache does."""
    if isinstance(block, bool) or not isinstance(block, int) or block < 1 or TRACE_BLOCK % block:
        raise ValueError(f"block must be a positive int dividing {TRACE_BLOCK}, got {block!r}")
    root: dict[int, list] = {}  # block id -> [longest earlier prompt through it, children]
    out = []
    for hash_ids, tokens in prompts:
        used = hash_ids[:-(-tokens // TRACE_BLOCK)]
        best = 0
        node = root
        for depth, block_id in enumerate(used, 1):
            entry = node.get(block_id)
            if entry is None:
                break
            best = max(best, min(depth * TRACE_BLOCK, entry[0], tokens))
            node = entry[1]
        out.append(min(best, tokens - 1) // block * block if tokens else 0)
        node = root
        for block_id in used:
            entry = node.setdefault(block_id, [0, {}])
            entry[0] = max(entry[0], tokens)
            node = entry[1]
    return out



def continued_turns(requests: list[TraceRequest]) -> list[int | None]:
    """Per request, the earlier request whose whole prompt it may continue
    (a conversation's next turn), or None.

    The trace names 512-token blocks only: a turn's prompt ends inside a
    block, and the next turn's block there holds that partial block's tokens
    and then more, so its id differs and the block ids cannot say whether
    the next turn starts with the whole earlier prompt. This names the
    candidate: the latest earlier request, shorter than this one, whose
    whole blocks (at least two: past the system prompt, into the
    conversation) are this one's leading blocks and which ends inside the
    next one (longest such prefix first)."""
    chains: dict[tuple[int, int], int] = {}  # (parent chain, block id) -> chain id
    latest: dict[int, int] = {}  # chain of a prompt's whole blocks -> the latest such prompt
    out: list[int | None] = []
    for k, request in enumerate(requests):
        used = request.hash_ids[:-(-request.input_length // TRACE_BLOCK)]
        ids = []
        chain = -1
        for block_id in used:
            chain = chains.setdefault((chain, block_id), len(chains))
            ids.append(chain)
        parent = None
        for whole in range(len(used) - 1, 1, -1):
            earlier = latest.get(ids[whole - 1])
            if earlier is not None and requests[earlier].input_length < request.input_length:
                parent = earlier
                break
        out.append(parent)
        whole = request.input_length // TRACE_BLOCK
        if request.input_length % TRACE_BLOCK and whole >= 2:
            latest[ids[whole - 1]] = k
    return out
