"""Files benchc reads as input (spec, dataset, trace, agent trace, tokenizer, chat template, a dataset's
images, a tools file, a text to count, a twin, result documents and their per-request
files): each must be a regular file within its stated bound (README: Limits), found out
from its metadata before a byte is read, so a FIFO, a device (/dev/zero, /dev/stdin) or a
file of many gigabytes is refused at once rather than blocking or filling memory.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

SPEC_BYTES = 256 * 1024  # also spec/yaml_bounds.py's ceiling, checked again on the bytes
DATASET_BYTES = 1 << 30  # a jsonl or ShareGPT dataset, read whole
TRACE_BYTES = 1 << 30  # a trace file, read whole
AGENT_SESSION_BYTES = 256 << 20  # one agent-trace session (a Weka .json file, or one line of a .jsonl)
AGENT_TRACE_BYTES = 1 << 30  # a .jsonl of agent-trace sessions, read a session (line) at a time
TOKENIZER_BYTES = 1 << 30  # tokenizer.json, tiktoken, tekken, SentencePiece (a GGUF: metadata only)
TEMPLATE_BYTES = 16 << 20  # tokenizer_config.json, chat_template.jinja
IMAGE_BYTES = 64 << 20  # an image a dataset names, sent base64 in a request
TOOLS_BYTES = 16 << 20  # workload.tools.file
TEXT_BYTES = 1 << 30  # a file `benchc tokens` counts
TWIN_BYTES = 16 << 20  # a twin file (`benchc fit` writes a few kB)
RESULT_BYTES = 1 << 30  # a result document, read whole
REQUESTS_BYTES = 4 << 30  # a result's per-request file (JSON lines), read whole by export and report


def input_problem(path: str | os.PathLike, limit: int | None, what: str) -> str | None:
    """Why `path` cannot be read as a `what` (None: it can, or it does not exist, which the
    reader reports in its own words)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a character device" if stat.S_ISCHR(st.st_mode)
                else "a block device" if stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file")
        return f"{what} {path} is {kind}: benchc reads a {what} from a regular file"
    if limit is not None and st.st_size > limit:
        return (f"{what} {path} is {st.st_size:,} bytes, more than the {limit:,} a {what} may have "
                "(benchc's bound; README: Limits)")
    return None


def read_utf8(path: str | os.PathLike, limit: int, what: str, error: Callable[[str], Exception],
              not_utf8: Callable[[int, int, int], str],
              unreadable: str = "cannot read {path}: {strerror}") -> str:
    """A `what` file as UTF-8 text, checked by input_problem first; each way it fails is an
    `error` (the reader's own exception class) in the reader's words: `unreadable` formatted
    with the path and the OS's strerror, or `not_utf8(line, offset, byte)` for the first byte
    that is not UTF-8 (its 1-based line, its offset in the file, its value)."""
    if why := input_problem(path, limit, what):
        raise error(why)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise error(unreadable.format(path=path, strerror=e.strerror)) from e
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise error(not_utf8(line, e.start, raw[e.start])) from e
