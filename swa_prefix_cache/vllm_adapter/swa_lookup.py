"""The replacement for ``SlidingWindowManager.find_longest_cache_hit``.

The search itself (which blocks to probe, what the hit is) is the verified
core; this module only translates vLLM's arguments, probes ``BlockPool``
for exactly the blocks the core asks about, and builds vLLM's output lists
once the hit is known. Inputs outside what the core models (other spec
types, DCP/PCP, no groups, too few hashes) go to vLLM's own method, so its
own errors and asserts are raised unchanged.

This is vLLM's hot path. With the native core (the default), the whole
lookup is one call into the extension ``swa_prefix_cache.core._hotpath``: the proved
C search (prefix_cache.c, probe instance) probing vLLM's BlockPool in C and
building vLLM's lists in C (hotpath_module.c says what that glue assumes).
Whatever its per-call checks do not model (another pool class, a patched
``get_cached_block``, odd group ids, hashes that are not bytes, an unknown
pool-read fingerprint) it hands, as it came, to the Python lookup below:
pyspec's search over a mask of the pool, which reads the pool's hash map
directly when the sources of that read match a known vLLM build
(``fingerprint.POOL_READ``) and calls ``get_cached_block`` otherwise.
With ``SWA_PREFIX_CACHE_CORE=python`` the Python lookup serves every call.
"""

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from swa_prefix_cache.pyspec import SearchParams
from swa_prefix_cache.pyspec.params import alignment_period, search_need
from swa_prefix_cache.pyspec.search import prefix_fallback, stride_search
from swa_prefix_cache.vllm_adapter.instance_attrs import calls_own
from swa_prefix_cache.vllm_adapter.lookup_memo import watch_type

# Cached SearchParams per (n, block_size, sliding_window, alignment, eagle);
# emptied when it grows past this (a model has one shape, so this only
# bounds the number of distinct prompt lengths remembered).
_PARAMS_CACHE_LIMIT = 8192


class Counter(Protocol):
    """What the lookup counts its calls on (patch.Stats)."""

    calls: int


class PoolMask(Sequence[bool]):
    """The cached-block mask of one lookup, probed lazily through the pool's
    own ``get_cached_block`` (any pool, any number of groups).

    Reading ``self[i]`` is one ``get_cached_block`` call (vLLM's own probe,
    all groups at once); the blocks it returns are kept in ``found`` so the
    output lists are built from exactly what vLLM would have read.
    """

    __slots__ = ("_n", "_hashes", "_group_ids", "_get", "found")

    def __init__(self, n: int, hashes: Any, group_ids: list[int], block_pool: Any) -> None:
        self._n = n
        self._hashes = hashes
        self._group_ids = group_ids
        self._get = block_pool.get_cached_block
        self.found: dict[int, list[Any]] = {}

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> bool:  # type: ignore[override]
        blocks = self._get(self._hashes[i], self._group_ids)
        if blocks:
            self.found[i] = blocks
            return True
        return False


def _read_block(mask: Any, key: bytes) -> Any | None:
    """The block stored under ``key`` as vLLM <= 0.33's ``get_one_block``
    answers it, or None for a miss: the map's value is the block itself;
    anything else under the key (several blocks, an unexpected type) is
    handed to vLLM's own ``get_one_block``, whose answer is tested as vLLM
    tests it (``if not block``)."""
    block = mask._read(key)
    if block is None:
        return None
    if type(block) is not mask._block_type:
        block = mask._hash_map.get_one_block(key)
        if not block:
            return None
    return block


def _read_block_by_id(mask: Any, key: bytes) -> Any | None:
    """``_read_block`` for the id layout (vLLM 0.34): the map's ``_cache``
    holds a block id and ``get_one_block`` answers ``_blocks[id]``, whatever
    ``_dup_ids`` holds. An id that is not an int in ``[0, len(_blocks))``
    (or a block of another type) is read by vLLM's own ``get_one_block``."""
    block_id = mask._read(key)
    if block_id is None:
        return None
    block = None
    if type(block_id) is int and 0 <= block_id < len(mask._blocks):
        block = mask._blocks[block_id]
    if type(block) is not mask._block_type:
        block = mask._hash_map.get_one_block(key)
        if not block:
            return None
    return block


class OneGroupMask(Sequence[bool]):
    """The mask of a one-group lookup on vLLM's own ``BlockPool``, read the
    way ``BlockPool.get_cached_block`` reads it, without its calls.

    vLLM's probe for one group is ``get_one_block(hash + suffix)`` with
    ``suffix = group_id.to_bytes(4, "big")``: a dict read that answers the
    one block stored under the key. Here that dict read is made inline
    (``_block_of``, one per layout of the map). ``found[i]`` is the block
    itself.
    """

    __slots__ = ("_n", "_hashes", "_suffix", "_read", "_hash_map", "_block_type", "found")

    _block_of = _read_block

    def __init__(
        self, n: int, hashes: Any, suffix: bytes, hash_map: Any, block_type: type
    ) -> None:
        self._n = n
        self._hashes = hashes
        self._suffix = suffix
        self._read = hash_map._cache.get
        self._hash_map = hash_map
        self._block_type = block_type
        self.found: dict[int, Any] = {}

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> bool:  # type: ignore[override]
        block = self._block_of(self._hashes[i] + self._suffix)
        if block is None:
            return False
        self.found[i] = block
        return True


class GroupsMask(Sequence[bool]):
    """``OneGroupMask`` for several groups: a block is cached when every
    group has it, checked in vLLM's order (stop at the first miss).
    ``found[i]`` is the list of blocks, one per group, as vLLM builds it."""

    __slots__ = ("_n", "_hashes", "_suffixes", "_read", "_hash_map", "_block_type", "found")

    _block_of = _read_block

    def __init__(
        self, n: int, hashes: Any, suffixes: list[bytes], hash_map: Any, block_type: type
    ) -> None:
        self._n = n
        self._hashes = hashes
        self._suffixes = suffixes
        self._read = hash_map._cache.get
        self._hash_map = hash_map
        self._block_type = block_type
        self.found: dict[int, list[Any]] = {}

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> bool:  # type: ignore[override]
        block_hash = self._hashes[i]
        blocks = []
        for suffix in self._suffixes:
            block = self._block_of(block_hash + suffix)
            if block is None:
                return False
            blocks.append(block)
        self.found[i] = blocks
        return True


class OneGroupIdMask(OneGroupMask):
    """``OneGroupMask`` on the id layout of the map (``_read_block_by_id``)."""

    __slots__ = ("_blocks",)

    _block_of = _read_block_by_id

    def __init__(
        self, n: int, hashes: Any, suffix: bytes, hash_map: Any, block_type: type
    ) -> None:
        super().__init__(n, hashes, suffix, hash_map, block_type)
        self._blocks = hash_map._blocks


class GroupsIdMask(GroupsMask):
    """``GroupsMask`` on the id layout of the map (``_read_block_by_id``)."""

    __slots__ = ("_blocks",)

    _block_of = _read_block_by_id

    def __init__(
        self, n: int, hashes: Any, suffixes: list[bytes], hash_map: Any, block_type: type
    ) -> None:
        super().__init__(n, hashes, suffixes, hash_map, block_type)
        self._blocks = hash_map._blocks


# The pool-read layouts (fingerprint.SEMANTICS of the pool_read binding):
# the map's value is the block (or a dict of blocks), or a block id.
LAYOUT_BLOCKS = "blocks"
LAYOUT_BLOCK_IDS = "block_ids"


def pool_layout(pool_read: bool | str | None) -> str | None:
    """The inline read's layout from ``pool_read``: None (no inline read)
    for a false value, ``LAYOUT_BLOCKS`` for True, else the layout named."""
    if not pool_read:
        return None
    if pool_read is True:
        return LAYOUT_BLOCKS
    if pool_read not in (LAYOUT_BLOCKS, LAYOUT_BLOCK_IDS):
        raise ValueError(f"pool_read must be a bool or a layout name, got {pool_read!r}")
    return pool_read


def python_search(cached: Sequence[bool], params: SearchParams) -> tuple[int, int]:
    """pyspec's ``find_hit``, returning ``(length, first_real)``.

    The same two verified calls composed the same way as ``swa_prefix_cache.pyspec.find_hit``
    (tests/test_hot_path.py checks they agree on every small mask), without
    building a ``HitResult`` per lookup (a frozen dataclass costs about as
    much as two probes). The mask always has ``params.n`` entries here.
    """
    end = stride_search(cached, params)
    if end is not None:
        return end - int(params.eagle), end - params.need
    return prefix_fallback(cached, params), 0


def group_suffix(group_id: object) -> bytes | None:
    """``group_id.to_bytes(4, "big", signed=False)`` as vLLM appends it to a
    block hash, or None when it is not a plain int in range (those lookups
    are probed through ``get_cached_block``, which raises what vLLM
    raises)."""
    if type(group_id) is not int or not 0 <= group_id < 1 << 32:
        return None
    return group_id.to_bytes(4, "big", signed=False)


def make_lookup(
    original: Callable[..., Any],
    on_error: Callable[[BaseException], None],
    counter: Counter,
    pool_read: bool | str | None,
    hotpath: Any = None,
) -> Callable[..., Any]:
    """Build the replacement classmethod body around ``original``, vLLM's
    own classmethod object (bound to the class each call is made on, so a
    subclass that inherits the method gets the answer vLLM would give it).

    ``hotpath``: the extension module (``swa_prefix_cache.core.hotpath.load()``), or
    None for the pure-Python core. With it, the body is the extension's
    ``SwaLookup``, which answers in C and hands any input it does not model
    to the Python lookup built here. If a search fails (a bug of ours, never
    an input vLLM rejects: those are sent to ``original`` up front),
    ``on_error`` is told and vLLM's own method answers, so serving never
    breaks because of us. ``counter.calls`` counts every call of the Python
    lookup (the extension counts its own, ``SwaLookup.calls``).
    ``pool_read``: the installed vLLM's pool read path matches the one
    ``OneGroupMask`` and the extension reproduce: True or "blocks" (the
    map's value is the block), "block_ids" (a block id, ``OneGroupIdMask``),
    or False / None (every probe calls ``get_cached_block``).
    """
    from vllm.v1.core import block_pool as block_pool_module
    from vllm.v1.core.kv_cache_utils import BlockHashListWithBlockSize
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    pool_type = block_pool_module.BlockPool
    map_type = block_pool_module.BlockHashToBlockMap
    # vLLM's map, or the lookup memory's watching view of it (its reads are vLLM's).
    map_types = (map_type, watch_type(map_type))
    block_type = block_pool_module.KVCacheBlock
    # What the inline read assumes of the classes, checked on every call so
    # a later patch of vLLM's probe (a profiler, a test's counter) is seen.
    probe_fn = pool_type.__dict__["get_cached_block"]
    read_fn = map_type.__dict__["get_one_block"]
    key_fn = block_pool_module.make_block_hash_with_group_id
    # A stored block passes vLLM's ``if not block`` unless its class says
    # otherwise; then every read goes through vLLM's own get_one_block.
    layout = pool_layout(pool_read)
    if hasattr(block_type, "__bool__") or hasattr(block_type, "__len__"):
        layout = None
    block_ids = layout == LAYOUT_BLOCK_IDS
    params_cache: dict[tuple[int, int, int, int, bool], SearchParams] = {}
    suffixes: dict[int, bytes] = {}
    single: dict[int, list[bytes]] = {}

    def search_params(
        n: int, block_size: int, sliding_window: int, alignment_tokens: int, eagle: bool
    ) -> SearchParams:
        """Validated once per shape and length (SearchParams raises a
        ValueError naming the argument), then reused."""
        params = SearchParams(
            n=n, need=search_need(sliding_window, block_size, eagle),
            period=alignment_period(block_size, alignment_tokens), eagle=eagle,
        )
        if len(params_cache) >= _PARAMS_CACHE_LIMIT:
            params_cache.clear()
        params_cache[(n, block_size, sliding_window, alignment_tokens, eagle)] = params
        return params

    def suffix_of(group_id: object) -> bytes | None:
        """``group_suffix``, remembered per group id."""
        suffix = suffixes.get(group_id) if type(group_id) is int else None
        if suffix is None:
            suffix = group_suffix(group_id)
            if suffix is not None:
                suffixes[group_id] = suffix
        return suffix

    def inline_map(block_pool: Any) -> Any | None:
        """``block_pool``'s hash map when a dict read of it is what vLLM's
        probe does (``OneGroupMask``), else None."""
        if (
            type(block_pool) is not pool_type
            or not calls_own(block_pool, "get_cached_block", probe_fn)
            or block_pool_module.make_block_hash_with_group_id is not key_fn
        ):
            return None
        hash_map = block_pool.cached_block_hash_to_block
        if (
            type(hash_map) not in map_types
            or not calls_own(hash_map, "get_one_block", read_fn)
            or type(hash_map._cache) is not dict
            or (layout == LAYOUT_BLOCK_IDS and type(getattr(hash_map, "_blocks", None)) is not list)
        ):
            return None
        return hash_map

    def suffixes_of(group_ids: list[int]) -> list[bytes] | None:
        """The key suffix of each group, or None when one is not a plain
        4-byte int. One group's list is remembered (the common case)."""
        if len(group_ids) == 1:
            group_id = group_ids[0]
            one = single.get(group_id) if type(group_id) is int else None
            if one is None:
                suffix = suffix_of(group_id)
                if suffix is None:
                    return None
                one = single[group_id] = [suffix]
            return one
        group_suffixes = []
        for group_id in group_ids:
            suffix = suffix_of(group_id)
            if suffix is None:
                return None
            group_suffixes.append(suffix)
        return group_suffixes

    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    contiguous = SlidingWindowManager.__dict__["_contiguous_blocks_for_hit"]

    def vllm_own(cls: type, *args: Any, **kwargs: Any) -> Any:
        """vLLM's own method, bound to the class it was called on."""
        return original.__get__(None, cls)(*args, **kwargs)

    def own_window_rule(cls: type) -> bool:
        """A subclass that overrides ``_contiguous_blocks_for_hit`` (the
        window rule the search bakes in) gets vLLM's own method."""
        for klass in cls.__mro__:
            if "_contiguous_blocks_for_hit" in klass.__dict__:
                return klass.__dict__["_contiguous_blocks_for_hit"] is not contiguous
        return True

    def find_longest_cache_hit(
        cls: type,
        block_hashes: Any,
        max_length: int,
        kv_cache_group_ids: list[int],
        block_pool: Any,
        kv_cache_spec: Any,
        drop_eagle_block: bool,
        alignment_tokens: int,
        dcp_world_size: int = 1,
        pcp_world_size: int = 1,
    ) -> tuple[tuple[list[Any], ...], int]:
        counter.calls += 1
        if (
            (cls is not SlidingWindowManager and own_window_rule(cls))
            or not isinstance(kv_cache_spec, SlidingWindowSpec)
            or dcp_world_size != 1
            or pcp_world_size != 1
            or type(kv_cache_group_ids) is not list
            or not kv_cache_group_ids
            or type(max_length) is not int
            or type(alignment_tokens) is not int
            or max_length < 0
            or alignment_tokens < 1
        ):
            # vLLM asserts or raises on these (or a subclass has its own
            # window rule); let vLLM's own method answer.
            return vllm_own(
                cls, block_hashes, max_length, kv_cache_group_ids, block_pool,
                kv_cache_spec, drop_eagle_block, alignment_tokens,
                dcp_world_size, pcp_world_size,
            )
        block_size = kv_cache_spec.block_size
        sliding_window = kv_cache_spec.sliding_window
        if type(block_size) is not int or type(sliding_window) is not int or block_size < 1:
            return vllm_own(
                cls, block_hashes, max_length, kv_cache_group_ids, block_pool,
                kv_cache_spec, drop_eagle_block, alignment_tokens,
                dcp_world_size, pcp_world_size,
            )
        hashes = resolve(
            cls, block_hashes, block_pool.hash_block_size, block_size, alignment_tokens
        )
        n = max_length // block_size
        if n > 0 and len(hashes) < n:  # vLLM reads no hash when n == 0
            return vllm_own(
                cls, block_hashes, max_length, kv_cache_group_ids, block_pool,
                kv_cache_spec, drop_eagle_block, alignment_tokens,
                dcp_world_size, pcp_world_size,
            )
        eagle = True if drop_eagle_block else False
        params = params_cache.get((n, block_size, sliding_window, alignment_tokens, eagle))
        if params is None:
            params = search_params(n, block_size, sliding_window, alignment_tokens, eagle)
        hash_map = inline_map(block_pool) if layout is not None else None
        group_suffixes = suffixes_of(kv_cache_group_ids) if hash_map is not None else None
        try:
            one_group = len(kv_cache_group_ids) == 1
            if group_suffixes is None:
                cached: Any = PoolMask(n, hashes, kv_cache_group_ids, block_pool)
                one_group = False  # found[i] is get_cached_block's list
            elif one_group:
                # The mask classes are read at call time (tests count them).
                one_mask = OneGroupIdMask if block_ids else OneGroupMask
                cached = one_mask(n, hashes, group_suffixes[0], hash_map, block_type)
            else:
                groups_mask = GroupsIdMask if block_ids else GroupsMask
                cached = groups_mask(n, hashes, group_suffixes, hash_map, block_type)
            length, first_real = python_search(cached, params)
            found = cached.found
            null = block_pool.null_block
            if one_group:
                blocks = [null] * first_real
                if length > first_real:
                    blocks += [found[i] for i in range(first_real, length)]
                computed: tuple[list[Any], ...] = (blocks,)
            else:
                computed = tuple(
                    [null] * first_real + [found[i][g] for i in range(first_real, length)]
                    for g in range(len(kv_cache_group_ids))
                )
        except Exception as exc:
            on_error(exc)
            return vllm_own(
                cls, block_hashes, max_length, kv_cache_group_ids, block_pool,
                kv_cache_spec, drop_eagle_block, alignment_tokens,
                dcp_world_size, pcp_world_size,
            )
        return computed, length * block_size

    if hotpath is None:
        return find_longest_cache_hit
    return hotpath.new_lookup(
        fallback=find_longest_cache_hit,
        original=vllm_own,
        on_error=on_error,
        resolve=resolve,
        spec_type=SlidingWindowSpec,
        home=SlidingWindowManager,
        pool_type=pool_type,
        map_type=map_types,
        block_type=block_type,
        probe_fn=probe_fn,
        read_fn=read_fn,
        key_fn=key_fn,
        key_scope=vars(block_pool_module),
        pool_read=layout is not None,
        view_type=BlockHashListWithBlockSize,
        layout=layout or LAYOUT_BLOCKS,
    )


def resolve(
    cls: type, block_hashes: Any, hash_block_size: int, block_size: int, alignment_tokens: int
) -> Any:
    """vLLM's ``resolve_block_hashes`` as ``find_longest_cache_hit`` calls
    it: the hashes at ``block_size`` granularity (the list itself when the
    sizes are equal)."""
    from vllm.v1.core.kv_cache_utils import resolve_block_hashes

    if block_size == hash_block_size:
        return block_hashes  # resolve_block_hashes' first line: the same list
    return resolve_block_hashes(
        block_hashes,
        hash_block_size,
        block_size,
        supports_fine_grained_hash_lookup=cls.supports_fine_grained_hash_lookup,
        alignment_tokens=alignment_tokens,
    )
