/*
 * joint.c -- verified C99 multi-group (hybrid) prefix-cache lookup:
 * vLLM's HybridKVCacheCoordinator.find_longest_cache_hit fixed point.
 *
 * Where this comes from: hand-written from swa_prefix_cache/pyspec/joint.py (joint_lookup,
 * group_hit, full_attention_hit), same names, same loop, same lookups in
 * the same order; a sliding-window lookup is the proved find_hit
 * (prefix_cache.h), its run length and period the proved
 * contiguous_blocks_for_hit and alignment_period (params.h), all used
 * through their contracts. It is NOT generated.
 * Frama-C/WP proves the contracts in joint.h (with -wp-rte: no undefined
 * behaviour, termination within max_rounds_bound rounds);
 * swa_prefix_cache/core/proved/verify.sh runs the proof and checks that broken copies of
 * this file are rejected. Never patch this file without re-running
 * swa_prefix_cache/core/proved/verify.sh.
 *
 * C99, no dependencies beyond <stdint.h>.
 */
#include "joint.h"
#include "params.h"

/*@ // ---- arithmetic facts (non-negative operands) ------------------------
    lemma jl_mul_lt:
      \forall integer q, x, a; 1 <= a && q < x ==> q * a + a <= x * a;
    lemma jl_mul_lt_left:
      \forall integer b, l, n; 1 <= b && l < n ==> b + b * l <= b * n;
    lemma jl_mul_mod:
      \forall integer x, a; 0 <= x && 1 <= a ==> (x * a) % a == 0;
    lemma jl_mul_mod_left:
      \forall integer x, a; 0 <= x && 1 <= a ==> (a * x) % a == 0;
    lemma jl_div_mono:
      \forall integer x, y, a; 0 <= x <= y && 1 <= a ==> x / a <= y / a;
    lemma jl_mod_zero_eq:
      \forall integer x, p; 0 <= x && 1 <= p && x % p == 0 ==>
        x == x / p * p;
    lemma jl_mod_range:
      \forall integer x, p; 0 <= x && 1 <= p ==> 0 <= x % p < p;
    lemma jl_realign_is_multiple:
      \forall integer x, p; 0 <= x && 1 <= p ==> (x - x % p) % p == 0;
    lemma jl_div_mul_le:
      \forall integer x, a; 0 <= x && 1 <= a ==> 0 <= x / a * a <= x;
    lemma jl_mul_le:
      \forall integer l, n, b; 0 <= l <= n && 1 <= b ==> l * b <= n * b;
    lemma jl_le_div_mul:
      \forall integer l, x, b; 1 <= b && 0 <= x && 0 <= l <= x / b ==>
        l * b <= x;
    lemma jl_div_step:
      \forall integer x, y, a; 1 <= a && 0 <= x < y && x % a == 0 &&
        y % a == 0 ==> x / a + 1 <= y / a;

    // ---- the EAGLE drop lands below max_length ----------------------------
    lemma jl_fallback_eagle:
      \forall integer p, per; 0 <= p && 1 <= per ==>
        fallback_length(p, per, 1) == 0 || fallback_length(p, per, 1) <= p - 1;
    lemma jl_swa_hit_eagle{L}:
      \forall uint8_t *c, integer n, need, period, length, first_real;
        0 <= n && 1 <= need && 1 <= period &&
        swa_hit(c, n, need, period, 1, length, first_real) ==>
          length == 0 || length + 1 <= n;
*/

/* swa_prefix_cache.pyspec.joint.full_attention_hit (block-aligned mode), in tokens. */
/*@ requires 1 <= bs <= align <= PC_MAX_BLOCKS && align % bs == 0;
    requires 0 <= max_length <= PC_MAX_BLOCKS;
    requires 0 <= len;
    requires \valid_read(cached + (0 .. len - 1));
    requires drop == 0 || drop == 1;
    assigns \nothing;
    ensures answer: aligned_answer(\result, max_length, align);
    ensures eagle_drop: drop == 1 ==> \result == 0 || \result + bs <= max_length;
*/
static int64_t full_attention_hit(const uint8_t *cached, int64_t len, int64_t max_length, int64_t bs, int64_t align, int drop)
{
    int64_t limit = max_length / bs;
    int64_t prefix = 0;
    int64_t hit;
    if (limit > len) {
        limit = len;
    }
    /*@ assert limit_le: 0 <= limit <= max_length / bs; */
    /*@ assert limit_tokens: 0 <= limit * bs <= max_length; */
    /*@ loop invariant 0 <= prefix <= limit;
        loop assigns prefix;
        loop variant limit - prefix;
    */
    while (prefix < limit && cached[prefix] != 0) {
        prefix++;
    }
    /*@ assert prefix_tokens: 0 <= prefix * bs <= max_length; */
    hit = prefix * bs;
    if (drop && hit > 0) {
        /*@ assert 1 <= prefix; */
        hit -= bs; /* min(alignment_tokens, block_size) == block_size */
        /*@ assert dropped: 0 <= hit && hit + bs <= max_length; */
    }
    /*@ assert 0 <= hit - hit % align <= hit; */
    return hit - hit % align;
}

/* find_hit, seen from the joint loop: the hit in blocks, within n,
 * aligned to the period, and with the EAGLE drop at least one block below
 * n. */
/*@ requires 0 <= n <= PC_MAX_BLOCKS;
    requires 1 <= period;
    requires drop == 0 || drop == 1;
    requires \valid_read(cached + (0 .. n - 1));
    requires \valid(first_real);
    requires \separated(first_real, cached + (0 .. n - 1));
    assigns *first_real;
    ensures in_range: 0 <= \result <= n;
    ensures gate: \result % period == 0;
    ensures eagle_drop: drop == 1 ==> \result == 0 || \result + 1 <= n;
    ensures null_prefix: 0 <= *first_real <= \result;
*/
static int64_t swa_blocks(const uint8_t *cached, int64_t n, int64_t need, int64_t period, int drop, int64_t *first_real)
{
    pc_hit_result hit;
    find_hit(cached, n, need, period, drop, &hit);
    *first_real = hit.first_real;
    return hit.length;
}

/* A sliding-window hit of length blocks (gate period = align / bs) in
 * tokens: an aligned answer within max_length (the block-level gate is
 * the token-level one). */
/*@ requires 1 <= bs <= align <= PC_MAX_BLOCKS && align % bs == 0;
    requires 0 <= max_length <= PC_MAX_BLOCKS;
    requires 0 <= n <= max_length / bs;
    requires 0 <= length <= n;
    requires period_is: period == align / bs;
    requires gate: length % period == 0;
    requires drop == 0 || drop == 1;
    requires drop == 1 ==> length == 0 || length + 1 <= n;
    assigns \nothing;
    ensures in_range: 0 <= \result <= max_length;
    ensures units: \result == (length / period) * align && 0 <= length / period;
    ensures aligned: \result % align == 0;
    ensures drop == 1 ==> \result == 0 || \result + bs <= max_length;
*/
static int64_t blocks_to_tokens(int64_t length, int64_t n, int64_t bs, int64_t period, int64_t align, int64_t max_length, int drop)
{
    /* n, period, align, max_length and drop are read only by the contract */
    (void)n;
    (void)period;
    (void)align;
    (void)max_length;
    (void)drop;
    /*@ assert n_tokens: 0 <= n * bs <= max_length; */
    /*@ assert tokens_in_range: 0 <= length * bs <= n * bs; */
    /*@ assert drop_below: drop == 1 ==> length == 0 ||
                           length * bs + bs <= n * bs; */
    /*@ ghost int64_t q = length / period; */
    /*@ assert q_nonneg: 0 <= q; */
    /*@ assert tokens_mod: (q * align) % align == 0; */
    /*@ assert align_eq: align == period * bs; */
    /*@ assert length_eq: length == q * period; */
    /*@ assert tokens_eq1: length * bs == q * period * bs; */
    /*@ assert tokens_eq: length * bs == q * align; */
    /*@ assert q_pos: 0 <= q; */
    return length * bs;
}

/* The gate period of a sliding-window group: alignment_period (params.h)
 * where the block size divides the alignment (well_formed_group), which is
 * align / bs (its behavior coarse). Only this is exposed to group_hit, so
 * its goals do not carry the definition of gcd. */
/*@ requires 1 <= bs <= align <= PC_MAX_BLOCKS && align % bs == 0;
    assigns \nothing;
    ensures period_is: \result == align / bs;
*/
static int64_t block_period(int64_t bs, int64_t align)
{
    return alignment_period(bs, align);
}

int64_t group_hit(const pc_group *g, const uint8_t *masks, int64_t masks_len, int64_t max_length, int64_t align, int drop, int64_t *first_real)
{
    int64_t bs = g->block_size;
    const uint8_t *cached = masks + g->mask_offset;
    int64_t n;
    int64_t need;
    int64_t period;
    int64_t length;
    int64_t tokens;

    (void)masks_len; /* the contract's bound on g's mask */
    if (g->is_full) {
        *first_real = 0;
        return full_attention_hit(cached, g->mask_len, max_length, bs, align, drop);
    }
    n = max_length / bs;
    if (n > g->mask_len) {
        n = g->mask_len;
    }
    /*@ assert n_le: 0 <= n <= max_length / bs; */
    /* need = cdiv(window - 1, bs) + drop; period = align / gcd(align, bs),
     * which is align / bs here (params.h). */
    need = contiguous_blocks_for_hit(g->sliding_window, bs, drop);
    period = block_period(bs, align);
    length = swa_blocks(cached, n, need, period, drop, first_real);
    tokens = blocks_to_tokens(length, n, bs, period, align, max_length, drop);
    /*@ assert tokens_aligned: tokens % align == 0; */
    return tokens;
}

/* #32802: a non-dropping lookup that shrinks the candidate clears the
 * verified set. */
/*@ requires 0 <= num_groups;
    requires \valid(answers + (0 .. num_groups - 1));
    assigns answers[0 .. num_groups - 1].verified;
    ensures \forall integer i; 0 <= i < num_groups ==> answers[i].verified == 0;
*/
static void clear_verified(pc_group_answer *answers, int64_t num_groups)
{
    int64_t j;
    /*@ loop invariant 0 <= j <= num_groups;
        loop invariant \forall integer i; 0 <= i < j ==> answers[i].verified == 0;
        loop assigns j, answers[0 .. num_groups - 1].verified;
        loop variant num_groups - j;
    */
    for (j = 0; j < num_groups; j++) {
        answers[j].verified = 0;
    }
}

/* One round (one pass over the attention groups) of swa_prefix_cache.pyspec.joint_lookup's
 * loop, from the candidate hit_length; returns curr at the end. first: the
 * first round (full attention is looked up only then; hit_length may be
 * unaligned only then). */
/*@ requires 1 <= num_groups <= PC_MAX_BLOCKS;
    requires 1 <= align <= PC_MAX_BLOCKS;
    requires 0 <= hit_length <= max_len <= PC_MAX_BLOCKS;
    requires 0 <= cap <= PC_MAX_BLOCKS;
    requires 0 <= masks_len;
    requires first == 0 || first == 1;
    requires first_aligned: first == 0 ==> hit_length % align == 0;
    requires \valid_read(groups + (0 .. num_groups - 1));
    requires \forall integer k; 0 <= k < num_groups ==>
               well_formed_group(groups + k, align, masks_len);
    requires \valid_read(masks + (0 .. masks_len - 1));
    requires \valid(answers + (0 .. num_groups - 1));
    requires \valid(longest);
    requires \separated(answers + (0 .. num_groups - 1), longest,
                        groups + (0 .. num_groups - 1),
                        masks + (0 .. masks_len - 1));
    requires \separated(longest, groups + (0 .. num_groups - 1),
                        masks + (0 .. masks_len - 1));
    requires answers_ok(answers, num_groups, max_len, align);
    requires 0 <= *longest <= max_len;
    assigns answers[0 .. num_groups - 1], *longest;
    ensures candidate_non_increasing: 0 <= \result <= hit_length;
    ensures candidate_aligned: \result % align == 0;
    ensures answers_ok(answers, num_groups, max_len, align);
    ensures 0 <= *longest <= max_len;
*/
static int64_t joint_round(const pc_group *groups, int64_t num_groups, const uint8_t *masks, int64_t masks_len, int64_t max_len, int64_t align, int64_t cap, int first, int64_t hit_length, pc_group_answer *answers, int64_t *longest)
{
    int64_t curr = hit_length;
    int64_t k;
    (void)max_len; /* the contract's bound on the answers */
    /*@ loop invariant 0 <= k <= num_groups;
        loop invariant curr_range: 0 <= curr <= hit_length;
        loop invariant curr_aligned: k >= 1 || first == 0 ==>
          curr % align == 0;
        loop invariant longest_range: 0 <= *longest <= max_len;
        loop invariant answers_ok(answers, num_groups, max_len, align);
        loop assigns k, curr, *longest, answers[0 .. num_groups - 1];
        loop variant num_groups - k;
    */
    for (k = 0; k < num_groups; k++) {
        const pc_group *g = groups + k;
        int64_t max_length = curr;
        int64_t tokens;
        int64_t first_real;
        int drop;
        if (g->is_full && !first) {
            /* downward closed: looked up in the first round only */
            if (answers[k].tokens < curr) {
                curr = answers[k].tokens;
            }
            continue;
        }
        drop = g->eagle && !answers[k].verified;
        if (drop) {
            /* min(curr + block_size, cap_tokens) */
            max_length = curr <= cap - g->block_size ? curr + g->block_size : cap;
        }
        tokens = group_hit(g, masks, masks_len, max_length, align, drop, &first_real);
        /*@ assert lookup_below_candidate: 0 <= tokens <= curr; */
        /*@ assert lookup_answer: aligned_answer(tokens, max_len, align) && 0 <= first_real; */
        if (drop) {
            answers[k].verified = 1;
        } else if (tokens < curr) {
            clear_verified(answers, num_groups);
        }
        /*@ assert answers_kept: answers_ok(answers, num_groups, max_len, align); */
        curr = tokens;
        answers[k].tokens = tokens;
        answers[k].first_real = first_real;
        if (curr > *longest) {
            *longest = curr;
        }
    }
    return curr;
}

/* Every answer starts at 0 (pyspec: None, never read before written). */
/*@ requires 0 <= num_groups;
    requires \valid(answers + (0 .. num_groups - 1));
    assigns answers[0 .. num_groups - 1];
    ensures \forall integer i; 0 <= i < num_groups ==>
      answers[i].tokens == 0 && answers[i].first_real == 0;
*/
static void init_answers(pc_group_answer *answers, int64_t num_groups)
{
    int64_t k;
    /*@ loop invariant 0 <= k <= num_groups;
        loop invariant \forall integer i; 0 <= i < k ==>
          answers[i].tokens == 0 && answers[i].first_real == 0;
        loop assigns k, answers[0 .. num_groups - 1];
        loop variant num_groups - k;
    */
    for (k = 0; k < num_groups; k++) {
        answers[k].length = 0;
        answers[k].first_real = 0;
        answers[k].tokens = 0;
        answers[k].verified = 0;
    }
}

/* The blocks vLLM returns per group: full attention is cut to
 * cdiv(hit_length, block_size) blocks; a sliding-window group keeps the
 * list of its last lookup. */
/*@ requires 1 <= num_groups <= PC_MAX_BLOCKS;
    requires 1 <= align;
    requires 0 <= hit_length <= PC_MAX_BLOCKS;
    requires 0 <= masks_len;
    requires \valid_read(groups + (0 .. num_groups - 1));
    requires \forall integer k; 0 <= k < num_groups ==>
               well_formed_group(groups + k, align, masks_len);
    requires \valid(answers + (0 .. num_groups - 1));
    requires \separated(answers + (0 .. num_groups - 1),
                        groups + (0 .. num_groups - 1));
    requires 0 <= max_len;
    requires answers_ok(answers, num_groups, max_len, align);
    assigns answers[0 .. num_groups - 1].length;
    ensures \forall integer i; 0 <= i < num_groups ==> 0 <= answers[i].length;
    ensures answers_ok(answers, num_groups, max_len, align);
*/
static void set_lengths(const pc_group *groups, int64_t num_groups, int64_t masks_len, int64_t align, int64_t max_len, int64_t hit_length, pc_group_answer *answers)
{
    int64_t k;
    (void)masks_len;
    (void)align;
    (void)max_len;
    /*@ loop invariant 0 <= k <= num_groups;
        loop invariant answers_kept: \forall integer i; 0 <= i < num_groups ==>
          answers[i].tokens == \at(answers[i].tokens, Pre) &&
          answers[i].first_real == \at(answers[i].first_real, Pre);
        loop invariant \forall integer i; 0 <= i < k ==> 0 <= answers[i].length;
        loop assigns k, answers[0 .. num_groups - 1].length;
        loop variant num_groups - k;
    */
    for (k = 0; k < num_groups; k++) {
        int64_t bs = groups[k].block_size;
        if (groups[k].is_full) {
            answers[k].length = hit_length / bs + (hit_length % bs != 0);
        } else {
            answers[k].length = answers[k].tokens / bs;
        }
        /*@ assert length_written: 0 <= answers[k].length; */
    }
}

void joint_lookup(const pc_group *groups, int64_t num_groups, const uint8_t *masks, int64_t masks_len, int64_t max_cache_hit_length, int64_t alignment_tokens, int64_t cap_tokens, pc_group_answer *answers, pc_joint_result *out)
{
    int64_t hit_length = max_cache_hit_length;
    int64_t longest = 0;
    int64_t rounds = 0;
    int64_t curr;
    int simple_hybrid = num_groups == 2 && groups[0].is_full;
    /*@ ghost int64_t round_start = max_cache_hit_length; */

    init_answers(answers, num_groups);

    /*@ loop invariant rounds_range: 0 <= rounds;
        loop invariant first_round: rounds == 0 ==>
          hit_length == max_cache_hit_length;
        loop invariant hit_range: 0 <= hit_length <= max_cache_hit_length;
        loop invariant hit_aligned: rounds >= 1 ==>
          hit_length % alignment_tokens == 0;
        loop invariant round_budget: rounds >= 1 ==>
          rounds + hit_length / alignment_tokens
            <= 1 + max_cache_hit_length / alignment_tokens;
        loop invariant rounds_le: rounds <= 1 + max_cache_hit_length
                                               / alignment_tokens;
        // the fixed point descends: each round that is not the last ends
        // strictly below the candidate it started from
        loop invariant descending: rounds >= 1 ==>
          hit_length < round_start <= max_cache_hit_length;
        loop invariant longest_range: 0 <= longest <= max_cache_hit_length;
        loop invariant answers_ok(answers, num_groups, max_cache_hit_length,
                                  alignment_tokens);
        loop assigns rounds, hit_length, longest, curr, round_start,
          answers[0 .. num_groups - 1];
        loop variant max_rounds_bound(max_cache_hit_length, alignment_tokens)
                     - rounds;
    */
    for (;;) {
        /*@ ghost round_start = hit_length; */
        rounds++;
        curr = joint_round(groups, num_groups, masks, masks_len, max_cache_hit_length, alignment_tokens, cap_tokens, rounds == 1, hit_length, answers, &longest);
        /* joint_round: curr <= hit_length (the candidate never grows) */
        if (curr >= hit_length) {
            break; /* fixed point: every group accepts hit_length */
        }
        /*@ assert budget: rounds == 1 ==>
              curr / alignment_tokens <= max_cache_hit_length / alignment_tokens; */
        /*@ assert budget_step: rounds >= 2 ==>
              curr / alignment_tokens + 1 <= hit_length / alignment_tokens; */
        hit_length = curr; /* strictly lower, by at least alignment_tokens
                              after the first round */
        if (simple_hybrid) {
            break;
        }
    }
    /*@ assert rounds_in_bound: 1 <= rounds <= max_rounds_bound(
                  max_cache_hit_length, alignment_tokens); */
    set_lengths(groups, num_groups, masks_len, alignment_tokens, max_cache_hit_length, hit_length, answers);
    out->hit_length = hit_length;
    out->num_uncached_common_prefix_tokens = longest - hit_length;
    out->rounds = rounds;
}
