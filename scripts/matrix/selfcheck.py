"""The native hot path's self-check without vLLM (for interpreters and
machines where vLLM cannot run: `make matrix-py313`, `make cross-aarch64`
under qemu).

Run from the repository root (or with it on sys.path): imports
extracted_c._hotpath, prints its fast-path choice (fast_paths()), then
checks, against plain-Python references:
  * key_hashes: the read-ahead's own hash of bytes keys of 1-64 bytes is
    hash(key) (when it hashes them itself);
  * a full-attention lookup (the proved full_hit_probe through the glue's
    pool probe and, where compiled in, its read-ahead) on a stand-in for
    vLLM's BlockPool (the same reads: key = hash + 4-byte big-endian group
    id, a plain dict of blocks), random masks, read-ahead on and off, 1-3
    groups: the same blocks and hit as the reference, every call answered
    in C (totals());
  * offload_lookup (the proved offload stride search): answers in range.
Prints one JSON line {"fast_paths": ..., "checks": {...}, "ok": bool} last;
exits 1 on a failed check. A glue self-check, not vLLM's differential
tests (tests/test_hotpath_glue.py and the others need vLLM).
"""

import json
import os
import random
import sys

sys.path.insert(0, os.getcwd())

from extracted_c import hotpath  # noqa: E402


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


def offload_check(module, rng: random.Random, trials: int) -> int:
    hit, pending, miss = object(), object(), object()
    for _ in range(trials):
        n = rng.randint(0, 60)
        states = [rng.choice((hit, hit, hit, pending, miss)) for _ in range(n)]
        window = rng.randint(1, 8)
        initial = rng.choice((0, rng.randint(1, 8)))
        got = module.offload_lookup(lambda key, ctx: states[key], list(range(n)), None, window,
                                    initial, hit, pending, miss)
        assert got is None or got is NotImplemented or -1 <= got <= n, got
    return trials


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
    print(json.dumps({"fast_paths": paths, "checks": checks, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
