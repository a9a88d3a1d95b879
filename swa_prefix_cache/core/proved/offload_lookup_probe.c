/*
 * offload_lookup_probe.c -- the probe instance of offload_lookup.c.
 *
 * Not a second copy: it is offload_lookup.c itself, compiled with
 * OL_PROBE_INSTANCE, so offload_stride_search_probe is the proved
 * offload_stride_search token for token, with each read chunks[i] replaced
 * by probe(ctx, i). It relies on one assumption the proof of the mask
 * instance makes explicit: during one call, probe answers the same for the
 * same i (CPUOffloadingManager.lookup is pure: a dict read).
 * tests/test_ffi_offload.py checks both instances agree, read for read.
 */
#define OL_PROBE_INSTANCE
#include "offload_lookup.c"
