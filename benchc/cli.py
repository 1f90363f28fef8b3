"""Command line: `benchc VERB ...`. One small function per verb; imports are lazy
so that `benchc --help` stays fast. Data goes to stdout, diagnostics to stderr.
Exit codes: see benchc/errors.py.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import sys
import traceback
from collections.abc import Iterator, Sequence

from benchc import __version__
from benchc.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, BenchcError, UsageError
from benchc.inputs import TEXT_BYTES, input_problem, read_utf8  # light: os and stat only


def _version_line() -> str:
    from benchc._core import core_name

    return f"benchc {__version__} (core: {core_name()})"


RUN_VERBOSE = ("log to stderr what the run does: -v points, readiness, workers; "
               "-vv also every connection, retry and poll")
SIM_VERBOSE = ("log to stderr what the simulator does: -v when it starts accepting connections; "
               "-vv also every request it finishes (why, and how many tokens)")


def _add_verbose(p: argparse.ArgumentParser, text: str = RUN_VERBOSE) -> None:
    p.add_argument("-v", "--verbose", action="count", default=0, help=text)


def _gpu_hour(text: str) -> float:
    try:
        price = float(text)
    except ValueError:
        price = float("nan")
    if not (price > 0 and price < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a price (a number above 0, e.g. 2.49)")
    return price


def _add_gpu_hour(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu-hour", type=_gpu_hour, metavar="PRICE",
                   help="the price of one GPU for an hour: cost per million output tokens per point "
                        "(overrides the spec's cost.gpu_hour; docs/decide.md)")


@contextlib.contextmanager
def _logging(verbosity: int) -> Iterator[None]:
    """benchc's log lines to stderr while a verb runs (none without -v); secrets are never
    logged (URLs and commands go through benchc.redact)."""
    if not verbosity:
        yield
        return
    logger = logging.getLogger("benchc")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(name)s: %(message)s", "%H:%M:%S"))
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbosity == 1 else logging.DEBUG)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a spec value before validation, e.g. --set load.requests=50 "
                        "(YAML value; repeatable; list items as a.b[2])")


def _add_target(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", help="benchmark this server instead of the spec's target (a simulator "
                   "the spec names is not started: the result names this server)")


def _add_vllm_flags(p: argparse.ArgumentParser) -> None:
    """vLLM bench serve's flags, as documented aliases of --set (docs/running.md)."""
    p.add_argument("--model", help="the model the requests name: --set target.model=MODEL")
    p.add_argument("--num-prompts", type=int, metavar="N", help="requests per point: --set load.requests=N")
    p.add_argument("--request-rate", type=float, metavar="RPS",
                   help="one open-loop point at RPS requests/s instead of the spec's sweep: --set "
                        "load.sweep={rate: [RPS]} (inf: all at once, as vLLM means it)")
    p.add_argument("--max-concurrency", type=int, metavar="C",
                   help="with --request-rate its cap (load.sweep.max_concurrency); alone, one closed-loop "
                        "point of C in flight instead of the spec's sweep: "
                        "--set load.sweep={concurrency: [C]}")


def vllm_overrides(args: argparse.Namespace) -> list[str]:
    """The --set items that --model, --num-prompts, --request-rate and --max-concurrency stand for;
    they come before the command line's own --set, which therefore wins."""
    out = []
    if args.model is not None:
        out.append(f"target.model={json.dumps(args.model)}")
    if args.num_prompts is not None:
        out.append(f"load.requests={args.num_prompts}")
    rate = args.request_rate
    if rate is not None and rate != float("inf"):
        cap = f", max_concurrency: {args.max_concurrency}" if args.max_concurrency is not None else ""
        out.append(f"load.sweep={{rate: [{rate!r}]{cap}}}")
    elif args.max_concurrency is not None:
        # vLLM's default rate is inf: every request at once, C at most in flight: a closed loop
        out.append(f"load.sweep={{concurrency: [{args.max_concurrency}]}}")
    return out


def _aimed(plan, base_url: str | None):
    """The plan against --base-url when one is given (run and plan alike)."""
    return plan if base_url is None else plan.aimed_at(base_url)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchc", description="Declarative benchmarks for "
                                "OpenAI-compatible LLM servers.")
    p.add_argument("--version", action="store_true", help="print the version and the core in use")
    sub = p.add_subparsers(dest="verb", metavar="VERB")

    v = sub.add_parser("validate", help="check specs; print every problem as file:line:col")
    v.add_argument("specs", nargs="+", metavar="SPEC")
    v.add_argument("--format", choices=["text", "json"], default="text")
    _add_set(v)

    pl = sub.add_parser("plan", help="print the compiled plan as JSON (runs nothing)")
    pl.add_argument("spec", metavar="SPEC")
    _add_set(pl)
    _add_target(pl)
    _add_vllm_flags(pl)

    sc = sub.add_parser("schema", help="print a JSON schema benchc uses")
    sc.add_argument("which", choices=["spec", "result"])
    sc.add_argument("--version", type=int, metavar="N", dest="schema_version",
                    help="an older version of the format (default: the one this benchc writes)")

    sm = sub.add_parser("sim", help="run the simulated LLM server until SIGINT/SIGTERM")
    sm.add_argument("--preset", default="minimax-m2.5-tp4",
                    help="minimax-m2.5-tp4 (default), kimi-k2.5-nvfp4-tp8 or instant")
    sm.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed on stdout)")
    sm.add_argument("--host", help="address to bind (default 127.0.0.1)")
    sm.add_argument("--model", help="the model name it serves (default: the preset's)")
    sm.add_argument("--trace", metavar="FILE", help="append a JSON line per finished request")
    sm.add_argument("--fault", action="append", default=[], metavar="KIND:RATE[:ARG]",
                    help="inject faults, e.g. http_503:0.1, reset:0.05, stall:0.1:500ms")
    sm.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="override a preset parameter (YAML value), e.g. max_num_seqs=64")
    sm.add_argument("--config-json", help=argparse.SUPPRESS)  # used by `run` for target.sim
    _add_verbose(sm, SIM_VERBOSE)

    cp = sub.add_parser("compare", help="compare results (base first); --fail-on gates for CI")
    cp.add_argument("results", nargs="+", metavar="RESULT")
    cp.add_argument("--fail-on", action="append", default=[], metavar="GATE",
                    help="e.g. 'output_tok_s < -5%%', 'ttft.p99 > +10%%', 'error_rate > 1%%' (repeatable)")
    cp.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    cp.add_argument("--noise-floor", default="2%", metavar="PCT",
                    help="repeated runs: a smaller change is never called beyond noise (default 2%%)")
    cp.add_argument("--allow-unjudged", action="store_true",
                    help="a gate the figures cannot judge (too few samples) is a note, not a failure")
    _add_gpu_hour(cp)

    mg = sub.add_parser("merge", help="merge shards of one plan into one result, exactly")
    mg.add_argument("results", nargs="+", metavar="RESULT")
    mg.add_argument("--repeats", action="store_true",
                    help="the results are complete runs of the plan, one after another: keep each "
                         "as a repeat of every point (without it, only shards that ran side by side merge)")
    mg.add_argument("-o", "--out", required=True)
    mg.add_argument("--force", action="store_true", help="overwrite --out if it exists")

    ft = sub.add_parser("fit", help="fit the simulator to results of one server: a twin preset")
    ft.add_argument("results", nargs="+", metavar="RESULT")
    ft.add_argument("-o", "--out", required=True, help="the twin file to write (YAML)")
    ft.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    ft.add_argument("--format", choices=["text", "json"], default="text",
                    help="the residuals per point as a table (default) or the twin as JSON")

    ex = sub.add_parser("export", help="a result as CSV, per-request JSONL, llm-d Benchmark Reports "
                        "(0.2, 0.2.1) or vLLM bench-serve JSON")
    ex.add_argument("result", metavar="RESULT")
    ex.add_argument("--format", choices=["csv", "csv-turns", "jsonl", "br0.2", "br0.2.1", "vllm"],
                    default="csv",
                    help="csv-turns: one row per point and turn of a sessions workload; br0.2, br0.2.1 and "
                         "vllm give one JSON document per point: one per line on stdout, or one file per "
                         "point with -o (OUT, or OUT-1, OUT-2, ... for several)")
    ex.add_argument("-o", "--out", help="write here instead of stdout")
    ex.add_argument("--force", action="store_true", help="overwrite --out if it exists")

    rp = sub.add_parser("report", help="plots (PNG) and a self-contained HTML page of results")
    rp.add_argument("results", nargs="+", metavar="RESULT")
    rp.add_argument("--png", metavar="DIR", help="write the plots here as PNG files")
    rp.add_argument("--html", metavar="FILE", help="write one self-contained HTML page")
    rp.add_argument("--force", action="store_true", help="overwrite the PNGs or the page if they exist")
    _add_gpu_hour(rp)

    tk = sub.add_parser("tokens", help="count (or list) the tokens of files with a model's tokenizer")
    tk.add_argument("files", nargs="+", metavar="FILE")
    tk.add_argument("--tokenizer", required=True,
                    help="a tokenizer.json, tekken.json, SentencePiece .model or .gguf file, a model "
                    "directory, or a tiktoken rank file (cl100k_base.tiktoken, or ENCODING:PATH)")
    tk.add_argument("--ids", action="store_true", help="print the token ids too")

    r = sub.add_parser("run", help="run a spec and write its result document")
    r.add_argument("spec", metavar="SPEC")
    _add_set(r)
    _add_target(r)
    _add_vllm_flags(r)
    r.add_argument("--out", help="result path (default: the spec's output.path)")
    r.add_argument("--quiet", action="store_true", help="no progress, no table")
    r.add_argument("--json", action="store_true", help="print the result document to stdout")
    r.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    r.add_argument("--backend", choices=["local", "ray"],
                   help="ray: split each point across Ray workers (pip install 'benchc[ray]'); "
                        "default: the spec's run.backend, else local")
    r.add_argument("--ray-address", help="Ray cluster to join: auto, ray://host:10001, or host:6379")
    r.add_argument("--workers", type=int, help="Ray workers (default: the spec's, else one per free CPU)")
    r.add_argument("--http", choices=["native", "aiohttp"], default="native",
                   help="HTTP client of the measured requests: benchc's own HTTP/1.1 reader "
                        "(default; one C call per socket read) or aiohttp")
    _add_gpu_hour(r)
    r.add_argument("--rx-loop", choices=["auto", "off"], default="auto",
                   help="own reader: read plain-http streams on the receive loop in C, a thread of "
                        "its own (auto: on Linux with the compiled core) or on the event loop (off)")
    r.add_argument("--send-priority", choices=["raise", "off"], default="raise",
                   help="an open loop's sends on the own reader: raise the event loop thread's CPU "
                        "priority during the point where the process is permitted (raise: SCHED_RR 1, "
                        "else nice -10; docs/loadgen.md) or leave it as it is (off)")
    r.add_argument("--strict", action="store_true",
                   help="exit 6 when a point was client-limited, output lengths were not as asked, the "
                        "server served more from its prefix cache than the spec shares, or a "
                        "server.reset_cache reset was not done")
    _add_verbose(r)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run benchc with `argv` (default: sys.argv[1:]); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(_version_line())
        return EXIT_OK
    if not args.verb:
        parser.print_help()
        return EXIT_OK
    try:
        with _logging(getattr(args, "verbose", 0)):
            return VERBS[args.verb](args)
    except BenchcError as e:
        print(f"benchc: {e}" if not hasattr(e, "problems") else str(e), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("benchc: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception:  # noqa: BLE001 - a bug: say so, with the traceback, and exit 4
        traceback.print_exc()
        print(f"benchc: internal error in {_version_line()}; please report it", file=sys.stderr)
        return EXIT_INTERNAL


def main_entry() -> None:
    sys.exit(main())


# --------------------------------------------------------------------------- verbs


def cmd_validate(args: argparse.Namespace) -> int:
    from benchc.errors import SpecError
    from benchc.plan.compiler import compile_spec
    from benchc.spec import loader as spec_mod

    worst = EXIT_OK
    report = []
    for path in args.specs:
        try:
            plan = compile_spec(spec_mod.load(path, args.overrides))
        except SpecError as e:
            worst = max(worst, e.exit_code)
            report.append({"spec": path, "valid": False, "errors": [str(p) for p in e.problems]})
            if args.format == "text":
                print(str(e), file=sys.stderr)
            continue
        except BenchcError as e:
            worst = max(worst, e.exit_code)
            report.append({"spec": path, "valid": False, "errors": [f"{path}: {e}"]})
            if args.format == "text":
                print(f"{path}: {e}", file=sys.stderr)
            continue
        n_points = len(plan.load_steps())
        report.append({"spec": path, "valid": True, "plan_hash": plan.plan_hash, "load_points": n_points,
                       "budget": plan.budget})
        if args.format == "text":
            searches = plan.budget.get("searches")
            what = (f"{searches} capacity search(es), up to {plan.budget['probes_max']} probes" if searches
                    else f"{n_points} load points")
            print(f"{path}: valid ({what}, plan_hash {plan.plan_hash[:12]})")
    if args.format == "json":
        print(json.dumps(report, indent=2))
    return worst


def cmd_plan(args: argparse.Namespace) -> int:
    from benchc.plan.compiler import compile_spec
    from benchc.spec import loader as spec_mod

    if args.base_url is not None:
        _check_base_url(args.base_url)
    spec = spec_mod.load(args.spec, vllm_overrides(args) + args.overrides)
    plan = _aimed(compile_spec(spec), args.base_url)
    if args.base_url is not None:
        _check_url_credentials(args.base_url, plan)
    sys.stdout.write(plan.to_json(redact=True))
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    from benchc.results.document import schema_text, schema_versions

    versions = schema_versions(args.which)
    version = max(versions) if args.schema_version is None else args.schema_version
    if version not in versions:
        raise UsageError(f"there is no {args.which} schema version {version}; this benchc has "
                         f"{', '.join(map(str, versions))}")
    sys.stdout.write(schema_text(args.which, version))
    return EXIT_OK


def cmd_sim(args: argparse.Namespace) -> int:
    import asyncio

    import yaml

    from benchc.sim.model import PARAMS, make_config
    from benchc.sim.server import serve_forever
    from benchc.sim.twin import is_twin_path, twin_config
    from benchc.spec import yaml_bounds
    from benchc.spec.values import sim_param_problems

    params: dict = json.loads(args.config_json) if args.config_json else {}
    preset = params.pop("preset", args.preset)
    for item in args.param:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise UsageError(f"sim: --param {item!r}: expected NAME=VALUE, e.g. max_num_seqs=64")
        try:
            params[name] = yaml_bounds.load_value(value)
        except (yaml.YAMLError, yaml_bounds.YamlLimitError) as e:
            raise UsageError(f"sim: --param {name}: the value is not a YAML value benchc reads ({e})") from e
    problems = sim_param_problems(params, PARAMS)
    if problems:
        raise UsageError("sim: " + "\n  ".join(["invalid simulator parameters:"] + problems))
    if args.host:
        params["host"] = args.host
    if args.model:
        params["model"] = args.model
    if args.fault:
        params["faults"] = list(params.get("faults", [])) + args.fault
    try:
        if is_twin_path(preset):
            cfg = twin_config(preset, **params)
        else:
            cfg = make_config(preset, **params)
        from benchc.sim.faults import parse_faults

        parse_faults(cfg.faults)
    except (ValueError, TypeError) as e:
        raise UsageError(f"sim: {e}") from e
    if not 0 <= args.port <= 65535:
        raise UsageError(f"sim: --port {args.port} is not a port (0 to 65535; 0 picks a free one)")
    try:
        asyncio.run(serve_forever(cfg, args.port, args.trace))
    except OSError as e:
        # the listening socket or the trace file: both are the user's to fix
        what = f"cannot open {e.filename}" if e.filename else f"cannot listen on {cfg.host}:{args.port}"
        raise UsageError(f"sim: {what}: {e.strerror or e}") from e
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from benchc.results.compare import parse_floor, raise_on_breaches, run_compare

    text, breaches = run_compare(args.results, args.fail_on, args.format, parse_floor(args.noise_floor),
                                 args.gpu_hour, args.allow_unjudged)
    sys.stdout.write(text)
    raise_on_breaches(breaches)
    return EXIT_OK


def cmd_merge(args: argparse.Namespace) -> int:
    from benchc.results.document import read, validate_document, write_atomic
    from benchc.results.merge import merge_docs

    doc = merge_docs([read(p) for p in args.results], args.results, repeats=args.repeats)
    validate_document(doc)
    write_atomic(args.out, json.dumps(doc, indent=1) + "\n", overwrite=args.force)
    print(args.out)
    return EXIT_OK


def cmd_fit(args: argparse.Namespace) -> int:
    from benchc.results.document import check_target, read, write_atomic
    from benchc.sim.fit import FitRefused, fit, residual_table
    from benchc.sim.twin import dump_twin

    check_target(args.out, args.force)
    docs = [(p, read(p)) for p in args.results]
    try:
        twin = fit(docs)
    except FitRefused as e:
        raise UsageError(f"fit: {e}") from e
    write_atomic(args.out, dump_twin(twin), overwrite=args.force)
    if args.format == "json":
        sys.stdout.write(json.dumps(twin, indent=1) + "\n")
    else:
        sys.stdout.write(residual_table(twin))
        for line in twin["notes"] + [f"not observed: {x}" for x in twin["not_observed"]]:
            print(f"benchc: fit: {line}", file=sys.stderr)
        for line in twin["warnings"]:
            print(f"benchc: fit: warning: {line}", file=sys.stderr)
        print(f"benchc: fit: wrote {args.out}; run any spec against it with "
              f"target.sim: {{preset: {args.out}}}", file=sys.stderr)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    import os

    from benchc.results import br
    from benchc.results.document import read, write_atomic
    from benchc.results.export import (
        PER_POINT_FORMATS,
        dropped_doubts,
        export_points,
        export_whole,
        point_paths,
    )

    doc = read(args.result)
    if args.format not in PER_POINT_FORMATS:
        texts = [export_whole(doc, args.format, args.result)]
        paths = [args.out] if args.out else []
    else:
        texts = [json.dumps(d, indent=None if not args.out else 1) + "\n"
                 for d in export_points(doc, args.format, args.result)]
        paths = point_paths(args.out, len(texts)) if args.out else []
        if args.format.startswith("br"):
            print(f"benchc: Benchmark Report {args.format[2:]}: left out (not in a benchc result): "
                  + "; ".join(br.left_out(args.format[2:])), file=sys.stderr)
        what = f"Benchmark Report {args.format[2:]}" if args.format.startswith("br") else "vLLM JSON"
        for line in dropped_doubts(doc):
            print(f"benchc: warning: {what} has no field for benchc's doubts, left out: {line}",
                  file=sys.stderr)
    if not args.out:
        sys.stdout.write("".join(texts))
        return EXIT_OK
    taken = [p for p in paths if os.path.exists(p)]
    if taken and not args.force:
        # checked for every file before any is written, so a refusal leaves nothing half done
        raise UsageError(f"{', '.join(taken)} exist{'s' if len(taken) == 1 else ''}; choose another -o "
                         "or pass --force")
    for path, text in zip(paths, texts, strict=True):
        write_atomic(path, text, overwrite=args.force)
        if args.format in PER_POINT_FORMATS:
            print(path)
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from benchc.results.api import read_document as read
    from benchc.results.compare import decide_section, render_decide
    from benchc.results.report_files import write_report

    docs = [read(p) for p in args.results]
    for path in write_report(docs, args.png, args.html, args.force, args.results, args.gpu_hour):
        print(path)
    # the decision at the end (docs/decide.md), as compare and run print it
    section = decide_section(docs, args.results, gpu_hour=args.gpu_hour)
    if section["decision"]:
        sys.stderr.write(render_decide({**section, "side_by_side": []}, "text"))
    return EXIT_OK


def cmd_tokens(args: argparse.Namespace) -> int:
    from benchc.tokenizer.tokenizer import load

    for path in args.files:  # a bad input is told before seconds spent loading a vocabulary
        if why := input_problem(path, TEXT_BYTES, "text file"):
            raise UsageError(why)
    try:
        tok = load(args.tokenizer)
    except BenchcError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever a loader trips on in a user's file is the file's fault
        detail = (e.strerror or str(e) if isinstance(e, OSError) else
                  f"a field it needs is missing ({e})" if isinstance(e, KeyError) else
                  f"{type(e).__name__}: {e}")
        raise UsageError(f"cannot load the tokenizer {args.tokenizer}: {detail}") from e
    print(f"tokenizer: {tok.kind} ({args.tokenizer}); pre-tokenization: {tok.pretokenizer}", file=sys.stderr)
    for path in args.files:
        text = read_utf8(path, TEXT_BYTES, "text file", UsageError,
                         lambda line, at, byte: f"{path}:{line}: byte 0x{byte:02x} is not UTF-8 "  # noqa: B023 - called at once
                                                "text; benchc counts the tokens of UTF-8 text")
        ids = tok.encode(text)
        print(f"{path}\t{len(ids)}" + ("\t" + " ".join(map(str, ids)) if args.ids else ""))
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from benchc import redact
    from benchc.plan.compiler import compile_spec, draw_seed
    from benchc.run.runner import RunOptions, execute
    from benchc.run.secrets import run_scrubber
    from benchc.spec import loader as spec_mod

    if args.base_url is not None:
        _check_base_url(args.base_url)
    spec = spec_mod.load(args.spec, vllm_overrides(args) + args.overrides)
    # fresh prompts per run unless the spec pins a seed
    plan = _aimed(compile_spec(spec, run_seed=draw_seed()), args.base_url)
    if args.base_url is not None:
        _check_url_credentials(args.base_url, plan)
    if args.gpu_hour is not None:
        plan = dataclasses.replace(plan, cost={"gpu_hour": args.gpu_hour,
                                               "currency": (plan.cost or {}).get("currency", "USD")})
    opts = RunOptions(base_url=args.base_url, out=args.out, force=args.force,
                      quiet=args.quiet or args.json, strict=args.strict,
                      backend=args.backend or plan.run.get("backend", "local"),
                      ray_address=args.ray_address or plan.run.get("ray_address"),
                      workers=args.workers or plan.run.get("workers", 0), http=args.http,
                      rx_loop=args.rx_loop, send_priority=args.send_priority == "raise")
    # Every secret value of the run is replaced in what the run writes (results, per-request
    # records: results.document.write_atomic), prints, and says when it fails.
    scrub = run_scrubber(plan, args.base_url)
    with redact.scrubbing(scrub):
        try:
            doc, path = execute(plan, spec.data, opts)
        except BenchcError as e:
            e.args = (scrub.text(str(e)),)
            raise
    text = scrub.json(json.dumps(doc, indent=1)) + "\n" if args.json else path + "\n"
    failed = _print_result(text)
    if failed is not None:
        # the result is on disk; stdout failing (a full device, a closed pipe) loses nothing
        print(f"benchc: warning: could not print the result to stdout ({failed}); it is on disk at {path}",
              file=sys.stderr)
    return EXIT_OK


def _print_result(text: str) -> str | None:
    """Write `text` to stdout; None, or why it could not be written. After a failure the
    descriptor under stdout is pointed at the null device, so that the interpreter's last
    flush of what is still buffered does not fail again (and turn the exit status into 120)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
        return None
    except OSError as e:
        with contextlib.suppress(OSError, AttributeError, ValueError):  # a stdout without a descriptor
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        return e.strerror or str(e)


def _check_base_url(url: str) -> None:
    from benchc.spec.values import base_url_problem

    problem = base_url_problem(url)
    if problem:
        raise UsageError(f"--base-url: {problem}")


def _check_url_credentials(url: str, plan) -> None:
    """user:password in --base-url and the spec's api_key (or Authorization header) would both
    set the request's credentials: refused, as in a spec."""
    from urllib.parse import urlsplit

    if urlsplit(url).username is None:
        return
    for c in plan.combinations:
        if c.target.api_key or any(k.lower() == "authorization" for k in c.target.headers):
            raise UsageError("--base-url holds user:password and the spec gives target.api_key or an "
                             "Authorization header: both set the credentials; keep one")


VERBS = {"validate": cmd_validate, "plan": cmd_plan, "schema": cmd_schema, "sim": cmd_sim,
         "run": cmd_run, "compare": cmd_compare, "merge": cmd_merge, "fit": cmd_fit, "export": cmd_export,
         "report": cmd_report, "tokens": cmd_tokens}
