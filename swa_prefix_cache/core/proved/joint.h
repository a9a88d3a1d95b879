/*
 * joint.h -- public API and ACSL contracts of the multi-group (hybrid)
 * prefix-cache lookup: vLLM's HybridKVCacheCoordinator fixed point.
 *
 * Where this comes from: hand-written from swa_prefix_cache/pyspec/joint.py (joint_lookup,
 * group_hit, full_attention_hit, max_rounds_bound), same names, same loop,
 * same lookups in the same order. It is NOT generated. The merging of
 * groups with equal specs into attention groups (swa_prefix_cache.pyspec.attention_groups)
 * is done by the caller (benchmarks/cffi_core.py uses pyspec's function);
 * joint_lookup takes the attention groups, full attention first. A
 * sliding-window lookup is the proved find_hit of prefix_cache.h.
 *
 * Proved by Frama-C/WP (swa_prefix_cache/core/proved/verify.sh), with -wp-rte: no undefined
 * behaviour, every read and write in bounds, termination within
 * max_rounds_bound rounds, the candidate never grows (from round to round,
 * and inside a round), every lookup
 * answers at most what it is asked (an EAGLE lookup at most the candidate
 * it was asked one block past), and the answer is at most
 * max_cache_hit_length and a multiple of alignment_tokens. That the answer
 * is vLLM's (swa_prefix_cache.pyspec.joint_lookup's) is tested, not proved:
 * tests/test_ffi_joint.py, exhaustively on small inputs and by hypothesis.
 * Never patch this file or joint.c without re-running swa_prefix_cache/core/proved/verify.sh.
 */
#ifndef PC_JOINT_H
#define PC_JOINT_H

#include <stdint.h>

#include "prefix_cache.h"

/* One attention group (a vLLM SpecGroup): its blocks are cached when
 * masks[mask_offset + i] != 0, i < mask_len. */
typedef struct {
    int64_t block_size;     /* tokens per block; divides alignment_tokens */
    int64_t sliding_window; /* tokens; ignored for full attention */
    int64_t mask_offset;    /* this group's mask in masks[] */
    int64_t mask_len;       /* blocks in this group's mask */
    int is_full;            /* 1: full attention, 0: sliding window */
    int eagle;              /* 1: drops the EAGLE block */
} pc_group;

/* What joint_lookup returns for one attention group. */
typedef struct {
    int64_t length;     /* blocks vLLM returns for the group */
    int64_t first_real; /* blocks [0, first_real) are the null block */
    int64_t tokens;     /* the group's last lookup answer (tokens) */
    int64_t verified;   /* EAGLE: matched its extra block at the candidate
                           the loop ended on (pyspec's eagle_verified) */
} pc_group_answer;

typedef struct {
    int64_t hit_length;                        /* tokens */
    int64_t num_uncached_common_prefix_tokens; /* longest candidate - hit */
    int64_t rounds;                            /* passes over the groups */
} pc_joint_result;

/*@ // ---- vocabulary (same names as swa_prefix_cache/pyspec/joint.py) ---------------------

    // swa_prefix_cache.pyspec.max_rounds_bound.
    logic integer max_rounds_bound(integer max_len, integer align) =
      2 + max_len / align;

    // A group's parameters are in the proved range and its mask lies in
    // masks[0 .. masks_len).
    predicate well_formed_group{L}(pc_group *g, integer align,
                                   integer masks_len) =
      1 <= g->block_size <= align && align % g->block_size == 0 &&
      -PC_MAX_BLOCKS <= g->sliding_window <= PC_MAX_BLOCKS &&
      (g->is_full == 0 || g->is_full == 1) &&
      (g->eagle == 0 || g->eagle == 1) &&
      0 <= g->mask_offset && 0 <= g->mask_len &&
      g->mask_offset + g->mask_len <= masks_len;

    // An answer of a lookup: a multiple of the alignment in [0, max_length].
    predicate aligned_answer(integer t, integer max_length, integer align) =
      0 <= t <= max_length && t % align == 0;

    // Every group's last answer is a lookup answer (or the initial 0).
    predicate answers_ok{L}(pc_group_answer *ans, integer ng, integer max_len,
                            integer align) =
      \forall integer i; 0 <= i < ng ==>
        aligned_answer(ans[i].tokens, max_len, align) && 0 <= ans[i].first_real;

*/

/* group_hit: one lookup of one attention group, in tokens
 * (swa_prefix_cache.pyspec.joint.group_hit): full attention = the cached run from block 0
 * within max_length, minus one block with the EAGLE drop, rounded down to
 * alignment_tokens; sliding window = find_hit with n = max_length /
 * block_size (at most the mask), need = contiguous_blocks_for_hit(window,
 * block_size, drop) = cdiv(window - 1, block_size) + drop, period =
 * alignment_period(block_size, alignment_tokens) = alignment_tokens /
 * block_size (params.h). *first_real: the
 * sliding-window null prefix (0 for full attention). */
/*@ requires 1 <= align <= PC_MAX_BLOCKS;
    requires 0 <= max_length <= PC_MAX_BLOCKS;
    requires 0 <= masks_len;
    requires \valid_read(g);
    requires well_formed_group(g, align, masks_len);
    requires \valid_read(masks + (0 .. masks_len - 1));
    requires drop == 0 || drop == 1;
    requires \valid(first_real);
    requires \separated(first_real, g, masks + (0 .. masks_len - 1));
    assigns *first_real;
    ensures answer: aligned_answer(\result, max_length, align);
    ensures eagle_drop: drop == 1 ==>
              \result == 0 || \result + g->block_size <= max_length;
    ensures null_prefix: 0 <= *first_real;
*/
int64_t group_hit(const pc_group *g, const uint8_t *masks, int64_t masks_len, int64_t max_length, int64_t align, int drop, int64_t *first_real);

/* joint_lookup: HybridKVCacheCoordinator.find_longest_cache_hit on masks
 * (swa_prefix_cache.pyspec.joint.joint_lookup) over num_groups attention groups (full
 * attention first). cap_tokens = num_hash_blocks * hash_block_size (the
 * EAGLE lookups' max_length cap). Writes answers[0 .. num_groups) and *out.
 * The candidate never grows: each round (joint_round in joint.c, whose
 * contract says so) ends at or below the candidate it started from, each
 * lookup answers at or below the running candidate, and a round that does
 * not end at its start lowers hit_length strictly (by at least
 * alignment_tokens after the first round, which bounds the rounds). */
/*@ requires 1 <= num_groups <= PC_MAX_BLOCKS;
    requires 1 <= alignment_tokens <= PC_MAX_BLOCKS;
    requires 0 <= max_cache_hit_length <= PC_MAX_BLOCKS;
    requires 0 <= cap_tokens <= PC_MAX_BLOCKS;
    requires 0 <= masks_len;
    requires \valid_read(groups + (0 .. num_groups - 1));
    requires \forall integer k; 0 <= k < num_groups ==>
               well_formed_group(groups + k, alignment_tokens, masks_len);
    requires \valid_read(masks + (0 .. masks_len - 1));
    requires \valid(answers + (0 .. num_groups - 1));
    requires \valid(out);
    requires \separated(answers + (0 .. num_groups - 1), out,
                        groups + (0 .. num_groups - 1),
                        masks + (0 .. masks_len - 1));
    requires \separated(out, groups + (0 .. num_groups - 1),
                        masks + (0 .. masks_len - 1));
    assigns answers[0 .. num_groups - 1], *out;
    ensures terminates_in_bound:
      1 <= out->rounds <= max_rounds_bound(max_cache_hit_length,
                                           alignment_tokens);
    ensures at_most_max: 0 <= out->hit_length <= max_cache_hit_length;
    ensures aligned: out->hit_length % alignment_tokens == 0;
    ensures uncached_prefix: 0 <= out->num_uncached_common_prefix_tokens
              + out->hit_length <= max_cache_hit_length;
    ensures answers_aligned: answers_ok(answers, num_groups,
                                        max_cache_hit_length, alignment_tokens);
    ensures lengths: \forall integer k; 0 <= k < num_groups ==>
              0 <= answers[k].length;
*/
void joint_lookup(const pc_group *groups, int64_t num_groups, const uint8_t *masks, int64_t masks_len, int64_t max_cache_hit_length, int64_t alignment_tokens, int64_t cap_tokens, pc_group_answer *answers, pc_joint_result *out);

#endif /* PC_JOINT_H */
