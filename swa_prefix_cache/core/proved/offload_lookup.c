/*
 * offload_lookup.c -- verified C99 core of vLLM 0.33.0's KV-offload
 * sliding-window lookup (OffloadingConnectorScheduler._sliding_window_lookup).
 *
 * Where this comes from: hand-written from swa_prefix_cache/pyspec/offload_lookup.py, same
 * names, same algorithm, read for read. It is NOT generated. Every function
 * is proved by Frama-C/WP (with -wp-rte: no undefined behaviour,
 * termination, and the contracts in offload_lookup.h); swa_prefix_cache/core/proved/verify.sh
 * runs the proof and checks that deliberately broken copies are rejected.
 *
 * One text, two instances (as prefix_cache.c). Compiled as it is (and proved
 * by WP), the search reads a byte mask chunks[i]. offload_lookup_probe.c
 * defines OL_PROBE_INSTANCE and includes this file, which gives
 * offload_stride_search_probe, token for token the same function except that
 * a read asks probe(ctx, i). Only OL_NAME, OL_SOURCE and OL_READ differ;
 * legacy_offload_scan exists only in the mask instance.
 *
 * C99, no dependencies beyond <stdint.h>.
 */
#include "offload_lookup.h"

#ifndef OL_PROBE_INSTANCE
#define OL_NAME(name) name
#define OL_SOURCE const uint8_t *chunks
#define OL_READ(i) (chunks[(i)])
#else
#define OL_NAME(name) name##_probe
#define OL_SOURCE pc_tri_probe_fn probe, void *ctx
#define OL_READ(i) (probe(ctx, (i)))
#endif

#define OL_MISS 0
#define OL_HIT_PENDING 2

/*@ // ---- one miss rules out every window holding it -------------------
    lemma miss_breaks{L}:
      \forall uint8_t *c, integer w, e, j;
        e - w <= j < e && c[j] == 0 ==> !window_ok(c, w, e);

    lemma window_gives_has{L}:
      \forall uint8_t *c, integer w, m, e;
        -1 < e <= m && window_ok(c, w, e) ==> has_window(c, w, m);

    lemma short_has_none{L}:
      \forall uint8_t *c, integer w, b, m;
        b < w && no_window_after(c, w, b, m) ==> !has_window(c, w, m);

    // ---- offload_answer is a function: each of its parts is unique -----
    lemma rightmost_miss_unique{L}:
      \forall uint8_t *c, integer n, m1, m2;
        rightmost_miss(c, n, m1) && rightmost_miss(c, n, m2) ==> m1 == m2;

    lemma rightmost_window_unique{L}:
      \forall uint8_t *c, integer w, m, e1, e2;
        rightmost_window(c, w, m, e1) && rightmost_window(c, w, m, e2) ==>
          e1 == e2;

    lemma leading_run_unique{L}:
      \forall uint8_t *c, integer n, p1, p2;
        leading_run(c, n, p1) && leading_run(c, n, p2) ==> p1 == p2;

    // The reads of vLLM's loop, case by case (offload_reads is a function).
    lemma reads_initial{L}:
      \forall uint8_t *c, integer n, w, i0, k;
        initial_window_holds(c, n, required_window(w, i0)) &&
        offload_reads(c, n, w, i0, k) ==> k == required_window(w, i0);
    lemma reads_all{L}:
      \forall uint8_t *c, integer n, w, i0, k;
        !initial_window_holds(c, n, required_window(w, i0)) &&
        rightmost_miss(c, n, -1) && offload_reads(c, n, w, i0, k) ==> k == n;
    lemma reads_at_miss{L}:
      \forall uint8_t *c, integer n, w, i0, m, k;
        !initial_window_holds(c, n, required_window(w, i0)) &&
        rightmost_miss(c, n, m) && offload_reads(c, n, w, i0, k) ==>
          reads_from_miss(c, n, w, m, k);
    lemma reads_at_window{L}:
      \forall uint8_t *c, integer n, w, m, e, k;
        0 <= w && m >= 0 && rightmost_window(c, w, m, e) &&
        reads_from_miss(c, n, w, m, k) ==> k == n - (e - w);
    lemma reads_window{L}:
      \forall uint8_t *c, integer n, w, i0, m, e, k;
        0 <= w && !initial_window_holds(c, n, required_window(w, i0)) &&
        rightmost_miss(c, n, m) && m >= 0 && rightmost_window(c, w, m, e) &&
        offload_reads(c, n, w, i0, k) ==> k == n - (e - w);
    lemma reads_lead{L}:
      \forall uint8_t *c, integer n, w, i0, m, k;
        !initial_window_holds(c, n, required_window(w, i0)) &&
        rightmost_miss(c, n, m) && m >= 0 && !has_window(c, w, m) &&
        offload_reads(c, n, w, i0, k) ==> k == n;

    // offload_stride_search and legacy_offload_scan both ensure
    // offload_answer, so they return the same value on every input.
    lemma offload_answer_unique{L}:
      \forall uint8_t *c, integer n, w, i0, r1, r2;
        offload_answer(c, n, w, i0, r1) && offload_answer(c, n, w, i0, r2) ==>
          r1 == r2;
*/

int64_t OL_NAME(offload_stride_search)(OL_SOURCE, int64_t n, int64_t window, int64_t initial_window, int64_t *probes)
{
    int64_t r = initial_window >= 1 ? initial_window : window;
    int pend = 0;
    int64_t count = 0;
    int64_t idx = n - 1;
    int64_t m;
    int64_t bound;
    int64_t known_lo;
    int known_pend;
    int64_t f;
    int lead_pend;
    /*@ assert r_is_required: r == required_window(window, initial_window); */

    /* Phase 1, as vLLM: from the right end until a miss or r chunks. */
    /*@ loop invariant p1_range: -1 <= idx <= n - 1;
        loop invariant p1_count: count == n - 1 - idx;
        loop invariant p1_short: r >= 1 ==> count < r;
        loop invariant p1_run: non_miss(chunks, idx + 1, n);
        loop invariant p1_pend: pend != 0 <==> !no_pending(chunks, idx + 1, n);
        loop invariant p1_reads: *probes == \at(*probes, Pre) + count;
        loop assigns idx, count, pend, *probes;
        loop variant idx + 1;
    */
    while (idx >= 0) {
        uint8_t v;
        *probes += 1;
        v = OL_READ(idx);
        if (v == OL_MISS) {
            break;
        }
        if (v == OL_HIT_PENDING) {
            pend = 1;
        }
        count++;
        if (count == r) {
            /* the window [n - r, n) touching the right end */
            int64_t res = pend ? OL_NONE : n;
            /*@ assert initial_window_holds(chunks, n, r); */
            /*@ assert gated(chunks, n - r, n, res); */
            /*@ assert answer: offload_answer(chunks, n, window, initial_window, res); */
            /*@ assert reads_ok: \forall integer k;
                  offload_reads(chunks, n, window, initial_window, k) ==>
                    *probes - \at(*probes, Pre) <= k; */
            return res;
        }
        idx--;
    }
    if (idx < 0) {
        /* no miss at all, and fewer than r chunks (or r == 0) */
        int64_t res = pend ? OL_NONE : n;
        /*@ assert !initial_window_holds(chunks, n, r); */
        /*@ assert answer_from_miss(chunks, n, window, -1, res); */
        /*@ assert answer: offload_answer(chunks, n, window, initial_window, res); */
        /*@ assert reads_ok: \forall integer k;
              offload_reads(chunks, n, window, initial_window, k) ==>
                *probes - \at(*probes, Pre) <= k; */
        return res;
    }
    m = idx;
    /*@ assert p1_miss: rightmost_miss(chunks, n, m); */
    /*@ assert p1_not_initial: !initial_window_holds(chunks, n, r); */
    if (window == 0) {
        /* vLLM: the miss sets required_window = 0 == consecutive_hits. */
        /*@ assert window_ok(chunks, 0, m); */
        /*@ assert rightmost_window(chunks, 0, m, m); */
        /*@ assert has_window(chunks, 0, m); */
        /*@ assert gated(chunks, m, m, m); */
        /*@ assert answer_from_window(chunks, 0, m, m); */
        /*@ assert answer_from_miss(chunks, n, 0, m, m); */
        /*@ assert answer: offload_answer(chunks, n, window, initial_window, m); */
        /*@ assert reads_ok: \forall integer k;
              offload_reads(chunks, n, window, initial_window, k) ==>
                *probes - \at(*probes, Pre) <= k; */
        return m;
    }

    /* Phase 2: the rightmost window of `window` non-miss chunks ending at
     * or before m. Chunk `bound` is a miss; [known_lo, bound) was read and
     * is non-miss (known_pend: one of them is pending). */
    bound = m;
    known_lo = m;
    known_pend = 0;
    /*@ loop invariant ranges: 0 <= known_lo <= bound <= m;
        loop invariant next_start_below: bound - window < known_lo;
        loop invariant bound_miss: chunks[bound] == 0;
        loop invariant known_non_miss: non_miss(chunks, known_lo, bound);
        loop invariant known_pending:
          known_pend != 0 <==> !no_pending(chunks, known_lo, bound);
        loop invariant none_after: no_window_after(chunks, window, bound, m);
        // chunks >= known_lo were read at most once, chunks below never
        loop invariant reads_once: \at(*probes, Pre) <= *probes
                       <= \at(*probes, Pre) + (n - known_lo);
        loop assigns bound, known_lo, known_pend, *probes;
        loop variant bound;
    */
    while (bound >= window) {
        int64_t start = bound - window;
        int64_t j = start;
        int round_pend = 0;
        /*@ loop invariant scan_range: start <= j <= known_lo;
            loop invariant scan_non_miss: non_miss(chunks, start, j);
            loop invariant scan_pending:
              round_pend != 0 <==> !no_pending(chunks, start, j);
            loop invariant scan_reads:
              *probes == \at(*probes, LoopEntry) + (j - start);
            loop assigns j, round_pend, *probes;
            loop variant known_lo - j;
        */
        while (j < known_lo) {
            uint8_t v;
            *probes += 1;
            v = OL_READ(j);
            if (v == OL_MISS) {
                break;
            }
            if (v == OL_HIT_PENDING) {
                round_pend = 1;
            }
            j++;
        }
        if (j == known_lo) {
            int64_t res = (round_pend || known_pend) ? OL_NONE : bound;
            /*@ assert found_ok: window_ok(chunks, window, bound); */
            /*@ assert found: rightmost_window(chunks, window, m, bound); */
            /*@ assert found_has: has_window(chunks, window, m); */
            /*@ assert found_gated: gated(chunks, bound - window, bound, res); */
            /*@ assert found_answer: answer_from_window(chunks, window, m, res); */
            /*@ assert found_spec: answer_from_miss(chunks, n, window, m, res); */
            /*@ assert answer: offload_answer(chunks, n, window, initial_window, res); */
            /*@ assert reads_ok: \forall integer k;
                  offload_reads(chunks, n, window, initial_window, k) ==>
                    *probes - \at(*probes, Pre) <= k; */
            return res;
        }
        /*@ assert miss_rules_out: chunks[j] == 0 &&
              \forall integer e; j < e <= bound ==> !window_ok(chunks, window, e); */
        bound = j;
        known_lo = start;
        known_pend = round_pend;
    }

    /* Phase 3: no window; the leading run. [0, known_lo) was never read. */
    /*@ assert no_window: !has_window(chunks, window, m); */
    f = 0;
    lead_pend = 0;
    /*@ loop invariant lead_range: 0 <= f <= known_lo;
        loop invariant lead_non_miss: non_miss(chunks, 0, f);
        loop invariant lead_pending:
          lead_pend != 0 <==> !no_pending(chunks, 0, f);
        loop invariant lead_reads: *probes == \at(*probes, LoopEntry) + f;
        loop assigns f, lead_pend, *probes;
        loop variant known_lo - f;
    */
    while (f < known_lo) {
        uint8_t v;
        *probes += 1;
        v = OL_READ(f);
        if (v == OL_MISS) {
            break;
        }
        if (v == OL_HIT_PENDING) {
            lead_pend = 1;
        }
        f++;
    }
    if (f == known_lo) {
        int64_t res = (lead_pend || known_pend) ? OL_NONE : bound;
        /*@ assert leading_run(chunks, n, bound); */
        /*@ assert gated(chunks, 0, bound, res); */
        /*@ assert answer_from_lead(chunks, n, res); */
        /*@ assert answer_from_miss(chunks, n, window, m, res); */
        /*@ assert answer: offload_answer(chunks, n, window, initial_window, res); */
        /*@ assert reads_ok: \forall integer k;
              offload_reads(chunks, n, window, initial_window, k) ==>
                *probes - \at(*probes, Pre) <= k; */
        return res;
    } else {
        int64_t res = lead_pend ? OL_NONE : f;
        /*@ assert leading_run(chunks, n, f); */
        /*@ assert gated(chunks, 0, f, res); */
        /*@ assert answer_from_lead(chunks, n, res); */
        /*@ assert answer_from_miss(chunks, n, window, m, res); */
        /*@ assert answer: offload_answer(chunks, n, window, initial_window, res); */
        /*@ assert reads_ok: \forall integer k;
              offload_reads(chunks, n, window, initial_window, k) ==>
                *probes - \at(*probes, Pre) <= k; */
        return res;
    }
}

#ifndef OL_PROBE_INSTANCE
int64_t legacy_offload_scan(const uint8_t *chunks, int64_t n, int64_t window, int64_t initial_window, int64_t *probes)
{
    /* initial_window_size or sliding_window_size */
    const int64_t r = initial_window >= 1 ? initial_window : window;
    int pending_in_window = 0;
    int64_t consecutive_hits = 0;
    int64_t required = r;
    int64_t idx;
    /*@ ghost int64_t gm = -1; */

    /* vLLM: for idx in range(len(keys) - 1, -1, -1). The current run is
     * [idx + 1, idx + 1 + consecutive_hits); it ends at a miss or at n. */
    /*@ loop invariant range: -1 <= idx <= n - 1;
        loop invariant run_in: 0 <= consecutive_hits &&
                               idx + 1 + consecutive_hits <= n;
        loop invariant run_non_miss:
          non_miss(chunks, idx + 1, idx + 1 + consecutive_hits);
        loop invariant run_pending: pending_in_window != 0 <==>
          !no_pending(chunks, idx + 1, idx + 1 + consecutive_hits);
        loop invariant tail_run: idx + 1 + consecutive_hits == n ==>
          required == r && (r >= 1 ==> consecutive_hits < r);
        loop invariant after_miss: idx + 1 + consecutive_hits < n ==>
          required == window && consecutive_hits < window &&
          chunks[idx + 1 + consecutive_hits] == 0 &&
          idx + 1 + consecutive_hits <= gm;
        loop invariant first_miss: idx + 1 + consecutive_hits < n ==>
          rightmost_miss(chunks, n, gm);
        loop invariant not_initial: idx + 1 + consecutive_hits < n ==>
          !initial_window_holds(chunks, n, r);
        loop invariant none_after: idx + 1 + consecutive_hits < n ==>
          no_window_after(chunks, window, idx + 1 + consecutive_hits, gm);
        loop invariant reads: *probes == \at(*probes, Pre) + (n - 1 - idx);
        loop assigns idx, consecutive_hits, pending_in_window, required,
                     *probes, gm;
        loop variant idx + 1;
    */
    for (idx = n - 1; idx >= 0; idx--) {
        uint8_t v;
        *probes += 1;
        v = chunks[idx];
        if (v == OL_HIT_PENDING) {
            /* HIT_PENDING: counts as a hit for the streak */
            pending_in_window = 1;
            consecutive_hits++;
        } else if (v != OL_MISS) {
            /* HIT */
            consecutive_hits++;
        } else {
            /* MISS: this gap rules out the incomplete window to its right */
            /*@ assert miss_rules_out: idx + 1 + consecutive_hits < n ==>
                  \forall integer e; idx < e <= idx + 1 + consecutive_hits ==>
                    !window_ok(chunks, window, e); */
            /*@ ghost if (idx + 1 + consecutive_hits == n) { gm = idx; } */
            /*@ assert miss_none_after: no_window_after(chunks, window, idx, gm); */
            consecutive_hits = 0;
            pending_in_window = 0;
            required = window;
        }
        if (consecutive_hits == required) {
            int64_t res = pending_in_window ? OL_NONE : idx + required;
            /*@ assert legacy_initial: idx + consecutive_hits == n ==>
                  initial_window_holds(chunks, n, r) &&
                  gated(chunks, n - r, n, res); */
            /*@ assert legacy_window_pos: idx + consecutive_hits < n ==>
                  rightmost_window(chunks, window, gm, idx + window); */
            /*@ assert legacy_window_nm: idx + consecutive_hits < n ==>
                  idx + window <= gm && window_ok(chunks, window, idx + window); */
            /*@ assert legacy_window_has: idx + consecutive_hits < n ==>
                  has_window(chunks, window, gm); */
            /*@ assert legacy_window_gated: idx + consecutive_hits < n ==>
                  gated(chunks, idx, idx + window, res); */
            /*@ assert legacy_window: idx + consecutive_hits < n ==>
                  !initial_window_holds(chunks, n, r) &&
                  answer_from_window(chunks, window, gm, res) &&
                  answer_from_miss(chunks, n, window, gm, res); */
            /*@ assert answer: offload_answer(chunks, n, window, initial_window, res); */
            /*@ assert legacy_reads_window: idx + consecutive_hits < n ==>
                  reads_from_miss(chunks, n, window, gm, *probes - \at(*probes, Pre)); */
            /*@ assert legacy_reads: offload_reads(chunks, n, window, initial_window,
                                                   *probes - \at(*probes, Pre)); */
            return res;
        }
    }
    {
        int64_t res = pending_in_window ? OL_NONE : consecutive_hits;
        /*@ assert legacy_all: consecutive_hits == n ==>
              !initial_window_holds(chunks, n, r) &&
              answer_from_miss(chunks, n, window, -1, res); */
        /*@ assert legacy_lead: consecutive_hits < n ==>
              leading_run(chunks, n, consecutive_hits) &&
              !has_window(chunks, window, gm) &&
              answer_from_lead(chunks, n, res) &&
              answer_from_miss(chunks, n, window, gm, res); */
        /*@ assert answer: offload_answer(chunks, n, window, initial_window, res); */
        /*@ assert legacy_reads_all: consecutive_hits == n ==>
              reads_from_miss(chunks, n, window, -1, *probes - \at(*probes, Pre)); */
        /*@ assert legacy_reads_lead: consecutive_hits < n ==>
              reads_from_miss(chunks, n, window, gm, *probes - \at(*probes, Pre)); */
        /*@ assert legacy_reads: offload_reads(chunks, n, window, initial_window,
                                               *probes - \at(*probes, Pre)); */
        return res;
    }
}
#endif /* OL_PROBE_INSTANCE */
