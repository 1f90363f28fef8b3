"""`benchc export`: a result in the formats other tools read.

Whole-result formats give one text: `csv` (one row per point), `csv-turns` (one row per point
and turn index of a sessions workload) and `jsonl` (the per-request records). Per-point
formats give one JSON document per load point: `br0.2` and `br0.2.1` (llm-d Benchmark
Reports, results/br.py) and `vllm` (what `vllm bench serve --save-result` writes,
results/vllm.py).
"""

from __future__ import annotations

import json
import os

from benchc.errors import ResultFormatError, UsageError
from benchc.inputs import REQUESTS_BYTES, input_problem
from benchc.results import br, vllm
from benchc.results.document import REQUESTS_VERSION, REQUESTS_VERSION_KEY, not_json_number, requests_sha256
from benchc.results.table import to_csv

WHOLE_FORMATS = ("csv", "csv-turns", "jsonl")
PER_POINT_FORMATS = ("br0.2", "br0.2.1", "vllm")
FORMATS = WHOLE_FORMATS + PER_POINT_FORMATS


def _requests_path(doc: dict, result_path: str) -> str | None:
    name = doc.get("requests_file")
    return os.path.join(os.path.dirname(os.path.abspath(result_path)), name) if name else None


def requests_jsonl(doc: dict, result_path: str) -> str:
    """The per-request file's text, once every line of it is checked to be a whole record:
    a truncated or damaged file is refused, naming the line, so that no half record is
    ever passed on."""
    path = _requests_path(doc, result_path)
    if not path and doc.get("merged_from"):
        raise UsageError("a merged result has no per-request file: each shard's records stay beside "
                         "the shard; export those")
    if not path:
        raise UsageError("this result has no per-request records (run with output.requests: true)")
    raw = _read_requests(path)
    check_requests_binding(doc, raw, _records(raw, path), path)
    return raw.decode("utf-8")


def _read_requests(path: str) -> bytes:
    if why := input_problem(path, REQUESTS_BYTES, "per-request file"):
        raise UsageError(why)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"the per-request file {path} is missing: {e.strerror}") from e


def _records(raw: bytes, path: str) -> list[dict]:
    """Every record of a per-request JSONL file; ResultFormatError names the first bad line."""
    out = []
    lines = raw.split(b"\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line.decode("utf-8"), parse_constant=not_json_number)
        except RecursionError as e:  # a record nested past Python's stack: no record of benchc's
            raise ResultFormatError(f"{path} line {n}: a JSON record nested too deep to read; the "
                                    "per-request file is damaged or not benchc's") from e
        except (UnicodeDecodeError, ValueError) as e:
            why = "cut short: the file ends inside a record" if n == len(lines) else "not a JSON record"
            raise ResultFormatError(f"{path} line {n}: {why} ({e}); the per-request file is damaged") from e
        if isinstance(r, dict):
            _check_version(r, path, n)
        if not isinstance(r, dict) or not isinstance(r.get("point"), str) or not isinstance(
                r.get("t0_ns"), int):
            raise ResultFormatError(f"{path} line {n}: not a per-request record of benchc (a JSON object "
                                    "with point and t0_ns)")
        out.append(r)
    return out


def _check_version(record: dict, path: str, n: int) -> None:
    """A record's format version (REQUESTS_VERSION_KEY; none: version 1) is one this reader
    knows: a newer one is refused by name (its keys may mean what this benchc cannot say)."""
    version = record.get(REQUESTS_VERSION_KEY, 1)
    if type(version) is not int or version < 1:
        said = json.dumps(version)[:40]
        raise ResultFormatError(f"{path} line {n}: {REQUESTS_VERSION_KEY} {said} is not a version (a whole "
                                "number from 1); the per-request file is damaged")
    if version > REQUESTS_VERSION:
        raise ResultFormatError(f"{path} line {n}: per-request records of {REQUESTS_VERSION_KEY} {version}, "
                                f"newer than this benchc reads (1 to {REQUESTS_VERSION}): export it with "
                                "the benchc that wrote it, or a newer one")


def check_requests_binding(doc: dict, raw: bytes, records: list[dict], path: str) -> None:
    """Refuse (ResultFormatError, exit 5) a per-request file that is not `doc`'s: records of
    another run (their `run_id`), or bytes other than those the run wrote (the SHA-256 the
    result keeps, `requests_sha256`). A result and file written before the binding (neither
    names a run) are read as they are."""
    mine = doc.get("run_id")
    others = sorted({str(r["run_id"]) for r in records if "run_id" in r and r["run_id"] != mine})
    if others:
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        theirs = ", ".join(x[:40] for x in others[:3]) + more
        this = f"run {mine}" if mine else "a result written before per-request files named their run"
        raise ResultFormatError(f"{path} is another run's per-request file (its records are of run {theirs}; "
                                f"this result is {this}): export the result that file belongs to")
    want = doc.get("requests_sha256")
    if isinstance(want, str) and requests_sha256(raw) != want:
        raise ResultFormatError(f"{path} is not the per-request file this result was written with (its "
                                f"SHA-256 is {requests_sha256(raw)[:16]}..., the result's requests_sha256 "
                                f"{want[:16]}...): it was changed or replaced after the run")


def requests_by_point(doc: dict, result_path: str) -> dict[str, list[dict]] | None:
    """The per-request records grouped by point id, in the order they were sent, or None when
    the run did not keep them."""
    path = _requests_path(doc, result_path)
    if not path:
        return None
    raw = _read_requests(path)
    records = _records(raw, path)
    check_requests_binding(doc, raw, records, path)
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["point"], []).append(r)
    for records in out.values():
        records.sort(key=lambda r: r["t0_ns"])
    return out


def export_whole(doc: dict, fmt: str, result_path: str) -> str:
    if fmt == "csv":
        return to_csv(doc)
    if fmt == "csv-turns":
        if not any(p.get("sessions") for p in doc["points"]):
            raise UsageError("csv-turns: this result has no sessions (the points of a sessions workload "
                             "have turns)")
        return to_csv(doc, turns=True)
    if fmt == "jsonl":
        return requests_jsonl(doc, result_path)
    raise UsageError(f"unknown export format {fmt!r} (one of {', '.join(FORMATS)})")


def export_points(doc: dict, fmt: str, result_path: str) -> list[dict]:
    """One JSON document per point, in point order."""
    if fmt.startswith("br"):
        return br.to_reports(doc, fmt[2:])
    if fmt == "vllm":
        return vllm.to_vllm(doc, requests_by_point(doc, result_path))
    raise UsageError(f"unknown export format {fmt!r} (one of {', '.join(FORMATS)})")


def dropped_doubts(doc: dict) -> list[str]:
    """The doubts on the result's points (client-limited figures, output lengths not as asked, ...),
    one line per point, which no per-point format has a field for: `benchc export` says them on
    stderr rather than let an exported figure look trusted."""
    out = []
    for p in doc.get("points") or []:
        doubts = ((p.get("trust") or {}).get("doubts")) or []
        if doubts:
            out.append(f"{p.get('id')}: " + "; ".join(str(d.get("message")) for d in doubts))
    return out


def point_paths(out: str, n: int) -> list[str]:
    """Where `-o OUT` puts n per-point documents: OUT itself for one, else OUT's stem with -1,
    -2, ... in point order (point ids hold characters such as '/' that file names cannot)."""
    if n == 1:
        return [out]
    stem, ext = os.path.splitext(out)
    return [f"{stem}-{i}{ext}" for i in range(1, n + 1)]
