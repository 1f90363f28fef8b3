"""Command line: `benchc VERB ...`. One small function per verb; imports are lazy
so that `benchc --help` stays fast. Data goes to stdout, diagnostics to stderr.
Exit codes: see benchc/errors.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Sequence

from benchc import __version__
from benchc.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, BenchcError, UsageError


def _version_line() -> str:
    from benchc._core import core_name

    return f"benchc {__version__} (core: {core_name()})"


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a spec value before validation, e.g. --set load.requests=50 "
                        "(YAML value; repeatable; list items as a.b[2])")


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

    sc = sub.add_parser("schema", help="print a JSON schema benchc uses")
    sc.add_argument("which", choices=["spec", "result"])

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

    cp = sub.add_parser("compare", help="compare results (base first); --fail-on gates for CI")
    cp.add_argument("results", nargs="+", metavar="RESULT")
    cp.add_argument("--fail-on", action="append", default=[], metavar="GATE",
                    help="e.g. 'output_tok_s < -5%%', 'ttft.p99 > +10%%', 'error_rate > 1%%' (repeatable)")
    cp.add_argument("--format", choices=["text", "json", "markdown"], default="text")

    mg = sub.add_parser("merge", help="merge shards of one plan into one result, exactly")
    mg.add_argument("results", nargs="+", metavar="RESULT")
    mg.add_argument("-o", "--out", required=True)
    mg.add_argument("--force", action="store_true", help="overwrite --out if it exists")

    ex = sub.add_parser("export", help="a result as CSV, per-request JSONL, or Benchmark Report v0.2")
    ex.add_argument("result", metavar="RESULT")
    ex.add_argument("--format", choices=["csv", "jsonl", "br0.2"], default="csv")
    ex.add_argument("-o", "--out", help="write here instead of stdout")

    rp = sub.add_parser("report", help="plots (PNG) and a self-contained HTML page of results")
    rp.add_argument("results", nargs="+", metavar="RESULT")
    rp.add_argument("--png", metavar="DIR", help="write the plots here as PNG files")
    rp.add_argument("--html", metavar="FILE", help="write one self-contained HTML page")

    tk = sub.add_parser("tokens", help="count (or list) the tokens of files with a model's tokenizer")
    tk.add_argument("files", nargs="+", metavar="FILE")
    tk.add_argument("--tokenizer", required=True,
                    help="a tokenizer.json, a model directory holding one, or a tiktoken rank file "
                    "(cl100k_base.tiktoken, or ENCODING:PATH)")
    tk.add_argument("--ids", action="store_true", help="print the token ids too")

    r = sub.add_parser("run", help="run a spec and write its result document")
    r.add_argument("spec", metavar="SPEC")
    _add_set(r)
    r.add_argument("--base-url", help="benchmark this server instead of the spec's target")
    r.add_argument("--out", help="result path (default: the spec's output.path)")
    r.add_argument("--quiet", action="store_true", help="no progress, no table")
    r.add_argument("--json", action="store_true", help="print the result document to stdout")
    r.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    r.add_argument("--backend", choices=["local", "ray"],
                   help="ray: split each point across Ray workers (pip install 'benchc[ray]'); "
                        "default: the spec's run.backend, else local")
    r.add_argument("--ray-address", help="Ray cluster to join: auto, ray://host:10001, or host:6379")
    r.add_argument("--workers", type=int, help="Ray workers (default: the spec's, else one per CPU)")
    r.add_argument("--http", choices=["native", "aiohttp"], default="native",
                   help="HTTP client of the measured requests: benchc's own HTTP/1.1 reader "
                        "(default; one C call per socket read) or aiohttp")
    r.add_argument("--rx-loop", choices=["auto", "off"], default="auto",
                   help="own reader: read plain-http streams on the receive loop in C, a thread of "
                        "its own (auto: on Linux with the compiled core) or on the event loop (off)")
    r.add_argument("--strict", action="store_true",
                   help="exit 6 when a point was client-limited or output lengths were not as asked")
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
        report.append({"spec": path, "valid": True, "plan_hash": plan.plan_hash, "load_points": n_points})
        if args.format == "text":
            print(f"{path}: valid ({n_points} load points, plan_hash {plan.plan_hash[:12]})")
    if args.format == "json":
        print(json.dumps(report, indent=2))
    return worst


def cmd_plan(args: argparse.Namespace) -> int:
    from benchc.plan.compiler import compile_spec
    from benchc.spec import loader as spec_mod

    plan = compile_spec(spec_mod.load(args.spec, args.overrides))
    sys.stdout.write(plan.to_json(redact=True))
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    from benchc.spec.loader import load_schema

    print(json.dumps(load_schema({"spec": "spec-v1", "result": "result-v1"}[args.which]), indent=2))
    return EXIT_OK


def cmd_sim(args: argparse.Namespace) -> int:
    import asyncio

    import yaml

    from benchc.sim.model import make_config
    from benchc.sim.server import serve_forever

    params: dict = json.loads(args.config_json) if args.config_json else {}
    preset = params.pop("preset", args.preset)
    for item in args.param:
        name, _, value = item.partition("=")
        params[name] = yaml.safe_load(value)
    if args.host:
        params["host"] = args.host
    if args.model:
        params["model"] = args.model
    if args.fault:
        params["faults"] = list(params.get("faults", [])) + args.fault
    try:
        cfg = make_config(preset, **params)
        from benchc.sim.faults import parse_faults

        parse_faults(cfg.faults)
    except (ValueError, TypeError) as e:
        raise UsageError(f"sim: {e}") from e
    asyncio.run(serve_forever(cfg, args.port, args.trace))
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from benchc.results.compare import raise_on_breaches, run_compare

    text, breaches = run_compare(args.results, args.fail_on, args.format)
    sys.stdout.write(text)
    raise_on_breaches(breaches)
    return EXIT_OK


def cmd_merge(args: argparse.Namespace) -> int:
    from benchc.results.document import read, validate_document, write_atomic
    from benchc.results.merge import merge_docs

    doc = merge_docs([read(p) for p in args.results], args.results)
    validate_document(doc)
    write_atomic(args.out, json.dumps(doc, indent=1) + "\n", overwrite=args.force)
    print(args.out)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from benchc.results.document import read, write_atomic
    from benchc.results.export import BR02_LEFT_OUT, export

    text = export(read(args.result), args.format, args.result)
    if args.format == "br0.2":
        print("benchc: Benchmark Report v0.2: left out (not measured by benchc): "
              + "; ".join(BR02_LEFT_OUT), file=sys.stderr)
    if args.out:
        write_atomic(args.out, text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from benchc.results.document import read
    from benchc.results.report import write_report

    for path in write_report([read(p) for p in args.results], args.png, args.html):
        print(path)
    return EXIT_OK


def cmd_tokens(args: argparse.Namespace) -> int:
    from benchc.tokenizer.tokenizer import load

    tok = load(args.tokenizer)
    for path in args.files:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise UsageError(f"cannot read {path}: {e.strerror}") from e
        ids = tok.encode(text)
        print(f"{path}\t{len(ids)}" + ("\t" + " ".join(map(str, ids)) if args.ids else ""))
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from benchc.plan.compiler import compile_spec
    from benchc.run.runner import RunOptions, execute
    from benchc.spec import loader as spec_mod

    spec = spec_mod.load(args.spec, args.overrides)
    plan = compile_spec(spec)
    opts = RunOptions(base_url=args.base_url, out=args.out, force=args.force,
                      quiet=args.quiet or args.json, strict=args.strict,
                      backend=args.backend or plan.run.get("backend", "local"),
                      ray_address=args.ray_address or plan.run.get("ray_address"),
                      workers=args.workers or plan.run.get("workers", 0), http=args.http,
                      rx_loop=args.rx_loop)
    doc, path = execute(plan, spec.data, opts)
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(path)
    return EXIT_OK


VERBS = {"validate": cmd_validate, "plan": cmd_plan, "schema": cmd_schema, "sim": cmd_sim,
         "run": cmd_run, "compare": cmd_compare, "merge": cmd_merge, "export": cmd_export,
         "report": cmd_report, "tokens": cmd_tokens}
