/*
 * bench_core.c -- times the verified core from C, without Python call
 * overhead, so the legacy-vs-stride ratio of the core itself is visible.
 * Not part of the library; built by `make bench` as
 * build/libprefix_cache_bench.so together with swa_prefix_cache/core/proved/prefix_cache.c.
 */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <time.h>

#include "../swa_prefix_cache/core/proved/prefix_cache.h"

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Mean ns per call of find_hit (which == 0) or legacy_scan (which == 1)
 * over `reps` calls on the same mask. */
double pc_bench_ns(int which, const uint8_t *cached, int64_t n, int64_t need,
                   int64_t period, int eagle, int64_t reps) {
    volatile int64_t sink = 0;
    pc_hit_result out;
    double start = now_ns();
    for (int64_t r = 0; r < reps; r++) {
        if (which == 0) {
            find_hit(cached, n, need, period, eagle, &out);
        } else {
            legacy_scan(cached, n, need, period, eagle, &out);
        }
        sink += out.length;
    }
    (void)sink;
    return (now_ns() - start) / (double)(reps > 0 ? reps : 1);
}
