/*
 * params.h -- public API and ACSL contracts of the reduction of vLLM's
 * sliding-window lookup parameters to the search's inputs: the run length
 * `need` and the alignment gate as a period in blocks.
 *
 * Where this comes from: hand-written from swa_prefix_cache/pyspec/params.py
 * (contiguous_blocks_for_hit, alignment_period, search_need), same names,
 * same arithmetic; swa_prefix_cache/pyspec/params.py is the one Python twin, and
 * tests/test_params.py checks the two agree with each other and with vLLM's
 * SlidingWindowManager._contiguous_blocks_for_hit. It is NOT generated.
 * Frama-C/WP proves the contracts below (swa_prefix_cache/core/proved/verify.sh, with -wp-rte:
 * no overflow, no division by zero, termination); broken copies of params.c
 * are rejected. Every caller (joint.c, the hot path's glue, kv_index through
 * joint.c) computes these numbers here, nowhere else.
 */
#ifndef PC_PARAMS_H
#define PC_PARAMS_H

#include <stdint.h>

#include "prefix_cache.h"

/*@ // ---- vocabulary (same names as swa_prefix_cache/pyspec/params.py) ---------------------

    // vLLM's cdiv(a, b) = -(a // -b): the ceiling of a / b (b >= 1). ACSL's
    // / truncates towards zero, which is the ceiling for a <= 0.
    logic integer cdiv(integer a, integer b) =
      a > 0 ? a / b + (a % b != 0 ? 1 : 0) : a / b;

    // The ceiling, said without division: the least q with q * b >= a.
    predicate is_ceiling(integer q, integer a, integer b) =
      q * b >= a && (q - 1) * b < a;

    // SlidingWindowManager._contiguous_blocks_for_hit: the window of the
    // last token reaches w - 1 tokens back; EAGLE needs one block more.
    logic integer contiguous_blocks_for_hit(integer w, integer bs,
                                            integer eagle) =
      cdiv(w - 1, bs) + eagle;

    // Euclid's greatest common divisor (a, b >= 0).
    logic integer gcd(integer a, integer b) =
      b <= 0 ? a : gcd(b, a % b);

    // The alignment gate in blocks: vLLM accepts k blocks when
    // k * bs % align == 0, i.e. when k is a multiple of this period.
    logic integer alignment_period(integer bs, integer align) =
      align / gcd(align, bs);
*/

/* contiguous_blocks_for_hit: vLLM's run length for a window of
 * sliding_window tokens, cdiv(sliding_window - 1, block_size) + eagle,
 * exactly (0 or negative for windows of 0 or 1 token or below). */
/*@ requires window_range: -PC_MAX_BLOCKS <= sliding_window <= PC_MAX_BLOCKS;
    requires block_size_range: 1 <= block_size <= PC_MAX_BLOCKS;
    requires eagle == 0 || eagle == 1;
    assigns \nothing;
    ensures exact: \result == contiguous_blocks_for_hit(sliding_window,
                                                        block_size, eagle);
    ensures ceiling: is_ceiling(\result - eagle, sliding_window - 1,
                                block_size);
    ensures range: -PC_MAX_BLOCKS - 1 <= \result <= PC_MAX_BLOCKS + 1;
*/
int64_t contiguous_blocks_for_hit(int64_t sliding_window, int64_t block_size, int eagle);

/* search_need: the run length the search uses, contiguous_blocks_for_hit
 * clamped to at least 1 (vLLM's loop treats any run length below 1 as 1). */
/*@ requires window_range: -PC_MAX_BLOCKS <= sliding_window <= PC_MAX_BLOCKS;
    requires block_size_range: 1 <= block_size <= PC_MAX_BLOCKS;
    requires eagle == 0 || eagle == 1;
    assigns \nothing;
    ensures exact: \result == eff_need(contiguous_blocks_for_hit(
                                 sliding_window, block_size, eagle));
    ensures clamped: 1 <= \result <= PC_MAX_BLOCKS + 1;
*/
int64_t search_need(int64_t sliding_window, int64_t block_size, int eagle);

/* alignment_period: alignment_tokens / gcd(alignment_tokens, block_size),
 * the least number of blocks whose tokens are a multiple of
 * alignment_tokens. vLLM allows any alignment >= 1 here: a multiple of the
 * block size (hybrid models), a divisor of it (fine-grained hashes), or
 * neither. */
/*@ requires block_size_range: 1 <= block_size <= PC_MAX_BLOCKS;
    requires alignment_range: 1 <= alignment_tokens <= PC_MAX_BLOCKS;
    assigns \nothing;
    ensures exact: \result == alignment_period(block_size, alignment_tokens);
    ensures range: 1 <= \result <= alignment_tokens;
    behavior coarse:
      assumes alignment_tokens % block_size == 0;
      ensures period_is: \result == alignment_tokens / block_size;
    behavior fine:
      assumes alignment_tokens % block_size != 0;
      assumes block_size % alignment_tokens == 0;
      ensures period_is: \result == 1;
    behavior other:
      assumes alignment_tokens % block_size != 0;
      assumes block_size % alignment_tokens != 0;
    complete behaviors;
    disjoint behaviors;
*/
int64_t alignment_period(int64_t block_size, int64_t alignment_tokens);

#endif /* PC_PARAMS_H */
