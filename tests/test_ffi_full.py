"""The C full-attention lookup (swa_prefix_cache/core/proved/full_attention.{h,c}) against swa_prefix_cache.pyspec.full.

For every input: the C ``full_hit`` (mask instance, proved by WP), the C
``full_hit_probe`` (probe instance, same text), the C ``legacy_full_scan``
and pyspec's ``full_hit`` / ``legacy_full_scan`` return the same
``FullHit`` (hit tokens, blocks, phase-1 prefix, tail, probes); the probe
instance reads exactly ``probes`` times, each index in range, full blocks
from 0 up then fine indices high to low.

* exhaustive: every full-block mask of up to 6 blocks x every interior
  pattern of the partial block x 0 / scale - 1 trailing fine hashes x every
  max_length up to one block past the masks x EAGLE, for fine-grained and
  plain (block_size, alignment_tokens);
* hypothesis: masks of up to 5000 entries, the two masks independent (any
  lengths), scales 2-64, unaligned alignments, huge max_length (up to
  2**62) over short masks;
* argument checks: ``ValueError`` naming the argument.
"""

import itertools
import os
import random
import re

import pytest
from conftest import CASE_COUNTS, require_native
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks import cffi_core as native
from swa_prefix_cache.pyspec.full import full_hit, is_fine_grained, legacy_full_scan

FFI_CASES = int(os.environ.get("PREFIX_CACHE_FFI_CASES", "1200"))


def check(cached: list[bool], fine: list[bool], max_length: int, bs: int, align: int,
          eagle: bool) -> None:
    args = (cached, fine, max_length, bs, align, eagle)
    expected = full_hit(*args)
    assert legacy_full_scan(*args) == expected, args
    cbuf, fbuf = bytes(map(int, cached)), bytes(map(int, fine))
    assert native.full_hit(cbuf, fbuf, max_length, bs, align, eagle) == expected, args
    assert native.legacy_full_scan(cbuf, fbuf, max_length, bs, align, eagle) == expected, args
    reads: list[tuple[str, int]] = []

    def probe(i: int) -> bool:
        reads.append(("full", i))
        return cached[i]

    def fine_probe(j: int) -> bool:
        reads.append(("fine", j))
        return fine[j]

    got = native.full_hit_probe(probe, fine_probe, len(cached), len(fine), max_length, bs,
                                align, eagle)
    assert got == expected, args
    assert len(reads) == expected.probes, args
    full_reads = [i for kind, i in reads if kind == "full"]
    fine_reads = [j for kind, j in reads if kind == "fine"]
    assert full_reads == list(range(len(full_reads))), args
    assert reads[: len(full_reads)] == [("full", i) for i in full_reads], args
    assert fine_reads == sorted(fine_reads, reverse=True), args
    assert all(0 <= i < min(max_length // bs, len(cached)) for i in full_reads), args
    assert all(0 <= j < min(max_length // align, len(fine)) for j in fine_reads), args
    assert not fine_reads or is_fine_grained(bs, align), args


CONFIGS = [(2, 1), (4, 1), (4, 2), (6, 2), (8, 4), (1, 1), (4, 4), (4, 8), (4, 3), (4, 6)]


@pytest.mark.parametrize("bs,align", CONFIGS)
def test_exhaustive_small(bs: int, align: int) -> None:
    require_native()
    fine_mode = is_fine_grained(bs, align)
    s = bs // align if fine_mode else 1
    interiors = list(itertools.product([False, True], repeat=s - 1)) if fine_mode else [()]
    count = 0
    for n in range(7):
        for bits in itertools.product([False, True], repeat=n):
            for interior in interiors:
                for extra in sorted({0, s - 1}):
                    fine: list[bool] = []
                    for b in bits:
                        fine.extend(interior)
                        fine.append(b)
                    fine.extend(interior[:extra])
                    for max_length in range((n + 1) * bs + 2):
                        for eagle in (False, True):
                            check(list(bits), fine, max_length, bs, align, eagle)
                            count += 1
    CASE_COUNTS["full attention C vs pyspec, exhaustive"] += count


@settings(max_examples=FFI_CASES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), eagle=st.booleans(), huge=st.booleans())
def test_random(seed: int, eagle: bool, huge: bool) -> None:
    require_native()
    rng = random.Random(seed)
    kind = rng.choice(("fine", "fine", "plain", "odd"))
    if kind == "fine":
        align = rng.choice((1, 2, 16))
        bs = align * rng.choice((2, 3, 8, 64))
    elif kind == "plain":
        bs = rng.choice((1, 16))
        align = bs * rng.choice((1, 1, 2, 3))
    else:
        bs = rng.choice((6, 16))
        align = rng.choice((4, 5, 7, 10, 24))
    n_cached = rng.randrange(0, 5001 if rng.random() < 0.3 else 80)
    run = rng.randrange(n_cached + 1)
    density = rng.random()
    cached = [i < run or rng.random() < density for i in range(n_cached)]
    if rng.random() < 0.5 and run < n_cached:
        cached[run] = False
    n_fine = rng.choice((n_cached * (bs // align if is_fine_grained(bs, align) else 1),
                         rng.randrange(0, 5001)))
    fdens = rng.choice((0.0, 0.1, 0.5, 1.0, rng.random()))
    fine = [rng.random() < fdens for _ in range(n_fine)]
    tokens = n_cached * bs
    max_length = (rng.randrange(1 << 62) if huge and rng.random() < 0.3
                  else rng.choice((tokens, tokens + bs, max(tokens - 1, 0),
                                   rng.randrange(tokens + 3 * bs + 1))))
    check(cached, fine, max_length, bs, align, eagle)
    CASE_COUNTS["full attention C vs pyspec, random"] += 1


def test_large_values() -> None:
    """Sizes at the contract's limit (2**62) without overflow."""
    require_native()
    big = 1 << 62
    for bs, align in [(big, 1), (big, big), (1, big), (big, big // 2), (2, 1)]:
        for eagle in (False, True):
            check([True, True], [True] * 8, big, bs, align, eagle)


def test_argument_checks() -> None:
    require_native()
    ok = dict(cached=b"\x01", fine_cached=b"", max_length=4, block_size=4,
              alignment_tokens=4, eagle=False)
    for kwargs, name in [
        (dict(cached=None), "cached"),
        (dict(cached=[1, 0]), "cached"),
        (dict(fine_cached="ab"), "fine_cached"),
        (dict(max_length=-1), "max_length"),
        (dict(max_length=(1 << 62) + 1), "max_length"),
        (dict(block_size=0), "block_size"),
        (dict(alignment_tokens=0), "alignment_tokens"),
        (dict(eagle=1), "eagle"),
        (dict(block_size=True), "block_size"),
    ]:
        args = dict(ok)
        args.update(kwargs)
        for fn in (native.full_hit, native.legacy_full_scan):
            with pytest.raises(ValueError, match=name):
                fn(*args.values())
    with pytest.raises(ValueError, match="fine_probe"):
        native.full_hit_probe(lambda i: True, None, 1, 0, 4, 4, 4, False)
    with pytest.raises(ValueError, match="n_fine"):
        native.full_hit_probe(lambda i: True, lambda j: True, 1, -1, 4, 4, 4, False)


def test_probe_exception_propagates() -> None:
    require_native()

    def boom(i: int) -> bool:
        raise KeyError(i)

    with pytest.raises(KeyError):
        native.full_hit_probe(boom, lambda j: True, 4, 0, 16, 4, 4, False)


def test_cdef_matches_header() -> None:
    """The loader's declarations are the header's prototypes, token for token."""
    header = (native.PROVED_DIR / "full_attention.h").read_text()
    header = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
    header = re.sub(r"//[^\n]*", " ", header)

    def normalize(text: str) -> str:
        return " ".join(re.findall(r"\w+|[^\w\s]", text))

    flat_header = normalize(header)
    for decl in native.CDEF_FULL.strip().split(";"):
        decl = normalize(decl)
        if decl:
            assert decl in flat_header, decl
