"""SentencePiece-style BPE, pure Python (the reference twin of csrc/tokenizer/_spm_c.pyx).

Byte-level BPE starts from a piece's bytes; SentencePiece's BPE (and HF's char-level BPE,
which converted SentencePiece models use) starts from its characters:

- each character is the token spelled by it; one missing from the vocabulary becomes
  the tokens <0xXX> of its UTF-8 bytes when the model has byte fallback and all of them
  exist, else the unknown token (consecutive ones fused into one where `fuse_unk`;
  dropped where the model has none, as HF does). A pending fused unknown is written
  when the next known character comes, as HF's merge_word writes it;
- then adjacent symbols merge as byte-level BPE's do (benchc/tokenizer/_bpe_py.py): the
  pair of lowest rank first, leftmost on ties. For HF's tokenizer.json the rank is the
  merge's place in the list; for a SentencePiece .model it is the merged piece's place
  in descending score order (sentencepiece's bpe_model.cc: highest score, then
  leftmost).

`encode_text(text, cut)` encodes a whole normalized segment, cut first into pieces that
merge separately:
    CUT_NONE       the segment is one piece (SentencePiece, HF without a pre-tokenizer)
    CUT_METASPACE  a piece starts at every "▁" (HF's Metaspace with split=true)
    CUT_WORDS      a piece starts at every "▁" that follows another character; only
                   given by loaders for vocabularies where no token holds "▁" after
                   another character, so no merge can cross the cut and the ids are
                   those of CUT_NONE (it bounds the memory and work of one merge)
"""

from __future__ import annotations

from benchc.tokenizer._bpe_py import BPE

CUT_NONE, CUT_METASPACE, CUT_WORDS = 0, 1, 2
SPACE = "▁"


class SPM:
    def __init__(self, char_ids: dict[int, int], pairs: dict[tuple[int, int], tuple[int, int]],
                 byte_ids: list[int] | None = None, unk_id: int | None = None, fuse_unk: bool = False):
        """char_ids: {code point: id} of the one-character tokens; pairs as BPE's;
        byte_ids: 256 ids of <0x00>..<0xFF> (-1 where missing) when byte fallback is on."""
        if byte_ids is not None and len(byte_ids) != 256:
            raise ValueError("byte_ids needs one id per byte value")
        self.char_ids = char_ids
        self.pairs = pairs
        self.byte_ids = list(byte_ids) if byte_ids is not None else None
        self.unk_id = unk_id
        self.fuse_unk = fuse_unk
        self.bpe = BPE([-1] * 256, pairs)

    def symbols(self, piece: bytes) -> list[int]:
        out: list[int] = []
        unk = 0  # how many unknown characters are pending (fused into one)
        unk_id = -1 if self.unk_id is None else self.unk_id  # unk is only set when there is one
        for ch in piece.decode("utf-8", "surrogatepass"):
            i = self.char_ids.get(ord(ch))
            if i is not None:
                if unk:
                    out.append(unk_id)
                    unk = 0
                out.append(i)
                continue
            if self.byte_ids is not None:
                ids = [self.byte_ids[b] for b in ch.encode("utf-8", "surrogatepass")]
                if -1 not in ids:
                    out += ids
                    continue
            if self.unk_id is not None:
                if unk and not self.fuse_unk:
                    out.append(unk_id)
                unk = 1
        if unk:
            out.append(unk_id)
        return out

    def encode_piece(self, piece: bytes) -> list[int]:
        return self.bpe.merge_ids(self.symbols(piece))

    def encode_text(self, text: bytes, cut: int = CUT_NONE) -> list[int]:
        out: list[int] = []
        for piece in _cut(text.decode("utf-8", "surrogatepass"), cut):
            out += self.encode_piece(piece.encode("utf-8", "surrogatepass"))
        return out

    def count_text(self, text: bytes, cut: int = CUT_NONE) -> int:
        return len(self.encode_text(text, cut))


def _cut(text: str, cut: int) -> list[str]:
    if cut == CUT_NONE or not text:
        return [text] if text else []
    starts = [0] + [i for i in range(1, len(text)) if text[i] == SPACE
                    and (cut == CUT_METASPACE or text[i - 1] != SPACE)]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)], strict=True)]
