/*
 * full_attention.h -- public API and ACSL contracts of vLLM 0.33.0's
 * full-attention prefix-cache lookup (FullAttentionManager.
 * find_longest_cache_hit), proved by Frama-C/WP against full_attention.c.
 *
 * Where this comes from: hand-written from swa_prefix_cache/pyspec/full.py (full_hit,
 * legacy_full_scan, same names, same probes). It is NOT generated. Never
 * patch this file or full_attention.c without re-running
 * swa_prefix_cache/core/proved/verify.sh (PC_FILES=full_attention.c for this file alone).
 *
 * Model (swa_prefix_cache/pyspec/full.py): vLLM probes two lists of hashes.
 *   cached[i] != 0       full block i (the block-size view of the hashes) is
 *                        cached in every group; i < n_cached, the length of
 *                        that view.
 *   fine_cached[j] != 0  the prefix of (j + 1) * alignment_tokens tokens
 *                        (raw hash j, a partial-tail entry) is cached in
 *                        every group; j < n_fine = len(block_hashes).
 * Every read of either is one probe (one BlockPool.get_cached_block call).
 *
 * The answer (predicate full_answer below): p = the run of cached full
 * blocks from block 0, at most min(max_length / block_size, n_cached);
 * in fine-grained mode (alignment_tokens < block_size, block_size %
 * alignment_tokens == 0) the highest cached fine index t in
 * [p * scale, min(p * scale + scale - 1, max_length / alignment_tokens,
 * n_fine)) with scale = block_size / alignment_tokens, giving
 * (t + 1) * alignment_tokens tokens, else p * block_size tokens; then the
 * EAGLE drop of min(alignment_tokens, block_size) tokens of a non-empty
 * hit, the round-down to alignment_tokens, and cdiv(hit, block_size)
 * blocks kept. vLLM returns, per group, the first num_blocks of [the
 * blocks of cached[0 .. prefix - 1], then the block of fine_cached[tail]
 * if tail >= 0]; num_blocks <= prefix + (tail >= 0).
 *
 * vLLM with DCP > 1 (block_size *= dcp_world_size) is out of scope.
 */
#ifndef FULL_ATTENTION_H
#define FULL_ATTENTION_H

#include <stdint.h>

#include "prefix_cache.h" /* pc_probe_fn, PC_MAX_BLOCKS, all_cached, max_cached_prefix */

typedef struct {
    int64_t hit_tokens; /* vLLM's hit length in tokens */
    int64_t num_blocks; /* blocks vLLM returns per group */
    int64_t prefix;     /* phase 1: cached full blocks from block 0 */
    int64_t tail;       /* phase 2: the fine index found, -1 if none */
    int64_t probes;     /* reads made (get_cached_block calls) */
} fa_hit_result;

/*@ // ---- vocabulary (same names as swa_prefix_cache/pyspec/full.py) ---------------------

    logic integer fa_min(integer a, integer b) = a < b ? a : b;

    // vLLM's fine_grained.
    predicate fine_mode(integer bs, integer align) =
      align < bs && bs % align == 0;

    // The same as a 0/1 term.
    logic integer fine_flag(integer bs, integer align) =
      (align < bs && bs % align == 0) ? 1 : 0;

    // Phase 1 looks at blocks [0, phase1_limit).
    logic integer phase1_limit(integer max_length, integer bs,
                               integer n_cached) =
      fa_min(max_length / bs, n_cached);

    // Phase 2's fine indices [fine_lo, fine_hi) (fine mode only): vLLM's
    // first_partial_idx and max_partial_idx.
    logic integer fine_lo(integer p, integer bs, integer align) =
      p * (bs / align);
    logic integer fine_hi(integer p, integer bs, integer align,
                          integer max_length, integer n_fine) =
      fa_min(fa_min(p * (bs / align) + bs / align - 1, max_length / align),
             n_fine);

    // No fine index in [lo, hi) is cached.
    predicate no_fine_hit{L}(uint8_t *f, integer lo, integer hi) =
      \forall integer k; lo <= k < hi ==> f[k] == 0;

    // j is the highest cached fine index in [lo, hi).
    predicate highest_fine_hit{L}(uint8_t *f, integer lo, integer hi,
                                  integer j) =
      lo <= j < hi && f[j] != 0 && no_fine_hit(f, j + 1, hi);

    // What phase 2 finds: the highest hit, or -1 when there is none.
    predicate fine_tail{L}(uint8_t *f, integer lo, integer hi, integer t) =
      (t == -1 && no_fine_hit(f, lo, hi)) || highest_fine_hit(f, lo, hi, t);

    // The hit before EAGLE and alignment, in tokens.
    logic integer raw_hit(integer p, integer t, integer bs, integer align) =
      t < 0 ? p * bs : (t + 1) * align;

    // EAGLE drops one hash unit (fine) or one block of a non-empty hit.
    logic integer eagle_drop(integer h, integer bs, integer align,
                             integer eagle) =
      (eagle != 0 && h > 0) ? h - fa_min(align, bs) : h;

    logic integer round_down(integer h, integer align) = h - h % align;

    // vLLM's cdiv for h >= 0.
    logic integer fa_cdiv(integer h, integer bs) =
      h / bs + (h % bs == 0 ? 0 : 1);

    logic integer finished_hit(integer p, integer t, integer bs,
                               integer align, integer eagle) =
      round_down(eagle_drop(raw_hit(p, t, bs, align), bs, align, eagle),
                 align);

    // get_cached_block calls: phase 1's hits and the miss that stopped it
    // (if it stopped before its limit), phase 2's reads from the top of its
    // range down to the hit (or the whole range).
    logic integer full_probes(integer p, integer limit, integer t,
                              integer lo, integer hi, integer fine) =
      p + (p < limit ? 1 : 0) +
      (fine == 0 ? 0 : (t >= 0 ? hi - t : (hi > lo ? hi - lo : 0)));

    // The whole answer, for (prefix p, tail t, hit tokens, blocks).
    predicate full_answer{L}(uint8_t *c, integer n_cached, uint8_t *f,
        integer n_fine, integer max_length, integer bs, integer align,
        integer eagle, integer p, integer t, integer hit, integer nb) =
      max_cached_prefix(c, phase1_limit(max_length, bs, n_cached), p) &&
      (fine_mode(bs, align) ?
         fine_tail(f, fine_lo(p, bs, align),
                   fine_hi(p, bs, align, max_length, n_fine), t)
       : t == -1) &&
      hit == finished_hit(p, t, bs, align, eagle) &&
      nb == fa_cdiv(hit, bs);
*/

/* full_hit: vLLM's full-attention hit (full_answer), probing exactly as
 * vLLM does: phase 1 from block 0 up, phase 2 high to low. */
/*@ requires 0 <= n_cached <= PC_MAX_BLOCKS;
    requires 0 <= n_fine <= PC_MAX_BLOCKS;
    requires 0 <= max_length <= PC_MAX_BLOCKS;
    requires 1 <= block_size <= PC_MAX_BLOCKS;
    requires 1 <= alignment_tokens <= PC_MAX_BLOCKS;
    requires eagle == 0 || eagle == 1;
    requires \valid_read(cached + (0 .. n_cached - 1));
    requires \valid_read(fine_cached + (0 .. n_fine - 1));
    requires \valid(out);
    requires \separated(out, cached + (0 .. n_cached - 1),
                        fine_cached + (0 .. n_fine - 1));
    assigns *out;
    ensures spec: full_answer(cached, n_cached, fine_cached, n_fine,
      max_length, block_size, alignment_tokens, eagle,
      out->prefix, out->tail, out->hit_tokens, out->num_blocks);
    ensures prefix_cached: all_cached(cached, 0, out->prefix);
    ensures prefix_longest: out->prefix
        == phase1_limit(max_length, block_size, n_cached)
      || cached[out->prefix] == 0;
    ensures in_range: 0 <= out->hit_tokens <= max_length;
    ensures aligned: out->hit_tokens % alignment_tokens == 0;
    ensures blocks_exist: 0 <= out->num_blocks
      <= out->prefix + (out->tail >= 0 ? 1 : 0);
    ensures probes_exact: out->probes == full_probes(out->prefix,
      phase1_limit(max_length, block_size, n_cached), out->tail,
      fine_lo(out->prefix, block_size, alignment_tokens),
      fine_hi(out->prefix, block_size, alignment_tokens, max_length, n_fine),
      fine_flag(block_size, alignment_tokens));
    behavior fine:
      assumes fine_mode(block_size, alignment_tokens);
      ensures tail: fine_tail(fine_cached,
        fine_lo(out->prefix, block_size, alignment_tokens),
        fine_hi(out->prefix, block_size, alignment_tokens, max_length, n_fine),
        out->tail);
      ensures probe_bound: out->probes
        <= out->prefix + block_size / alignment_tokens;
    behavior not_fine:
      assumes !fine_mode(block_size, alignment_tokens);
      ensures no_tail: out->tail == -1;
      ensures probe_bound: out->probes <= out->prefix + 1;
    complete behaviors;
    disjoint behaviors;
*/
void full_hit(const uint8_t *cached, int64_t n_cached, const uint8_t *fine_cached, int64_t n_fine, int64_t max_length, int64_t block_size, int64_t alignment_tokens, int eagle, fa_hit_result *out);

/* legacy_full_scan: vLLM's method transcribed line for line (the list
 * `computed` kept as its length); proved to meet the same full_answer, so
 * it returns what full_hit returns (lemma full_answer_unique), with the
 * same probes. */
/*@ requires 0 <= n_cached <= PC_MAX_BLOCKS;
    requires 0 <= n_fine <= PC_MAX_BLOCKS;
    requires 0 <= max_length <= PC_MAX_BLOCKS;
    requires 1 <= block_size <= PC_MAX_BLOCKS;
    requires 1 <= alignment_tokens <= PC_MAX_BLOCKS;
    requires eagle == 0 || eagle == 1;
    requires \valid_read(cached + (0 .. n_cached - 1));
    requires \valid_read(fine_cached + (0 .. n_fine - 1));
    requires \valid(out);
    requires \separated(out, cached + (0 .. n_cached - 1),
                        fine_cached + (0 .. n_fine - 1));
    assigns *out;
    ensures spec: full_answer(cached, n_cached, fine_cached, n_fine,
      max_length, block_size, alignment_tokens, eagle,
      out->prefix, out->tail, out->hit_tokens, out->num_blocks);
    ensures probes_exact: out->probes == full_probes(out->prefix,
      phase1_limit(max_length, block_size, n_cached), out->tail,
      fine_lo(out->prefix, block_size, alignment_tokens),
      fine_hi(out->prefix, block_size, alignment_tokens, max_length, n_fine),
      fine_flag(block_size, alignment_tokens));
*/
void legacy_full_scan(const uint8_t *cached, int64_t n_cached, const uint8_t *fine_cached, int64_t n_fine, int64_t max_length, int64_t block_size, int64_t alignment_tokens, int eagle, fa_hit_result *out);

/* ---- the probe instance (full_attention_probe.c) --------------------------
 * full_hit_probe is full_hit compiled from the same text with each read
 * cached[i] replaced by probe(ctx, i) != 0 and each read fine_cached[j] by
 * fine_probe(ctx, j) != 0 (see the top of full_attention.c). Its guarantees
 * are full_hit's with "cached[i] != 0" read as "probe(ctx, i) != 0" and
 * "fine_cached[j] != 0" as "fine_probe(ctx, j) != 0", provided both answer
 * the same for the same index during one call. It calls probe only with
 * 0 <= i < min(max_length / block_size, n_cached), fine_probe only with
 * 0 <= j < min(max_length / alignment_tokens, n_fine) and only in
 * fine-grained mode; out->probes counts both. A CPython glue records, in
 * ctx, the blocks get_cached_block returned for each index it was asked,
 * and returns per group the first out->num_blocks of [the blocks of probe
 * 0 .. out->prefix - 1, then those of fine_probe(out->tail) when
 * out->tail >= 0]. */
void full_hit_probe(pc_probe_fn probe, pc_probe_fn fine_probe, void *ctx, int64_t n_cached, int64_t n_fine, int64_t max_length, int64_t block_size, int64_t alignment_tokens, int eagle, fa_hit_result *out);

#endif /* FULL_ATTENTION_H */
