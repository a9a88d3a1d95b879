#!/usr/bin/env bash
# verify.sh -- prove swa_prefix_cache/core/proved/params.c, prefix_cache.c, reachable.c,
# joint.c, offload_lookup.c and full_attention.c with Frama-C/WP, then check that
# deliberately broken copies of them (mutants) are rejected.
#
# Usage: swa_prefix_cache/core/proved/verify.sh [BUILD_DIR]   (default: <repo>/build/wp)
#
# Needs frama-c (25, Manganese), why3 (1.5.1), cvc4, cvc5 and z3 on PATH;
# Alt-Ergo is not used. Exits non-zero unless
#   * every WP goal of each file is proved (RTE, contracts, loop
#     invariants, variants, lemmas) and every smoke test passes
#     (no contradictory precondition, no dead code or dead loop), and
#   * every mutant leaves at least one goal unproved.
#
# Real file: provers are tried in order of speed, as a cascade: cvc4 on
# every goal (it proves all but a few dozen), then cvc5 on what cvc4 left,
# then z3 on what both left (frama-c -then stages). Racing the three provers
# on every goal costs 2-3x the CPU for nothing.
#
# Mutants: see section 2 below.
#
# Knobs (environment): PC_WP_TIMEOUT (s per prover and goal, default 10;
# PC_WP_Z3_TIMEOUT, default 30, for the last, z3 stage),
# PC_WP_PAR (parallel prover processes, default 4: on 2 cores a prover call
# spends about half its wall time waiting on WP's scheduler, so 4 keeps both
# cores busy; the slowest goal needs ~3 s of the 10 s timeout),
# PC_MUTANT_TIMEOUT (default 5), PC_SKIP_MUTANTS=1 to prove the real files
# only, PC_FILES (default "params.c prefix_cache.c reachable.c joint.c
# offload_lookup.c full_attention.c") to prove (and mutate) only some of
# them. joint.c calls find_hit through its contract in prefix_cache.h,
# which prefix_cache.c's proof establishes, and contiguous_blocks_for_hit
# and alignment_period through theirs in params.h, which params.c's proof
# establishes.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../../../build/wp}"
mkdir -p "$build"
build="$(cd "$build" && pwd)"
files="${PC_FILES:-params.c prefix_cache.c reachable.c joint.c offload_lookup.c full_attention.c}"
timeout="${PC_WP_TIMEOUT:-10}"
# z3 only sees the few goals cvc4 and cvc5 left; one of them (joint.c,
# blocks_to_tokens tokens_mod: a product modulo its factor) takes z3 ~4 s alone
# and timed out at 10 s on 2 loaded cores, so the last stage gets more room.
z3_timeout="${PC_WP_Z3_TIMEOUT:-30}"
par="${PC_WP_PAR:-4}"
mutant_timeout="${PC_MUTANT_TIMEOUT:-5}"

for tool in frama-c why3 cvc4 cvc5 z3; do
    command -v "$tool" >/dev/null || { echo "verify.sh: $tool not on PATH" >&2; exit 2; }
done

# ---- why3 configuration, kept inside the build dir -------------------------
export WHY3CONFIG="$build/why3.conf"
rm -f "$WHY3CONFIG"
why3 config detect >"$build/why3-detect.log" 2>&1
# why3 1.5.1 does not detect cvc5; without --force-logic=ALL every goal fails.
cat >>"$WHY3CONFIG" <<'EOF'

[prover]
command = "cvc5 --tlimit=%t000 --lang=smt2 --force-logic=ALL %f"
command_steps = "cvc5 --rlimit=%S --lang=smt2 --force-logic=ALL %f"
driver = "cvc4_17"
editor = ""
in_place = false
interactive = false
name = "CVC5"
shortcut = "cvc5"
version = "1.0.3"
EOF
provers="$(why3 config list-provers 2>/dev/null)"
for p in "CVC4 1.8" "CVC5 1.0.3" "Z3 4.8.12"; do
    grep -qx "$p" <<<"$provers" || { echo "verify.sh: why3 does not see $p" >&2; exit 2; }
done

# ---- helpers -------------------------------------------------------------
# wp_counts LOG: sets WP_PROVED / WP_TOTAL from the last "Proved goals" line.
wp_counts() {
    local line
    line="$(grep -E '^\[wp\] Proved goals:' "$1" | tail -1 || true)"
    if [ -z "$line" ]; then
        echo "verify.sh: no 'Proved goals' line in $1 (no goal selected?)" >&2
        tail -20 "$1" >&2
        exit 2
    fi
    WP_PROVED="$(awk '{print $(NF-2)}' <<<"$line")"
    WP_TOTAL="$(awk '{print $NF}' <<<"$line")"
}

# Goals not proved by the last WP run in LOG, on one line.
unproved_goals() {
    awk '/^\[wp\] Running WP plugin/ {buf = ""; next}
         /Goal typed_/ && !/: Valid/ {
             match($0, /Goal typed_[A-Za-z0-9_]+/)
             buf = buf substr($0, RSTART + 11, RLENGTH - 11) " "
         }
         END {print buf}' "$1"
}

# frama-c, run from the build dir so that it writes nothing elsewhere.
fc() {
    (cd "$build" && frama-c -cpp-extra-args="-I$here" "$@")
}

wp_common=(-wp -wp-rte -wp-no-pruning -wp-par "$par")

# ---- 1. the real files --------------------------------------------------------
# One frama-c run per file, three stages (-then): cvc4 on everything (with
# the smoke tests), then cvc5, then z3; a later stage only retries the goals
# that are not valid yet (and re-checks the lemmas), never the smoke tests.
# So
#   total    = goals of the first stage (smoke tests included),
#   unproved = goals the last stage left + failed smoke tests.
start=$(date +%s)
status=0
all_proved=0
all_total=0
for f in $files; do
    t0=$(date +%s)
    log="$build/wp-${f%.c}.log"
    fc "$here/$f" "${wp_common[@]}" -wp-timeout "$timeout" -wp-prover cvc4 -wp-smoke-tests \
        -then -wp -wp-prover cvc5 -wp-no-smoke-tests \
        -then -wp -wp-prover z3 -wp-timeout "$z3_timeout" -wp-no-smoke-tests >"$log" 2>&1 \
        || { echo "verify.sh: frama-c failed on $f, see $log" >&2; tail -20 "$log" >&2; exit 2; }
    total="$(grep -E '^\[wp\] Proved goals:' "$log" | head -1 | awk '{print $NF}')"
    wp_counts "$log"
    smoke_failed="$(grep -c 'Failed smoke-test' "$log" || true)"
    WP_PROVED=$((total - (WP_TOTAL - WP_PROVED) - smoke_failed))
    t1=$(date +%s)
    echo "$f: Proved goals: $WP_PROVED / $total ($((t1 - t0)) s, log $log)"
    all_proved=$((all_proved + WP_PROVED))
    all_total=$((all_total + total))
    if [ "$smoke_failed" != 0 ]; then
        grep -E 'Failed smoke-test|\[Failed\] Smoke-test' "$log" || true
        echo "FAIL: $f: smoke test failed (contradictory precondition or dead code)"
        status=1
    fi
    if [ "$WP_PROVED" != "$total" ]; then
        echo "FAIL: $f: not every goal is proved; unproved: $(unproved_goals "$log")"
        status=1
    fi
done
end=$(date +%s)
echo "all files: Proved goals: $all_proved / $all_total ($((end - start)) s)"
if [ "$status" != 0 ] || [ "${PC_SKIP_MUTANTS:-0}" = 1 ]; then
    exit "$status"
fi

# ---- 2. mutants -----------------------------------------------------------
# mutant NAME FUNCTION PROPERTIES SED-EXPRESSION
#
# Each mutant is generated from the real file at run time with sed, so it
# cannot drift; the expression must change exactly one line, else the
# pattern is stale and the script fails loudly.
#
# A mutant is rejected when WP leaves a goal unproved. To keep the run short
# only the goals of the named properties of FUNCTION are tried (-wp-fct,
# -wp-prop: the properties the bug breaks, plus any assertion they rest on),
# with all three provers racing on each goal (same verdict as the cascade:
# a goal counts as proved if any prover proves it within the timeout). This
# is conservative: a goal unproved here is unproved in a full run too, and a
# property name that no longer exists selects nothing, which is an error.
mdir="$build/mutants"
rm -rf "$mdir"
mkdir -p "$mdir"
survivors=0
# The mutants of one file run when the file is in PC_FILES.
src=""
mutants_of() {
    src=""
    case " $files " in *" $1 "*) src="$here/$1" ;; esac
}
mutant() {
    local name="$1" fct="$2" props="$3" expr="$4"
    local file="$mdir/$name.c" mlog="$mdir/$name.log"
    [ -n "$src" ] || return 0
    sed -e "$expr" "$src" >"$file"
    local changed
    changed="$(diff "$src" "$file" | grep -c '^>' || true)"
    if [ "$changed" != 1 ]; then
        echo "verify.sh: mutant $name: sed pattern changed $changed lines (expected 1); update verify.sh" >&2
        exit 2
    fi
    local t0 t1
    t0=$(date +%s)
    fc "$file" -wp -wp-rte -wp-no-pruning -wp-par 3 -wp-timeout "$mutant_timeout" \
        -wp-prover cvc4,cvc5,z3 -wp-fct "$fct" -wp-prop "$props" >"$mlog" 2>&1 \
        || { echo "verify.sh: frama-c failed, see $mlog" >&2; tail -20 "$mlog" >&2; exit 2; }
    t1=$(date +%s)
    wp_counts "$mlog"
    if [ "$WP_PROVED" = "$WP_TOTAL" ]; then
        echo "mutant $name: SURVIVED ($WP_PROVED/$WP_TOTAL proved) -- the contract misses this bug"
        survivors=$((survivors + 1))
    else
        echo "mutant $name: rejected ($WP_PROVED/$WP_TOTAL proved)"
        echo "    unproved: $(unproved_goals "$mlog")[$((t1 - t0)) s]"
    fi
}

mutants_of prefix_cache.c
# stride_search: anchor one block to the right (window one block short).
mutant anchor_off_by_one stride_search rightmost \
    's#start = end - need;#start = end - need + 1;#'
# stride_search: after a miss at j, keep windows ending at j + 1 (they hold
# the miss).
mutant jump_bound_plus_one stride_search known_cached \
    's#        bound = j;#        bound = j + 1;#'
# stride_search: forget that [start, j) was seen cached: still finds the
# right window, but probes blocks twice; caught by the invariants the probe
# bound rests on (known_lo <= bound).
mutant jump_known_lo_end stride_search ranges,probes_once \
    's#        known_lo = start;#        known_lo = end;#'
# stride_search: drop the alignment gate (consider every end).
mutant stride_no_gate stride_search rightmost \
    's#int64_t end = last_aligned_end(bound, period, eagle);#int64_t end = bound;#'
# stride_search: a read that is not counted as a probe.
mutant stride_probe_uncounted stride_search probes_counted \
    '/^int64_t PC_NAME(stride_search)(/,/^}/ s#            \*probes += 1;#            *probes += 0;#'
# prefix_fallback: look at need blocks instead of need - 1.
mutant prefix_limit_need prefix_fallback formula \
    's#int64_t limit = need - 1 < n ? need - 1 : n;#int64_t limit = need < n ? need : n;#'
# prefix_fallback: forget the EAGLE drop.
mutant prefix_no_eagle_pop prefix_fallback formula,formula_step \
    's#        length = realign(length - 1, period);#        length = realign(length, period);#'
# find_hit: need = 0 (sliding window of 0 or 1 token) not clamped: the
# search would never end; stride_search's precondition need >= 1 fails.
mutant need_zero_not_clamped find_hit need_pos \
    's#    if (need < 1) {#    if (need < 0) {#'
# find_hit: wrong EAGLE length (no block dropped).
mutant eagle_length find_hit eagle_length \
    's#        out->length = end - eagle;#        out->length = end;#'
# find_hit: first real block off by one.
mutant first_real_off_by_one find_hit rightmost \
    's#        out->first_real = end - need;#        out->first_real = end - need + 1;#'
# legacy_scan: drop vLLM's alignment gate.
mutant legacy_no_gate legacy_scan rightmost,run_aligned \
    's#if (num_contiguous_blocks == 0 \&\& !aligned_end(i + 1, period, eagle)) {#if (0) {#'
# legacy_scan: stop one block late (run > need).
mutant legacy_run_too_long legacy_scan run_short,rightmost \
    's#if (num_contiguous_blocks >= need) {#if (num_contiguous_blocks > need) {#'
# legacy_scan: EAGLE pop skipped when one block is left.
mutant legacy_eagle_pop legacy_scan eagle_length \
    '/^void legacy_scan(/,/^}/ s#    if (eagle \&\& length > 0) {#    if (eagle \&\& length > 1) {#'

mutants_of reachable.c
# reachable_mask: segment tail one block short (> instead of >=).
mutant rm_segment_short segment_tail_at segment \
    's#    return i >= eagle \&\& (i - eagle) % per >= per - need;#    return i >= eagle \&\& (i - eagle) % per > per - need;#'
# reachable_mask: EAGLE shift forgotten (tail ends on the boundary).
mutant rm_no_eagle_shift segment_tail_at segment \
    's#    return i >= eagle \&\& (i - eagle) % per >= per - need;#    return i % per >= per - need;#'
# reachable_mask: final tail not cut to the final segment.
mutant rm_final_uncut final_tail_at final \
    's#    return final_size != 0 \&\& fe - final_size <= i \&\& fe - need <= i \&\& i < fe;#    return final_size != 0 \&\& fe - need <= i \&\& i < fe;#'
# reachable_mask: a negative boundary read with C's truncating division.
mutant rm_negative_boundary boundary_tail_at boundary,aligned_range \
    's#        if (p >= 0) {#        if (p >= -1) {#'
# reachable_mask: tails as long as a segment kept as a mask (not None).
mutant rm_keep_all_strict reachable_mask none,mask,exact,keep_all_is,per_is \
    's#            if (need >= per) {#            if (need > per) {#'
# reachable_mask: one write past the block (out[i - start + 1]).
mutant rm_write_past reachable_mask mem_access \
    's#        out\[i - start_block\] = (uint8_t)block_kept(#        out[i - start_block + 1] = (uint8_t)block_kept(#'

mutants_of joint.c
# joint_lookup: EAGLE lookup asked two blocks past the candidate (its
# answer may exceed the candidate: the loop would climb).
mutant jl_eagle_two_blocks joint_round lookup_below_candidate \
    's#            max_length = curr <= cap - g->block_size ? curr + g->block_size : cap;#            max_length = curr + 2 * g->block_size;#'
# full_attention_hit: the EAGLE block not dropped.
mutant jl_full_no_drop full_attention_hit eagle_drop,dropped \
    's#        hit -= bs; /\* min(alignment_tokens, block_size) == block_size \*/#        hit -= 0;#'
# full_attention_hit: answer not rounded down to the alignment.
mutant jl_full_unaligned full_attention_hit answer \
    's#    return hit - hit % align;#    return hit;#'
# group_hit: gate period of one block (not align / block_size).
mutant jl_period_one group_hit gate,period_is \
    's#    period = block_period(bs, align);#    period = 1;#'
# joint_lookup: keep going while the candidate stays (no fixed point
# test): no round bound.
mutant jl_no_fixed_point joint_lookup descending,round_budget \
    's#        if (curr >= hit_length) {#        if (curr > hit_length) {#'
# joint_lookup: the first round not flagged as first (full attention
# never looked up, an unaligned candidate taken as aligned).
mutant jl_first_round_flag joint_lookup first_aligned \
    's#max_cache_hit_length, alignment_tokens, cap_tokens, rounds == 1, hit_length, answers, \&longest);#max_cache_hit_length, alignment_tokens, cap_tokens, 0, hit_length, answers, \&longest);#'

mutants_of full_attention.c
# full_hit: phase 2 probes one index too high (the next block's boundary).
mutant fa_phase2_off_by_one full_hit hi_is,spec \
    's#        hi = lo + (scale - 1); /\* lo + scale may be 2^63 \*/#        hi = lo + scale;#'
# finish: EAGLE drops a whole block even in fine-grained mode.
mutant fa_eagle_drop_block finish formula \
    's#        hit -= align < bs ? align : bs;#        hit -= bs;#'
# finish: no round-down to alignment_tokens.
mutant fa_no_round_down finish formula,aligned \
    's#    hit -= hit % align;#    hit -= 0;#'
# finish: trim with floor instead of cdiv.
mutant fa_trim_floor finish trim \
    's#    \*num_blocks = hit / bs + (hit % bs == 0 ? 0 : 1);#    *num_blocks = hit / bs;#'
# legacy_full_scan: phase-2 loop stops one index early (first_partial_idx
# never probed).
mutant fa_legacy_range_short legacy_full_scan spec,probes_exact \
    's#fine_idx > first_partial_idx - 1; fine_idx--#fine_idx > first_partial_idx; fine_idx--#'

mutants_of params.c
# contiguous_blocks_for_hit: the EAGLE block not added.
mutant pm_no_eagle contiguous_blocks_for_hit exact \
    's#    return blocks + eagle;#    return blocks;#'
# contiguous_blocks_for_hit: floor instead of vLLM's cdiv (the
# postconditions rest on the branch assertions up / exact_or_nonpos).
mutant pm_floor contiguous_blocks_for_hit exact,ceiling,up,exact_or_nonpos \
    's#    if (a > 0 \&\& a % block_size != 0) {#    if (0) {#'
# contiguous_blocks_for_hit: rounded up for a negative numerator too (C's /
# already truncates towards the ceiling there).
mutant pm_ceil_negative contiguous_blocks_for_hit exact,ceiling,up,exact_or_nonpos \
    's#    if (a > 0 \&\& a % block_size != 0) {#    if (a % block_size != 0) {#'
# contiguous_blocks_for_hit: the window's own token counted (w, not w - 1).
mutant pm_window_no_minus_one contiguous_blocks_for_hit exact,ceiling \
    's#    int64_t a = sliding_window - 1;#    int64_t a = sliding_window;#'
# search_need: run lengths of 0 not clamped to 1.
mutant pm_clamp_removed search_need exact,clamped \
    's#    if (need < 1) {#    if (need < 0) {#'
# alignment_period: the period without the gcd (alignment / block size).
mutant pm_period_no_gcd alignment_period exact,range,period_is \
    's#    return alignment_tokens / a;#    return alignment_tokens / block_size;#'

mutants_of offload_lookup.c
# offload_stride_search: the initial window ignored (vLLM's `or`).
mutant ol_initial_ignored offload_stride_search r_is_required,answer \
    's#    int64_t r = initial_window >= 1 ? initial_window : window;#    int64_t r = window;#'
# offload_stride_search: a pending chunk of the remembered part not seen.
mutant ol_known_pending_lost offload_stride_search found_gated \
    's#int64_t res = (round_pend || known_pend)#int64_t res = (round_pend)#'
# offload_stride_search: a miss skips past windows that do not hold it
# (the next bound is not a miss; none_after alone is proved, from bound_miss).
mutant ol_skip_too_far offload_stride_search bound_miss,none_after \
    's#        bound = j;#        bound = start;#'
# offload_stride_search: window 0 not answered at the miss.
mutant ol_window_zero offload_stride_search answer,next_start_below \
    's#    if (window == 0) {#    if (window == 1) {#'
# legacy_offload_scan: a miss does not reset the required window.
mutant ol_legacy_required_kept legacy_offload_scan after_miss,answer \
    's#            required = window;#            required = required;#'
# legacy_offload_scan: a miss does not clear pending_in_window.
mutant ol_legacy_pending_kept legacy_offload_scan run_pending \
    's#            pending_in_window = 0;#            pending_in_window = pending_in_window;#'

end=$(date +%s)
echo "verify.sh: total $((end - start)) s"
if [ "$survivors" != 0 ]; then
    echo "FAIL: $survivors mutant(s) fully proved"
    exit 1
fi
echo "OK: $files fully proved, every mutant rejected"
