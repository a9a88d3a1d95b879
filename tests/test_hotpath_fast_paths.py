"""What the extension chose on this interpreter (``fast_paths()``) and its
vLLM-free self-check (scripts/matrix/selfcheck.py: key hashes against
``hash()``, full-attention lookups on a stand-in pool read as vLLM's, the
offload search), so interpreters and machines without vLLM test the glue
too. The per-version choice: the read-ahead on CPython 3.11-3.13 (the dict
layout hotpath_dict.h mirrors), compiled out elsewhere; the AVX2 SipHash on
x86-64 with AVX2 where the read-ahead is on; CPython's hash otherwise.
"""

import importlib.util
import os
import platform
import random
import sys
from pathlib import Path

import pytest

from conftest import cpu_has_avx2, require_hotpath

ROOT = Path(__file__).resolve().parent.parent


def _selfcheck():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(
        "matrix_selfcheck", ROOT / "scripts" / "matrix" / "selfcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def module():  # noqa: ANN201
    require_hotpath()
    from swa_prefix_cache.core import hotpath

    return hotpath.load()


def test_fast_paths_say_what_this_version_gets(module) -> None:  # noqa: ANN001
    paths = module.fast_paths()
    assert set(paths) == {"read_ahead", "read_ahead_on", "hash", "built", "why"}
    assert paths["built"] is True
    expect_ahead = (3, 11) <= sys.version_info[:2] <= (3, 13)
    assert paths["read_ahead"] is expect_ahead, paths
    expect_hash = ("avx2-siphash13" if expect_ahead and platform.machine() == "x86_64"
                   and cpu_has_avx2() else "cpython")
    assert paths["hash"] == expect_hash, paths
    assert f"CPython {sys.version_info[0]}.{sys.version_info[1]}" in paths["why"]
    was = module.read_ahead(False)
    try:
        assert module.fast_paths()["read_ahead_on"] is False
        assert module.fast_paths()["read_ahead"] is expect_ahead
    finally:
        module.read_ahead(was)


def test_key_hashes_are_cpythons(module) -> None:  # noqa: ANN001
    checked = _selfcheck().key_hash_check(module, random.Random(1))
    assert (checked > 0) == (module.fast_paths()["hash"] == "avx2-siphash13")


def test_full_attention_on_a_stand_in_pool(module) -> None:  # noqa: ANN001
    trials = 40 if os.environ.get("PREFIX_CACHE_GLUE_QUICK") == "1" else 200
    assert _selfcheck().full_attention_check(module, random.Random(2), trials) == 2 * trials


def test_offload_search_answers_in_range(module) -> None:  # noqa: ANN001
    assert _selfcheck().offload_check(module, random.Random(3), 300) == 300
