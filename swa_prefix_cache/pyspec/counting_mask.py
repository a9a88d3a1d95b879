"""A mask wrapper that counts probes, so both searches can be compared."""

from collections.abc import Sequence


class CountingMask:
    """Read-only view of a cached-block mask that counts every read.

    One read is one probe: it stands for one ``BlockPool.get_cached_block``
    call in vLLM, which is what the stride search saves.
    """

    def __init__(self, cached: Sequence[bool]) -> None:
        self._cached = cached
        self.probes = 0

    def __len__(self) -> int:
        return len(self._cached)

    def __getitem__(self, i: int) -> bool:
        self.probes += 1
        return bool(self._cached[i])
