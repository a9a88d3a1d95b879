/*
 * params.c -- verified C99 reduction of vLLM's sliding-window lookup
 * parameters (window, block size, EAGLE, alignment) to the search's run
 * length and alignment period. The contracts are in params.h; Frama-C/WP
 * proves them (swa_prefix_cache/core/proved/verify.sh). Never patch this file without
 * re-running swa_prefix_cache/core/proved/verify.sh.
 *
 * C99, no dependencies beyond <stdint.h>.
 */
#include "params.h"

/*@ // ---- arithmetic facts ---------------------------------------------------
    // Euclid's step, as the loop takes it.
    lemma gcd_step:
      \forall integer a, b; 1 <= b ==> gcd(a, b) == gcd(b, a % b);
    lemma gcd_zero:
      \forall integer a; gcd(a, 0) == a;
    // A multiple of b: gcd(a, b) == b.
    lemma gcd_multiple:
      \forall integer a, b; 0 <= a && 1 <= b && a % b == 0 ==> gcd(a, b) == b;
    // A divisor of b below it: gcd(a, b) == a.
    lemma gcd_divisor:
      \forall integer a, b; 1 <= a < b && b % a == 0 ==> gcd(a, b) == a;
*/

int64_t contiguous_blocks_for_hit(int64_t sliding_window, int64_t block_size, int eagle)
{
    int64_t a = sliding_window - 1;
    int64_t blocks = a / block_size; /* truncates: the ceiling when a <= 0 */
    /*@ assert a >= 0 ==> 0 <= blocks <= a; */
    /*@ assert a < 0 ==> a <= blocks <= 0; */
    /*@ assert euclid: a == blocks * block_size + a % block_size; */
    /*@ assert rem_pos: a >= 0 ==> 0 <= a % block_size < block_size; */
    /*@ assert rem_neg: a < 0 ==> -block_size < a % block_size <= 0; */
    if (a > 0 && a % block_size != 0) {
        /*@ assert up: blocks * block_size < a < blocks * block_size + block_size; */
        blocks++;
        /*@ assert up_ceiling: is_ceiling(blocks, a, block_size); */
    } else {
        /*@ assert exact_or_nonpos: a <= blocks * block_size < a + block_size; */
        /*@ assert down_ceiling: is_ceiling(blocks, a, block_size); */
    }
    return blocks + eagle;
}

int64_t search_need(int64_t sliding_window, int64_t block_size, int eagle)
{
    int64_t need = contiguous_blocks_for_hit(sliding_window, block_size, eagle);
    if (need < 1) {
        need = 1;
    }
    return need;
}

int64_t alignment_period(int64_t block_size, int64_t alignment_tokens)
{
    int64_t a = alignment_tokens;
    int64_t b = block_size;
    /*@ loop invariant same_gcd: gcd(a, b) == gcd(alignment_tokens, block_size);
        loop invariant a_pos: 1 <= a && 0 <= b;
        loop invariant small: a <= alignment_tokens || b <= alignment_tokens;
        loop invariant done_small: b == 0 ==> a <= alignment_tokens;
        loop invariant bounded: a <= PC_MAX_BLOCKS && b <= PC_MAX_BLOCKS;
        loop assigns a, b;
        loop variant b;
    */
    while (b != 0) {
        int64_t t = a % b;
        /*@ assert step: gcd(b, t) == gcd(a, b); */
        /*@ assert t_range: 0 <= t < b && t <= a; */
        /*@ assert t_zero: t == 0 ==> b <= a; */
        a = b;
        b = t;
    }
    /*@ assert gcd_range: 1 <= a <= alignment_tokens; */
    return alignment_tokens / a;
}
