"""Exact token counts with a model's own tokenizer file (see tokenizer.py); the merge loops
and the pre-tokenizer have compiled cores (csrc/tokenizer/) with pure-Python twins."""

from benchc.tokenizer.tokenizer import (
    ENCODINGS,
    Tokenizer,
    from_gguf,
    from_kimi,
    from_sentencepiece,
    from_tekken,
    from_tiktoken,
    from_tokenizer_json,
    load,
)

__all__ = ["ENCODINGS", "Tokenizer", "from_gguf", "from_kimi", "from_sentencepiece", "from_tekken",
           "from_tiktoken", "from_tokenizer_json", "load"]
