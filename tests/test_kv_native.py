"""kv_index's native core (swa_prefix_cache.kv_index._kvnative) against its references.

* the block pickle byte for byte against ``pickle.dumps(..., protocol=5)``
  (edge ints of every opcode range, tuple lengths 1..3 and longer, hash
  block sizes up to 576), and what it declines (ints beyond [-2**63,
  2**64), non-ints, a body past one 64 KiB frame);
* SHA-256, both compression functions (SHA-NI when the CPU has it, and the
  portable code) against hashlib;
* the chain against swa_prefix_cache.kv_index.hashing.prompt_block_hashes (the Python
  reference; tests/test_kv_index.py compares both with vLLM's hasher);
* the key set against a dict (stores, removes, growth, key 0);
* the score: random event streams and prompts on random layouts (unitary
  full and sliding window, hybrids, EAGLE on and off, hash block sizes 1 to
  16, sha256 and sha256_cbor): the native ``KVIndex`` answers and counts
  what the pure-Python reference (pyspec) does;
* bad input: TypeError / ValueError naming the argument;
* planted mutants of the glue (an off-by-one in the mask's key index, a
  mask built one block short) are caught, by this file's differential test
  and by tests/test_kv_index.py's exactness test against vLLM.

``PREFIX_CACHE_KV_NATIVE_CASES`` sets the differential test's prompts
(default 4,000).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import random
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import CASE_COUNTS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swa_prefix_cache.kv_index import GroupLayout, KVIndex, ReplicaLayout
from swa_prefix_cache.kv_index import native as native_loader
from swa_prefix_cache.kv_index.hashing import event_key, none_hash, prompt_block_hashes
from swa_prefix_cache import settings as swa_settings

ROOT = Path(__file__).resolve().parent.parent
CASES = int(os.environ.get("PREFIX_CACHE_KV_NATIVE_CASES", "4000"))


def _native():  # noqa: ANN202
    """The extension; skipped (failed under SWA_PREFIX_CACHE_STRICT_NATIVE=1)
    when it is not built."""
    try:
        return native_loader.require()
    except native_loader.NativeUnavailable as exc:
        if swa_settings.get("SWA_PREFIX_CACHE_STRICT_NATIVE") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def kvn():  # noqa: ANN201
    return _native()


EDGE_INTS = [0, 1, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, -1, -255, -256,
             -257, -(2**31), -(2**31) - 1, 2**39, -(2**39), -(2**39) - 1, 2**47, 2**55, -(2**55),
             2**63 - 1, 2**63, 2**64 - 1, -(2**63), -(2**63) + 1]
TOKENS = st.one_of(st.sampled_from(EDGE_INTS), st.integers(-(2**63), 2**64 - 1),
                   st.integers(0, 2**17))
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _dumps(parent: bytes, tokens: list[int]) -> bytes:
    return pickle.dumps((parent, tuple(tokens), None), protocol=pickle.HIGHEST_PROTOCOL)


# ---- the pickle -------------------------------------------------------------------


def test_pickle_is_protocol_5() -> None:
    assert pickle.HIGHEST_PROTOCOL == 5, "vLLM's sha256 pickles with the highest protocol"


@pytest.mark.parametrize("h", [1, 2, 3, 4, 5, 16, 576])
def test_pickle_of_edge_values(kvn, h: int) -> None:
    rng = random.Random(h)
    parent = rng.randbytes(32)
    for start in range(len(EDGE_INTS)):
        tokens = [EDGE_INTS[(start + j) % len(EDGE_INTS)] for j in range(h)]
        assert kvn.pickle_block(parent, tokens) == _dumps(parent, tokens), tokens[:4]
    CASE_COUNTS["kv native pickle == pickle.dumps"] += len(EDGE_INTS)


@SETTINGS
@given(parent=st.binary(min_size=32, max_size=32),
       tokens=st.lists(TOKENS, min_size=1, max_size=600))
def test_pickle_is_pickles(parent: bytes, tokens: list[int]) -> None:
    kvn = _native()
    assert kvn.pickle_block(parent, tokens) == _dumps(parent, tokens)
    CASE_COUNTS["kv native pickle == pickle.dumps"] += 1


def test_pickle_declines_what_it_does_not_encode(kvn) -> None:
    parent = bytes(32)

    class Sub(int):
        pass

    for token in (2**64, -(2**63) - 1, 2**200, True, 1.0, Sub(3), None):
        assert kvn.pickle_block(parent, [1, token, 2]) is None, token
    # one frame ends at 64 KiB: 6,000 LONG1 ints of 11 bytes are past it
    assert kvn.pickle_block(parent, [2**63] * 6000) is None
    assert kvn.pickle_block(parent, [2**63] * 5900) == _dumps(parent, [2**63] * 5900)


# ---- SHA-256 -------------------------------------------------------------------------


def _impls(kvn) -> list[str]:  # noqa: ANN001
    return ["portable"] + (["sha-ni"] if kvn.sha256_impl() == "sha-ni" else [])


def test_sha_ni_is_used_when_the_cpu_has_it(kvn) -> None:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    if " sha_ni" in flags and sysconfig.get_platform().endswith("x86_64"):
        assert kvn.sha256_impl() == "sha-ni"


@pytest.mark.parametrize("impl", ["portable", "sha-ni"])
def test_sha256_is_hashlibs(kvn, impl: str) -> None:
    if impl not in _impls(kvn):
        pytest.skip("no SHA-NI on this CPU")
    rng = random.Random(7)
    for length in [*range(0, 300), 1000, 4096, 65537]:
        data = rng.randbytes(length)
        assert kvn.sha256(data, impl) == hashlib.sha256(data).digest(), length
    CASE_COUNTS[f"kv native sha256 ({impl}) == hashlib"] += 303


# ---- the chain -------------------------------------------------------------------------


@pytest.mark.parametrize("h", [1, 2, 3, 4, 16, 576])
def test_chain_is_the_python_chain(kvn, h: int) -> None:
    rng = random.Random(h)
    seed = "vllm-none-hash"
    nh = none_hash("sha256", seed)
    for impl in _impls(kvn):
        before = kvn.use_sha256(impl)
        try:
            for _ in range(6):
                tokens = [rng.choice((rng.randrange(32_000), rng.choice(EDGE_INTS)))
                          for _ in range(rng.randint(0, 6 * h + h - 1))]
                want = prompt_block_hashes(tokens, h, "sha256", seed)
                assert kvn.prompt_block_hashes(tokens, h, nh) == want
                packed = kvn.prompt_block_keys(tokens, h, nh)
                assert list(memoryview(packed).cast("Q")) == [event_key(d) for d in want]
        finally:
            kvn.use_sha256(before)
    CASE_COUNTS["kv native chain == python chain"] += 6 * len(_impls(kvn))


def test_chain_declines_to_python(kvn) -> None:
    nh = none_hash("sha256", "s")
    assert kvn.prompt_block_keys([1, 2**64, 3, 4], 2, nh) is None
    assert kvn.prompt_block_keys([1, 2, 3, True], 2, nh) is None  # even in the tail
    assert kvn.prompt_block_keys([1, 2, 3, 4, 5], 2, nh) is not None
    index = KVIndex(native=True)
    index.add_replica("r", ReplicaLayout((GroupLayout("full_attention", 2),), 2))
    assert index.score([1, 2**64, 3, 4]) == {"r": 0}  # hashed by the Python chain
    with pytest.raises(TypeError, match="prompt_token_ids"):
        index.score([1, 2, 3, True])


# ---- the key set -------------------------------------------------------------------------


def test_key_set_is_a_counter(kvn) -> None:
    from array import array

    rng = random.Random(3)
    pool = [0, 1, 2**64 - 1, 2**63] + [rng.getrandbits(64) for _ in range(3000)]
    keyset, model = kvn.KeySet(), {}
    for step in range(400):
        batch = [rng.choice(pool[: rng.choice((8, 100, len(pool)))]) for _ in range(rng.randint(0, 60))]
        packed = array("Q", batch).tobytes()
        if rng.random() < 0.55:
            keyset.add(packed)
            for k in batch:
                model[k] = model.get(k, 0) + 1
        else:
            unknown = 0
            for k in batch:
                if k not in model:
                    unknown += 1
                elif model[k] == 1:
                    del model[k]
                else:
                    model[k] -= 1
            assert keyset.remove(packed) == unknown
        if step % 50 == 49:
            assert len(keyset) == len(model)
            assert all(keyset.count(k) == model.get(k, 0) for k in pool)
            assert all((k in keyset) == (k in model) for k in pool[:500])
        if step == 300:
            keyset.clear()
            model.clear()
    assert -1 not in keyset and 2**64 not in keyset and "x" not in keyset
    CASE_COUNTS["kv native key set == dict"] += 400


def test_keys_of_is_event_key(kvn) -> None:
    rng = random.Random(4)
    hashes = [rng.randbytes(32), rng.randbytes(3), bytearray(rng.randbytes(32)), 0, 2**64 - 1,
              rng.getrandbits(64), b""]
    packed, big = kvn.keys_of(hashes)
    assert list(memoryview(packed).cast("Q")) == [event_key(h) for h in hashes] and big == []
    packed, big = kvn.keys_of((5, -1, 2**64, 6))
    assert list(memoryview(packed).cast("Q")) == [5, 6] and big == [-1, 2**64]
    for bad in ("abc", True, 1.5, None):
        with pytest.raises(TypeError, match="block hash must be bytes or int"):
            kvn.keys_of([1, bad])


# ---- the score: native against the reference -----------------------------------------------


@dataclass
class BlockStored:
    block_hashes: list
    group_idx: int | None = None
    medium: str | None = "GPU"


@dataclass
class BlockRemoved:
    block_hashes: list
    group_idx: int | None = None
    medium: str | None = "GPU"


@dataclass
class AllBlocksCleared:
    pass


@dataclass
class Batch:
    events: list = field(default_factory=list)


def _random_layout(rng: random.Random) -> ReplicaLayout:
    h = rng.choice((1, 2, 4, 16))
    algo = "sha256" if rng.random() < 0.85 else "sha256_cbor"
    shape = rng.choice(("full", "swa", "hybrid", "hybrid", "hybrid"))
    if shape == "full":
        groups = (GroupLayout("full_attention", h, eagle=rng.random() < 0.5),)
    elif shape == "swa":
        groups = (GroupLayout("sliding_window", h, rng.choice((1, 2, h, 3 * h, 5 * h + 1)),
                              rng.random() < 0.5),)
    else:
        eagle = rng.random() < 0.5
        groups = tuple(
            GroupLayout("full_attention", bs, eagle=eagle) if rng.random() < 0.4
            else GroupLayout("sliding_window", bs, rng.choice((1, 2, bs, 2 * bs + 1, 4 * bs)), eagle)
            for bs in (h * rng.choice((1, 1, 2, 4)) for _ in range(rng.randint(2, 4))))
    return ReplicaLayout(groups, h, algo, rng.choice(("vllm-none-hash", "42")))


class Stream:
    """Documents, and random event batches over their chains' keys for one
    replica: stores of the group's block boundaries (some dropped, some
    misaligned), removes, other media, clears; keys as bytes or ints."""

    def __init__(self, rng: random.Random, layout: ReplicaLayout) -> None:
        self.rng, self.layout = rng, layout
        h = layout.hash_block_size
        self.docs = [[rng.randrange(32_000) for _ in range(rng.randint(1, 24) * 4 * h)]
                     for _ in range(rng.randint(1, 3))]
        self.chains = [prompt_block_hashes(d, h, layout.hash_algo, layout.none_hash_seed)
                       for d in self.docs]
        self.stored: list[tuple[int, object]] = []

    def _key(self, digest: bytes) -> object:
        return digest if self.rng.random() < 0.5 else event_key(digest)

    def batch(self) -> Batch:
        rng, layout = self.rng, self.layout
        events: list = []
        for _ in range(rng.randint(1, 4)):
            g = rng.randrange(len(layout.groups))
            group_idx = None if len(layout.groups) == 1 and rng.random() < 0.5 else g
            roll = rng.random()
            if roll < 0.72:
                chain = rng.choice(self.chains)
                k = layout.groups[g].block_size // layout.hash_block_size
                start, end = sorted(rng.randrange(len(chain) // k + 1) for _ in range(2))
                idx = [(i + 1) * k - 1 for i in range(start, end) if rng.random() < 0.9]
                idx += [rng.randrange(len(chain)) for _ in range(rng.randint(0, 1))]
                hashes = [self._key(chain[i]) for i in idx]
                self.stored += [(g, x) for x in hashes]
                medium = "GPU" if rng.random() < 0.9 else rng.choice(("CPU", None))
                events.append(BlockStored(hashes, group_idx, medium))
            elif roll < 0.94 and self.stored:
                picks = [self.stored.pop(rng.randrange(len(self.stored)))
                         for _ in range(min(len(self.stored), rng.randint(1, 4)))]
                hashes = [x for gg, x in picks if gg == g] + [rng.getrandbits(64)] * (rng.random() < 0.1)
                events.append(BlockRemoved(hashes, group_idx))
            elif roll < 0.96:
                events.append(BlockStored([rng.choice((-5, 2**64 + 3))], group_idx))
            else:
                events.append(AllBlocksCleared())
                self.stored.clear()
        return Batch(events)

    def prompt(self) -> list[int]:
        rng = self.rng
        doc = rng.choice(self.docs)
        cut = rng.randint(0, len(doc))
        return doc[:cut] + [rng.randrange(32_000) for _ in range(rng.choice((0, 0, 1, 5)))]


def test_native_score_is_the_reference(kvn) -> None:
    rng = random.Random(20261205)
    done = hits = 0
    shapes = set()
    while done < CASES:
        layout = _random_layout(rng)
        shapes.add((len(layout.groups), layout.hash_block_size, any(g.eagle for g in layout.groups)))
        stream = Stream(rng, layout)
        native, ref = KVIndex(native=True), KVIndex(native=False)
        assert (native.core, ref.core) == ("native", "python")
        for index in (native, ref):
            index.add_replica("r", layout)
            index.add_replica("twin", layout)  # same chain: computed once per score
        for _ in range(20):
            batch = stream.batch()
            for index in (native, ref):
                index.apply("r", batch)
            for _ in range(5):
                prompt = stream.prompt()
                got, want = native.score(prompt), ref.score(prompt)
                assert got == want, (layout, len(prompt))
                done += 1
                hits += want["r"] > 0
            assert native.stats("r") == ref.stats("r")
    assert hits > done // 4, f"only {hits} of {done} prompts hit"
    CASE_COUNTS["kv native score == reference: prompts that hit"] += hits
    assert len(shapes) >= min(20, done // 200), shapes
    CASE_COUNTS["kv native score == reference (random streams)"] += done


def test_bad_input_names_the_argument(kvn) -> None:
    ks = kvn.KeySet()
    plan = ((16, 0, 1, 0, (0,)),)
    ok = (plan, (ks,), bytes(16), 16, 16, 31, False)
    assert kvn.score(*ok) == 0
    bad = [
        ((), TypeError, "groups"), ((("x",),), TypeError, "groups"),
        ((((16, 0, 1, 0, (1,)),),), ValueError, "members"),
        ((((0, 0, 1, 0, (0,)),),), ValueError, "block_size"),
        ((((16, 2**63, 0, 0, (0,)),),), (ValueError, OverflowError), "sliding_window"),
        ((((16, 0, 2, 0, (0,)),),), ValueError, "is_full"),
        ((((16, 0, 1, "1", (0,)),),), TypeError, "eagle"),
        ((((24, 0, 1, 0, (0,)),),), ValueError, "block_size"),
    ]
    for args, exc, word in bad:
        with pytest.raises(exc, match=word):
            kvn.score(*args, *ok[1:])
    for pos, value, exc, word in [(1, ("x",), TypeError, "keysets"), (1, [ks], TypeError, "keysets"),
                                  (2, b"123", ValueError, "keys"), (2, "ab", TypeError, "keys"),
                                  (3, 0, ValueError, "hash_block_size"),
                                  (4, "16", TypeError, "alignment_tokens"),
                                  (5, 1.5, TypeError, "max_cache_hit_length"),
                                  (5, 2**70, ValueError, "max_cache_hit_length"),
                                  (5, 2**62, ValueError, "keys")]:
        args = list(ok)
        args[pos] = value
        with pytest.raises(exc, match=word):
            kvn.score(*args)
    with pytest.raises(TypeError):
        kvn.score(*ok[:6])
    for args, exc, word in [(("ab", 2, bytes(32)), TypeError, "token_ids"),
                            ((5, 2, bytes(32)), TypeError, "token_ids"),
                            (([1], 0, bytes(32)), ValueError, "hash_block_size"),
                            (([1], 2, bytes(31)), TypeError, "none_hash")]:
        with pytest.raises(exc, match=word):
            kvn.prompt_block_keys(*args)
    with pytest.raises(ValueError, match="impl"):
        kvn.sha256(b"", "md5")
    with pytest.raises(TypeError, match="keys"):
        ks.add([1, 2])
    with pytest.raises(TypeError, match="native"):
        KVIndex(native="yes")


def test_a_malformed_batch_changes_nothing() -> None:
    for native in (False, True) if native_loader.load() is not None else (False,):
        index = KVIndex(native=native)
        index.add_replica("r", ReplicaLayout((GroupLayout("full_attention", 2),), 2))
        index.apply("r", Batch([BlockStored([1, 2])]))
        before = index.stats("r")
        with pytest.raises(TypeError, match="block hash"):
            index.apply("r", Batch([BlockRemoved([1]), BlockStored([3, "x"])]))
        assert index.stats("r") == before


def test_without_the_extension_the_reference_answers_and_says_so(monkeypatch, caplog) -> None:
    monkeypatch.setattr(native_loader, "_module", None)
    monkeypatch.setattr(native_loader, "_why", None)
    monkeypatch.setenv(native_loader.PATH_ENV, "/nonexistent/_kvnative.so")
    for name in (native_loader.REQUIRE_ENV,
                 *(old.name for old in swa_settings.BY_NAME[native_loader.REQUIRE_ENV].old_names)):
        monkeypatch.delenv(name, raising=False)
    with caplog.at_level(logging.WARNING, logger="swa_prefix_cache.kv_index"):
        first, second = KVIndex(), KVIndex()
    assert first.core == second.core == "python"
    said = [r for r in caplog.records if "pure-Python reference" in r.getMessage()]
    assert len(said) == 1, said
    monkeypatch.setenv(native_loader.REQUIRE_ENV, "1")
    with pytest.raises(native_loader.NativeUnavailable):
        KVIndex()


# ---- planted mutants ------------------------------------------------------------------------

MUTANTS = {
    # block i of a group read at the next hash block's key
    "mask key off by one": ("uint64_t key = keys[(i + 1) * a->k - 1];",
                            "uint64_t key = keys[(i + 1) * a->k - 1 + ((i + 1) < a->g.mask_len)];"),
    # the sliding-window mask built one block short of what EAGLE reads
    "lazy mask one block short": ("limit = (Py_ssize_t)((bound + a->g.block_size) / a->g.block_size);",
                                  "limit = (Py_ssize_t)(bound / a->g.block_size);"),
}


def _build_mutant(tmp_path: Path, name: str) -> Path:
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc})")
    glue = ROOT / "swa_prefix_cache" / "kv_index" / "glue"
    source = (glue / "kvindex_module.c").read_text()
    old, new = MUTANTS[name]
    assert source.count(old) == 1, f"mutant {name!r}: the line to mutate is gone"
    mutated = tmp_path / "kvindex_module.c"
    mutated.write_text(source.replace(old, new))
    out = tmp_path / "_kvnative.so"
    c = ROOT / "swa_prefix_cache" / "core" / "proved"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", f"-I{c}",
                    f"-I{glue}", "-o", str(out), str(mutated), str(glue / "kvindex_sha256.c"), str(c / "joint.c"),
                    str(c / "params.c"), str(c / "prefix_cache.c")], check=True, capture_output=True, timeout=300)
    return out


def _pytest_with(module: Path, test: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env=dict(os.environ, SWA_PREFIX_CACHE_KVNATIVE=str(module), SWA_PREFIX_CACHE_STRICT_NATIVE="1", **env))


@pytest.mark.parametrize("name", list(MUTANTS))
def test_planted_mutants_are_caught(kvn, tmp_path: Path, name: str) -> None:
    if os.environ.get(native_loader.PATH_ENV):
        pytest.skip("running against a given extension file already")
    module = _build_mutant(tmp_path, name)
    done = _pytest_with(module, "tests/test_kv_native.py::test_native_score_is_the_reference",
                        PREFIX_CACHE_KV_NATIVE_CASES="3000")
    assert done.returncode != 0 and "AssertionError" in done.stdout, done.stdout[-2000:]
    if name == "mask key off by one":
        pytest.importorskip("vllm")
        done = _pytest_with(
            module, "tests/test_kv_index.py::test_index_scores_what_get_computed_blocks_returns",
            PREFIX_CACHE_KV_INDEX_CASES="600")
        assert done.returncode != 0 and "!= vLLM" in done.stdout, done.stdout[-2000:]
    CASE_COUNTS["kv native planted mutants caught"] += 1
