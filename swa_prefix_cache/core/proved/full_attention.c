/*
 * full_attention.c -- verified C99 core of vLLM 0.33.0's full-attention
 * prefix-cache lookup (FullAttentionManager.find_longest_cache_hit).
 *
 * Where this comes from: hand-written from swa_prefix_cache/pyspec/full.py, same names
 * (full_hit, legacy_full_scan), same probes in the same order. It is NOT
 * generated. Frama-C/WP proves the contracts in full_attention.h (with
 * -wp-rte: no undefined behaviour, termination); swa_prefix_cache/core/proved/verify.sh
 * runs the proof and checks that broken copies of this file are rejected.
 *
 * One text, two instances (as prefix_cache.c): compiled as it is (and
 * proved), reads are cached[i] and fine_cached[j]; full_attention_probe.c
 * defines FA_PROBE_INSTANCE and includes this file, which gives
 * full_hit_probe, token for token the same except that a read asks
 * probe(ctx, i) or fine_probe(ctx, j). Only FA_NAME, FA_SOURCE,
 * FA_SOURCE_ARGS, FA_IS_MISS and FA_FINE_IS_MISS differ between the two;
 * legacy_full_scan exists only in the mask instance.
 *
 * C99, no dependencies beyond <stdint.h>.
 */
#include "full_attention.h"

#ifndef FA_PROBE_INSTANCE
#define FA_NAME(name) name
#define FA_SOURCE const uint8_t *cached, int64_t n_cached, const uint8_t *fine_cached, int64_t n_fine
#define FA_IS_MISS(i) (cached[(i)] == 0)
#define FA_FINE_IS_MISS(j) (fine_cached[(j)] == 0)
#else
#define FA_NAME(name) name##_probe
#define FA_SOURCE pc_probe_fn probe, pc_probe_fn fine_probe, void *ctx, int64_t n_cached, int64_t n_fine
#define FA_IS_MISS(i) (probe(ctx, (i)) == 0)
#define FA_FINE_IS_MISS(j) (fine_probe(ctx, (j)) == 0)
#endif

/*@ // ---- arithmetic facts (non-negative operands) ------------------------
    lemma fa_le_div_mul:
      \forall integer l, x, b; 1 <= b && 0 <= x && 0 <= l <= x / b ==>
        l * b <= x;
    lemma fa_mul_le_div:
      \forall integer y, x, a; 1 <= a && 0 <= x && 0 <= y && y * a <= x ==>
        y <= x / a;
    lemma fa_mod_zero_eq:
      \forall integer x, p; 0 <= x && 1 <= p && x % p == 0 ==>
        x == x / p * p;
    lemma fa_mul_ge:
      \forall integer p, b; 1 <= p && 1 <= b ==> b <= p * b;
    lemma fa_mul_mono:
      \forall integer x, y, a; 0 <= x <= y && 1 <= a ==> x * a <= y * a;
    lemma fa_mod_range:
      \forall integer x, p; 0 <= x && 1 <= p ==> 0 <= x % p < p;
    lemma fa_mul_mod:
      \forall integer q, a; 0 <= q && 1 <= a ==> (q * a) % a == 0;
    lemma fa_mul_ge_left:
      \forall integer p, b; 0 <= p && 1 <= b ==> p <= p * b;
    // x hash units of a tokens each are at most y of them. A predicate, so
    // that the solvers see the products only once it is unfolded: the
    // arithmetic normaliser distributes (x + ...) * a into monomials, after
    // which a monotonicity step over sums is out of their reach (the same
    // step written directly timed out at 60 s in legacy_full_scan).
    predicate fa_units_le(integer x, integer y, integer a) = x * a <= y * a;
    lemma fa_units_mono:
      \forall integer x, y, a; x <= y && 1 <= a ==> fa_units_le(x, y, a);
    lemma fa_cdiv_nonneg:
      \forall integer h, b; 1 <= b && 0 <= h ==>
        0 <= h / b + (h % b == 0 ? 0 : 1);

*/

/* The last three steps: EAGLE drop, round-down, and cdiv (pyspec finish).
 * Returns the hit in tokens; *num_blocks = cdiv(hit, block_size), at most
 * cap when raw <= cap * bs (the blocks the lookup holds). */
/*@ requires 1 <= bs <= PC_MAX_BLOCKS;
    requires 1 <= align <= PC_MAX_BLOCKS;
    requires eagle == 0 || eagle == 1;
    requires 0 <= raw <= PC_MAX_BLOCKS;
    requires eagle != 0 && raw > 0 ==> fa_min(align, bs) <= raw;
    requires 0 <= cap && raw <= cap * bs;
    requires \valid(num_blocks);
    assigns *num_blocks;
    ensures formula: \result == round_down(eagle_drop(raw, bs, align, eagle), align);
    ensures in_range: 0 <= \result <= raw;
    ensures aligned: \result % align == 0;
    ensures trim: *num_blocks == fa_cdiv(\result, bs);
    ensures blocks_held: 0 <= *num_blocks <= cap;
*/
static int64_t finish(int64_t raw, int64_t bs, int64_t align, int eagle, int64_t cap, int64_t *num_blocks)
{
    int64_t hit = raw;
    (void)cap; /* used by the proof only */
    if (eagle && hit > 0) {
        hit -= align < bs ? align : bs;
    }
    /*@ assert round_euclid: hit - hit % align == hit / align * align; */
    /*@ assert round_mod: (hit / align * align) % align == 0; */
    hit -= hit % align;
    /*@ assert hit_le_cap: 0 <= hit <= cap * bs; */
    /*@ assert euclid: hit == hit / bs * bs + hit % bs && 0 <= hit % bs < bs; */
    /*@ assert q_mono: hit / bs >= cap + 1 ==>
          (cap + 1) * bs <= hit / bs * bs; */
    /*@ assert cap_dist: (cap + 1) * bs == cap * bs + bs; */
    /*@ assert div_le: hit / bs <= cap; */
    /*@ assert exact: hit / bs == cap ==> hit % bs == 0; */
    *num_blocks = hit / bs + (hit % bs == 0 ? 0 : 1);
    return hit;
}

void FA_NAME(full_hit)(FA_SOURCE, int64_t max_length, int64_t block_size, int64_t alignment_tokens, int eagle, fa_hit_result *out)
{
    int64_t limit = max_length / block_size;
    int64_t p = 0;
    int64_t probes = 0;
    int64_t tail = -1;
    int64_t raw;
    int64_t num_blocks;
    int64_t hit;

    if (limit > n_cached) {
        limit = n_cached;
    }
    /*@ assert limit_is: limit == phase1_limit(max_length, block_size, n_cached); */
    /*@ assert limit_tokens: limit * block_size <= max_length; */
    /* Phase 1: the cached run of full blocks from block 0. */
    /*@ loop invariant 0 <= p <= limit;
        loop invariant all_cached(cached, 0, p);
        loop invariant probes == p;
        loop assigns p, probes;
        loop variant limit - p;
    */
    while (p < limit) {
        probes++;
        if (FA_IS_MISS(p)) {
            break;
        }
        p++;
    }
    /*@ assert phase1: max_cached_prefix(cached, limit, p); */
    /*@ assert phase1_probes: probes == p + (p < limit ? 1 : 0); */
    /*@ assert p_mono: p * block_size <= limit * block_size; */
    /*@ assert phase1_tokens: p * block_size <= max_length; */
    raw = p * block_size;
    /* Phase 2 (fine-grained): the interior boundaries of block p, high to
     * low; the first hit wins. */
    if (alignment_tokens < block_size && block_size % alignment_tokens == 0) {
        int64_t scale = block_size / alignment_tokens;
        int64_t lo;
        int64_t hi;
        int64_t j;
        /*@ assert bs_split: block_size == scale * alignment_tokens; */
        /*@ assert scale_pos: 1 <= scale; */
        /*@ assert scale_le: scale <= scale * alignment_tokens; */
        /*@ assert lo_tokens: p * scale * alignment_tokens == p * block_size; */
        /*@ assert lo_le_tokens: p * scale <= p * scale * alignment_tokens; */
        lo = p * scale;
        hi = lo + (scale - 1); /* lo + scale may be 2^63 */
        if (hi > max_length / alignment_tokens) {
            hi = max_length / alignment_tokens;
        }
        if (hi > n_fine) {
            hi = n_fine;
        }
        /*@ assert lo_is: lo == fine_lo(p, block_size, alignment_tokens); */
        /*@ assert hi_is: hi == fine_hi(p, block_size, alignment_tokens,
                                        max_length, n_fine); */
        j = hi - 1;
        /*@ loop invariant lo - 1 <= j <= hi - 1 || (j == hi - 1 && hi < lo);
            loop invariant no_fine_hit(fine_cached, j + 1, hi);
            loop invariant probes == p + (p < limit ? 1 : 0) + (hi - 1 - j);
            loop assigns j, probes;
            loop variant j - lo + 1;
        */
        while (j >= lo) {
            probes++;
            if (!FA_FINE_IS_MISS(j)) {
                break;
            }
            j--;
        }
        if (j >= lo) {
            tail = j;
            /*@ assert j_le_div: j + 1 <= max_length / alignment_tokens; */
            /*@ assert tail_units_ml: fa_units_le(j + 1,
                    max_length / alignment_tokens, alignment_tokens); */
            /*@ assert tail_mono_ml: (j + 1) * alignment_tokens
                    <= max_length / alignment_tokens * alignment_tokens; */
            /*@ assert tail_tokens: (j + 1) * alignment_tokens <= max_length; */
            /*@ assert tail_units_ge: fa_units_le(1, j + 1, alignment_tokens); */
            /*@ assert tail_ge_unit: alignment_tokens <= (j + 1) * alignment_tokens; */
            /*@ assert tail_in_block: j + 1 <= lo + scale - 1; */
            /*@ assert tail_units: fa_units_le(j + 1, lo + scale - 1, alignment_tokens); */
            /*@ assert tail_mono: (j + 1) * alignment_tokens
                    <= (lo + scale - 1) * alignment_tokens; */
            /*@ assert tail_dist: (lo + scale - 1) * alignment_tokens
                    == lo * alignment_tokens + scale * alignment_tokens - alignment_tokens; */
            /*@ assert cap_dist: (p + 1) * block_size == p * block_size + block_size; */
            /*@ assert tail_cap: (j + 1) * alignment_tokens
                    <= (p + 1) * block_size - alignment_tokens; */
            raw = (j + 1) * alignment_tokens;
        }
        /*@ assert tail_found: fine_tail(fine_cached, lo, hi, tail); */
        /*@ assert tail_is: fine_tail(fine_cached,
              fine_lo(p, block_size, alignment_tokens),
              fine_hi(p, block_size, alignment_tokens, max_length, n_fine), tail); */
    }
    /*@ assert raw_is: raw == raw_hit(p, tail, block_size, alignment_tokens); */
    /*@ assert mode_tail: fine_mode(block_size, alignment_tokens) ?
          fine_tail(fine_cached, fine_lo(p, block_size, alignment_tokens),
            fine_hi(p, block_size, alignment_tokens, max_length, n_fine), tail)
        : tail == -1; */
    /*@ assert raw_ge_unit: p >= 1 ==> block_size <= p * block_size; */
    /*@ assert raw_le_cap: tail >= 0 ? raw <= p * block_size + block_size
                                     : raw <= p * block_size; */
    hit = finish(raw, block_size, alignment_tokens, eagle, tail >= 0 ? p + 1 : p, &num_blocks);
    out->hit_tokens = hit;
    out->num_blocks = num_blocks;
    out->prefix = p;
    out->tail = tail;
    out->probes = probes;
}

#ifndef FA_PROBE_INSTANCE
void legacy_full_scan(const uint8_t *cached, int64_t n_cached, const uint8_t *fine_cached, int64_t n_fine, int64_t max_length, int64_t block_size, int64_t alignment_tokens, int eagle, fa_hit_result *out)
{
    int64_t probes = 0;
    int64_t computed = 0; /* len(computed_blocks[0]) */
    int64_t prefix;
    int64_t tail = -1;
    int64_t hit_length;
    int64_t num_blocks;
    int64_t i;
    int fine_grained = alignment_tokens < block_size && block_size % alignment_tokens == 0;
    int64_t phase1 = max_length / block_size;

    if (phase1 > n_cached) {
        phase1 = n_cached; /* islice stops at the end of the view */
    }
    /*@ assert legacy_limit: phase1 == phase1_limit(max_length, block_size, n_cached); */
    /*@ assert legacy_limit_tokens: phase1 * block_size <= max_length; */
    /* for block_hash in islice(full_block_hashes, max_length // block_size) */
    /*@ loop invariant 0 <= i <= phase1;
        loop invariant computed == i;
        loop invariant all_cached(cached, 0, i);
        loop invariant probes == i;
        loop assigns i, computed, probes;
        loop variant phase1 - i;
    */
    for (i = 0; i < phase1; i++) {
        probes++;
        if (cached[i] == 0) {
            break;
        }
        computed++;
    }
    /*@ assert legacy_phase1: max_cached_prefix(cached, phase1, computed); */
    /*@ assert legacy_p_mono: computed * block_size <= phase1 * block_size; */
    /*@ assert legacy_phase1_tokens: computed * block_size <= max_length; */
    /*@ assert legacy_raw_ge_unit: computed >= 1 ==> block_size <= computed * block_size; */
    hit_length = computed * block_size;
    prefix = computed;
    /*@ assert legacy_prefix: max_cached_prefix(cached,
          phase1_limit(max_length, block_size, n_cached), prefix); */
    if (fine_grained) {
        int64_t scale_factor = block_size / alignment_tokens;
        int64_t first_partial_idx;
        int64_t max_partial_idx;
        int64_t fine_idx;
        /*@ assert legacy_bs_split: block_size == scale_factor * alignment_tokens; */
        /*@ assert legacy_scale_pos: 1 <= scale_factor; */
        /*@ assert legacy_scale_le: scale_factor <= scale_factor * alignment_tokens; */
        /*@ assert legacy_lo_split: computed * scale_factor * alignment_tokens == computed * block_size; */
        /*@ assert legacy_lo_le_tokens: computed * scale_factor <= computed * scale_factor * alignment_tokens; */
        first_partial_idx = computed * scale_factor;
        max_partial_idx = first_partial_idx + (scale_factor - 1);
        if (max_partial_idx > max_length / alignment_tokens) {
            max_partial_idx = max_length / alignment_tokens;
        }
        if (max_partial_idx > n_fine) {
            max_partial_idx = n_fine;
        }
        /*@ assert legacy_range: first_partial_idx == fine_lo(prefix, block_size, alignment_tokens)
              && max_partial_idx == fine_hi(prefix, block_size, alignment_tokens,
                                            max_length, n_fine); */
        /* for fine_idx in range(max_partial_idx - 1, first_partial_idx - 1, -1) */
        /*@ loop invariant first_partial_idx - 1 <= fine_idx <= max_partial_idx - 1
                || (fine_idx == max_partial_idx - 1 && max_partial_idx < first_partial_idx);
            loop invariant tail == -1;
            loop invariant computed == prefix;
            loop invariant hit_length == prefix * block_size;
            loop invariant legacy_raw_inv: hit_length == raw_hit(prefix, tail, block_size,
                                                                 alignment_tokens);
            loop invariant no_fine_hit(fine_cached, fine_idx + 1, max_partial_idx);
            loop invariant probes == prefix + (prefix < phase1 ? 1 : 0)
                                     + (max_partial_idx - 1 - fine_idx);
            loop assigns fine_idx, probes, computed, tail, hit_length;
            loop variant fine_idx - first_partial_idx + 1;
        */
        for (fine_idx = max_partial_idx - 1; fine_idx > first_partial_idx - 1; fine_idx--) {
            probes++;
            if (fine_cached[fine_idx] == 0) {
                continue;
            }
            computed++;
            tail = fine_idx;
            /*@ assert legacy_j_le_div: fine_idx + 1 <= max_length / alignment_tokens; */
            /*@ assert legacy_tail_units_ml: fa_units_le(fine_idx + 1,
                    max_length / alignment_tokens, alignment_tokens); */
            /*@ assert legacy_tail_mono_ml: (fine_idx + 1) * alignment_tokens
                    <= max_length / alignment_tokens * alignment_tokens; */
            /*@ assert legacy_tail_tokens: (fine_idx + 1) * alignment_tokens <= max_length; */
            /*@ assert legacy_tail_units_ge: fa_units_le(1, fine_idx + 1, alignment_tokens); */
            /*@ assert legacy_tail_ge_unit: alignment_tokens <= (fine_idx + 1) * alignment_tokens; */
            /*@ assert legacy_lo_tokens: first_partial_idx * alignment_tokens
                    == prefix * block_size; */
            /*@ assert legacy_tail_in_block: fine_idx + 1 <= first_partial_idx + scale_factor - 1; */
            /*@ assert legacy_tail_units: fa_units_le(fine_idx + 1,
                    first_partial_idx + scale_factor - 1, alignment_tokens); */
            /*@ assert legacy_tail_mono: (fine_idx + 1) * alignment_tokens
                    <= (first_partial_idx + scale_factor - 1) * alignment_tokens; */
            /*@ assert legacy_tail_dist: (first_partial_idx + scale_factor - 1) * alignment_tokens
                    == first_partial_idx * alignment_tokens + scale_factor * alignment_tokens
                       - alignment_tokens; */
            /*@ assert legacy_cap_dist: (prefix + 1) * block_size == prefix * block_size + block_size; */
            /*@ assert legacy_tail_cap: (fine_idx + 1) * alignment_tokens
                    <= (prefix + 1) * block_size - alignment_tokens; */
            hit_length = (fine_idx + 1) * alignment_tokens;
            /*@ assert legacy_raw_tail: hit_length == raw_hit(prefix, tail, block_size,
                                                            alignment_tokens); */
            break;
        }
        /*@ assert legacy_tail: fine_tail(fine_cached, first_partial_idx,
                                          max_partial_idx, tail); */
        /*@ assert legacy_raw_fine: hit_length == raw_hit(prefix, tail, block_size,
                                                          alignment_tokens); */
    }
    /*@ assert legacy_mode_tail: fine_mode(block_size, alignment_tokens) ?
          fine_tail(fine_cached, fine_lo(prefix, block_size, alignment_tokens),
            fine_hi(prefix, block_size, alignment_tokens, max_length, n_fine), tail)
        : tail == -1; */
    /* EAGLE: drop one hash unit when fine-grained, else one block; round
     * down to alignment_tokens; num_blocks = cdiv(hit_length, block_size)
     * (the same three lines as full_hit's, in finish). */
    /*@ assert legacy_raw: hit_length == raw_hit(prefix, tail, block_size, alignment_tokens); */
    /*@ assert legacy_len: computed == prefix + (tail >= 0 ? 1 : 0); */
    /*@ assert legacy_unit: eagle != 0 && hit_length > 0 ==>
          fa_min(alignment_tokens, block_size) <= hit_length; */
    /*@ assert legacy_raw_le_cap: hit_length <= computed * block_size; */
    hit_length = finish(hit_length, block_size, alignment_tokens, eagle, computed, &num_blocks);
    /* del computed[num_blocks:] */
    if (computed > num_blocks) {
        computed = num_blocks;
    }
    out->hit_tokens = hit_length;
    out->num_blocks = computed;
    out->prefix = prefix;
    out->tail = tail;
    out->probes = probes;
}
#endif /* FA_PROBE_INSTANCE */

/* Stated after the functions so that their proofs do not carry these
 * quantified lemmas. */
/*@
    // ---- full_answer is a function of the input ----------------------------
    lemma fa_max_cached_prefix_unique{L}:
      \forall uint8_t *c, integer limit, p, q;
        max_cached_prefix(c, limit, p) && max_cached_prefix(c, limit, q) ==>
          p == q;
    lemma fine_tail_unique{L}:
      \forall uint8_t *f, integer lo, hi, t1, t2;
        fine_tail(f, lo, hi, t1) && fine_tail(f, lo, hi, t2) ==> t1 == t2;
    // full_hit and legacy_full_scan both ensure full_answer, so they return
    // the same (prefix, tail, hit_tokens, num_blocks) on every input.
    lemma full_answer_unique{L}:
      \forall uint8_t *c, integer nc, uint8_t *f, integer nf, integer ml,
        integer bs, integer al, integer eg, integer p1, integer t1,
        integer h1, integer b1, integer p2, integer t2, integer h2,
        integer b2;
        full_answer(c, nc, f, nf, ml, bs, al, eg, p1, t1, h1, b1) &&
        full_answer(c, nc, f, nf, ml, bs, al, eg, p2, t2, h2, b2) ==>
          p1 == p2 && t1 == t2 && h1 == h2 && b1 == b2;
*/
