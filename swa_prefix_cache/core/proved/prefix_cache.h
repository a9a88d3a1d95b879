/*
 * prefix_cache.h -- public API and ACSL contracts of the verified C core.
 *
 * Where this comes from: hand-written from swa_prefix_cache/pyspec/search.py (stride_search,
 * prefix_fallback, find_hit and the helpers aligned_end, realign,
 * last_aligned_end, valid_window) and swa_prefix_cache/pyspec/legacy.py (legacy_scan), with
 * the same names, the same algorithm and the same probes. It is NOT
 * generated. The contracts below are proved against prefix_cache.c by
 * Frama-C/WP (see verify.sh, which also checks that broken copies of the
 * code are rejected). Never patch this file or prefix_cache.c without
 * re-running swa_prefix_cache/core/proved/verify.sh.
 *
 * Model: block i is cached when cached[i] != 0 (any nonzero byte; the
 * proof does not assume the bytes are 0 or 1). Every read of cached[i] is one
 * probe.
 *
 * The contracts live here, on the prototypes, so that a reader of the API
 * sees exactly what was proved; prefix_cache.c holds the code, the loop
 * invariants and the contracts of its static helpers.
 */
#ifndef PREFIX_CACHE_H
#define PREFIX_CACHE_H

#include <stdint.h>

/* Largest block count n the contracts allow: 2^62 (as benchmarks/cffi_core.py
 * checks). find_hit's probes <= n + min(need - 1, n) then fit in int64_t,
 * because the stride search reads nothing when need > n. */
#define PC_MAX_BLOCKS ((int64_t)1 << 62)

typedef struct {
    int64_t length;     /* hit length in blocks */
    int64_t first_real; /* blocks [0, first_real) are null, the rest real */
    int64_t probes;     /* reads of cached[] made */
} pc_hit_result;

/*@ // ---- vocabulary (same names as swa_prefix_cache/pyspec/search.py) -------------------

    // Blocks [s, e) are all cached.
    predicate all_cached{L}(uint8_t *c, integer s, integer e) =
      \forall integer i; s <= i < e ==> c[i] != 0;

    // The alignment gate: ``end - eagle`` is a multiple of ``period``.
    predicate aligned_end(integer e, integer period, integer eagle) =
      (e - eagle) % period == 0;

    // ValidWindow: [s, e) lies in the n-block mask, spans >= need blocks,
    // and is all cached.
    predicate valid_window{L}(uint8_t *c, integer n, integer s, integer e,
                              integer need) =
      0 <= s && e <= n && e - s >= need && all_cached(c, s, e);

    // The search treats any need below 1 as 1 (vLLM's loop does).
    logic integer eff_need(integer need) = need < 1 ? 1 : need;

    // vLLM's re-alignment loop in closed form (length >= 0).
    logic integer realign(integer length, integer period) =
      length - length % period;

    // Largest aligned end <= bound; -1 when bound < eagle.
    logic integer last_aligned_end(integer bound, integer period,
                                   integer eagle) =
      bound < eagle ? -1 : bound - (bound - eagle) % period;

    // Optimality, as a negated universal: no window of need blocks with an
    // aligned end in (e0, n] is all cached.
    predicate no_valid_aligned_window_after{L}(uint8_t *c, integer n,
        integer need, integer period, integer eagle, integer e0) =
      \forall integer e; e0 < e <= n && e >= need &&
        aligned_end(e, period, eagle) ==> !all_cached(c, e - need, e);

    predicate has_valid_aligned_window{L}(uint8_t *c, integer n,
        integer need, integer period, integer eagle) =
      !no_valid_aligned_window_after(c, n, need, period, eagle, 0);

    // e is the answer of the stride search: the largest aligned end of a
    // valid window.
    predicate rightmost_valid_aligned_end{L}(uint8_t *c, integer n,
        integer need, integer period, integer eagle, integer e) =
      need <= e <= n && aligned_end(e, period, eagle) &&
      valid_window(c, n, e - need, e, need) &&
      no_valid_aligned_window_after(c, n, need, period, eagle, e);

    // How far the prefix fallback looks: min(need - 1, n).
    logic integer fallback_limit(integer n, integer need) =
      need - 1 < n ? need - 1 : n;

    // p is the cached prefix from block 0, capped at limit.
    predicate max_cached_prefix{L}(uint8_t *c, integer limit, integer p) =
      0 <= p <= limit && all_cached(c, 0, p) && (p == limit || c[p] == 0);

    // swa_prefix_cache.pyspec.prefix_fallback's formula over the cached prefix p.
    logic integer fallback_length(integer p, integer period, integer eagle) =
      \let l0 = (last_aligned_end(p, period, eagle) < 0 ? 0
                 : last_aligned_end(p, period, eagle));
      \let l1 = realign(l0, period);
      (eagle != 0 && l1 > 0) ? realign(l1 - 1, period) : l1;

    predicate is_fallback_length{L}(uint8_t *c, integer n, integer need,
        integer period, integer eagle, integer len) =
      \exists integer p; max_cached_prefix(c, fallback_limit(n, need), p) &&
        len == fallback_length(p, period, eagle);

    // The whole answer (what find_hit and legacy_scan both return):
    // the rightmost valid aligned window, else the prefix fallback.
    predicate swa_hit{L}(uint8_t *c, integer n, integer need,
        integer period, integer eagle, integer length, integer first_real) =
      (has_valid_aligned_window(c, n, need, period, eagle) ==>
         rightmost_valid_aligned_end(c, n, need, period, eagle,
                                     first_real + need) &&
         length == first_real + need - eagle) &&
      (!has_valid_aligned_window(c, n, need, period, eagle) ==>
         first_real == 0 &&
         is_fallback_length(c, n, need, period, eagle, length));
*/

/* stride_search: the largest aligned end e (need <= e <= n,
 * (e - eagle) % period == 0) whose window [e - need, e) is all cached, or -1.
 * Adds its reads of cached[] to *probes (an accumulator); every block is
 * read at most once, so it adds at most n. Requires need >= 1. */
/*@ requires 0 <= n <= PC_MAX_BLOCKS;
    requires need_pos: 1 <= need;
    requires 1 <= period;
    requires eagle == 0 || eagle == 1;
    requires \valid_read(cached + (0 .. n - 1));
    requires \valid(probes);
    requires \separated(probes, cached + (0 .. n - 1));
    requires 0 <= *probes <= INT64_MAX - n;
    assigns *probes;
    ensures probe_bound: \old(*probes) <= *probes <= \old(*probes) + n;
    ensures no_read_if_too_short: need > n ==> *probes == \old(*probes);
    behavior found:
      assumes has_valid_aligned_window(cached, n, need, period, eagle);
      ensures rightmost: rightmost_valid_aligned_end(cached, n, need, period,
                                                     eagle, \result);
    behavior not_found:
      assumes !has_valid_aligned_window(cached, n, need, period, eagle);
      ensures none: \result == -1;
    complete behaviors;
    disjoint behaviors;
*/
int64_t stride_search(const uint8_t *cached, int64_t n, int64_t need, int64_t period, int eagle, int64_t *probes);

/* prefix_fallback: the hit length when no window is found: the cached run
 * from block 0 (looked at up to min(need - 1, n) blocks), cut back to the
 * last aligned end, re-aligned, then the EAGLE block dropped and re-aligned.
 * Adds its reads to *probes (at most min(need - 1, n)). Requires need >= 1. */
/*@ requires 0 <= n <= PC_MAX_BLOCKS;
    requires need_pos: 1 <= need;
    requires 1 <= period;
    requires eagle == 0 || eagle == 1;
    requires \valid_read(cached + (0 .. n - 1));
    requires \valid(probes);
    requires \separated(probes, cached + (0 .. n - 1));
    requires 0 <= *probes <= INT64_MAX - fallback_limit(n, need);
    assigns *probes;
    ensures probe_bound: \old(*probes) <= *probes
                         <= \old(*probes) + fallback_limit(n, need);
    ensures in_range: 0 <= \result <= fallback_limit(n, need);
    ensures prefix_cached: all_cached(cached, 0, \result);
    ensures aligned: \result % period == 0;
    ensures formula_exists:
      is_fallback_length(cached, n, need, period, eagle, \result);
    ensures formula: \forall integer p;
      max_cached_prefix(cached, fallback_limit(n, need), p) ==>
        \result == fallback_length(p, period, eagle);
    behavior whole_prefix_cached:
      assumes all_cached(cached, 0, fallback_limit(n, need));
      ensures probes_exact:
        *probes == \old(*probes) + fallback_limit(n, need);
    behavior prefix_ends_in_miss:
      assumes !all_cached(cached, 0, fallback_limit(n, need));
      ensures probes_exact: \forall integer p;
        max_cached_prefix(cached, fallback_limit(n, need), p) ==>
          *probes == \old(*probes) + p + 1;
    complete behaviors;
    disjoint behaviors;
*/
int64_t prefix_fallback(const uint8_t *cached, int64_t n, int64_t need, int64_t period, int eagle, int64_t *probes);

/* find_hit: vLLM's sliding-window cache hit. On a found window ending at e:
 * length = e - eagle, first_real = e - need; else length = prefix_fallback
 * and first_real = 0. Any need is accepted: need < 1 (vLLM's formula for a
 * sliding window of 0 or 1 token) is treated as 1, as vLLM's loop does.
 * out->probes = total reads of cached[]. */
/*@ requires 0 <= n <= PC_MAX_BLOCKS;
    requires 1 <= period;
    requires eagle == 0 || eagle == 1;
    requires \valid_read(cached + (0 .. n - 1));
    requires \valid(out);
    requires \separated(out, cached + (0 .. n - 1));
    assigns *out;
    ensures spec: swa_hit(cached, n, eff_need(need), period, eagle,
                          out->length, out->first_real);
    ensures ranges: 0 <= out->first_real <= out->length <= n;
    ensures aligned: out->length % period == 0;
    ensures probe_bound:
      0 <= out->probes <= n + fallback_limit(n, eff_need(need));
    behavior found:
      assumes has_valid_aligned_window(cached, n, eff_need(need), period,
                                       eagle);
      ensures rightmost: rightmost_valid_aligned_end(cached, n, eff_need(need),
                period, eagle, out->first_real + eff_need(need));
      ensures eagle_length:
        out->length == out->first_real + eff_need(need) - eagle;
      ensures probe_bound_found: out->probes <= n;
    behavior not_found:
      assumes !has_valid_aligned_window(cached, n, eff_need(need), period,
                                        eagle);
      ensures first_real_zero: out->first_real == 0;
      ensures prefix_cached: all_cached(cached, 0, out->length);
      ensures in_limit: out->length <= fallback_limit(n, eff_need(need));
      ensures formula: \forall integer p;
        max_cached_prefix(cached, fallback_limit(n, eff_need(need)), p) ==>
          out->length == fallback_length(p, period, eagle);
    complete behaviors;
    disjoint behaviors;
*/
void find_hit(const uint8_t *cached, int64_t n, int64_t need, int64_t period, int eagle, pc_hit_result *out);

/* legacy_scan: vLLM 0.33.0's right-to-left O(n) loop (swa_prefix_cache/pyspec/legacy.py) on
 * (n, need, period, eagle); same result as find_hit (its contract is the
 * same swa_hit spec, which has one solution: lemma swa_hit_unique), with
 * out->probes = reads made (n - first_real when found, n otherwise). */
/*@ requires 0 <= n <= PC_MAX_BLOCKS;
    requires 1 <= period;
    requires eagle == 0 || eagle == 1;
    requires \valid_read(cached + (0 .. n - 1));
    requires \valid(out);
    requires \separated(out, cached + (0 .. n - 1));
    assigns *out;
    ensures spec: swa_hit(cached, n, eff_need(need), period, eagle,
                          out->length, out->first_real);
    ensures ranges: 0 <= out->first_real <= out->length <= n;
    ensures aligned: out->length % period == 0;
    behavior found:
      assumes has_valid_aligned_window(cached, n, eff_need(need), period,
                                       eagle);
      ensures rightmost: rightmost_valid_aligned_end(cached, n, eff_need(need),
                period, eagle, out->first_real + eff_need(need));
      ensures eagle_length:
        out->length == out->first_real + eff_need(need) - eagle;
      ensures probes_exact: out->probes == n - out->first_real;
    behavior not_found:
      assumes !has_valid_aligned_window(cached, n, eff_need(need), period,
                                        eagle);
      ensures first_real_zero: out->first_real == 0;
      ensures prefix_cached: all_cached(cached, 0, out->length);
      ensures in_limit: out->length <= fallback_limit(n, eff_need(need));
      ensures formula: \forall integer p;
        max_cached_prefix(cached, fallback_limit(n, eff_need(need)), p) ==>
          out->length == fallback_length(p, period, eagle);
      ensures probes_exact: out->probes == n;
    complete behaviors;
    disjoint behaviors;
*/
void legacy_scan(const uint8_t *cached, int64_t n, int64_t need, int64_t period, int eagle, pc_hit_result *out);

/* ---- the probe instance (prefix_cache_probe.c) ---------------------------
 * The same stride_search, prefix_fallback and find_hit, compiled from the
 * same text with each read of cached[i] replaced by probe(ctx, i) != 0
 * (see the top of prefix_cache.c). What their mask twins above guarantee
 * holds for them with "cached[i] != 0" read as "probe(ctx, i) != 0",
 * provided probe answers the same for the same i during one call. */
typedef uint8_t (*pc_probe_fn)(void *ctx, int64_t i);
int64_t stride_search_probe(pc_probe_fn probe, void *ctx, int64_t n, int64_t need, int64_t period, int eagle, int64_t *probes);
int64_t prefix_fallback_probe(pc_probe_fn probe, void *ctx, int64_t n, int64_t need, int64_t period, int eagle, int64_t *probes);
void find_hit_probe(pc_probe_fn probe, void *ctx, int64_t n, int64_t need, int64_t period, int eagle, pc_hit_result *out);

#endif /* PREFIX_CACHE_H */
