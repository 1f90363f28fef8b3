"""benchc.results.load() on the stored result fixtures, and the result schema's versions."""

import csv
import io
import json
import os
import sys

import pytest
from hdrh.histogram import HdrHistogram

import benchc.results
from benchc.cli import main
from benchc.errors import ResultFormatError, UsageError
from benchc.results.document import READABLE_VERSIONS, SCHEMA_VERSION, read, schema_versions

DATA = os.path.join(os.path.dirname(__file__), "data")
FIXTURES = sorted(os.path.join(DATA, n) for n in os.listdir(DATA) if n.endswith(".json"))


@pytest.mark.parametrize("path", FIXTURES, ids=os.path.basename)
def test_load_gives_typed_points_with_the_documents_values(path):
    r = benchc.results.load(path)
    doc = read(path)
    assert (r.schema_version, r.plan_hash, r.name) == (1, doc["plan_hash"], doc["plan"]["name"])
    assert r.created is not None and r.created.isoformat().startswith(doc["created"][:19])
    assert [p.id for p in r.points] == [p["id"] for p in doc["points"]]
    for p, raw in zip(r.points, doc["points"], strict=True):
        assert (p.concurrency, p.sent, p.completed) == (raw["params"]["concurrency"], raw["counts"]["sent"],
                                                        raw["counts"]["completed"])
        assert p.output_tok_s == raw["throughput"]["output_tok_s"] and p.closed_loop is True
        assert set(p.latency) == {k.removesuffix("_us") for k in raw["latency"]}
        assert p.ttft.p99_ms == raw["latency"]["ttft_us"]["p99"] / 1000
        assert p.e2e.mean_ms == raw["latency"]["e2e_us"]["mean"] / 1000
        assert r.point(p.id) is p


@pytest.mark.slow  # decodes every stored histogram
@pytest.mark.parametrize("path", FIXTURES, ids=os.path.basename)
def test_histograms_are_hdrhistogram_objects_decoded_from_the_stored_encoding(path):
    for p in benchc.results.load(path).points:
        for lat in p.latency.values():
            h = lat.histogram()
            assert isinstance(h, HdrHistogram)
            assert h.get_total_count() == lat.count
            for pct, stored in lat.percentiles.items():
                assert h.get_value_at_percentile(pct) == stored
            assert (h.get_min_value(), h.get_max_value()) == (lat.min, lat.max)
            assert round(h.get_mean_value(), 3) == lat.mean and round(h.get_stddev(), 3) == lat.stdev
    # hdrhistogram's own tools merge them: two shards' TTFTs add up count for count
    a, b = (benchc.results.load(os.path.join(DATA, f"result-v1-shard-{s}.json")) for s in "ab")
    merged = a.points[0].ttft.histogram()
    merged.add(b.points[0].ttft.histogram())
    assert merged.get_total_count() == a.points[0].ttft.count + b.points[0].ttft.count


@pytest.mark.parametrize("path", FIXTURES, ids=os.path.basename)
def test_to_dataframe_has_one_row_per_point_and_the_csv_columns(path, capsys):
    df = benchc.results.load(path).to_dataframe()
    assert main(["export", path, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(df.columns) == list(rows[0]) and len(df) == len(rows) == len(read(path)["points"])
    for (_, got), want in zip(df.iterrows(), rows, strict=True):
        for col, text in want.items():
            value = got[col]
            if isinstance(value, bool) or col in ("point", "matrix", "output_method"):
                assert str(value) == text
            elif text == "":
                assert value is None or value != value  # None or NaN
            else:
                assert float(value) == float(text), col


def test_to_dataframe_without_pandas_says_how_to_get_it(monkeypatch):
    r = benchc.results.load(FIXTURES[0])
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(UsageError, match=r"pip install 'benchc\[pandas\]'"):
        r.to_dataframe()


def test_load_refuses_what_is_not_a_result(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 9}))
    with pytest.raises(ResultFormatError, match="schema_version 9 is not one this benchc reads"):
        benchc.results.load(str(bad))


# --------------------------------------------------------------------------- schema versions


def test_every_readable_version_has_its_schema_file_with_a_stable_id():
    assert schema_versions("result") == list(READABLE_VERSIONS) and max(READABLE_VERSIONS) == SCHEMA_VERSION
    for v in READABLE_VERSIONS:
        assert any(read(f)["schema_version"] == v for f in FIXTURES)  # a fixture of every version
    from benchc.spec.loader import load_schema

    for v in schema_versions("result"):
        schema = load_schema(f"result-v{v}")
        assert schema["$id"] == f"https://benchc.dev/schemas/result-v{v}.json"
        assert "Changelog" in schema["$comment"]


def test_schema_prints_any_shipped_version(capsys):
    assert main(["schema", "result"]) == 0
    current = json.loads(capsys.readouterr().out)
    assert main(["schema", "result", "--version", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == current and current["$id"].endswith("result-v1.json")
    assert main(["schema", "result", "--version", "7"]) == 2
    assert "no result schema version 7; this benchc has 1" in capsys.readouterr().err


def test_schema_versions_are_the_files_in_the_package(tmp_path, monkeypatch, capsys):
    """The mechanism for when result-v2 exists: versions are read from the shipped files."""
    from importlib import resources

    pkg = tmp_path / "benchc"
    (pkg / "schemas").mkdir(parents=True)
    for name in ("result-v1.json", "result-v2.json", "result-v10.json", "spec-v1.json", "result-vx.json"):
        (pkg / "schemas" / name).write_text(json.dumps({"$id": name}))
    monkeypatch.setattr(resources, "files", lambda package: pkg)
    assert schema_versions("result") == [1, 2, 10] and schema_versions("spec") == [1]
    assert main(["schema", "result"]) == 0
    assert json.loads(capsys.readouterr().out) == {"$id": "result-v10.json"}  # the newest by default
    assert main(["schema", "result", "--version", "2"]) == 0
    assert json.loads(capsys.readouterr().out) == {"$id": "result-v2.json"}
