"""Byte-pair merging, pure Python (the reference for a compiled core to come).

`merge(piece, rank)` splits `piece` into single bytes and repeatedly merges the
adjacent pair of lowest rank (leftmost first on ties) until no pair has a rank.
A heap of candidate pairs over a linked list of parts keeps it O(n log n) in the
piece's length (CJK pre-tokens reach hundreds of bytes; a rescan per merge is
quadratic). Stale heap entries are skipped by comparing the parts they named.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

Rank = Callable[[bytes, bytes], "int | None"]


def merge(piece: bytes, rank: Rank) -> list[bytes]:
    n = len(piece)
    if n <= 1:
        return [piece] if n else []
    parts = [piece[i:i + 1] for i in range(n)]
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prev = list(range(-1, n - 1))
    heap = []
    for i in range(n - 1):
        r = rank(parts[i], parts[i + 1])
        if r is not None:
            heap.append((r, i, parts[i], parts[i + 1]))
    heapq.heapify(heap)
    while heap:
        r, i, a, b = heapq.heappop(heap)
        j = nxt[i]
        if parts[i] != a or j == -1 or parts[j] != b:
            continue  # stale: one side was merged since this pair was queued
        parts[i] = a + b
        parts[j] = b""
        nxt[i] = nxt[j]
        if nxt[j] != -1:
            prev[nxt[j]] = i
        p, q = prev[i], nxt[i]
        if p != -1:
            r2 = rank(parts[p], parts[i])
            if r2 is not None:
                heapq.heappush(heap, (r2, p, parts[p], parts[i]))
        if q != -1:
            r3 = rank(parts[i], parts[q])
            if r3 is not None:
                heapq.heappush(heap, (r3, i, parts[i], parts[q]))
    out, i = [], 0
    while i != -1:
        out.append(parts[i])
        i = nxt[i]
    return out
