"""Byte-pair merging, pure Python (the reference twin of csrc/_bpe_c.pyx).

`BPE(byte_ids, pairs).merge(piece)` starts from the ids of the piece's single bytes
and repeatedly merges the adjacent pair of lowest rank (leftmost first on ties)
until no adjacent pair is in `pairs`. A heap of candidate pairs over a linked list
keeps it O(n log n) in the piece's length (CJK pre-tokens reach hundreds of bytes;
a rescan per merge is quadratic). Stale heap entries are skipped by comparing the
ids they named.

    byte_ids: 256 ids, one per byte value (-1 where the vocabulary lacks it)
    pairs:    {(id_a, id_b): (rank, id_merged)}
"""

from __future__ import annotations

import heapq


class BPE:
    def __init__(self, byte_ids: list[int], pairs: dict[tuple[int, int], tuple[int, int]]):
        if len(byte_ids) != 256:
            raise ValueError("byte_ids needs one id per byte value")
        self.byte_ids = list(byte_ids)
        self.pairs = pairs

    def merge(self, piece: bytes) -> list[int]:
        ids = [self.byte_ids[b] for b in piece]
        if -1 in ids:
            raise KeyError(f"a byte of {piece!r} has no token in this vocabulary")
        n = len(ids)
        if n <= 1:
            return ids
        pairs = self.pairs
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prev = list(range(-1, n - 1))
        heap = []
        for i in range(n - 1):
            hit = pairs.get((ids[i], ids[i + 1]))
            if hit is not None:
                heap.append((hit[0], i, ids[i], ids[i + 1], hit[1]))
        heapq.heapify(heap)
        while heap:
            _, i, a, b, merged = heapq.heappop(heap)
            j = nxt[i]
            if ids[i] != a or j == -1 or ids[j] != b:
                continue  # stale: one side was merged since this pair was queued
            ids[i] = merged
            ids[j] = -1
            nxt[i] = nxt[j]
            if nxt[j] != -1:
                prev[nxt[j]] = i
            p, q = prev[i], nxt[i]
            if p != -1:
                hit = pairs.get((ids[p], merged))
                if hit is not None:
                    heapq.heappush(heap, (hit[0], p, ids[p], merged, hit[1]))
            if q != -1:
                hit = pairs.get((merged, ids[q]))
                if hit is not None:
                    heapq.heappush(heap, (hit[0], i, merged, ids[q], hit[1]))
        out, i = [], 0
        while i != -1:
            out.append(ids[i])
            i = nxt[i]
        return out
