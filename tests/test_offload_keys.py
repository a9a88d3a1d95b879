"""The KV-offload request keys (swa_prefix_cache/vllm_adapter/offload_keys.py) against
vLLM's own ``RequestOffloadState.update_offload_keys``, on vLLM's real
``RequestOffloadState`` and ``ReqContext``.

Two states are built alike; one is extended by the plugin's method, the
other by vLLM's, a few blocks at a time as a request's hashes grow. Each
group's key list and the context's positions (values and insertion order)
must end equal, and so must an error vLLM raises (bad group index, hashes
that are not bytes). Inputs outside the model (a patched context, a tuple
of hashes) go to vLLM's own loop.
"""

from __future__ import annotations

import os
import random
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")

from conftest import CASE_COUNTS  # noqa: E402
from vllm_support import unpatched  # noqa: E402, F401 (autouse fixture)

from swa_prefix_cache import vllm_adapter  # noqa: E402
from swa_prefix_cache.vllm_adapter import Mode, fingerprint, offload_keys  # noqa: E402

pytestmark = pytest.mark.skipif(
    not fingerprint.check(fingerprint.OFFLOAD_KEYS).known,
    reason="the request-key loop binds vLLM 0.33.0 and 0.34.0",
)


@pytest.fixture(scope="module")
def env():  # type: ignore[no-untyped-def]
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        RequestOffloadState,
    )
    from vllm.v1.kv_offload.base import ReqContext

    original = RequestOffloadState.__dict__["update_offload_keys"]
    return SimpleNamespace(RequestOffloadState=RequestOffloadState, ReqContext=ReqContext,
                           original=original)


def _install() -> None:
    assert vllm_adapter.install(Mode.ON)
    assert offload_keys.status()["installed"], offload_keys.status()


def _state(env, groups, hashes):  # type: ignore[no-untyped-def]
    """A real RequestOffloadState over stand-in config and request data."""
    config = SimpleNamespace(kv_group_configs=tuple(
        SimpleNamespace(group_idx=g, hashes_per_chunk=h, tokens_per_chunk=t) for g, h, t in groups))
    req = SimpleNamespace(block_hashes=hashes, kv_transfer_params=None, request_id="r")
    return env.RequestOffloadState(config=config, req=req, req_context=env.ReqContext(req_id="r"),
                                   offloading_context=None)


def _outcome(fn, state):  # type: ignore[no-untyped-def]
    try:
        fn(state)
    except Exception as exc:  # vLLM's own error, compared by type and text
        return (type(exc), str(exc))
    return None


def _same(a, b) -> None:  # type: ignore[no-untyped-def]
    assert [g.offload_keys for g in a.group_states] == [g.offload_keys for g in b.group_states]
    assert list(a.req_context._offload_key_positions.items()) == \
        list(b.req_context._offload_key_positions.items())


def test_keys_same_as_vllm_as_a_request_grows(env) -> None:
    _install()
    rng = random.Random(11)
    before = offload_keys.status()
    cases = 0
    for _ in range(int(os.environ.get("PREFIX_CACHE_OFFLOAD_KEYS_CASES", "400"))):
        groups = [(rng.randint(0, 9), rng.choice((1, 1, 2, 3, 4)), rng.choice((16, 32, 64, 256)))
                  for _ in range(rng.randint(1, 7))]
        hashes_a: list[bytes] = []
        hashes_b: list[bytes] = []
        ours = _state(env, groups, hashes_a)
        theirs = _state(env, groups, hashes_b)
        for _ in range(rng.randint(1, 6)):
            new = [rng.randbytes(32) for _ in range(rng.randint(0, 300))]
            if new and rng.random() < 0.1:
                new[-1] = new[0]  # a repeated hash: its position is overwritten, order kept
            hashes_a.extend(new)
            hashes_b.extend(new)
            ours.update_offload_keys()
            env.original(theirs)
            _same(ours, theirs)
            cases += 1
    after = offload_keys.status()
    assert after["answered"] - before["answered"] == cases
    assert after["delegated"] == before["delegated"]
    CASE_COUNTS["offload request keys vs vLLM"] += cases


def test_errors_and_inputs_outside_the_model_are_vllms(env) -> None:
    """vLLM's error where vLLM raises one (groups before it done alike);
    a context with a patched setter, a tuple of hashes and odd sizes handed
    to vLLM's loop."""
    _install()
    hashes = [bytes([i]) * 32 for i in range(40)]
    before = offload_keys.status()["delegated"]
    cases = [
        ([(0, 1, 16), (-1, 1, 16)], hashes),  # group index out of to_bytes' range
        ([(0, 1, 16), (2**32, 2, 32)], hashes),
        ([(0, 2, 32), (1, 1, 16)], hashes[:5] + ["not bytes"] + hashes[5:]),  # type: ignore[list-item]
        ([(0, 1, 16)], [bytearray(b"x" * 32)] * 3),  # unhashable keys: vLLM fails on its first set
        ([(0, 0, 16)], hashes),  # islice / slice step 0
        ([(0, 1, 0)], hashes),
        ([(0, 1.0, 16)], hashes),
        ([(0, 1, 16)], tuple(hashes)),
    ]
    for groups, these in cases:
        ours = _state(env, groups, list(these) if isinstance(these, list) else these)
        theirs = _state(env, groups, list(these) if isinstance(these, list) else these)
        assert _outcome(env.RequestOffloadState.update_offload_keys, ours) == \
            _outcome(env.original, theirs), groups
        _same(ours, theirs)
    patched = _state(env, [(0, 1, 16)], list(hashes))
    seen: list = []
    patched.req_context.set_offload_key_position = lambda key, end: seen.append(end)
    patched.update_offload_keys()
    assert seen == [16 * (i + 1) for i in range(40)]
    assert offload_keys.status()["delegated"] - before == len(cases) + 1


def test_a_request_without_hashes_is_read_as_vllm_reads_it(env) -> None:
    """vLLM's own unit test drives the method with a request stub that has
    no ``block_hashes`` and no groups: vLLM's loop reads nothing and
    returns; with a group it raises AttributeError. Ours does the same."""
    _install()
    for groups in ([], [(0, 1, 16)]):
        ours, theirs = _state(env, groups, []), _state(env, groups, [])
        for state in (ours, theirs):
            del state.req.block_hashes
        assert _outcome(env.RequestOffloadState.update_offload_keys, ours) == \
            _outcome(env.original, theirs), groups
        _same(ours, theirs)
    assert _outcome(env.original, theirs)[0] is AttributeError


def test_shadow_mode_keeps_vllms_loop_and_uninstall_restores(env) -> None:
    assert vllm_adapter.install(Mode.SHADOW)
    assert env.RequestOffloadState.__dict__["update_offload_keys"] is env.original
    assert "mode shadow" in offload_keys.status()["reason"]
    vllm_adapter.uninstall()
    _install()
    assert env.RequestOffloadState.__dict__["update_offload_keys"] is not env.original
    vllm_adapter.uninstall()
    assert env.RequestOffloadState.__dict__["update_offload_keys"] is env.original
