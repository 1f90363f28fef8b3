"""The metric declarations (benchc/catalog.py) against every output that names metrics: none
names one that is not declared, and each carries every metric declared for it."""

from benchc import catalog
from benchc.catalog import METRICS, metric
from benchc.spec.schemas import load_schema
from benchc.spec.thresholds import METRICS as SLO_METRICS


def _point_schema() -> dict:
    return load_schema("result-v1")["$defs"]["point"]["properties"]


def test_names_are_unique_and_a_lookup_names_the_known_ones():
    assert len({m.name for m in METRICS}) == len(METRICS)
    try:
        metric("speed")
    except KeyError as e:
        assert "'speed' is not a declared metric; known: ttft, itl" in str(e)
    else:
        raise AssertionError("an undeclared metric was found")


def test_the_slo_grammar_names_exactly_the_metrics_declared_for_slo():
    assert SLO_METRICS == {"ttft": "latency", "itl": "latency", "tpot": "latency", "e2e": "latency",
                           "error_rate": "ratio", "output_tok_s": "rate", "total_tok_s": "rate",
                           "request_s": "rate", "goodput_s": "rate"} | {
        m.name: catalog.threshold_kind(m) for m in METRICS if m.slo}
    assert set(SLO_METRICS) == {m.name for m in METRICS if m.slo}


def test_the_result_schema_requires_the_required_metrics_and_names_every_optional_latency():
    props = _point_schema()
    latency = props["latency"]
    assert set(latency["required"]) == {m.key for m in METRICS if m.latency and m.required}
    for m in METRICS:
        if m.latency and not m.required:
            assert m.key in latency["description"], f"the schema's latency block does not name {m.key}"
    throughput = props["throughput"]
    declared = {m.key for m in METRICS if m.path[0] == "throughput"}
    assert set(throughput["required"]) == {m.key for m in declared_required("throughput")}
    assert set(throughput["properties"]) <= declared
    for name in ("inputs_s", "input_tok_s"):
        assert name in throughput["properties"]


def declared_required(block: str) -> list:
    return [m for m in METRICS if m.path[0] == block and m.required]


def test_compare_and_its_gates_carry_the_metrics_declared_compared():
    from benchc.results.compare import COMPARED

    declared = [k for m in METRICS for k in m.keys(m.compared)]
    assert sorted(COMPARED) == sorted(declared)
    for key in COMPARED:  # each a statistic of a declared metric
        name = key.split(".", 1)[0]
        assert metric(name).compared


def test_the_repeats_summary_carries_the_metrics_declared_for_it():
    from benchc.results.repeats import METRICS as REPEATED

    assert sorted(REPEATED) == sorted(k for m in METRICS for k in m.keys(m.repeats))
    assert REPEATED[:5] == ("output_tok_s", "total_tok_s", "request_s", "goodput_s", "error_rate")


def test_the_csv_export_and_the_dataframe_carry_each_declared_column():
    from benchc.results.table import CSV_COLUMNS

    declared = [m.column(s) for m in METRICS for s in m.csv]
    assert set(declared) <= set(CSV_COLUMNS)
    assert len(CSV_COLUMNS) == len(set(CSV_COLUMNS))
    # every metric-looking column is a declared one (none kept by the table alone)
    for column in CSV_COLUMNS:
        if column.endswith(("_ms", "_s", "_rate")) and column != "session_duration_p50_ms":
            assert column in declared, f"CSV column {column} is not a declared metric's"
    assert CSV_COLUMNS[7:20] == ["error_rate", "output_tok_s", "total_tok_s", "request_s", "goodput_s",
                                 "steady_output_tok_s", "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms",
                                 "ttft_p99_ms", "itl_mean_ms", "itl_p50_ms", "itl_p99_ms"]


def test_the_llmd_and_vllm_exports_carry_the_declared_mappings():
    from benchc.results import br, vllm

    assert br._LATENCIES == {m.name: m.br for m in METRICS if m.br}
    assert list(br._LATENCIES) == ["ttft", "tpot", "itl", "e2e"]  # the report's field order
    assert vllm._METRICS == {m.vllm: m.name for m in METRICS if m.vllm}
    assert list(vllm._METRICS) == ["ttft", "tpot", "itl", "e2el"]
    for m in METRICS:
        assert m.br is None or m.latency, f"{m.name}: only latencies map onto a report's latency field"


def test_the_console_html_charts_and_per_request_slo_read_the_declarations():
    from benchc.metrics.recorder import REQUEST_METRICS
    from benchc.results.html_report import LATENCIES as CHARTED
    from benchc.results.html_report import _titles
    from benchc.run.console import COLUMNS, HEADER

    assert [(m.name, stat) for m, stat, _, _ in COLUMNS] == [
        (m.name, s) for latency in (False, True) for m in METRICS if m.latency == latency for s in m.console]
    assert HEADER.split()[:4] == ["point", "reqs", "out", "tok/s"]
    assert set(CHARTED) == {m.name for m in METRICS if m.chart}
    assert all(metric(n).latency for n in CHARTED)  # the page charts latencies against throughput
    assert _titles() == "{" + ",".join(f'"{n}":"{metric(n).title}"' for n in CHARTED) + "}"
    assert set(REQUEST_METRICS) == {m.name for m in METRICS if m.slo and m.latency}


def test_a_declared_scalar_is_read_where_its_declaration_says():
    from benchc.results.document import metric_value

    point = {"throughput": {"output_tok_s": 12.5}, "error_rate": 0.25, "latency": {"ttft_us": {"p99": 7}}}
    assert metric_value(point, "output_tok_s") == 12.5
    assert metric_value(point, "error_rate") == 0.25
    assert metric_value(point, "ttft.p99") == 7
    assert metric_value(point, "request_s") is None


def test_the_spec_schema_lets_slo_name_exactly_the_metrics_declared_for_slo():
    enum = load_schema("spec-v1")["$defs"]["slo"]["propertyNames"]["enum"]
    assert enum == [m.name for m in METRICS if m.slo]


def test_a_points_latency_blocks_are_the_declared_latencies_in_their_order():
    from benchc.metrics.aggregate import ALWAYS, LATENCIES, Tally, latency_block

    assert LATENCIES == ("ttft_us", "itl_us", "tpot_us", "e2e_us", "itl_per_token_us",
                         "ttft_from_schedule_us", "e2e_from_schedule_us", "ttf_reasoning_us", "ttf_answer_us",
                         "itl_answer_us", "ttf_tool_call_us")
    assert LATENCIES == tuple(m.key for m in METRICS if m.latency)
    assert list(latency_block(Tally())) == list(ALWAYS) == ["ttft_us", "itl_us", "tpot_us", "e2e_us"]


def test_a_search_charts_every_declared_latency_in_milliseconds():
    from benchc.results.report import search_metric

    for m in METRICS:
        if m.slo:
            scale, axis = search_metric(f"{m.name}: p99 < 2s" if m.latency else f"{m.name}: > 1")
            assert (scale, axis) == ((1000.0, f"{m.name} (ms)") if m.latency else (1.0, m.name))


def metrics_table() -> str:
    """docs/metrics.md's table of the declarations (regenerate it from here after a change)."""
    def stats(values: tuple) -> str:
        return ", ".join("value" if s is None else s for s in values) or "-"

    rows = ["| metric | unit | kind | where a point holds it | console | CSV | llm-d BR | vLLM | slo "
            "| compare |", "|---|---|---|---|---|---|---|---|---|---|"]
    for m in METRICS:
        console = stats(m.console) if m.console else "-"
        if m.console_detail:
            console = f"line: {stats(m.console_detail)}"
        rows.append(f"| `{m.name}` | {m.unit} | {m.kind} | `{'.'.join(m.path)}` | {console} | {stats(m.csv)} "
                    f"| {m.br[0] if m.br else '-'} | {m.vllm or '-'} | {'yes' if m.slo else '-'} "
                    f"| {stats(m.compared)} |")
    return "\n".join(rows) + "\n"


def test_the_metrics_page_lists_every_declaration():
    from tests.conftest import REPO

    with open(f"{REPO}/docs/metrics.md") as f:
        assert metrics_table() in f.read(), "docs/metrics.md's table differs: paste metrics_table()'s"


def test_every_per_request_slo_metric_has_its_value_taken_per_request():
    from benchc.metrics.recorder import _VALUE_AT, REQUEST_METRICS

    assert set(_VALUE_AT) == set(REQUEST_METRICS)
    assert sorted(_VALUE_AT.values()) == list(range(len(_VALUE_AT)))
