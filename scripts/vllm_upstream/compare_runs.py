"""Compare two runs of vLLM's unit tests: with our plugin and without it.

Usage:
    python compare_runs.py WITH.xml WITH.json WITHOUT.xml WITHOUT.json

The ``.xml`` files are pytest ``--junitxml`` reports, the ``.json`` files
what scripts/vllm_upstream/vllm_upstream_plugin.py wrote at session end.

Exit status 0 only when
* both pytest sessions ended normally (exit status 0 or 1: no crash,
  interruption, usage error, or empty selection) and ran the same tests;
* the "with" run had the patch installed and its patched methods were
  called at least once in all (the sum of the call counters the plugin read
  from ``swa_prefix_cache.vllm_adapter.status()``, each printed); the "without" run had it
  not installed and no calls;
* vLLM's "requires Triton" config guard was passed over in both runs or
  in neither (triton_guard.py);
* no test that passed without the plugin fails, errors, is skipped or is
  missing with it, and no test passes only with it (a provably identical
  lookup cannot fix a test: that would mean the runs differ in something
  else, so it is reported as a difference too).

Tests that fail in both runs are listed, grouped by cause (the reasons in
known_failures.py, else their first error line), and do not fail the
comparison: they say something about this machine, not the plugin.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from known_failures import explain

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"


def _reason(element: ET.Element) -> str:
    text = element.get("message") or (element.text or "").strip()
    first = text.strip().splitlines()[0] if text.strip() else element.tag
    return first if len(first) <= 240 else first[:237] + "..."


def read_junit(
    path: Path, details: dict[str, str] | None = None
) -> dict[str, tuple[str, str]]:
    """``{test id: (outcome, reason)}`` from a junit xml file; the full text
    of each non-pass (message and traceback) into ``details`` if given."""
    outcomes: dict[str, tuple[str, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        classname = case.get("classname", "")
        test_id = f"{classname}::{case.get('name', '')}" if classname else case.get("name", "")
        outcome, reason = PASSED, ""
        for child in case:
            if child.tag in ("error", "failure"):
                outcome = ERROR if child.tag == "error" else FAILED
                reason = _reason(child)
                if details is not None and test_id not in details:
                    details[test_id] = f"{child.get('message') or ''}\n{child.text or ''}"
                break
            if child.tag == "skipped":
                outcome, reason = SKIPPED, _reason(child)
        if test_id in outcomes and outcomes[test_id][0] != PASSED:
            continue  # keep the first non-pass (e.g. a teardown error entry)
        outcomes[test_id] = (outcome, reason)
    return outcomes


def summary(outcomes: dict[str, tuple[str, str]]) -> str:
    counts = Counter(outcome for outcome, _ in outcomes.values())
    return ", ".join(
        f"{counts.get(k, 0)} {k}" for k in (PASSED, FAILED, ERROR, SKIPPED)
    ) + f" (of {len(outcomes)})"


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    with_xml, with_json, without_xml, without_json = map(Path, argv[1:])
    problems: list[str] = []

    reports = {}
    for label, path in (("with plugin", with_json), ("without plugin", without_json)):
        try:
            reports[label] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            problems.append(f"{label}: no session report ({exc})")
    runs = {}
    details: dict[str, str] = {}  # failure texts of the run without the plugin
    for label, path in (("with plugin", with_xml), ("without plugin", without_xml)):
        try:
            runs[label] = read_junit(path, details if label == "without plugin" else None)
        except (OSError, ET.ParseError) as exc:
            problems.append(f"{label}: no junit report ({exc})")
    if problems:
        for p in problems:
            print(f"FAIL: {p}")
        return 1

    on, off = runs["with plugin"], runs["without plugin"]
    rep_on, rep_off = reports["with plugin"], reports["without plugin"]

    print(f"with plugin:    {summary(on)}")
    print(f"without plugin: {summary(off)}")
    print(
        f"patched-lookup calls: {rep_on.get('calls')} with plugin "
        f"(backend {rep_on.get('backend') or '-'}), {rep_off.get('calls')} without"
    )
    for counter, n in sorted((rep_on.get("calls_by_counter") or {}).items()):
        print(f"    swa_prefix_cache.vllm_adapter.status() {counter}: {n} with plugin, "
              f"{(rep_off.get('calls_by_counter') or {}).get(counter, 0)} without")

    guard = {label: bool(rep.get("triton_guard_passed_over"))
             for label, rep in (("with plugin", rep_on), ("without plugin", rep_off))}
    if any(guard.values()):
        print(
            "vLLM's CPU platform refuses configs on x86 without Triton; that guard was "
            f"passed over in both runs (triton_guard.py): "
            f"{rep_on.get('triton_guard_configs')} config checks with plugin, "
            f"{rep_off.get('triton_guard_configs')} without"
        )
    if guard["with plugin"] != guard["without plugin"]:
        problems.append(f"the Triton guard was passed over in one run only: {guard}")

    for label, rep in (("with plugin", rep_on), ("without plugin", rep_off)):
        if rep.get("exitstatus") not in (0, 1):
            problems.append(
                f"{label}: pytest exit status {rep.get('exitstatus')} "
                "(interrupted, internal error, usage error or no tests)"
            )
    if not rep_on.get("installed_at_end"):
        problems.append(f"with plugin: patch not installed at session end ({rep_on.get('reason')})")
    if not rep_on.get("calls"):
        problems.append("with plugin: no patched lookup was ever called")
    if rep_off.get("installed_at_end") or rep_off.get("calls"):
        problems.append("without plugin: the patch was active in the reference run")
    if not off:
        problems.append("without plugin: no tests ran")
    if set(on) != set(off):
        only_on, only_off = sorted(set(on) - set(off)), sorted(set(off) - set(on))
        problems.append(
            f"the runs collected different tests: {len(only_on)} only with plugin "
            f"{only_on[:5]}, {len(only_off)} only without {only_off[:5]}"
        )

    regressions = sorted(
        t for t, (o, _) in off.items() if o == PASSED and on.get(t, ("missing", ""))[0] != PASSED
    )
    only_with = sorted(
        t for t, (o, _) in on.items() if o == PASSED and t in off and off[t][0] != PASSED
    )
    both = sorted(
        t for t, (o, _) in off.items()
        if o in (FAILED, ERROR) and t in on and on[t][0] in (FAILED, ERROR)
    )
    skipped_both = sum(
        1 for t, (o, _) in off.items() if o == SKIPPED and on.get(t, ("", ""))[0] == SKIPPED
    )

    if both:
        print(f"\nfailing in BOTH runs ({len(both)}; not caused by the plugin), by cause:")
        groups: dict[tuple[str, str], list[str]] = {}
        for t in both:
            known = explain(details.get(t, "") + "\n" + off[t][1])
            key = known if known else ("not explained", off[t][1])
            groups.setdefault(key, []).append(t)
        for (name, reason), tests in sorted(groups.items(), key=lambda g: -len(g[1])):
            print(f"\n  [{len(tests)}] {name}: {reason}")
            for t in tests:
                print(f"      {off[t][0].upper():6} {t}")
    else:
        print("\nfailing in both runs: none")
    if skipped_both:
        print(f"skipped in both runs: {skipped_both}")

    if regressions:
        problems.append(f"{len(regressions)} test(s) pass without the plugin but not with it")
        print(f"\nREGRESSIONS with the plugin ({len(regressions)}):")
        for t in regressions:
            outcome, reason = on.get(t, ("missing", "not run with the plugin"))
            print(f"  {outcome.upper():7} {t}\n          {reason}")
    if only_with:
        problems.append(f"{len(only_with)} test(s) pass only with the plugin")
        print(f"\nDIFFERENCES: pass only with the plugin ({len(only_with)}):")
        for t in only_with:
            print(f"  {t}\n          without: {off[t][0]}: {off[t][1]}")

    print()
    if problems:
        for p in problems:
            print(f"FAIL: {p}")
        return 1
    print(
        f"OK: every test that passes without the plugin passes with it "
        f"({sum(1 for o, _ in on.values() if o == PASSED)} passed with, "
        f"{sum(1 for o, _ in off.values() if o == PASSED)} without); "
        f"patched lookups called {rep_on['calls']} times"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
