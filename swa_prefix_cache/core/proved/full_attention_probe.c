/*
 * full_attention_probe.c -- the probe instance of full_attention.c.
 *
 * Not a second copy: it is full_attention.c itself, compiled with
 * FA_PROBE_INSTANCE, so full_hit_probe is the proved full_hit token for
 * token, with each read cached[i] replaced by probe(ctx, i) and each read
 * fine_cached[j] by fine_probe(ctx, j). It relies on one assumption the
 * proof of the mask instance makes explicit: during one call, each probe
 * answers the same for the same index (vLLM's BlockPool is not mutated
 * during a lookup). tests/test_ffi_full.py checks both instances agree.
 */
#define FA_PROBE_INSTANCE
#include "full_attention.c"
