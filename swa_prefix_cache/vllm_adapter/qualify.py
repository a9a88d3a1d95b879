"""``python -m swa_prefix_cache qualify``: will the plugin serve this
installation, and does it answer as vLLM does here?

Run in an operator's environment, it prints the installed vLLM and CPython,
whether the extension is built and which fast paths it chose, each patch's
binding and whether it applies (the functions that changed when not), then a
bounded differential check: the plugin installed in shadow mode (both
lookups run on every call, vLLM's answer returned, every disagreement
counted: the same comparison ``SWA_PREFIX_CACHE_MODE=shadow`` makes in
production) over random lookups on vLLM's real ``BlockPool`` and managers of
this installation. It judges what would really serve vLLM here, with the
environment's settings, and says it in its last line and its exit code:

  0  PASS            the plugin would serve, and every lookup a patch
                     replaces agreed with vLLM's own
  1  FAIL            the plugin would serve, and a lookup disagreed or failed
  2  REFUSED         a setting has a value the plugin does not know (the
                     line names the variable and the values it takes)
  3  WOULD NOT SERVE SWA_PREFIX_CACHE_MODE=off, vLLM would not load the plugin
                     (its entry point is not installed, or VLLM_PLUGINS leaves
                     it out), vLLM is not importable, or its sliding-window
                     lookup is code the plugin does not know
  4  DEGRADED        the answers agreed, but a patch that exists for a lookup
                     does not apply here (unknown code, the extension missing,
                     an opt-in part refused): vLLM's own code, or a slower
                     path, serves it; the lines before name each one

Before the verdict it prints, per lookup, what would answer it with these
settings: native (the proved C), python (pyspec's search) or vllm (its own).

The ``--json`` report holds the same facts (``verdict``, ``exit``).
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

from swa_prefix_cache.vllm_adapter import fingerprint

PLUGIN_GROUP = "vllm.general_plugins"
PLUGIN_NAME = "swa_prefix_cache"
EXIT = {"PASS": 0, "FAIL": 1, "REFUSED": 2, "WOULD NOT SERVE": 3, "DEGRADED": 4}


def settings_problem() -> str | None:
    """The first setting the plugin would refuse, said as it says it, or
    None. A setting nothing reads with these settings (the data-parallel
    load weight while that routing is off) is not refused here:
    ``settings_warnings`` names it."""
    import os

    from swa_prefix_cache import settings
    from swa_prefix_cache.vllm_adapter import config, stats_file

    readers = (config.read_mode, config.read_core, config.read_lookup_memo,
               config.read_offload_filter, config.read_dp_routing)
    try:
        for read in readers:
            read()
        settings.STRICT_NATIVE.read()
        if config.read_dp_routing() is config.DpRouting.EXACT:
            config.read_tokens_per_load(0.0)
    except ValueError as exc:
        return str(exc)
    directory = stats_file.stats_dir()
    if directory is not None and not directory.is_dir() and os.path.exists(directory):
        return f"{stats_file.STATS_DIR_ENV}={directory} is not a directory"
    return None


def settings_warnings() -> list[str]:
    """What is off in the settings without being refused: each unknown
    ``SWA_PREFIX_CACHE_*`` name (with the setting it is a near miss of),
    and a bad value of a setting nothing reads with these settings."""
    from swa_prefix_cache import settings
    from swa_prefix_cache.vllm_adapter import config

    said = settings.unknown_said()
    try:
        unused = config.read_dp_routing() is not config.DpRouting.EXACT
    except ValueError:  # refused by settings_problem
        unused = False
    if unused:
        try:
            config.read_tokens_per_load(0.0)
        except ValueError as exc:
            said.append(f"{exc} (unused while SWA_PREFIX_CACHE_DP_ROUTING is off)")
    return said


def not_serving() -> str | None:
    """Why vLLM would not run the plugin's lookups here, or None."""
    import os
    from importlib.metadata import entry_points

    from swa_prefix_cache.vllm_adapter.config import Mode, read_mode

    if read_mode() is Mode.OFF:
        return "SWA_PREFIX_CACHE_MODE=off: vLLM's own code serves"
    if not any(ep.name == PLUGIN_NAME for ep in entry_points(group=PLUGIN_GROUP)):
        return (f"the entry point {PLUGIN_NAME} ({PLUGIN_GROUP}) is not installed: "
                "vLLM would not load the plugin (pip install the package)")
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and PLUGIN_NAME not in allowed.split(","):
        return f"VLLM_PLUGINS={allowed!r} leaves out {PLUGIN_NAME}: vLLM would not load the plugin"
    return None


def native_report() -> dict[str, Any]:
    """The extension: built or why not, and its fast paths."""
    try:
        from swa_prefix_cache.core import hotpath

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
    fingerprint.BLOCK_IDS:
        "the hash map holds block ids, read as this release reads them",
    fingerprint.JUNCTION_PINNED:
        "vLLM's offload lookup pins the tier's junction itself; only the store filter is replaced",
}


def bindings_report() -> list[dict[str, Any]]:
    """Each patch of the registry (swa_prefix_cache/vllm_adapter/registry.py) against the
    known variants of its binding (call before installing)."""
    from swa_prefix_cache.vllm_adapter import registry

    rows = []
    for patch in registry.PATCHES:
        found = fingerprint.check(patch.binding)
        rows.append({
            "binding": patch.name, "replaces": patch.replaces, "sources": patch.binding.doc,
            "binds": [target.name for target in patch.binds], "setting": patch.setting.name,
            "opt_in": patch.opt_in, "part_of": patch.part_of, "applies": found.known, "variant": found.variant,
            "semantics": found.semantics, "changed": list(found.changed),
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

    from swa_prefix_cache import vllm_adapter
    from swa_prefix_cache.vllm_adapter.config import Mode

    vllm_adapter.uninstall()
    if not vllm_adapter.install(Mode.SHADOW):
        return {"lookups": 0, "vllm_raised": 0, "compared": 0, "expected": 0, "mismatches": 0,
                "errors": 0, "not_installed": vllm_adapter.status()["reason"]}
    # A lookup is compared when a patch replaces it: the full-attention one
    # is replaced only on the native core.
    full_replaced = vllm_adapter.status()["full_attention"]["installed"]
    rng = random.Random(seed)
    done = raised = expected = 0
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
            replaced = manager is SlidingWindowManager or full_replaced
            try:
                manager.find_longest_cache_hit(
                    block_hashes=hashes, max_length=max_length, kv_cache_group_ids=[0],
                    block_pool=pool, kv_cache_spec=spec, drop_eagle_block=eagle,
                    alignment_tokens=alignment,
                )
                expected += replaced
            except Exception:  # vLLM's own method rejected the input (shadow runs it first)
                raised += 1
            done += 1
    finally:
        stats = vllm_adapter.stats()
        result = {"lookups": done, "vllm_raised": raised, "expected": expected,
                  "compared": stats.shadow_compared - base[0],
                  "mismatches": stats.shadow_mismatches - base[1], "errors": stats.errors - base[2]}
        vllm_adapter.uninstall()
    return result


def serving_report() -> dict[str, Any]:
    """What would answer each lookup with this environment's settings: the
    plugin installed as vLLM would install it, read, and removed again."""
    from swa_prefix_cache import vllm_adapter

    vllm_adapter.uninstall()
    try:
        vllm_adapter.install()
        status = vllm_adapter.status()
        return {"paths": status["paths"], "degraded": status["degraded"],
                "patches": status["patches"]}
    finally:
        vllm_adapter.uninstall()


def run(lookups: int, seed: int) -> dict[str, Any]:
    report = _run(lookups, seed)
    report["exit"] = EXIT[report["verdict"]]
    report["ok"] = report["verdict"] == "PASS"
    return report


def _run(lookups: int, seed: int) -> dict[str, Any]:
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
    report["refused"] = settings_problem()
    report["settings_warnings"] = settings_warnings()
    if report["refused"] is not None:
        report["verdict"] = "REFUSED"
        return report
    if report["vllm"] is None:
        report["verdict"], report["why"] = "WOULD NOT SERVE", "vLLM is not importable"
        return report
    report["bindings"] = bindings_report()
    applies = {b["binding"] for b in report["bindings"] if b["applies"]}
    report["differential"] = None
    if "sliding_window" not in applies:
        report["verdict"] = "WOULD NOT SERVE"
        report["why"] = "vLLM's sliding-window lookup is code the plugin does not know"
        return report
    started = time.perf_counter()
    check = differential_check(lookups, seed)
    check["seconds"] = round(time.perf_counter() - started, 2)
    report["differential"] = check
    agreed = (check["compared"] == check["expected"] > 0
              and check["mismatches"] == 0 and check["errors"] == 0)
    report["why"] = not_serving()
    if report["why"] is not None:
        report["verdict"] = "WOULD NOT SERVE"
        return report
    report["serving"] = serving_report()
    if not agreed:
        report["verdict"] = "FAIL"
    elif report["serving"]["degraded"]:
        report["verdict"] = "DEGRADED"
    else:
        report["verdict"] = "PASS"
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
    for line in report.get("settings_warnings", []):
        print(f"setting: {line}")
    for row in report.get("bindings", []):
        binds = (f"sets {', '.join(row['binds'])}" if row["binds"]
                 else f"sets nothing: a fast path of {row['part_of']}")
        gate = f"{row['setting']}, opt-in" if row["opt_in"] else row["setting"]
        if row["applies"]:
            how = f"; {SEMANTICS_SAID[row['semantics']]}" if row.get("semantics") else ""
            print(f"patch {row['binding']}: applies (code as in vLLM {row['variant']}{how}; "
                  f"{binds}; {gate})")
        else:
            print(f"patch {row['binding']}: does not apply; changed: {', '.join(row['changed'])} "
                  f"({binds}; {gate})")
    check = report.get("differential")
    if check is not None:
        print(f"differential check (sliding-window and full-attention lookups; the KV-offload lookup "
              f"is not exercised here): {check['compared']} of the {check['expected']} lookups a patch "
              f"replaces (of {check['lookups']}; {check['vllm_raised']} rejected by vLLM) compared "
              f"with vLLM's own, {check['mismatches']} disagreed, {check['errors']} errors "
              f"({check['seconds']} s)")
    serving = report.get("serving")
    if serving is not None:
        for name, row in serving["paths"].items():
            probes = f" (probes: {row['probes']})" if row.get("probes") not in (None, "vllm") else ""
            print(f"lookup {name}: {row['answers']}{probes}")
        off = [f"{row['patch']} ({row['reason'] or 'not asked for'})"
               for row in serving["patches"] if not row["installed"]]
        print(f"patches installed: {sum(row['installed'] for row in serving['patches'])} of "
              f"{len(serving['patches'])}" + (f"; off: {', '.join(off)}" if off else ""))
    verdict = report["verdict"]
    if verdict == "DEGRADED":
        print("DEGRADED: " + "; ".join(serving["degraded"]))
    elif verdict == "REFUSED":
        print(f"REFUSED: {report['refused']}; the plugin would leave that part of it off")
    elif verdict == "WOULD NOT SERVE":
        print(f"WOULD NOT SERVE: {report['why']}")
    else:
        print(verdict)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swa_prefix_cache qualify", description=__doc__,
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
    return int(report["exit"])


if __name__ == "__main__":
    sys.exit(main())
