"""``python -m vllm_adapter qualify``: will the plugin serve this
installation, and does it answer as vLLM does here?

Run in an operator's environment, it prints the installed vLLM and CPython,
whether the extension is built and which fast paths it chose, each patch's
binding and whether it applies (the functions that changed when not), then a
bounded differential check: the plugin installed in shadow mode (both
lookups run on every call, vLLM's answer returned, every disagreement
counted: the same comparison ``SWA_PREFIX_CACHE_MODE=shadow`` makes in
production) over random lookups on vLLM's real ``BlockPool`` and managers of
this installation. Exit 0 only when every patch that applies agreed on
every lookup; 1 otherwise; the ``--json`` report holds the same facts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import random
import sys
import sysconfig
import time
from typing import Any

from vllm_adapter import fingerprint


def native_report() -> dict[str, Any]:
    """The extension: built or why not, and its fast paths."""
    try:
        from extracted_c import hotpath

        module = hotpath.load()
    except Exception as exc:  # not built, or refused (free-threaded)
        return {"built": False, "why": str(exc)}
    fast = getattr(module, "fast_paths", None)
    return {"built": True, **(fast() if callable(fast) else {})}


# What a variant's ``semantics`` means for the operator.
SEMANTICS_SAID = {
    fingerprint.BLOCK_ALIGNED_ONLY:
        "an alignment that is not a multiple of the block size goes to vLLM's own "
        "method, which refuses it on this release",
}


def bindings_report() -> list[dict[str, Any]]:
    """Each binding against the known variants (call before installing)."""
    rows = []
    for binding in fingerprint.BINDINGS:
        found = fingerprint.check(binding)
        rows.append({
            "binding": binding.name, "replaces": binding.doc, "applies": found.known,
            "variant": found.variant, "semantics": found.semantics,
            "changed": list(found.changed),
        })
    return rows


def _block_hash(index: int, salt: bytes) -> bytes:
    return hashlib.sha256(salt + index.to_bytes(8, "big")).digest()


def differential_check(lookups: int, seed: int) -> dict[str, int]:
    """``lookups`` random lookups through each replaced manager method with
    the plugin in shadow mode; the plugin's own counters say how many were
    compared and how many disagreed."""
    import torch
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id
    from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager, SlidingWindowManager
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    import vllm_adapter
    from vllm_adapter.config import Mode

    vllm_adapter.uninstall()
    if not vllm_adapter.install(Mode.SHADOW):
        return {"compared": 0, "mismatches": 0, "errors": 0, "lookups": 0}
    rng = random.Random(seed)
    done = raised = 0
    before = vllm_adapter.stats()
    base = (before.shadow_compared, before.shadow_mismatches, before.errors)
    try:
        for case in range(lookups):
            block_size = rng.choice((1, 2, 4, 16))
            n = rng.randrange(0, 64)
            salt = case.to_bytes(4, "big")
            hashes = [BlockHash(_block_hash(i, salt)) for i in range(n + 1)]
            pool = BlockPool(num_gpu_blocks=n + 2, enable_caching=True, hash_block_size=block_size)
            density = rng.random()
            free = iter(b for b in pool.blocks if b is not pool.null_block)
            for i in range(n):
                if rng.random() < density:
                    pool.cached_block_hash_to_block.insert(
                        make_block_hash_with_group_id(hashes[i], 0), next(free))
            max_length = rng.randrange(0, n * block_size + 1) if n else 0
            eagle = rng.random() < 0.3
            # Block-aligned mostly; a multiple, or half a block (a fine-grained
            # alignment, which vLLM 0.28/0.29 refuse).
            alignment = rng.choice((block_size, block_size, 2 * block_size,
                                    max(1, block_size // 2)))
            if rng.random() < 0.5:
                window = rng.randrange(1, 8 * block_size + 2)
                spec: Any = SlidingWindowSpec(block_size=block_size, num_kv_heads=1, head_size=1,
                                              dtype=torch.float32, sliding_window=window)
                manager: Any = SlidingWindowManager
            else:
                spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1,
                                         dtype=torch.float32)
                manager = FullAttentionManager
            try:
                manager.find_longest_cache_hit(
                    block_hashes=hashes, max_length=max_length, kv_cache_group_ids=[0],
                    block_pool=pool, kv_cache_spec=spec, drop_eagle_block=eagle,
                    alignment_tokens=alignment,
                )
            except Exception:  # vLLM's own method rejected the input (shadow runs it first)
                raised += 1
            done += 1
    finally:
        stats = vllm_adapter.stats()
        result = {"lookups": done, "vllm_raised": raised,
                  "compared": stats.shadow_compared - base[0],
                  "mismatches": stats.shadow_mismatches - base[1], "errors": stats.errors - base[2]}
        vllm_adapter.uninstall()
    return result


def run(lookups: int, seed: int) -> dict[str, Any]:
    report: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "arch": platform.machine(),
        "gil_disabled": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    }
    try:
        report["vllm"] = fingerprint.installed_version()
    except Exception as exc:  # no vLLM here
        report["vllm"] = None
        report["vllm_error"] = repr(exc)
    report["extension"] = native_report()
    if report["vllm"] is None:
        report["ok"] = False
        return report
    report["bindings"] = bindings_report()
    applies = {b["binding"] for b in report["bindings"] if b["applies"]}
    if {"sliding_window"} <= applies:
        started = time.perf_counter()
        check = differential_check(lookups, seed)
        check["seconds"] = round(time.perf_counter() - started, 2)
        report["differential"] = check
        report["ok"] = (check["compared"] == check["lookups"] - check["vllm_raised"] > 0
                        and check["mismatches"] == 0 and check["errors"] == 0)
    else:
        report["differential"] = None
        report["ok"] = False
    return report


def print_report(report: dict[str, Any]) -> None:
    print(f"CPython {report['python']} ({report['implementation']}, {report['arch']}"
          f"{', free-threaded' if report['gil_disabled'] else ''})")
    print(f"vLLM {report['vllm'] or 'not importable: ' + report.get('vllm_error', '')}")
    ext = report["extension"]
    if ext.get("built"):
        print(f"extension: built; read-ahead {'on' if ext.get('read_ahead') else 'off'}, "
              f"key hash {ext.get('hash', '?')}" + (f" ({ext['why']})" if ext.get("why") else ""))
    else:
        print(f"extension: NOT available ({ext.get('why')}); the python core would serve")
    for row in report.get("bindings", []):
        if row["applies"]:
            how = f"; {SEMANTICS_SAID[row['semantics']]}" if row.get("semantics") else ""
            print(f"patch {row['binding']}: applies (code as in vLLM {row['variant']}{how})")
        else:
            print(f"patch {row['binding']}: does not apply; changed: {', '.join(row['changed'])}")
    check = report.get("differential")
    if check is None:
        print("differential check: not run (the sliding-window patch does not apply)")
    else:
        verdict = "PASS" if report["ok"] else "FAIL"
        print(f"differential check (sliding-window and full-attention lookups; the KV-offload lookup "
              f"is not exercised here): {verdict}: {check['compared']} of {check['lookups']} lookups "
              f"compared with vLLM's own ({check['vllm_raised']} rejected by vLLM), "
              f"{check['mismatches']} disagreed, {check['errors']} errors "
              f"({check['seconds']} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_adapter qualify", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lookups", type=int, default=2000, help="random lookups (default 2000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    args = parser.parse_args(argv)
    if args.lookups < 1:
        parser.error("--lookups must be >= 1")
    report = run(args.lookups, args.seed)
    print_report(report)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=1)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
