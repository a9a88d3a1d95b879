"""The native hot path's self-check without vLLM (for interpreters and
machines where vLLM cannot run: `make matrix-py313`, `make cross-aarch64`
under qemu).

Run from the repository root (or with it on sys.path): imports
swa_prefix_cache.core._hotpath, prints its fast-path choice (fast_paths()), then
checks, against plain-Python references:
  * key_hashes: the read-ahead's own hash of bytes keys of 1-64 bytes is
    hash(key) (when it hashes them itself);
  * a full-attention lookup (the proved full_hit_probe through the glue's
    pool probe and, where compiled in, its read-ahead) on a stand-in for
    vLLM's BlockPool (the same reads: key = hash + 4-byte big-endian group
    id, a plain dict of blocks), random masks, read-ahead on and off, 1-3
    groups: the same blocks and hit as the reference, every call answered
    in C (totals());
  * offload_lookup (the proved offload stride search, each chunk read from
    dicts inline): pyspec's answer on random masks;
then kv_index's native core, swa_prefix_cache.kv_index._kvnative (as kv_index loads it:
$SWA_PREFIX_CACHE_KVNATIVE names the cross-built file), with the standard
library only (no msgspec: event batches as objects):
  * SHA-256: the implementation it reports (portable off x86-64, where the
    SHA-NI code is not compiled) and the portable one against hashlib;
  * the C block-hash chain against the Python chain (pickle.dumps protocol
    5 + hashlib.sha256, and swa_prefix_cache.kv_index.hashing's), hash block sizes 1, 3, 16;
  * a small KVIndex (full attention, sliding window, a hybrid) on hand-made
    event batches: the native score and stats equal KVIndex(native=False)'s.
  When it cannot be loaded its checks count 0 (skipped), or fail under
  SWA_PREFIX_CACHE_STRICT_NATIVE=1 (the matrix targets set it).
Prints one JSON line {"fast_paths": ..., "kv_native": {...}, "checks": {...},
"ok": bool} last; exits 1 on a failed check. A glue self-check, not vLLM's
differential tests (tests/test_hotpath_glue.py and the others need vLLM).
"""

import json
import os
import random
import sys

sys.path.insert(0, os.getcwd())

from swa_prefix_cache.core import hotpath  # noqa: E402


class Block:
    __slots__ = ("block_id",)

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id


def make_block_hash_with_group_id(block_hash: bytes, group_id: int) -> bytes:
    return block_hash + group_id.to_bytes(4, "big", signed=False)


class HashMap:
    def __init__(self) -> None:
        self._cache: dict[bytes, object] = {}

    def get_one_block(self, key: bytes):  # noqa: ANN201
        blocks = self._cache.get(key)
        if blocks is None or isinstance(blocks, Block):
            return blocks
        return next(iter(blocks.values()))


class Pool:
    def __init__(self, hash_block_size: int) -> None:
        self.cached_block_hash_to_block = HashMap()
        self.null_block = Block(-1)
        self.hash_block_size = hash_block_size

    def get_cached_block(self, block_hash, group_ids):  # noqa: ANN001, ANN201
        found = []
        for gid in group_ids:
            block = self.cached_block_hash_to_block.get_one_block(
                make_block_hash_with_group_id(block_hash, gid))
            if not block:
                return None
            found.append(block)
        return found


class Spec:
    def __init__(self, block_size: int) -> None:
        self.block_size = block_size


class Manager:
    pass


def _never(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    raise AssertionError("the stand-in lookup was delegated or failed in C")


def _resolve(cls, hashes, hash_block_size, block_size, alignment):  # noqa: ANN001, ANN202
    return hashes


def full_attention_check(module, rng: random.Random, trials: int) -> int:
    lookup = module.new_lookup(
        _never, _never, _never, _resolve, Spec, Pool, HashMap, Block,
        Pool.get_cached_block, HashMap.get_one_block, make_block_hash_with_group_id,
        globals(), True, kind="full_attention", home=Manager)
    checked = 0
    before = module.totals()["native"]
    for trial in range(trials):
        n = rng.choice((0, 1, 5, 17, 40, 300, 2048))
        groups = rng.choice(([0], [1, 2], [2, 0, 1]))
        block_size = rng.choice((1, 16))
        pool = Pool(block_size)
        hashes = [rng.randbytes(32) for _ in range(n)]
        run = rng.randint(0, n)  # the cached prefix; later blocks cached at random
        ids = 0
        for i, h in enumerate(hashes):
            for g in groups:
                if i < run or rng.random() < 0.5:
                    pool.cached_block_hash_to_block._cache[
                        make_block_hash_with_group_id(h, g)] = Block(ids)
                    ids += 1
            if i == run and groups and n:
                # make block `run` a miss in one group at least
                pool.cached_block_hash_to_block._cache.pop(
                    make_block_hash_with_group_id(h, rng.choice(groups)), None)
        max_blocks = rng.choice((n, n, max(0, n - 3), n + 2))
        spec = Spec(block_size)
        cache = pool.cached_block_hash_to_block._cache
        expect_len = 0
        while expect_len < min(n, max_blocks) and all(
                make_block_hash_with_group_id(hashes[expect_len], g) in cache for g in groups):
            expect_len += 1
        expected = tuple(
            [cache[make_block_hash_with_group_id(hashes[i], g)] for i in range(expect_len)]
            for g in groups)
        for ahead in (True, False):
            was = module.read_ahead(ahead)
            try:
                got = lookup(Manager, hashes, max_blocks * block_size, list(groups), pool, spec,
                             False, block_size)
            finally:
                module.read_ahead(was)
            assert got[1] == expect_len * block_size, (trial, got[1], expect_len)
            assert len(got[0]) == len(groups)
            for g_got, g_exp in zip(got[0], expected, strict=True):
                assert len(g_got) == len(g_exp) and all(
                    a is b for a, b in zip(g_got, g_exp, strict=True)), trial
            checked += 1
    assert module.totals()["native"] - before == checked, module.totals()
    return checked


def key_hash_check(module, rng: random.Random) -> int:
    checked = 0
    for length in range(1, 65):
        keys = [rng.randbytes(length) for _ in range(16)]
        got = module.key_hashes(keys)
        if got is None:
            return 0
        assert got == [hash(k) for k in keys], length
        checked += len(keys)
    return checked


class Chunk:
    """A stand-in for vLLM's ChunkStatus: ref_cnt < 0 is pending."""

    __slots__ = ("ref_cnt",)

    def __init__(self, ref_cnt: int) -> None:
        self.ref_cnt = ref_cnt


def offload_check(module, rng: random.Random, trials: int) -> int:
    from swa_prefix_cache.pyspec.offload_lookup import HIT, HIT_PENDING, MISS, offload_stride_search

    for _ in range(trials):
        n = rng.randint(0, 60)
        mask = [rng.choice((HIT, HIT, HIT, HIT_PENDING, MISS)) for _ in range(n)]
        keys = [f"k{i}".encode() for i in range(n)]
        first, second = {}, {}
        for key, state in zip(keys, mask):
            if state != MISS:  # ARC-like: a chunk in either map
                (first if rng.random() < 0.5 else second)[key] = Chunk(-1 if state == HIT_PENDING else rng.randint(0, 3))
        window = rng.randint(1, 8)
        initial = rng.choice((0, rng.randint(1, 8)))
        got = module.offload_lookup((first, second), keys, window, initial, Chunk)
        want = offload_stride_search(mask.__getitem__, n, window, initial or None)
        assert got == want, (mask, window, initial, got, want)
    return trials


# ---- kv_index's native core (swa_prefix_cache.kv_index._kvnative) ---------------------------------
# Only the standard library: the batches are objects (swa_prefix_cache/kv_index/events.py
# reads an object's events without msgspec; msgpack bytes need it).

KV_SEED = "vllm-none-hash"
KV_EDGE_INTS = [0, 1, 255, 256, 65535, 65536, 2**31 - 1, 2**31, -1, -256, -257, -(2**31) - 1,
                2**63 - 1, 2**63, 2**64 - 1, -(2**63)]


class BlockStored:
    def __init__(self, block_hashes, group_idx=None, medium="GPU") -> None:  # noqa: ANN001
        self.block_hashes, self.group_idx, self.medium = block_hashes, group_idx, medium


class BlockRemoved(BlockStored):
    pass


class AllBlocksCleared:
    pass


class KVEventBatch:
    def __init__(self, events: list) -> None:
        self.events = events


def python_chain(tokens: list[int], h: int, parent: bytes) -> list[bytes]:
    """vLLM's sha256 chain, plainly: pickle protocol 5 of (parent, block, None), hashlib."""
    import hashlib
    import pickle

    out = []
    for start in range(0, len(tokens) - h + 1, h):
        parent = hashlib.sha256(pickle.dumps((parent, tuple(tokens[start:start + h]), None),
                                             protocol=5)).digest()
        out.append(parent)
    return out


def kv_impls(kvn) -> list[str]:  # noqa: ANN001
    return ["portable"] + (["sha-ni"] if kvn.sha256_impl() == "sha-ni" else [])


def kv_sha256_check(kvn, rng: random.Random) -> int:
    """The chosen implementation (portable wherever there is no SHA-NI code:
    off x86-64), and the portable compression function against hashlib."""
    import hashlib
    import platform

    impl = kvn.sha256_impl()
    if platform.machine().lower() not in ("x86_64", "amd64"):
        assert impl == "portable", f"sha256_impl() is {impl!r} on {platform.machine()}"
        try:
            kvn.use_sha256("sha-ni")
        except ValueError:
            pass
        else:
            raise AssertionError("use_sha256('sha-ni') accepted off x86-64")
    checked = 0
    for length in [*range(0, 130), 1000, 4096]:
        data = rng.randbytes(length)
        want = hashlib.sha256(data).digest()
        assert kvn.sha256(data, "portable") == want, ("portable", length)
        assert kvn.sha256(data) == want, (impl, length)
        checked += 1
    return checked


def kv_chain_check(kvn, rng: random.Random) -> int:
    """The C chain (prompt_block_hashes, prompt_block_keys) against the
    Python chain, swa_prefix_cache.kv_index.hashing's and pickle.dumps + hashlib's."""
    from swa_prefix_cache.kv_index.hashing import event_key, none_hash, prompt_block_hashes

    nh = none_hash("sha256", KV_SEED)
    checked = 0
    for h in (1, 3, 16):
        prompts = [[], [7] * (h - 1), list(range(h)), KV_EDGE_INTS * 2,
                   [rng.randrange(32_000) for _ in range(5 * h + 2)]]
        for impl in kv_impls(kvn):
            before = kvn.use_sha256(impl)
            try:
                for tokens in prompts:
                    want = python_chain(tokens, h, nh)
                    assert want == prompt_block_hashes(tokens, h, "sha256", KV_SEED), (h, tokens[:4])
                    assert kvn.prompt_block_hashes(tokens, h, nh) == want, (impl, h, tokens[:4])
                    packed = kvn.prompt_block_keys(tokens, h, nh)
                    assert list(memoryview(packed).cast("Q")) == [event_key(d) for d in want], (impl, h)
                    checked += 1
            finally:
                kvn.use_sha256(before)
    return checked


def kv_score_check(rng: random.Random) -> int:
    """A small KVIndex on the native core against the reference
    (KVIndex(native=False)): hand-made batches (stores, a sliding-window
    group's tail, removes, another medium, a clear), scores and stats after
    each."""
    from swa_prefix_cache.kv_index import GroupLayout, KVIndex, ReplicaLayout
    from swa_prefix_cache.kv_index.hashing import event_key, prompt_block_hashes

    layouts = {
        "full16": ReplicaLayout((GroupLayout("full_attention", 16),), 16),
        "swa3": ReplicaLayout((GroupLayout("sliding_window", 3, 7),), 3),
        "hybrid1": ReplicaLayout((GroupLayout("full_attention", 2), GroupLayout("sliding_window", 4, 5)), 1),
    }
    docs = [[rng.randrange(32_000) for _ in range(96)] for _ in range(2)]
    native, reference = KVIndex(native=True), KVIndex(native=False)
    assert native.core == "native" and reference.core == "python"
    batches: dict[str, list[KVEventBatch]] = {}
    for name, layout in layouts.items():
        native.add_replica(name, layout)
        reference.add_replica(name, layout)
        h = layout.hash_block_size
        chains = [prompt_block_hashes(d, h, "sha256", KV_SEED) for d in docs]
        per = [g.block_size // h for g in layout.groups]
        # block i of group g is keyed by hash (i + 1) * per[g] - 1
        blocks = [[c[k - 1::k] for k in per] for c in chains]
        last = len(layout.groups) - 1
        batches[name] = [
            # doc 0 whole in every group (bytes keys), doc 1's first half as ints
            KVEventBatch([BlockStored(list(blocks[0][g]), g) for g in range(len(per))]
                         + [BlockStored([event_key(x) for x in blocks[1][g][:len(blocks[1][g]) // 2]], g)
                            for g in range(len(per))]),
            # evictions in the middle of doc 0 (the last group: the window's side)
            KVEventBatch([BlockRemoved(list(blocks[0][last][3:6]), last),
                          BlockStored(list(blocks[1][last][-2:]), last, "CPU")]),
            # a store twice, one remove: still cached; an unknown remove
            KVEventBatch([BlockStored(list(blocks[0][0][:2]), 0), BlockRemoved(list(blocks[0][0][:2]), 0),
                          BlockRemoved([rng.getrandbits(64)], 0)]),
            KVEventBatch([AllBlocksCleared(), BlockStored(list(blocks[1][0][:4]), 0)]),
        ]
    prompts = [docs[0], docs[0][:50], docs[1], docs[1][:40] + [1, 2, 3], [5] * 20, [1]]
    checked = 0
    for step in range(4):
        for name in layouts:
            batch = batches[name][step]
            assert native.apply(name, batch) == reference.apply(name, batch)
            assert native.stats(name) == reference.stats(name), (step, name)
        for prompt in prompts:
            got, want = native.score(prompt), reference.score(prompt)
            assert got == want, (step, len(prompt), got, want)
            checked += 1
        if step == 0:
            assert all(v > 0 for v in native.score(docs[0]).values()), native.score(docs[0])
    return checked


def kv_native_checks(rng: random.Random, info: dict[str, object], checks: dict[str, object]) -> None:
    """swa_prefix_cache.kv_index._kvnative (as kv_index loads it: $SWA_PREFIX_CACHE_KVNATIVE, else
    the package's) into info, its checks' counts into checks; not loadable:
    the checks count 0 (skipped), or fail under SWA_PREFIX_CACHE_STRICT_NATIVE=1."""
    from swa_prefix_cache.kv_index import native as kv_loader

    try:
        kvn = kv_loader.load()
    except kv_loader.NativeUnavailable as exc:
        info["built"] = False
        raise AssertionError(str(exc)) from None
    if kvn is None:
        info.update(built=False, sha256=None)
        checks.update(kv_sha256_vs_hashlib=0, kv_chain_vs_python=0, kv_score_vs_reference=0)
        return
    info.update(built=True, sha256=kvn.sha256_impl(), file=os.path.basename(kvn.__file__))
    print("kv_native:", json.dumps(info))
    checks["kv_sha256_vs_hashlib"] = kv_sha256_check(kvn, rng)
    checks["kv_chain_vs_python"] = kv_chain_check(kvn, rng)
    checks["kv_score_vs_reference"] = kv_score_check(rng)


def main() -> int:
    paths = hotpath.fast_paths()
    print("fast_paths:", json.dumps(paths))
    checks: dict[str, object] = {}
    ok = bool(paths.get("built"))
    if ok:
        module = hotpath.load()
        rng = random.Random(20261202)
        try:
            checks["key_hashes_vs_hash"] = key_hash_check(module, rng)
            checks["full_attention_lookups"] = full_attention_check(module, rng, 60)
            checks["offload_lookups"] = offload_check(module, rng, 200)
        except AssertionError as exc:
            checks["failed"] = repr(exc)
            ok = False
    kv_native: dict[str, object] = {}
    if ok:
        try:
            kv_native_checks(random.Random(20261203), kv_native, checks)
        except AssertionError as exc:
            checks["failed"] = repr(exc)
            ok = False
    print(json.dumps({"fast_paths": paths, "kv_native": kv_native, "checks": checks, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
