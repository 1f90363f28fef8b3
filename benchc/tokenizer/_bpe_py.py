"""Byte-pair merging, pure Python (the reference twin of csrc/tokenizer/_bpe_c.pyx).

`BPE(byte_ids, pairs).merge(piece)` starts from the ids of the piece's single bytes
and repeatedly merges the adjacent pair of lowest rank (leftmost first on ties)
until no adjacent pair is in `pairs`. A heap of candidate pairs over a linked list
keeps it O(n log n) in the piece's length (CJK pre-tokens reach hundreds of bytes;
a rescan per merge is quadratic). Stale heap entries are skipped by comparing the
ids they named.

    byte_ids: 256 ids, one per byte value (-1 where the vocabulary lacks it)
    pairs:    {(id_a, id_b): (rank, id_merged)}
    whole:    {token bytes: id} when a piece that is itself a token is taken whole
              (tiktoken; HF's ignore_merges), else None

`encode_piece(piece)` is that lookup, then the merge; a cache keeps frequent pieces.
`merge_ids(ids)` merges symbols already mapped to ids (SentencePiece's characters).
"""

from __future__ import annotations

import heapq


class BPE:
    def __init__(self, byte_ids: list[int], pairs: dict[tuple[int, int], tuple[int, int]],
                 whole: dict[bytes, int] | None = None):
        if len(byte_ids) != 256:
            raise ValueError("byte_ids needs one id per byte value")
        self.byte_ids = list(byte_ids)
        self.pairs = pairs
        self.whole = whole
        self.has_whole = whole is not None
        self._cache: dict[bytes, list[int]] = {}

    def encode_piece(self, piece: bytes) -> list[int]:
        hit = self._cache.get(piece)
        if hit is not None:
            return list(hit)
        if self.whole is not None and piece in self.whole:
            ids = [self.whole[piece]]
        else:
            ids = self.merge(piece)
        if len(self._cache) < 100_000:
            self._cache[piece] = ids
        return list(ids)

    def merge(self, piece: bytes) -> list[int]:
        ids = [self.byte_ids[b] for b in piece]
        if -1 in ids:
            raise KeyError(f"a byte of {piece!r} has no token in this vocabulary")
        return self.merge_ids(ids)

    def merge_ids(self, ids: list[int]) -> list[int]:
        """The merge of symbols already mapped to ids (SentencePiece starts from characters)."""
        ids = list(ids)
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
