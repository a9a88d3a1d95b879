/*
 * reachable.c -- verified C99 store-side mask of a sliding-window group
 * (vLLM's SlidingWindowManager.reachable_block_mask).
 *
 * Where this comes from: hand-written from swa_prefix_cache/pyspec/reachable.py
 * (reachable_mask) and vLLM 0.33.0's reachable_block_mask
 * (vllm/v1/core/single_type_kv_cache_manager.py), whose per-block closed
 * form for the segment tails, (i - shift) % per_segment >= per_segment -
 * need, it uses. It is NOT generated. Frama-C/WP proves (with -wp-rte: no
 * undefined behaviour, termination) that the closed form marks exactly the
 * union of tails that pyspec's reachable_mask keeps (reachable.h);
 * swa_prefix_cache/core/proved/verify.sh runs the proof and checks that broken copies of
 * this file are rejected. Never patch this file without re-running
 * swa_prefix_cache/core/proved/verify.sh.
 *
 * C99, no dependencies beyond <stdint.h>.
 */
#include "reachable.h"

/*@ // ---- arithmetic facts about %, for non-negative operands ----------
    lemma rm_mod_range:
      \forall integer x, p; 0 <= x && 1 <= p ==> 0 <= x % p < p;
    lemma rm_realign_is_multiple:
      \forall integer x, p; 0 <= x && 1 <= p ==> (x - x % p) % p == 0;
    lemma rm_multiple_below:
      \forall integer x, y, p; 1 <= p && 0 <= y <= x && y % p == 0 ==>
        y <= x - x % p;
    lemma rm_next_multiple:
      \forall integer x, p; 0 <= x && 1 <= p ==>
        (x - x % p + p) % p == 0;
    // The smallest multiple of p above x is x - x % p + p.
    lemma rm_multiple_above:
      \forall integer x, m, p; 1 <= p && 0 <= x < m && m % p == 0 ==>
        x - x % p + p <= m;
    lemma rm_div_mul_le:
      \forall integer x, a; 0 <= x && 1 <= a ==> 0 <= x / a * a <= x;

    // vLLM's closed form for the segment tails is their union.
    lemma segment_closed_form:
      \forall integer i, per, need, eagle;
        0 <= i && 1 <= per && need < per && (eagle == 0 || eagle == 1) ==>
        ((i >= eagle && (i - eagle) % per >= per - need) <==>
         segment_kept(i, per, need, eagle));

    // Windows are >= 0 tokens, so need >= -1, and need < 0 only for
    // block size 1 (cdiv(-1, 1) == -1).
    lemma need_lower:
      \forall integer w, bs, eagle; 0 <= w && 1 <= bs &&
        (eagle == 0 || eagle == 1) ==>
        -1 <= contiguous_blocks_for_hit(w, bs, eagle) &&
        (contiguous_blocks_for_hit(w, bs, eagle) < 0 ==> bs == 1);
*/

/* (1) Is block i in a segment tail? vLLM's closed form. */
/*@ requires 0 <= i < PC_MAX_BLOCKS;
    requires 1 <= per <= PC_MAX_BLOCKS;
    requires -1 <= need < per;
    requires eagle == 0 || eagle == 1;
    assigns \nothing;
    ensures segment: \result != 0 <==> segment_kept(i, per, need, eagle);
*/
static int segment_tail_at(int64_t i, int64_t per, int64_t need, int eagle)
{
    return i >= eagle && (i - eagle) % per >= per - need;
}

/* (2) Is block i in the final segment's tail (no EAGLE)? */
/*@ requires 0 <= i < PC_MAX_BLOCKS;
    requires 1 <= per <= PC_MAX_BLOCKS;
    requires -1 <= need < per;
    requires fe == PC_NONE || 0 <= fe <= PC_MAX_BLOCKS;
    assigns \nothing;
    ensures final: \result != 0 <==> final_kept(i, fe, per, need);
*/
static int final_tail_at(int64_t i, int64_t per, int64_t need, int64_t fe)
{
    int64_t final_size;
    if (fe == PC_NONE) {
        return 0;
    }
    final_size = fe % per;
    return final_size != 0 && fe - final_size <= i && fe - need <= i && i < fe;
}

/* (3) Is block i in a reachable boundary's tail? A negative boundary has
 * none (pyspec's floor division puts it at or below block 0). */
/*@ requires 0 <= i < PC_MAX_BLOCKS;
    requires 1 <= align <= PC_MAX_BLOCKS && align % bs == 0;
    requires 1 <= bs <= PC_MAX_BLOCKS;
    requires -1 <= need <= PC_MAX_BLOCKS + 1;
    requires eagle == 0 || eagle == 1;
    requires 0 <= nb <= PC_MAX_BLOCKS;
    requires \valid_read(bounds + (0 .. nb - 1));
    requires \forall integer j; 0 <= j < nb ==> bounds[j] <= PC_MAX_BLOCKS;
    assigns \nothing;
    ensures boundary: \result != 0 <==> boundary_kept(bounds, nb, i, align, bs, need, eagle);
*/
static int boundary_tail_at(int64_t i, int64_t align, int64_t bs, int64_t need, int eagle, const int64_t *bounds, int64_t nb)
{
    int64_t j;
    /*@ loop invariant 0 <= j <= nb;
        loop invariant \forall integer k; 0 <= k < j ==>
          !(bounds[k] >= 0 &&
            in_tail(i, bounds[k] / align * align / bs, need, eagle));
        loop assigns j;
        loop variant nb - j;
    */
    for (j = 0; j < nb; j++) {
        int64_t p = bounds[j];
        if (p >= 0) {
            int64_t q = p / align;
            int64_t aligned;
            int64_t b;
            /*@ assert aligned_range: 0 <= q * align <= p; */
            aligned = q * align;
            b = aligned / bs + eagle; /* the tail is [b - need, b) */
            if (b - need <= i && i < b) {
                /*@ assert in_tail(i, bounds[j] / align * align / bs, need, eagle); */
                return 1;
            }
        }
    }
    return 0;
}

/* Is block i kept (mask case: need, per as vLLM computes them)? */
/*@ requires 0 <= i < PC_MAX_BLOCKS;
    requires 1 <= align <= PC_MAX_BLOCKS && align % bs == 0;
    requires 1 <= bs <= PC_MAX_BLOCKS;
    requires -1 <= need <= PC_MAX_BLOCKS + 1;
    requires eagle == 0 || eagle == 1;
    requires ret == PC_NONE || 0 <= ret <= PC_MAX_BLOCKS;
    requires fe == PC_NONE || 0 <= fe <= PC_MAX_BLOCKS;
    requires ret != 0 ==> 1 <= per <= PC_MAX_BLOCKS && need < per;
    requires 0 <= nb <= PC_MAX_BLOCKS;
    requires \valid_read(bounds + (0 .. nb - 1));
    requires \forall integer j; 0 <= j < nb ==> bounds[j] <= PC_MAX_BLOCKS;
    assigns \nothing;
    ensures \result == 0 || \result == 1;
    ensures \result == 1 <==> kept(i, need, per, eagle, ret, bounds, nb, align, bs, fe);
*/
static int block_kept(int64_t i, int64_t need, int64_t per, int eagle, int64_t ret, const int64_t *bounds, int64_t nb, int64_t align, int64_t bs, int64_t fe)
{
    if (ret != 0) {
        if (segment_tail_at(i, per, need, eagle)) {
            return 1;
        }
        if (!eagle && final_tail_at(i, per, need, fe)) {
            return 1;
        }
    }
    if (ret != PC_NONE && boundary_tail_at(i, align, bs, need, eagle, bounds, nb)) {
        return 1;
    }
    return 0;
}

int reachable_mask(int64_t start_block, int64_t end_block, int64_t alignment_tokens, int64_t block_size, int64_t sliding_window, int use_eagle, int64_t retention_interval, const int64_t *reachable_boundaries, int64_t num_boundaries, int64_t final_segment_end_block, uint8_t *out)
{
    int64_t len = end_block - start_block;
    int64_t need = 0;
    int64_t per = 0;
    int keep_all = 0;
    int64_t i;

    if (alignment_tokens == PC_NONE || alignment_tokens % block_size != 0) {
        keep_all = 1;
    } else {
        need = contiguous_blocks_for_hit(sliding_window, block_size, use_eagle);
        if (retention_interval != 0) {
            int64_t segment = retention_interval == PC_NONE ? alignment_tokens : retention_interval;
            per = segment / block_size;
            if (need >= per) {
                keep_all = 1; /* tails would overlap: every block is reachable */
            }
        }
    }
    /*@ assert keep_all_is: keep_all != 0 <==> keeps_all(alignment_tokens, block_size,
                   sliding_window, use_eagle, retention_interval); */
    if (keep_all) {
        /*@ loop invariant 0 <= i <= len;
            loop invariant \forall integer k; 0 <= k < i ==> out[k] == 1;
            loop assigns i, out[0 .. len - 1];
            loop variant len - i;
        */
        for (i = 0; i < len; i++) {
            out[i] = 1;
        }
        return 0;
    }
    /*@ assert need_is: need == rm_need(sliding_window, block_size, use_eagle); */
    /*@ assert per_is: retention_interval != 0 ==>
          per == rm_per(alignment_tokens, block_size, retention_interval) &&
          1 <= per && need < per; */
    /*@ loop invariant start_block <= i <= end_block;
        loop invariant \forall integer k; 0 <= k < i - start_block ==>
          out[k] == 0 || out[k] == 1;
        loop invariant \forall integer k; start_block <= k < i ==>
          (out[k - start_block] == 1 <==>
           kept(k, need, per, use_eagle, retention_interval,
                reachable_boundaries, num_boundaries, alignment_tokens,
                block_size, final_segment_end_block));
        loop assigns i, out[0 .. len - 1];
        loop variant end_block - i;
    */
    for (i = start_block; i < end_block; i++) {
        out[i - start_block] = (uint8_t)block_kept(i, need, per, use_eagle, retention_interval, reachable_boundaries, num_boundaries, alignment_tokens, block_size, final_segment_end_block);
    }
    return 1;
}
