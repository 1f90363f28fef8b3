"""The result document: build, write atomically, read with version checks.

Format history (a change of meaning is a new version; old ones stay readable, and the schema
of every version stays in benchc/schemas/ as result-vN.json, `$id`
https://benchc.dev/schemas/result-vN.json; the README's "Result format" keeps the changelog):
    1  first version (benchc 0.1).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import socket
import sys
import tempfile

import jsonschema

from benchc import redact
from benchc.errors import ResultFormatError, UsageError

SCHEMA_VERSION = 1
READABLE_VERSIONS = (1,)


def environment(event_loop: str, http_client: str = "native") -> dict:
    import aiohttp

    return {"host": socket.gethostname(), "os": platform.platform(), "python": sys.version.split()[0],
            "cpu_count": os.cpu_count(), "event_loop": event_loop, "aiohttp": aiohttp.__version__,
            "http_client": http_client, "clock": "time.perf_counter_ns (CLOCK_MONOTONIC)"}


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def output_path(template: str, name: str, plan_hash: str) -> str:
    """Fill {name}, {timestamp}, {plan_hash}; add -2, -3... rather than overwrite a file."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = template.format(name=name, timestamp=stamp, plan_hash=plan_hash[:12])
    base, ext = os.path.splitext(path)
    n = 2
    while os.path.exists(path):
        path = f"{base}-{n}{ext}"
        n += 1
    return path


def write_atomic(path: str, text: str, overwrite: bool = False) -> None:
    """Write via a temporary file and rename, so a reader never sees half a document.

    `text` is JSON or JSON lines (a result, per-request records): during a run every secret
    value the run knows is replaced in its strings first (benchc.redact.scrubbing)."""
    text = redact.active().json(text)
    if os.path.exists(path) and not overwrite:
        raise UsageError(f"{path} exists; choose another --out or pass --force")
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".benchc-", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; a result is an ordinary file
        os.replace(tmp, path)
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
    errors = sorted(jsonschema.Draft202012Validator(load_schema(f"result-v{version}")).iter_errors(doc),
                    key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
        raise ResultFormatError(f"result document invalid at {where}: {e.message} "
                                f"({len(errors)} problem(s))")


def read(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ResultFormatError(f"cannot read {path}: {e.strerror}") from e
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ResultFormatError(f"{path} is not a result document: byte {e.start} (0x{raw[e.start]:02x}) "
                                "is not UTF-8 text (a binary file?)") from e
    except json.JSONDecodeError as e:
        raise ResultFormatError(f"{path} is not JSON ({e.msg} at line {e.lineno})") from e
    except RecursionError as e:
        raise ResultFormatError(f"{path} is not a result document: JSON nested too deep to read") from e
    validate_document(doc)
    return doc


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
    if key == "error_rate":
        return point.get("error_rate")
    return point["throughput"].get(key)
