"""The plugin never makes CPython build the ``__dict__`` of a vLLM object
it reads (swa_prefix_cache/vllm_adapter/instance_attrs.py).

On CPython 3.11+ an object keeps its attributes as inline values until
something asks for its ``__dict__``; from then on every ``self.x`` of vLLM's
own code on it is slower, at every scheduler step. Issue 45's "time added
elsewhere" was this: the glue read the pool's and its hash map's
``__dict__`` at each lookup and the lookup memory the coordinator's (the
short-prompt replay of gemma-3-27b: +6.9 us a step outside the lookups
before, -0.6 us after). Checked here on a workload driven like vLLM's
scheduler drives it (lookups, admissions, decodes, frees, the memory
remembering and forgetting), with the native core and with the python one:
the pool, its map, the coordinator and its managers keep their inline
values (the lookup memory's watch sets nothing on vLLM's map: it puts a
view of it in the pool's slot). ``materialized`` reads the object's GC
referents, which do not build the dict.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest

pytest.importorskip("vllm")

from test_lookup_memo import SCENARIOS, run_workloads  # noqa: E402
from vllm_support import unpatched  # noqa: E402, F401 (autouse fixture)

from swa_prefix_cache.vllm_adapter import instance_attrs  # noqa: E402


def materialized(obj: Any) -> bool:
    """Whether ``obj`` holds a real ``__dict__``: a dict among its GC
    referents that maps its attribute names to its attribute values (an
    object with inline values has its values as referents, not a dict)."""
    names = [name for name in ("block_pool", "single_type_managers", "_cache", "blocks",
                               "kv_cache_spec", "num_gpu_blocks")
             if hasattr(obj, name)]
    assert names, f"{type(obj).__name__}: no known attribute to look for"
    return any(
        type(ref) is dict and any(name in ref and ref[name] is getattr(obj, name) for name in names)
        for ref in gc.get_referents(obj)
    )


@pytest.mark.skipif(sys.version_info >= (3, 13), reason=(
    "CPython 3.13 keeps the values inline when it builds the dict (the dict reads them), so "
    "the GC referents do not show it, and reads stay fast: 45.7 ns before vars(), 45.6 after"))
def test_materialized_sees_a_built_dict() -> None:
    """The check can fail: ``vars`` builds the dict and it is seen."""
    [work] = run_workloads(seed=1, steps=0, scenarios=[SCENARIOS[0]])
    pool = work.manager.block_pool
    assert not materialized(pool)
    vars(pool)
    assert materialized(pool)


@pytest.mark.parametrize("core", ["native", "python"])
@pytest.mark.parametrize("memo", ["on", "off"])
def test_lookups_build_no_dict_of_vllms_objects(core: str, memo: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways, after a workload that made many maps (the ones of
    earlier scenarios): a name set on the 28th object of a class builds its
    dict, which the memory's watch did while it set insert and pop on
    vLLM's maps. The map checked is vLLM's, in its pool again or not."""
    monkeypatch.setenv("SWA_PREFIX_CACHE_CORE", core)
    monkeypatch.setenv("SWA_PREFIX_CACHE_LOOKUP_MEMO", memo)
    works = run_workloads(seed=45, steps=400, scenarios=SCENARIOS, memo=memo == "on")
    assert sum(w.lookups for w in works) > 400
    assert all(w.mismatches == 0 for w in works)
    built = []
    for i, work in enumerate(works):
        coordinator = work.manager.coordinator
        pool = coordinator.block_pool
        block_map = getattr(pool.cached_block_hash_to_block, "_vllm_map", pool.cached_block_hash_to_block)
        objects = {"coordinator": coordinator, "block_pool": pool, "hash map": block_map}
        objects.update({f"manager {k}": m for k, m in enumerate(coordinator.single_type_managers)})
        built += [f"scenario {i}: {name}" for name, obj in objects.items() if materialized(obj)]
    assert built == [], built


def test_calls_own_reads_no_dict() -> None:
    class Owner:
        def __init__(self) -> None:
            self.kv_cache_spec = 1

        def lookup(self) -> int:
            return 1

    fn = Owner.__dict__["lookup"]
    obj = Owner()
    assert instance_attrs.calls_own(obj, "lookup", fn)
    assert instance_attrs.calls_own(obj, "clear", None)
    assert not materialized(obj)
    obj.lookup = lambda: 2  # an instance that shadows the class's method
    assert not instance_attrs.calls_own(obj, "lookup", fn)
    assert not instance_attrs.calls_own(Owner(), "lookup", Owner.__init__)
    obj.clear = fn
    assert not instance_attrs.calls_own(obj, "clear", None)


def test_the_extensions_calls_own_answers_as_pythons() -> None:
    """``all_own_checker`` with the extension and without it: the same
    answers on owned, shadowed, re-bound, patched-class and missing
    methods, and no dict built; bad pairs raise naming them."""
    from swa_prefix_cache.core import hotpath

    class Owner:
        def __init__(self) -> None:
            self.kv_cache_spec = 1

        def lookup(self) -> int:
            return 1

        def store(self) -> int:
            return 2

    class Patched(Owner):
        def lookup(self) -> int:
            return 3

    lookup, store = Owner.__dict__["lookup"], Owner.__dict__["store"]
    both = (("lookup", lookup), ("store", store))
    plain, shadowed, rebound = Owner(), Owner(), Owner()
    shadowed.store = lambda: 4
    rebound.lookup = rebound.lookup  # the very bound method: still calls its class's own
    cases = [
        (plain, both, True),
        (plain, (("lookup", lookup),), True),
        (plain, (), True),
        (shadowed, both, False),
        (shadowed, (("lookup", lookup),), True),
        (rebound, both, True),
        (Patched(), both, False),
        (plain, (("lookup", store),), False),
        (plain, (("missing", lookup),), False),
    ]
    native = instance_attrs.all_own_checker(hotpath.load())
    python = instance_attrs.all_own_checker(None)
    for obj, pairs, want in cases:
        assert native(obj, pairs) is want, (obj, pairs)
        assert python(obj, pairs) is want, (obj, pairs)
    assert not materialized(plain)
    for pairs, name in ((["lookup", lookup], "pairs"), ((("lookup",),), "pairs\\[0\\]"),
                        (((b"lookup", lookup),), "pairs\\[0\\]")):
        with pytest.raises(TypeError, match=name):
            native(plain, pairs)


# Run in a fresh interpreter: a class's shared keys take new attribute
# names only while it has made fewer than about 28 objects, and an earlier
# test of this process may already have made (or named) them.
_MANY_MAPS_FIRST = """
import sys
sys.path.insert(0, {tests!r})
from vllm.v1.core.block_pool import BlockPool
pools = [BlockPool(num_gpu_blocks=2, enable_caching=True, hash_block_size=16) for _ in range(40)]
from test_instance_dicts import materialized
from test_lookup_memo import SCENARIOS, memo_stats, run_workloads
works = run_workloads(seed=45, steps=300, scenarios=SCENARIOS[:4], memo=True)
assert memo_stats()["remembered"] > 0, memo_stats()
assert all(w.mismatches == 0 for w in works)
maps = [w.manager.coordinator.block_pool.cached_block_hash_to_block for w in works]
maps = [getattr(m, "_vllm_map", m) for m in maps]
print("built:", sum(materialized(m) for m in maps), "of", len(maps))
"""


def test_the_memorys_watch_builds_no_map_dict_after_many_maps(tmp_path: Any) -> None:
    """With 40 maps made before the memory first watches, a name set on
    vLLM's map would build its dict (the watch before this fix: insert and
    pop set on the map); the watching view sets nothing on it."""
    import subprocess
    import sys
    from pathlib import Path

    tests = str(Path(__file__).parent)
    run = subprocess.run([sys.executable, "-c", _MANY_MAPS_FIRST.format(tests=tests)],
                         capture_output=True, text=True, timeout=600,
                         env={**__import__("os").environ, "SWA_PREFIX_CACHE_LOOKUP_MEMO": "on"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "built: 0 of 4" in run.stdout, run.stdout
