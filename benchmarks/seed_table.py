"""The figures claimed by the stride-search summary the project started from.

Copied verbatim so every benchmark can print them next to what it measures;
they are a target to compare with, never a result of ours.
Key: (window_tokens, context_tokens) -> (legacy_probes, stride_probes, speedup).
"""

SEED_BLOCK_SIZE = 16
SEED_HIT_RATE = 0.05

SEED_CELLS: dict[tuple[int, int], tuple[int, int, float]] = {
    (2048, 4096): (256, 12, 30.5),
    (2048, 8192): (512, 14, 44.9),
    (2048, 32768): (2048, 26, 61.3),
    (512, 4096): (256, 18, 20.4),
    (512, 8192): (512, 26, 22.5),
    (512, 32768): (2048, 74, 24.6),
    (1024, 4096): (256, 14, 25.1),
    (1024, 8192): (512, 18, 33.5),
    (1024, 32768): (2048, 42, 43.5),
    (128, 4096): (256, 40, 6.9),
    (128, 8192): (512, 72, 6.3),
    (128, 32768): (2048, 264, 7.1),
}
