/*
 * offload_lookup.h -- public API and ACSL contracts of vLLM 0.33.0's
 * KV-offload sliding-window lookup (OffloadingConnectorScheduler.
 * _sliding_window_lookup), proved by Frama-C/WP against offload_lookup.c.
 *
 * Where this comes from: hand-written from swa_prefix_cache/pyspec/offload_lookup.py
 * (offload_lookup, offload_stride_search, legacy_offload_scan; same names,
 * same algorithm, same reads). It is NOT generated. Never patch this file or
 * offload_lookup.c without re-running swa_prefix_cache/core/proved/verify.sh
 * (PC_FILES=offload_lookup.c for this file alone).
 *
 * Model: chunk i answers manager.lookup(keys[i]) with
 *   chunks[i] == 0   MISS
 *   chunks[i] == 2   HIT_PENDING (stored, not ready yet)
 *   any other byte   HIT          (benchmarks/cffi_core.py only sends 1)
 * Every read of chunks[i] is one probe (one manager.lookup call). RETRY is
 * not modelled (docs/offload-lookup.md).
 *
 * Result encoding: a chunk count >= 0 (vLLM's int), or OL_NONE (-1) for
 * vLLM's None. initial_window 0 stands for both None and 0 (vLLM's
 * `initial_window_size or sliding_window_size`).
 *
 * The contracts live here, on the prototypes; offload_lookup.c holds the
 * code and the loop invariants.
 */
#ifndef OFFLOAD_LOOKUP_H
#define OFFLOAD_LOOKUP_H

#include <stdint.h>

/* Largest chunk count the contracts allow (as benchmarks/cffi_core.py checks). */
#define OL_MAX_CHUNKS ((int64_t)1 << 62)
/* vLLM's None. */
#define OL_NONE ((int64_t)-1)

/*@ // ---- vocabulary (same names as swa_prefix_cache/pyspec/offload_lookup.py) ---------

    // Chunks [s, e) are all HIT or HIT_PENDING.
    predicate non_miss{L}(uint8_t *c, integer s, integer e) =
      \forall integer i; s <= i < e ==> c[i] != 0;

    // No chunk of [s, e) is HIT_PENDING.
    predicate no_pending{L}(uint8_t *c, integer s, integer e) =
      \forall integer i; s <= i < e ==> c[i] != 2;

    // vLLM's `initial_window_size or sliding_window_size` (i0 0 = None).
    logic integer required_window(integer w, integer i0) = i0 >= 1 ? i0 : w;

    // The run touching the right end holds the required window r.
    predicate initial_window_holds{L}(uint8_t *c, integer n, integer r) =
      1 <= r <= n && non_miss(c, n - r, n);

    // m is the rightmost MISS (-1: none).
    predicate rightmost_miss{L}(uint8_t *c, integer n, integer m) =
      -1 <= m < n && non_miss(c, m + 1, n) && (m == -1 || c[m] == 0);

    // A window of w non-miss chunks ends at e: [e - w, e).
    predicate window_ok{L}(uint8_t *c, integer w, integer e) =
      w <= e && non_miss(c, e - w, e);

    // Optimality, as a negated universal: no window of w non-miss chunks
    // ends in (e0, m].
    predicate no_window_after{L}(uint8_t *c, integer w, integer e0,
                                 integer m) =
      \forall integer e; e0 < e <= m ==> !window_ok(c, w, e);

    predicate has_window{L}(uint8_t *c, integer w, integer m) =
      !no_window_after(c, w, -1, m);

    // e is the end of the rightmost window of w non-miss chunks ending at
    // or before m.
    predicate rightmost_window{L}(uint8_t *c, integer w, integer m,
                                  integer e) =
      e <= m && window_ok(c, w, e) && no_window_after(c, w, e, m);

    // p is the leading run: [0, p) non-miss, chunk p a miss (or p == n).
    predicate leading_run{L}(uint8_t *c, integer n, integer p) =
      0 <= p <= n && non_miss(c, 0, p) && (p == n || c[p] == 0);

    // The answer e of window [s, e), or None when it holds a pending chunk.
    predicate gated{L}(uint8_t *c, integer s, integer e, integer res) =
      (no_pending(c, s, e) ==> res == e) &&
      (!no_pending(c, s, e) ==> res == -1);

    // Clause 3: the rightmost window left of the miss m, gated.
    predicate answer_from_window{L}(uint8_t *c, integer w, integer m,
                                    integer res) =
      \exists integer e; rightmost_window(c, w, m, e) &&
        gated(c, e - w, e, res);

    // Clause 4: the leading run, gated.
    predicate answer_from_lead{L}(uint8_t *c, integer n, integer res) =
      \exists integer p; leading_run(c, n, p) && gated(c, 0, p, res);

    // Clauses 2-4, given the rightmost miss m.
    predicate answer_from_miss{L}(uint8_t *c, integer n, integer w,
                                  integer m, integer res) =
      rightmost_miss(c, n, m) &&
      (m == -1 ==> gated(c, 0, n, res)) &&
      (m >= 0 && has_window(c, w, m) ==> answer_from_window(c, w, m, res)) &&
      (m >= 0 && !has_window(c, w, m) ==> answer_from_lead(c, n, res));

    // The whole answer (what offload_stride_search and legacy_offload_scan
    // both return; swa_prefix_cache.pyspec.offload_lookup clauses 1-4).
    predicate offload_answer{L}(uint8_t *c, integer n, integer w,
                                integer i0, integer res) =
      (initial_window_holds(c, n, required_window(w, i0)) ==>
         gated(c, n - required_window(w, i0), n, res)) &&
      (!initial_window_holds(c, n, required_window(w, i0)) ==>
         \exists integer m; answer_from_miss(c, n, w, m, res));

    // ---- reads: how many chunks vLLM's loop asks about ------------------

    // Given the rightmost miss m: vLLM reads [e - w, n) when it finds the
    // window ending at e, else all n chunks.
    predicate reads_from_miss{L}(uint8_t *c, integer n, integer w, integer m,
                                 integer k) =
      rightmost_miss(c, n, m) &&
      (m == -1 ==> k == n) &&
      (m >= 0 && has_window(c, w, m) ==>
         \exists integer e; rightmost_window(c, w, m, e) && k == n - (e - w)) &&
      (m >= 0 && !has_window(c, w, m) ==> k == n);

    // k is the number of chunks legacy_offload_scan (vLLM) reads.
    predicate offload_reads{L}(uint8_t *c, integer n, integer w, integer i0,
                               integer k) =
      (initial_window_holds(c, n, required_window(w, i0)) ==>
         k == required_window(w, i0)) &&
      (!initial_window_holds(c, n, required_window(w, i0)) ==>
         \exists integer m; reads_from_miss(c, n, w, m, k));
*/

/* offload_stride_search: the answer, reading each chunk at most once.
 * Phase 1 reads from the right end until a miss m or the required window
 * (as vLLM); phase 2 (window >= 1) finds the rightmost window of `window`
 * non-miss chunks ending at or before m, reading each candidate left to
 * right from its start and remembering what it read (a miss at j rules out
 * every window holding j); phase 3 reads the leading run, reusing phase 2.
 * Adds its reads to *probes (an accumulator): at most n, and never more
 * than vLLM's loop reads (offload_reads, fewer_reads). */
/*@ requires 0 <= n <= OL_MAX_CHUNKS;
    requires 0 <= window;
    requires 0 <= initial_window;
    requires \valid_read(chunks + (0 .. n - 1));
    requires \valid(probes);
    requires \separated(probes, chunks + (0 .. n - 1));
    requires 0 <= *probes <= INT64_MAX - n;
    assigns *probes;
    ensures spec: offload_answer(chunks, n, window, initial_window, \result);
    ensures range: -1 <= \result <= n;
    ensures probe_bound: \old(*probes) <= *probes <= \old(*probes) + n;
    ensures fewer_reads: \forall integer k;
      offload_reads(chunks, n, window, initial_window, k) ==>
        *probes - \old(*probes) <= k;
    behavior initial:
      assumes initial_window_holds(chunks, n,
                                   required_window(window, initial_window));
      ensures initial_answer: \result == n || \result == -1;
      ensures initial_reads:
        *probes == \old(*probes) + required_window(window, initial_window);
    behavior further:
      assumes !initial_window_holds(chunks, n,
                                    required_window(window, initial_window));
      ensures further_answer: \result == n ==> non_miss(chunks, 0, n);
    complete behaviors;
    disjoint behaviors;
*/
int64_t offload_stride_search(const uint8_t *chunks, int64_t n, int64_t window, int64_t initial_window, int64_t *probes);

/* legacy_offload_scan: vLLM 0.33.0's right-to-left loop, line for line
 * (swa_prefix_cache.pyspec.legacy_offload_scan; defer_lookup is always false without
 * RETRY). Same answer as offload_stride_search: both ensure offload_answer,
 * which has one solution (lemma offload_answer_unique). *probes += reads. */
/*@ requires 0 <= n <= OL_MAX_CHUNKS;
    requires 0 <= window;
    requires 0 <= initial_window;
    requires \valid_read(chunks + (0 .. n - 1));
    requires \valid(probes);
    requires \separated(probes, chunks + (0 .. n - 1));
    requires 0 <= *probes <= INT64_MAX - n;
    assigns *probes;
    ensures spec: offload_answer(chunks, n, window, initial_window, \result);
    ensures range: -1 <= \result <= n;
    ensures probe_bound: \old(*probes) <= *probes <= \old(*probes) + n;
    ensures reads: offload_reads(chunks, n, window, initial_window,
                                 *probes - \old(*probes));
    behavior initial:
      assumes initial_window_holds(chunks, n,
                                   required_window(window, initial_window));
      ensures initial_reads:
        *probes == \old(*probes) + required_window(window, initial_window);
    behavior further:
      assumes !initial_window_holds(chunks, n,
                                    required_window(window, initial_window));
    complete behaviors;
    disjoint behaviors;
*/
int64_t legacy_offload_scan(const uint8_t *chunks, int64_t n, int64_t window, int64_t initial_window, int64_t *probes);

/* ---- the probe instance (offload_lookup_probe.c) --------------------------
 * The same offload_stride_search, compiled from the same text with each read
 * chunks[i] replaced by probe(ctx, i) (0 MISS, 2 HIT_PENDING, else HIT).
 * What the mask instance guarantees holds for it, provided probe answers the
 * same for the same i during one call (CPUOffloadingManager.lookup is pure).
 * As in the mask instance, *probes is an accumulator (add the calls to it). */
typedef uint8_t (*pc_tri_probe_fn)(void *ctx, int64_t i);
int64_t offload_stride_search_probe(pc_tri_probe_fn probe, void *ctx, int64_t n, int64_t window, int64_t initial_window, int64_t *probes);

#endif /* OFFLOAD_LOOKUP_H */
