"""vLLM's lookup parameters, reduced to the three numbers the search needs.

The one Python twin of the proved ``swa_prefix_cache/core/proved/params.c``
(``contiguous_blocks_for_hit``, ``search_need``, ``alignment_period``, same
names); ``tests/test_params.py`` checks that the two agree, and with vLLM's
own ``SlidingWindowManager._contiguous_blocks_for_hit``.
"""

import math
from dataclasses import dataclass


def cdiv(a: int, b: int) -> int:
    """Ceiling division exactly as vLLM's ``vllm.utils.math_utils.cdiv``.

    Kept bit-for-bit (floor division of negatives included) because a
    sliding window of 0 or 1 token makes ``a`` negative or zero.
    """
    return -(a // -b)


def contiguous_blocks_for_hit(sliding_window: int, block_size: int, eagle: bool) -> int:
    """vLLM's ``SlidingWindowManager._contiguous_blocks_for_hit``.

    The window of the last token reaches ``sliding_window - 1`` tokens back;
    EAGLE needs one more block because the last matched block is dropped.
    May be 0 or negative for degenerate windows; the search treats any
    value below 1 as 1, which is what vLLM's loop does (``search_need``).
    """
    _require_int("sliding_window", sliding_window, None)
    _require_int("block_size", block_size, 1)
    blocks = cdiv(sliding_window - 1, block_size)
    if eagle:
        blocks += 1
    return blocks


def search_need(sliding_window: int, block_size: int, eagle: bool) -> int:
    """The run length the search uses: ``contiguous_blocks_for_hit``, at
    least 1 (a window of 0 or 1 token still needs one cached block)."""
    return max(contiguous_blocks_for_hit(sliding_window, block_size, eagle), 1)


def alignment_period(block_size: int, alignment_tokens: int) -> int:
    """The alignment gate as a period in blocks.

    vLLM accepts a hit of ``k`` blocks only when ``k * block_size`` is a
    multiple of ``alignment_tokens``. That holds exactly when ``k`` is a
    multiple of ``alignment_tokens / gcd(alignment_tokens, block_size)``.
    When ``block_size == alignment_tokens`` (vLLM's fast path) this is 1.
    """
    _require_int("block_size", block_size, 1)
    _require_int("alignment_tokens", alignment_tokens, 1)
    return alignment_tokens // math.gcd(alignment_tokens, block_size)


def _require_int(name: str, value: object, minimum: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class SearchParams:
    """What the search needs: ``n`` blocks, runs of ``need``, gate ``period``.

    ``need`` is the effective run length (at least 1); ``eagle`` says whether
    the last matched block is dropped (vLLM's ``drop_eagle_block``).
    """

    n: int
    need: int
    period: int
    eagle: bool

    def __post_init__(self) -> None:
        _require_int("n", self.n, 0)
        _require_int("need", self.need, 1)
        _require_int("period", self.period, 1)
        if not isinstance(self.eagle, bool):
            raise ValueError(f"eagle must be a bool, got {type(self.eagle).__name__}")

    @classmethod
    def from_vllm(
        cls,
        max_length: int,
        block_size: int,
        sliding_window: int,
        alignment_tokens: int,
        drop_eagle_block: bool,
    ) -> "SearchParams":
        """Derive the search parameters from vLLM's arguments.

        Raises ``ValueError`` naming the argument for inputs on which vLLM
        itself would fail (zero block size or alignment) or that make no
        sense (negative lengths).
        """
        _require_int("max_length", max_length, 0)
        _require_int("block_size", block_size, 1)
        _require_int("sliding_window", sliding_window, None)
        _require_int("alignment_tokens", alignment_tokens, 1)
        if not isinstance(drop_eagle_block, bool):
            raise ValueError(
                f"drop_eagle_block must be a bool, got {type(drop_eagle_block).__name__}"
            )
        return cls(
            n=max_length // block_size,
            need=search_need(sliding_window, block_size, drop_eagle_block),
            period=alignment_period(block_size, alignment_tokens),
            eagle=drop_eagle_block,
        )
