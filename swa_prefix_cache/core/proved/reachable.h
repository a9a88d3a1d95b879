/*
 * reachable.h -- public API and ACSL contracts of the store-side mask:
 * which sliding-window blocks the store keeps.
 *
 * Where this comes from: hand-written from swa_prefix_cache/pyspec/reachable.py
 * (reachable_mask and tail), which states vLLM 0.33.0's
 * SlidingWindowManager.reachable_block_mask (dcp_world_size == 1) from its
 * meaning. It is NOT generated. The contract says what the mask is in
 * pyspec's words -- the union of the *tails* of the hits the store keeps
 * servable (segment boundaries, the final segment, the reachable
 * boundaries), cut to [start_block, end_block) -- while reachable.c computes
 * it block by block with vLLM's own closed form; Frama-C/WP proves the two
 * equal (swa_prefix_cache/core/proved/verify.sh). Never patch this file or reachable.c
 * without re-running swa_prefix_cache/core/proved/verify.sh.
 *
 * Python's None is PC_NONE (-1) for alignment_tokens, retention_interval and
 * final_segment_end_block. A negative reachable boundary (a token position
 * before the prompt, e.g. N - 1 for N = 0) has an empty tail in pyspec
 * (floor division puts it at or below block 0); the contract names only
 * the non-negative ones.
 */
#ifndef PC_REACHABLE_H
#define PC_REACHABLE_H

#include <stdint.h>

#include "prefix_cache.h"
#include "params.h"

/* Python's None for the optional integer arguments. */
#define PC_NONE ((int64_t)-1)

/*@ // ---- vocabulary (same names as swa_prefix_cache/pyspec/reachable.py; cdiv and
    // contiguous_blocks_for_hit are params.h's) ---------------------------

    // swa_prefix_cache.pyspec.reachable.tail: block i is in the run a hit of b blocks reads,
    // [max(b + eagle - need, 0), max(b + eagle, 0)).
    predicate in_tail(integer i, integer b, integer need, integer eagle) =
      (b + eagle - need < 0 ? 0 : b + eagle - need) <= i &&
      i < (b + eagle < 0 ? 0 : b + eagle);

    // The segment in tokens when there is one (retention_interval != 0):
    // alignment_tokens when dense (None), else retention_interval.
    logic integer segment_tokens(integer align, integer ret) =
      ret == PC_NONE ? align : ret;

    // pyspec returns None (keep every block): no alignment, a sub-block
    // alignment, or with segments a tail at least a segment long.
    predicate keeps_all(integer align, integer bs, integer w, integer eagle,
                        integer ret) =
      align == PC_NONE || align % bs != 0 ||
      (ret != 0 && contiguous_blocks_for_hit(w, bs, eagle)
                     >= segment_tokens(align, ret) / bs);

    // (1) a segment boundary: block i is in the tail of some positive
    // multiple m of the segment (in blocks: per).
    predicate segment_kept(integer i, integer per, integer need,
                           integer eagle) =
      \exists integer m; per <= m && m % per == 0 && in_tail(i, m, need, eagle);

    // (2) the final segment (only without EAGLE): the tail of the hit at
    // final_segment_end_block fe, cut to that final partial segment.
    predicate final_kept(integer i, integer fe, integer per, integer need) =
      fe != PC_NONE && fe % per != 0 && fe - fe % per <= i &&
      in_tail(i, fe, need, 0);

    // (3) a reachable boundary p >= 0: the tail of the hit at p rounded
    // down to the alignment.
    predicate boundary_kept{L}(int64_t *bounds, integer nb, integer i,
        integer align, integer bs, integer need, integer eagle) =
      \exists integer j; 0 <= j < nb && bounds[j] >= 0 &&
        in_tail(i, bounds[j] / align * align / bs, need, eagle);

    // need and per_segment, as vLLM computes them.
    logic integer rm_need(integer w, integer bs, integer eagle) =
      contiguous_blocks_for_hit(w, bs, eagle);
    logic integer rm_per(integer align, integer bs, integer ret) =
      segment_tokens(align, ret) / bs;

    // What swa_prefix_cache.pyspec.reachable_mask keeps (when not keeps_all), for
    // need = rm_need(...) and per = rm_per(...): segment boundaries and the
    // final segment when there are segments (retention_interval != 0),
    // reachable boundaries when there is a retention interval (not None,
    // 0 included).
    predicate kept{L}(integer i, integer need, integer per, integer eagle,
        integer ret, int64_t *bounds, integer nb, integer align,
        integer bs, integer fe) =
      (ret != 0 &&
        (segment_kept(i, per, need, eagle) ||
         (eagle == 0 && final_kept(i, fe, per, need)))) ||
      (ret != PC_NONE && boundary_kept(bounds, nb, i, align, bs, need, eagle));
*/

/* reachable_mask: vLLM's SlidingWindowManager.reachable_block_mask.
 * Writes out[i - start_block] for every block i in [start_block, end_block)
 * and nothing else: 1 when block i is kept, 0 when it is not. Returns 0 for
 * pyspec's None ("keep every block"; out is then all 1), 1 otherwise.
 * alignment_tokens, retention_interval, final_segment_end_block: PC_NONE
 * for None. */
/*@ requires 0 <= start_block <= end_block <= PC_MAX_BLOCKS;
    requires alignment_tokens == PC_NONE ||
             1 <= alignment_tokens <= PC_MAX_BLOCKS;
    requires 1 <= block_size <= PC_MAX_BLOCKS;
    requires 0 <= sliding_window <= PC_MAX_BLOCKS;
    requires use_eagle == 0 || use_eagle == 1;
    requires retention_interval == PC_NONE ||
             0 <= retention_interval <= PC_MAX_BLOCKS;
    requires final_segment_end_block == PC_NONE ||
             0 <= final_segment_end_block <= PC_MAX_BLOCKS;
    requires 0 <= num_boundaries <= PC_MAX_BLOCKS;
    requires \valid_read(reachable_boundaries + (0 .. num_boundaries - 1));
    requires \forall integer j; 0 <= j < num_boundaries ==>
               reachable_boundaries[j] <= PC_MAX_BLOCKS;
    requires \valid(out + (0 .. end_block - start_block - 1));
    requires \separated(out + (0 .. end_block - start_block - 1),
                        reachable_boundaries + (0 .. num_boundaries - 1));
    assigns out[0 .. end_block - start_block - 1];
    ensures result: \result == 0 || \result == 1;
    ensures zero_one: \forall integer k; 0 <= k < end_block - start_block ==>
              out[k] == 0 || out[k] == 1;
    behavior keep_all:
      assumes keeps_all(alignment_tokens, block_size, sliding_window,
                        use_eagle, retention_interval);
      ensures none: \result == 0;
      ensures all_ones: \forall integer k; 0 <= k < end_block - start_block ==>
                out[k] == 1;
    behavior masked:
      assumes !keeps_all(alignment_tokens, block_size, sliding_window,
                         use_eagle, retention_interval);
      ensures mask: \result == 1;
      ensures exact: \forall integer i; start_block <= i < end_block ==>
                (out[i - start_block] == 1 <==>
                 kept(i, rm_need(sliding_window, block_size, use_eagle),
                      rm_per(alignment_tokens, block_size, retention_interval),
                      use_eagle, retention_interval, reachable_boundaries,
                      num_boundaries, alignment_tokens, block_size,
                      final_segment_end_block));
    complete behaviors;
    disjoint behaviors;
*/
int reachable_mask(int64_t start_block, int64_t end_block, int64_t alignment_tokens, int64_t block_size, int64_t sliding_window, int use_eagle, int64_t retention_interval, const int64_t *reachable_boundaries, int64_t num_boundaries, int64_t final_segment_end_block, uint8_t *out);

#endif /* PC_REACHABLE_H */
