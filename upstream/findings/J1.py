"""J1: the hybrid coordinator stops below a length every group accepts
(EAGLE, window of one token).

``HybridKVCacheCoordinator.find_longest_cache_hit`` lowers a candidate until
every attention group accepts it. An EAGLE sliding-window group is verified
at a candidate with its EAGLE lookup (one block past it, then dropped) and,
once the candidate shrinks, re-checked plainly. For a window of <= 1 token
the EAGLE run is ``cdiv(W - 1, bs) + 1 = 1`` block (the peek alone), while
the plain lookup reads one block (it treats 0 as 1) one block to the left:
the two disagree, and the loop can end below a length that the group's own
lookup, called as the loop calls it, accepts.

Smallest input: two sliding-window groups of one token at block 1 (one spec,
one of them an EAGLE group), two hash blocks, block 1 cached in both, block 0
in neither, ``max_cache_hit_length`` 2: vLLM answers 0, although the group
accepts 1 (its EAGLE lookup at 1 + margin returns 1). With every block
cached it answers 1. There is no realistic size: windows of one token are
the edge of the configuration space.

Run on a stock vLLM 0.33.0: exits 1 while the bug is there.
"""

import _repro


def body() -> None:
    r = _repro.Report("J1", "joint lookup: an EAGLE window of <= 1 token, the loop stops below a commonly accepted length")
    groups = [(1, 1, False), (1, 1, True)]
    setup = "two sliding-window groups of 1 token at block 1 (group 1 EAGLE), hash block 1, 2 hash blocks, max 2"
    j = _repro.Joint(groups, hash_block_size=1, use_eagle=True, cached=[[False, True], [False, True]], num_hashes=2)
    got, accepted = j.lookup(2), j.greatest_accepted(2)
    full = _repro.Joint(groups, hash_block_size=1, use_eagle=True, cached=[[True, True], [True, True]], num_hashes=2)
    print()
    print(f"[smallest] {setup}")
    print(f"    blocks [miss, hit] in both groups: vLLM serves {_repro.tokens(got)}; the greatest length every group's own "
          f"lookup accepts (as the loop calls it) is {_repro.tokens(accepted)}{'  <-- BELOW' if got < accepted else ''}")
    full_hit = full.lookup(2)
    print(f"    with every block cached ([hit, hit]): vLLM serves {_repro.tokens(full_hit)}")
    r.flag(got < accepted, reached=full_hit > 0)
    r.finish()


if __name__ == "__main__":
    _repro.main(body)
