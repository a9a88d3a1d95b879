/*
 * prefix_cache.c -- verified C99 core of the sliding-window prefix-cache
 * lookup.
 *
 * Where this comes from: hand-written from swa_prefix_cache/pyspec/search.py and
 * swa_prefix_cache/pyspec/legacy.py, same names (snake_case), same algorithm, probe for
 * probe. It is NOT generated. Every function is proved by Frama-C/WP
 * (with -wp-rte: no undefined behaviour, termination, and the contracts in
 * prefix_cache.h); swa_prefix_cache/core/proved/verify.sh runs the proof and checks that
 * deliberately broken copies of this file are rejected. Never patch this
 * file without re-running swa_prefix_cache/core/proved/verify.sh.
 *
 * C99, no dependencies beyond <stdint.h>.
 */
#include "prefix_cache.h"

/* One text, two instances. Compiled as it is (and proved by Frama-C/WP),
 * the search reads a byte mask: block i is cached when cached[i] != 0.
 * prefix_cache_probe.c defines PC_PROBE_INSTANCE and includes this file,
 * which gives the same functions, token for token, except that a read asks
 * probe(ctx, i) and the names end in _probe (vLLM's hot path, where a read
 * is a BlockPool lookup). Only PC_NAME, PC_SOURCE(_ARGS) and PC_IS_MISS
 * differ between the two; legacy_scan exists only in the mask instance. */
#ifndef PC_PROBE_INSTANCE
#define PC_NAME(name) name
#define PC_SOURCE const uint8_t *cached
#define PC_SOURCE_ARGS cached
#define PC_IS_MISS(i) (cached[(i)] == 0)
#else
#define PC_NAME(name) name##_probe
#define PC_SOURCE pc_probe_fn probe, void *ctx
#define PC_SOURCE_ARGS probe, ctx
#define PC_IS_MISS(i) (probe(ctx, (i)) == 0)
#endif

/*@ // ---- arithmetic facts about %, for non-negative operands ----------
    lemma mod_range:
      \forall integer x, p; 0 <= x && 1 <= p ==> 0 <= x % p < p;
    lemma realign_is_multiple:
      \forall integer x, p; 0 <= x && 1 <= p ==> (x - x % p) % p == 0;
    lemma multiple_below:
      \forall integer x, y, p; 1 <= p && 0 <= y <= x && y % p == 0 ==>
        y <= x - x % p;

    // ---- last_aligned_end is the largest aligned end <= bound -----------
    lemma last_aligned_end_aligned:
      \forall integer b, p, g; 1 <= p && 0 <= g <= 1 && g <= b ==>
        g <= last_aligned_end(b, p, g) <= b &&
        aligned_end(last_aligned_end(b, p, g), p, g);
    lemma last_aligned_end_largest:
      \forall integer b, e, p, g; 1 <= p && 0 <= g <= 1 && g <= e <= b &&
        aligned_end(e, p, g) ==> e <= last_aligned_end(b, p, g);

    // ---- the cached prefix is unique, so swa_hit is a function ----------
    lemma max_cached_prefix_unique{L}:
      \forall uint8_t *c, integer limit, p, q;
        max_cached_prefix(c, limit, p) && max_cached_prefix(c, limit, q) ==>
          p == q;

    // find_hit and legacy_scan both ensure swa_hit, so they return the
    // same (length, first_real) on every input.
    lemma swa_hit_unique{L}:
      \forall uint8_t *c, integer n, need, period, eagle, l1, f1, l2, f2;
        swa_hit(c, n, need, period, eagle, l1, f1) &&
        swa_hit(c, n, need, period, eagle, l2, f2) ==>
          l1 == l2 && f1 == f2;
*/

/*@ requires 1 <= period;
    requires eagle == 0 || eagle == 1;
    requires INT64_MIN + 1 <= e;
    assigns \nothing;
    ensures \result != 0 <==> aligned_end(e, period, eagle);
*/
static inline int aligned_end(int64_t e, int64_t period, int eagle)
{
    return (e - eagle) % period == 0;
}

/*@ requires 0 <= length;
    requires 1 <= period;
    assigns \nothing;
    ensures \result == realign(length, period);
    ensures 0 <= \result <= length;
    ensures \result % period == 0;
*/
static inline int64_t realign(int64_t length, int64_t period)
{
    return length - length % period;
}

/*@ requires 0 <= bound;
    requires 1 <= period;
    requires eagle == 0 || eagle == 1;
    assigns \nothing;
    ensures \result == last_aligned_end(bound, period, eagle);
    ensures -1 <= \result <= bound;
    behavior no_candidate:
      assumes bound < eagle;
      ensures \result == -1;
    behavior largest:
      assumes bound >= eagle;
      ensures eagle <= \result && aligned_end(\result, period, eagle);
      ensures \forall integer e; \result < e <= bound ==>
                !aligned_end(e, period, eagle);
    complete behaviors;
    disjoint behaviors;
*/
static inline int64_t last_aligned_end(int64_t bound, int64_t period, int eagle)
{
    if (bound < eagle) {
        return -1;
    }
    return bound - (bound - eagle) % period;
}

#ifndef PC_PROBE_INSTANCE /* only legacy_scan uses it */
/* vLLM's "while len(computed) * block_size % alignment_tokens != 0:
 * computed.pop()" on a length; swa_prefix_cache.pyspec.realign is its closed form. */
/*@ requires 0 <= length;
    requires 1 <= period;
    assigns \nothing;
    ensures \result == realign(length, period);
*/
static int64_t pop_until_aligned(int64_t length, int64_t period)
{
    /*@ loop invariant realign(\at(length, Pre), period) <= length
                       <= \at(length, Pre);
        loop assigns length;
        loop variant length;
    */
    while (length % period != 0) {
        length--;
    }
    return length;
}
#endif

int64_t PC_NAME(stride_search)(PC_SOURCE, int64_t n, int64_t need, int64_t period, int eagle, int64_t *probes)
{
    int64_t bound = n;    /* no valid aligned window ends in (bound, n] */
    int64_t known_lo = n; /* [known_lo, bound) is known to be all cached */

    /*@ loop invariant ranges: 0 <= known_lo <= bound <= n;
        loop invariant next_anchor_below: bound - need < known_lo;
        loop invariant known_cached: all_cached(cached, known_lo, bound);
        loop invariant none_after:
          no_valid_aligned_window_after(cached, n, need, period, eagle, bound);
        // blocks >= known_lo were probed at most once, blocks below never
        loop invariant probes_once: \at(*probes, Pre) <= *probes
                       <= \at(*probes, Pre) + (n - known_lo);
        loop invariant no_read_if_too_short:
          need > n ==> *probes == \at(*probes, Pre);
        loop assigns bound, known_lo, *probes;
        loop variant bound;
    */
    for (;;) {
        int64_t end = last_aligned_end(bound, period, eagle);
        int64_t start;
        int64_t scan_to;
        int64_t j;
        if (end < need) {
            return -1;
        }
        start = end - need;
        scan_to = end < known_lo ? end : known_lo;
        j = start;
        /*@ loop invariant scan_range: start <= j <= scan_to;
            loop invariant scan_cached: all_cached(cached, start, j);
            loop invariant probes_counted:
              *probes == \at(*probes, LoopEntry) + (j - start);
            loop assigns j, *probes;
            loop variant scan_to - j;
        */
        while (j < scan_to) {
            *probes += 1;
            if (PC_IS_MISS(j)) {
                break;
            }
            j++;
        }
        if (j == scan_to) {
            return end;
        }
        bound = j;
        known_lo = start;
    }
}

int64_t PC_NAME(prefix_fallback)(PC_SOURCE, int64_t n, int64_t need, int64_t period, int eagle, int64_t *probes)
{
    int64_t limit = need - 1 < n ? need - 1 : n;
    int64_t prefix = 0;
    int64_t length;

    /*@ loop invariant 0 <= prefix <= limit;
        loop invariant all_cached(cached, 0, prefix);
        loop invariant *probes == \at(*probes, Pre) + prefix;
        loop assigns prefix, *probes;
        loop variant limit - prefix;
    */
    while (prefix < limit) {
        *probes += 1;
        if (PC_IS_MISS(prefix)) {
            break;
        }
        prefix++;
    }
    /*@ assert max_cached_prefix(cached, limit, prefix); */
    /* vLLM's run from block 0 ends at the last aligned end in the prefix. */
    length = last_aligned_end(prefix, period, eagle);
    if (length < 0) {
        length = 0;
    }
    length = realign(length, period);
    if (eagle && length > 0) {
        length = realign(length - 1, period);
    }
    /*@ assert formula_step: length == fallback_length(prefix, period, eagle); */
    return length;
}

void PC_NAME(find_hit)(PC_SOURCE, int64_t n, int64_t need, int64_t period, int eagle, pc_hit_result *out)
{
    int64_t probes = 0;
    int64_t end;

    /* vLLM's loop treats need <= 0 (sliding window of 0 or 1 token) as 1;
     * without this clamp the search would not terminate. */
    if (need < 1) {
        need = 1;
    }
    end = PC_NAME(stride_search)(PC_SOURCE_ARGS, n, need, period, eagle, &probes);
    if (end >= 0) {
        out->length = end - eagle;
        out->first_real = end - need;
    } else {
        out->length = PC_NAME(prefix_fallback)(PC_SOURCE_ARGS, n, need, period, eagle, &probes);
        out->first_real = 0;
    }
    out->probes = probes;
}

#ifndef PC_PROBE_INSTANCE
void legacy_scan(const uint8_t *cached, int64_t n, int64_t need, int64_t period, int eagle, pc_hit_result *out)
{
    int64_t probes = 0;
    int64_t num_contiguous_blocks = 0;
    int match_found = 0;
    int64_t i;
    int64_t length;
    int64_t first_real;
    /*@ ghost int64_t gp = 0; */
    /*@ ghost int64_t glimit = (need < 1 ? 0 : need - 1) < n ? (need < 1 ? 0 : need - 1) : n; */

    /* vLLM: for i in range(max_num_blocks - 1, -1, -1). Blocks
     * [i + 1, i + 1 + num_contiguous_blocks) are the current run. */
    /*@ loop invariant -1 <= i <= n - 1;
        loop invariant match_found == 0;
        loop invariant run_short: 0 <= num_contiguous_blocks < eff_need(need);
        loop invariant i + 1 + num_contiguous_blocks <= n;
        loop invariant run_cached:
          all_cached(cached, i + 1, i + 1 + num_contiguous_blocks);
        loop invariant run_aligned: num_contiguous_blocks > 0 ==>
          aligned_end(i + 1 + num_contiguous_blocks, period, eagle);
        loop invariant none_after:
          no_valid_aligned_window_after(cached, n, eff_need(need), period,
                                        eagle, i + 1 + num_contiguous_blocks);
        loop invariant run_maximal: \forall integer e;
          i + 1 + num_contiguous_blocks < e <= n && 1 <= e &&
          aligned_end(e, period, eagle) ==> !all_cached(cached, i + 1, e);
        loop invariant probes == n - 1 - i;
        loop assigns i, probes, num_contiguous_blocks, match_found;
        loop variant i + 1;
    */
    for (i = n - 1; i >= 0; i--) {
        probes++;
        if (cached[i] != 0) {
            /* vLLM's gate: (post_pop_blocks * block_size) %
             * alignment_tokens != 0, i.e. !aligned_end(i + 1). */
            if (num_contiguous_blocks == 0 && !aligned_end(i + 1, period, eagle)) {
                continue;
            }
            num_contiguous_blocks++;
            if (num_contiguous_blocks >= need) {
                /* del computed[i + num_contiguous_blocks:] */
                match_found = 1;
                break;
            }
        } else {
            num_contiguous_blocks = 0;
        }
    }
    if (!match_found) {
        /* del computed[num_contiguous_blocks:]; pop until aligned */
        length = num_contiguous_blocks;
        first_real = 0;
        /* Ghost (never compiled): the cached prefix of pyspec's formula,
         * named so that the contract's "exists p" has its witness. */
        /*@ ghost
            /@ loop invariant 0 <= gp <= glimit;
               loop invariant all_cached(cached, 0, gp);
               loop assigns gp;
               loop variant glimit - gp;
            @/
            while (gp < glimit && cached[gp] != 0) {
                gp++;
            }
        */
        /*@ assert gp_is_prefix: max_cached_prefix(cached, glimit, gp); */
        /*@ assert run_is_last_aligned_end:
              length == (last_aligned_end(gp, period, eagle) < 0 ? 0
                         : last_aligned_end(gp, period, eagle)); */
        length = pop_until_aligned(length, period);
    } else {
        length = i + num_contiguous_blocks;
        first_real = i;
    }
    if (eagle && length > 0) {
        /* computed.pop(), then pop until aligned */
        length--;
        length = pop_until_aligned(length, period);
    }
    /*@ assert formula_step: !match_found ==>
                 max_cached_prefix(cached, glimit, gp) &&
                 length == fallback_length(gp, period, eagle); */
    out->length = length;
    out->first_real = first_real;
    out->probes = probes;
}
#endif /* PC_PROBE_INSTANCE */
