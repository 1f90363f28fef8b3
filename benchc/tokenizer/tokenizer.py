"""Exact token counts without the Rust `tokenizers`, `tiktoken` or `sentencepiece` packages.

`load(path)` picks the loader by what the path is; every loader builds the same Tokenizer
(encoder.py), each following its file family's reference implementation:

    tokenizer.json (or a directory holding one)   HF tokenizers      _hf_json.py
    ENCODING:PATH, NAME.tiktoken                  tiktoken           _tiktoken_file.py
    a directory with tiktoken.model + Kimi's tokenizer_config.json   _tiktoken_file.py
    tekken*.json (or a directory holding tekken.json)  mistral-common _tekken.py
    *.model* (SentencePiece protobuf; a directory's tokenizer.model)  _sentencepiece.py
    *.gguf                                        llama.cpp          _gguf.py
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from benchc.errors import UsageError
from benchc.inputs import TOKENIZER_BYTES, input_problem
from benchc.tokenizer._gguf import from_gguf
from benchc.tokenizer._hf_json import from_tokenizer_json
from benchc.tokenizer._sentencepiece import from_sentencepiece
from benchc.tokenizer._tekken import from_tekken
from benchc.tokenizer._tiktoken_file import ENCODINGS, from_kimi, from_tiktoken, is_kimi_dir
from benchc.tokenizer.encoder import Tokenizer

__all__ = ["ENCODINGS", "Tokenizer", "from_gguf", "from_kimi", "from_sentencepiece", "from_tekken",
           "from_tiktoken", "from_tokenizer_json", "load", "tokenizer_files"]

_DIR_FILES = ("tokenizer.json", "tekken.json", "tokenizer.model")


def load(path: str, core: str | None = None) -> Tokenizer:
    """A tokenizer from a file or a model directory (see the module's table), or a tiktoken
    rank file named after its encoding (cl100k_base.tiktoken) or given as ENCODING:PATH.
    Any file it cannot read is a UsageError that names the file.

    A tokenizer already loaded from the same unchanged files is returned again: a 128k-entry
    vocabulary takes seconds to build, and one process may ask for it several times (a
    matrix's combinations, the simulator beside the plan, a test session)."""
    key = _files_identity(path, core)
    if key is not None:
        with _loaded_lock:
            if (tok := _loaded.get(key)) is not None:
                _loaded.move_to_end(key)
                return tok
    try:
        tok = _load(path, core)
    except UsageError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, OSError) as e:  # a malformed file
        raise UsageError(f"{path}: not a readable tokenizer file ({type(e).__name__}: {e})") from e
    if key is not None:
        with _loaded_lock:
            _loaded[key] = tok
            while len(_loaded) > _LOADED_KEPT:
                _loaded.popitem(last=False)
    return tok


# tokenizers are built once and never changed after (encoder.Tokenizer), so one can be shared
_LOADED_KEPT = 4
_loaded: OrderedDict[tuple, Tokenizer] = OrderedDict()
_loaded_lock = threading.Lock()


def _files_identity(path: str, core: str | None) -> tuple | None:
    """What makes two loads the same: the path asked for, the core, and each file read as it
    is on disk now (a file rewritten in place has another size or time). None where the files
    cannot be named: load() then reports why."""
    try:
        _how, files = tokenizer_files(path)
        stats = tuple((f, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                      for f in files for st in (os.stat(f),))
    except (UsageError, OSError):
        return None
    return (path, core, stats)


def _load(path: str, core: str | None) -> Tokenizer:
    name, sep, rest = path.partition(":")
    if sep and name in ENCODINGS:
        return from_tiktoken(_existing(rest), encoding=name, core=core)
    if os.path.isdir(path):
        return _from_dir(path, core)
    _existing(path)
    base = os.path.basename(path)
    stem, ext = os.path.splitext(base)
    if ext == ".tiktoken":
        if stem not in ENCODINGS:
            raise UsageError(f"{path}: name the encoding of a tiktoken file, as ENCODING:{path} "
                             f"(one of {', '.join(ENCODINGS)})")
        return from_tiktoken(path, encoding=stem, core=core)
    with open(path, "rb") as f:
        head = f.read(64)
    if head.startswith(b"GGUF") or ext == ".gguf":
        return from_gguf(path, core)
    if ext == ".json":
        return from_tekken(path, core) if "tekken" in base else from_tokenizer_json(path, core)
    if ".model" in base:
        if head[:1] != b"\n":  # a SentencePiece ModelProto opens with field 1 (pieces)
            raise UsageError(f"{path}: not a SentencePiece model; a tiktoken rank file needs its pattern: "
                             "give Kimi's model directory, or ENCODING:PATH")
        return from_sentencepiece(path, core)
    raise UsageError(f"{path}: not a tokenizer file benchc knows (tokenizer.json, tekken*.json, *.model, "
                     "*.gguf, ENCODING:PATH for a tiktoken rank file, or a model directory)")


def _from_dir(path: str, core: str | None) -> Tokenizer:
    for name in _DIR_TOKENIZER_FILES:  # a FIFO or a device there is not a file (isfile): its size then
        if os.path.isfile(os.path.join(path, name)):
            _existing(os.path.join(path, name))
    if os.path.isfile(os.path.join(path, "tokenizer.json")):
        return from_tokenizer_json(os.path.join(path, "tokenizer.json"), core)
    if is_kimi_dir(path):
        return from_kimi(path, core)
    if os.path.isfile(os.path.join(path, "tekken.json")):
        return from_tekken(os.path.join(path, "tekken.json"), core)
    if os.path.isfile(os.path.join(path, "tokenizer.model")):
        return from_sentencepiece(os.path.join(path, "tokenizer.model"), core)
    raise UsageError(f"no tokenizer at {path} (looked for {', '.join(_DIR_FILES)}, or tiktoken.model with "
                     "Kimi's tokenizer_config.json)")


# the files of a model directory the loaders may read (a directory also holds the weights,
# which a copy of the tokenizer must not carry)
_DIR_TOKENIZER_FILES = _DIR_FILES + ("tiktoken.model", "tokenizer_config.json")


def tokenizer_files(path: str) -> tuple[str, list[str]]:
    """What load(path) reads, for a copy of the tokenizer elsewhere (a Ray worker without the
    spec's files, run/prepare.py): (`how`, the files). `how` is "dir" (load the folder the
    copies are put in), "file" (load the copy) or "ENCODING:" (load ENCODING:copy)."""
    name, sep, rest = path.partition(":")
    if sep and name in ENCODINGS:
        return f"{name}:", [_existing(rest)]
    if os.path.isdir(path):
        files = [_existing(os.path.join(path, f)) for f in _DIR_TOKENIZER_FILES
                 if os.path.isfile(os.path.join(path, f))]
        if not files:
            raise UsageError(f"no tokenizer at {path}")
        return "dir", files
    return "file", [_existing(path)]


def _existing(path: str) -> str:
    if not os.path.exists(path):
        raise UsageError(f"no tokenizer at {path}")
    # a GGUF model of many gigabytes is read for its metadata only: no size bound there
    limit = None if path.endswith(".gguf") else TOKENIZER_BYTES
    if not os.path.isdir(path) and (why := input_problem(path, limit, "tokenizer")):
        raise UsageError(why)
    return path
