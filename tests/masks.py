"""Mask generators shared by the randomized tests and the benchmarks."""

import random

MASK_KINDS = ("sparse", "dense", "runs", "adversarial", "uniform")


def make_mask(rng: random.Random, n: int, kind: str, need: int, hit_rate: float = 0.05) -> bytes:
    """A cached-block mask of ``n`` bytes (1 = cached) of the given kind.

    * sparse / dense: independent hits at ``hit_rate`` / ``1 - hit_rate``;
    * runs: long cached runs around ``need`` blocks, separated by short gaps;
    * adversarial: runs of exactly ``need - 1`` cached blocks, each cut by one
      miss, the pattern that forces any search to look at every gap;
    * uniform: hits at a random rate.
    """
    if kind == "sparse":
        return bytes(rng.random() < hit_rate for _ in range(n))
    if kind == "dense":
        return bytes(rng.random() >= hit_rate for _ in range(n))
    if kind == "uniform":
        rate = rng.random()
        return bytes(rng.random() < rate for _ in range(n))
    out = bytearray()
    while len(out) < n:
        if kind == "runs":
            out += b"\x01" * rng.randint(max(need - 2, 0), need + 2)
            out += b"\x00" * rng.randint(1, 3)
        elif kind == "adversarial":
            out += b"\x01" * max(need - 1, 0) + b"\x00"
        else:
            raise ValueError(f"kind must be one of {MASK_KINDS}, got {kind!r}")
    return bytes(out[:n])


def random_alignment(rng: random.Random, block_size: int) -> int:
    """An alignment (tokens): equal to the block size, a multiple of it, a
    proper divisor of it, or a non-multiple (any value 1 .. 4 * bs)."""
    kind = rng.choice(("equal", "multiple", "divisor", "other"))
    if kind == "equal":
        return block_size
    if kind == "multiple":
        return block_size * rng.randint(2, 8)
    if kind == "divisor":
        divisors = [d for d in range(1, block_size) if block_size % d == 0]
        return rng.choice(divisors) if divisors else block_size
    return rng.randint(1, 4 * block_size)

def random_window(rng: random.Random, block_size: int, need: int) -> int:
    """A window (tokens) with cdiv(W - 1, bs) == need (need >= 1), or one of
    the degenerate windows 0 / 1 / negative for need == 0."""
    if need == 0:
        return rng.choice((0, 1, -rng.randint(1, 3 * block_size)))
    return rng.randint((need - 1) * block_size + 2, need * block_size + 1)

def random_mask(rng: random.Random, length: int, need: int) -> list[bool]:
    """A mask of one of masks.MASK_KINDS (sparse, dense, long runs, runs of
    exactly need - 1, uniform) or all-cached / none / cached prefix."""
    kind = rng.choice((*MASK_KINDS, "adversarial", "all", "none", "prefix"))
    if kind == "all":
        return [True] * length
    if kind == "none":
        return [False] * length
    if kind == "prefix":
        cut = rng.randint(0, length)
        return [i < cut for i in range(length)]
    hit_rate = rng.choice((0.02, 0.05, 0.2))
    return [bool(b) for b in make_mask(rng, length, kind, max(need, 1), hit_rate)]
