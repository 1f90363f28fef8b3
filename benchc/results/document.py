"""The result document: build, write atomically, read with version checks.

Format history (a change of meaning is a new version; old ones stay readable, and the schema
of every version stays in benchc/schemas/ as result-vN.json, `$id`
https://benchc.dev/schemas/result-vN.json; docs/results.md's "Result format" keeps the changelog):
    1  first version (benchc 0.1).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import platform
import re
import socket
import stat
import sys
import tempfile
import uuid
from dataclasses import dataclass, field

import jsonschema

from benchc import catalog, redact
from benchc.errors import ResultFormatError, UsageError
from benchc.inputs import RESULT_BYTES, read_utf8
from benchc.results import values
from benchc.spec.values import fill_output_path

SCHEMA_VERSION = 1
READABLE_VERSIONS = (1,)


def environment(event_loop: str, http_client: str = "native") -> dict:
    import aiohttp

    return {"host": socket.gethostname(), "os": platform.platform(), "python": sys.version.split()[0],
            "cpu_count": os.cpu_count(), "event_loop": event_loop, "aiohttp": aiohttp.__version__,
            "http_client": http_client, "clock": "time.perf_counter_ns (CLOCK_MONOTONIC)"}


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def requests_path(result_path: str) -> str:
    """The per-request JSONL written beside a result (`output.requests: true`)."""
    return os.path.splitext(result_path)[0] + ".requests.jsonl"


# The per-request JSONL's own format version, which every record names (REQUESTS_VERSION_KEY);
# a record without it is version 1. docs/results.md has the history:
#   1: what benchc wrote up to stop 47 (the run_id binding its last addition)
#   2: the same keys and values, each record naming its version (the record grouped by concern)
# The reader (results/export.py) refuses a version newer than this, naming the line.
REQUESTS_VERSION = 2
REQUESTS_VERSION_KEY = "requests_version"


def bound_requests_text(requests: list[dict], doc: dict) -> str:
    """The per-request JSONL of `doc`'s run, bound to it both ways: every record names the
    run (`run_id`, a random id the document takes too) and the document keeps the file's
    SHA-256 (`requests_sha256`), so that another run's file under this name is refused
    (results/export.py: check_requests_binding). Every record names its format version last."""
    run_id = doc.setdefault("run_id", uuid.uuid4().hex)
    text = "".join(json.dumps({**r, "run_id": run_id, REQUESTS_VERSION_KEY: REQUESTS_VERSION}) + "\n"
                   for r in requests)
    doc["requests_sha256"] = requests_sha256(text.encode("utf-8"))
    return text


def requests_sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def output_path(template: str, name: str, plan_hash: str, sidecars: bool = False) -> str:
    """Fill {name}, {timestamp}, {plan_hash}; add -2, -3... rather than overwrite a file (with
    `sidecars`, a name whose per-request JSONL exists is taken too)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        path = fill_output_path(template, {"name": name, "timestamp": stamp, "plan_hash": plan_hash[:12]})
    except ValueError as e:  # validate refuses it first; a plan written by hand may not have been
        raise UsageError(f"output.path {template!r}: {e}") from None
    base, ext = os.path.splitext(path)
    n = 2
    while os.path.lexists(path) or (sidecars and os.path.lexists(requests_path(path))):
        path = f"{base}-{n}{ext}"
        n += 1
    return path


def _kind(mode: int) -> str | None:
    """What a path that is not a regular file is, in words (None: a regular file)."""
    if stat.S_ISREG(mode):
        return None
    for test, what in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def check_target(path: str, overwrite: bool, hint: str = "choose another --out or pass --force") -> None:
    """`path` may be written: absent, or (with `overwrite`) a regular file. A FIFO, a symlink,
    a device (/dev/null, /dev/full) or a folder is refused even with `overwrite`: the rename
    that writes a file atomically would replace it (or writing through it would lose the
    document)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror}") from e
    kind = _kind(st.st_mode)
    if kind is not None:
        raise UsageError(f"{path} is {kind}: benchc writes only regular files (never through a link or "
                         "into a device); choose another path")
    if not overwrite:
        empty = " (empty: a run that did not finish reserved it)" if st.st_size == 0 else ""
        raise UsageError(f"{path} exists{empty}; {hint}")


def check_folder(path: str) -> None:
    """The folder of `path` exists (created here when missing) and a file can be created in
    it: what write_atomic needs, found out before anything is measured."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        # some part of the way is a file
        at = folder
        while at and not os.path.exists(at):
            at = os.path.dirname(at)
        raise UsageError(f"cannot write {path}: {at} is a file, not a folder") from e
    except OSError as e:
        raise UsageError(f"cannot create the folder {folder} for {path}: {e.strerror}") from e
    try:
        fd, probe = tempfile.mkstemp(prefix=".benchc-probe-", dir=folder)
    except OSError as e:
        raise UsageError(f"cannot write in {folder} ({e.strerror}); choose another path") from e
    os.close(fd)
    os.unlink(probe)


@dataclass
class Reservation:
    """Output paths a run checked before it sent anything. The result (and its per-request
    file) absent before are created empty, exclusively, so no other run takes them; one that
    is never written is removed again by release()."""

    result: str
    requests: str | None  # the per-request JSONL, when the run keeps one
    placeholders: list[str] = field(default_factory=list)
    lock_fd: int | None = None  # the result path held with flock for the run (see reserve_outputs)

    def release(self) -> None:
        """Remove the placeholders nothing was written to (the run ended without a document),
        and let the result path go."""
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
        for p in self.placeholders:
            with contextlib.suppress(OSError):
                st = os.lstat(p)
                if stat.S_ISREG(st.st_mode) and st.st_size == 0:
                    os.unlink(p)
        self.placeholders = []


def reserve_outputs(result: str, requests: bool, logs: list[str], overwrite: bool) -> Reservation:
    """Check and reserve a run's output paths before its first request: the result, its
    `*.requests.jsonl` when `requests`, and the server logs (appended to; an existing log must
    be a regular file). Raises UsageError (exit 2) naming the first path that cannot be
    written; nothing is left behind then."""
    res = Reservation(result, requests_path(result) if requests else None)
    try:
        for path in [result] + ([res.requests] if res.requests else []):
            check_folder(path)
            check_target(path, overwrite)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
            except FileExistsError:
                check_target(path, overwrite)  # appeared meanwhile: another run took it
                continue
            except OSError as e:
                raise UsageError(f"cannot write {path}: {e.strerror}") from e
            os.close(fd)
            res.placeholders.append(path)
        res.lock_fd = _hold(result)
        for path in logs:
            check_folder(path)
            check_target(path, overwrite=True)
    except BaseException:
        res.release()
        raise
    return res


def _hold(path: str) -> int:
    """The result path, held with an exclusive flock until the run releases it: a second run
    given the same --out --force while this one runs is refused (exit 2), so two runs can
    never both claim one file. (The lock is on the file as reserved; the finished result
    replaces it by a rename, after which the path is free again.)"""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        raise UsageError(f"{path} is being written by another benchc run (it holds the file); wait for "
                         "it, or choose another --out") from e
    return fd


def write_atomic(path: str, text: str, overwrite: bool = False) -> None:
    """Write via a temporary file and rename, so a reader never sees half a document.

    `text` is JSON or JSON lines (a result, per-request records): during a run every secret
    value the run knows is replaced in its strings first (benchc.redact.scrubbing)."""
    write_bytes_atomic(path, redact.active().json(text).encode("utf-8"), overwrite)


def write_bytes_atomic(path: str, data: bytes, overwrite: bool = False) -> None:
    """Write `data` to `path` through a temporary file and a rename. Only a regular file is
    ever replaced (check_target), with `overwrite`; the folder is created when missing."""
    check_target(path, overwrite)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".benchc-", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # a full disk (or quota) shows here, before the rename
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; a result is an ordinary file
        check_target(path, overwrite)  # again, just before the rename: nothing special appeared
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        # a full disk, a quota, an I/O error: the user's to fix, and nothing half written
        raise UsageError(f"cannot write {path}: {e.strerror or e}; nothing was written") from e
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def schema_versions(which: str) -> list[int]:
    """The versions of a format (`result`, `spec`) whose schema files this benchc ships."""
    from importlib import resources

    names = (f.name for f in resources.files("benchc").joinpath("schemas").iterdir())
    return sorted(int(m.group(1)) for n in names if (m := re.fullmatch(rf"{which}-v(\d+)\.json", n)))


def schema_text(which: str, version: int) -> str:
    """The schema file of one version, as shipped."""
    from importlib import resources

    return resources.files("benchc").joinpath("schemas", f"{which}-v{version}.json").read_text()


def validate_document(doc: dict) -> None:
    from benchc.spec.loader import load_schema

    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise ResultFormatError("not a benchc result document (no schema_version)")
    version = doc["schema_version"]
    readable = ", ".join(map(str, READABLE_VERSIONS))
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        # only a whole number >= 1 is a version; anything else says the file is damaged, not new
        raise ResultFormatError(f"result schema_version {json.dumps(version)} is not a version number "
                                f"(it is a whole number; this benchc reads {readable}): the document "
                                "is damaged or not a benchc result")
    if version > max(READABLE_VERSIONS):
        raise ResultFormatError(f"result schema_version {version} is not one this benchc reads (it reads "
                                f"{readable}): it is newer; a newer benchc may read it "
                                "(pip install -U benchc)")
    if version not in READABLE_VERSIONS:
        raise ResultFormatError(f"result schema_version {version} is not one this benchc reads "
                                f"(it reads {readable})")
    try:
        values.check(doc)  # before the schema: its validator recurses, and takes 1e40 as an integer
    except values.ValueProblem as problem:
        raise ResultFormatError(f"result document invalid at {problem}") from None
    errors = sorted(jsonschema.Draft202012Validator(load_schema(f"result-v{version}")).iter_errors(doc),
                    key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
        raise ResultFormatError(f"result document invalid at {where}: {e.message} "
                                f"({len(errors)} problem(s))")


def read_text(path: str, what: str = "result document") -> str:
    """A regular file within the result bound, as UTF-8 text (ResultFormatError otherwise)."""
    return read_utf8(path, RESULT_BYTES, what, ResultFormatError,
                     lambda line, at, byte: f"{path} is not a result document: byte {at} (0x{byte:02x}) "
                                            "is not UTF-8 text (a binary file?)")


def read(path: str) -> dict:
    text = read_text(path)
    try:
        doc = json.loads(text, parse_constant=not_json_number)
    except json.JSONDecodeError as e:
        raise ResultFormatError(f"{path} is not JSON ({e.msg} at line {e.lineno})") from e
    except RecursionError as e:
        raise ResultFormatError(f"{path} is not a result document: JSON nested too deep to read") from e
    except ValueError as e:  # NaN/Infinity literals; an integer of more than 4300 digits
        raise ResultFormatError(f"{path} is not a result document: {e}") from e
    validate_document(doc)
    return doc


def not_json_number(literal: str) -> float:
    raise ValueError(f"{literal} is not a JSON number (a result holds finite numbers only)")


# --------------------------------------------------------------------------- reading points


def load_key(point: dict) -> tuple:
    """What makes two points comparable: the load (concurrency or rate) and the matrix values.
    The runs of a repeated point share it (results/repeats.py groups them by it)."""
    params = point["params"]
    if params.get("concurrency"):
        load: tuple = ("c", params["concurrency"])
    elif params.get("users"):  # sessions at a per-user pace
        load = ("users", params["users"], params.get("turn_interval_s"))
    else:
        load = ("rate", params.get("rate_rps"))
    return (load, tuple(sorted((k, str(v)) for k, v in point.get("matrix", {}).items())))


def point_key(point: dict) -> tuple:
    """What makes two points the same point of a plan (shards of it merge): its load_key, and
    which run of a repeated point, or which probe of a capacity search, it is."""
    params = point["params"]
    return load_key(point) + (params.get("repeat"), params.get("probe"))


def is_probe(point: dict) -> bool:
    """A probe of a capacity search (its place in the search is in the result's `search`)."""
    return point["params"].get("probe") is not None


def is_closed_loop(point: dict) -> bool:
    """A fixed-concurrency point. Every other kind (a fixed rate, a replayed trace) sends on a
    schedule, and exporters treat them alike: by what the point's params say, not by kind names."""
    return bool(point["params"].get("concurrency"))


def latency_summary(point: dict, metric: str) -> dict | None:
    """A latency summary of a point: `ttft` (its latency block's ttft_us), `turn3.ttft` (turn 3's
    of a sessions point, `turn>=10.ttft` the last bucket's), `session_duration`; None if absent."""
    if metric.startswith("turn"):
        turn, _, name = metric[4:].partition(".")
        by_turn = (point.get("sessions") or {}).get("by_turn", [])
        block = next((b for b in by_turn if b["turn"] == turn), None)
        return (block or {}).get("latency", {}).get(f"{name}_us")
    if metric == "session_duration":
        return (point.get("sessions") or {}).get("duration_us")
    return point["latency"].get(f"{metric}_us")


def metric_value(point: dict, key: str) -> float | None:
    """`output_tok_s`, `error_rate`, `ttft.p99` (microseconds), `turn2.ttft.p50` ... from a point;
    None if absent."""
    if "." in key:
        metric, stat = key.rsplit(".", 1) if not key.endswith(".p99.9") else (key[:-6], "p99.9")
        return (latency_summary(point, metric) or {}).get(stat)
    declared = catalog.BY_NAME.get(key)
    if declared is not None:  # where the declaration says a point holds it
        return declared.value_in(point)
    return point["throughput"].get(key)
