"""``co-design predict CONFIG``: predicted serving performance of a model on a GPU deployment.

``co-design anchor CONFIG --concurrency N [N ...] --tpot-ms MS [MS ...] --out FILE``: the runtime's overheads
scaled to TPOTs measured on your own runtime (:mod:`co_design.perf.anchor`), for ``--runtime FILE``.

``co-design advise CONFIG``: the same prediction, every misaligned dimension with its cost, and
the shapes within ± ``--budget-pct`` of its parameters that serve more tokens/s per GPU *and*
per user (:mod:`co_design.advise`). ``co-design export CONFIG --out DIR`` (or ``--study-dir
RUN --trial N``): config.json, quantization recipes and TensorRT-LLM serving options for one
shape (:mod:`co_design.export`).

CONFIG is a Hugging Face ``config.json`` or a project model YAML. Parallel flags
follow TensorRT-LLM: ``--tp`` ranks per replica, ``--ep`` expert-parallel ranks
among them, ``--attention-dp`` runs attention data-parallel across the tp ranks,
``--helix`` splits decode attention's KV cache along the sequence. ``--concurrency``
counts requests in flight for the whole deployment (as trtllm-bench does);
without it (or with ``--max-throughput``) the model picks the batch with the
highest output tokens/s per GPU that fits.

Exit codes: 0 ok; 1 the output was closed early (e.g. piped into ``head``), quietly;
2 bad input (one line on stderr, no traceback); 3 the SLO cannot be met (the first
line of output says so and names the SLO flag; the nearest point follows, if any).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from co_design.perf.types import ARRIVALS
from co_design.precision import FP8_SCALINGS, PRECISIONS

__all__ = ["main", "build_parser"]

_EXIT_SLO = 3  # the SLO cannot be met by any operating point
_FP8_SCALING_HELP = ("FP8 activation scales: tensor (static per tensor, Model Optimizer FP8; default) or block "
                     "(per 128 values of a token at run time, as the FP8 checkpoints of DeepSeek-V3/R1, Qwen3 and "
                     "MiniMax-M2: a quantization kernel before each dense GEMM)")
_ARRIVALS_HELP = ("how requests arrive, for TTFT under load: steady (spread in time, production traffic; default), "
                  "burst (all --concurrency requests at once and in step, as a fixed-concurrency benchmark starts "
                  "them: each waits for the prompts ahead of it) or poisson (at random times, as MLPerf Server "
                  "sends them: each also waits, admitted at an iteration's end, for the prompts that arrived "
                  "before it and the later ones that share its last iteration, under --attention-dp on its "
                  "request's rank, the busiest rank pacing each iteration; the report adds the p99 TTFT, and a "
                  "p99 TPOT over requests, each decoding beside the prompts admitted while it does)")
_RUNTIME_HELP = ("runtime file (JSON of co_design.perf.Runtime fields, e.g. from `co-design anchor --out`): "
                 "overheads and rates of your serving runtime instead of the fitted defaults")
_MAX_GPUS = 2**20  # --pareto enumerates every tp dividing --gpus: bounded, a typo like 10**12 would hang it
# CLI flag, SLO field, factor from the flag's unit to the field's (ms -> s)
_SLO_FLAGS = (("--min-tokens-per-s-per-user", "min_tokens_per_s_per_user", 1.0),
              ("--max-ttft-ms", "max_ttft_s", 1e-3), ("--max-tpot-ms", "max_tpot_s", 1e-3),
              ("--max-ttft-p99-ms", "max_ttft_p99_s", 1e-3), ("--max-tpot-p99-ms", "max_tpot_p99_s", 1e-3))


def _version() -> str:
    """The installed distribution's version, else ``co_design.__version__``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("co-design")
    except PackageNotFoundError:
        import co_design

        return getattr(co_design, "__version__", "unknown")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="co-design", description="co-design: hardware-aware LLM architecture tools")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("predict", help="predict serving performance of a model on a GPU deployment",
                        description=__doc__.split("\n\n")[0])
    pr.add_argument("config", metavar="CONFIG", nargs="?", help="HF config.json or project model YAML")
    pr.add_argument("--hardware", default="b200", help="GPU name (default b200; see --list-hardware)")
    pr.add_argument("--gpus", type=int, default=None, help="GPUs in the deployment (default tp*pp)")
    pr.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks per replica (default 1)")
    pr.add_argument("--ep", type=int, default=1, help="expert-parallel ranks among the tp ranks (default 1)")
    pr.add_argument("--pp", type=int, default=1, help="pipeline stages (default 1)")
    pr.add_argument("--attention-dp", action="store_true",
                    help="attention data-parallel across the tp ranks (labelled DEP with --ep > 1, else ADP)")
    pr.add_argument("--helix", type=int, default=1, help="KV-parallel degree for decode attention (default 1)")
    pr.add_argument("--weights", choices=PRECISIONS, default="nvfp4",
                    help="weight format (default nvfp4; each GPU's native formats: --list-hardware --json)")
    pr.add_argument("--activations", choices=PRECISIONS, default=None,
                    help="activation format (default: the --weights format, W8A8 / W4A4)")
    pr.add_argument("--kv-cache", choices=PRECISIONS, default="fp8", help="KV-cache format (default fp8)")
    pr.add_argument("--fp8-scaling", choices=FP8_SCALINGS, default="tensor", help=_FP8_SCALING_HELP)
    pr.add_argument("--isl", type=int, default=1024, help="input tokens per request (default 1024)")
    pr.add_argument("--osl", type=int, default=1024, help="output tokens per request (default 1024)")
    pr.add_argument("--arrivals", choices=ARRIVALS, default="steady", help=_ARRIVALS_HELP)
    mode = pr.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", type=int, default=None, help="requests in flight, whole deployment")
    mode.add_argument("--max-throughput", action="store_true", help="pick the batch of highest tokens/s per GPU (default)")
    mode.add_argument("--pareto", action="store_true",
                      help="the throughput-vs-interactivity front over concurrency and the parallel layouts of --gpus")
    _slo_args(pr.add_argument_group("SLO (with --max-throughput or --pareto: keep only points that meet it)"))
    pr.add_argument("--runtime", metavar="FILE", default=None, help=_RUNTIME_HELP)
    pr.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    pr.add_argument("--no-advice", action="store_true", help="skip shape advice (faster)")
    pr.add_argument("--list-hardware", action="store_true",
                    help="list known GPUs with their key specs (with --json: in SI units) and exit")

    ad = sub.add_parser("advise", help="prediction, misalignments and dominating neighbour shapes of a model",
                        description="The model's predicted serving, its misaligned dimensions with their cost, and "
                                    "the shapes within --budget-pct of its parameters that serve more output tokens/s "
                                    "per GPU and per user at its load (an exact enumeration).")
    ad.add_argument("config", metavar="CONFIG", help="HF config.json or project model YAML")
    _deployment_args(ad)
    ad.add_argument("--budget-pct", type=float, default=10.0, help="parameter band, ± percent (default 10)")
    ad.add_argument("--align", type=int, default=128, help="step of hidden and FFN widths per GPU (default 128)")
    ad.add_argument("--top", type=int, default=10, help="neighbours shown in the table (default 10)")
    ad.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    ad.add_argument("--plot", metavar="FILE", default=None,
                    help="write the throughput-vs-interactivity plot (.html; .png needs kaleido)")
    ex = sub.add_parser("export", help="config.json, quantization recipes and serving options for one shape",
                        description="Write config.json (transformers), arch.yaml, ModelOpt and LLM Compressor "
                                    "recipes and the predicted best TensorRT-LLM serving options into --out.")
    ex.add_argument("config", metavar="CONFIG", nargs="?", help="HF config.json or project model YAML")
    ex.add_argument("--study-dir", default=None,
                    help="a search run directory (outputs/<name>); with --trial: that trial as the search served it "
                         "(its throughput point's GPU, parallelism, precision and batch; deployment flags unused)")
    ex.add_argument("--trial", type=int, default=None, help="trial number in --study-dir")
    ex.add_argument("--out", required=True, metavar="DIR", help="directory to write into")
    _deployment_args(ex)
    ex.add_argument("--json", action="store_true", help="print the written files and predicted figures as JSON")
    an = sub.add_parser("anchor", help="scale the runtime's overheads to a TPOT you measured; write a runtime file",
                        description="Scale the performance model's per-kernel, per-collective and host overheads "
                                    "(co_design.perf.anchor_runtime) by one factor so it predicts the TPOTs you "
                                    "measured for CONFIG on your runtime at each --concurrency (one, or a sweep "
                                    "fitted together), and write that runtime to "
                                    "--out for `co-design predict --runtime FILE` and the search's "
                                    "deployment.runtime_file. The GPU's rates are not changed.")
    an.add_argument("config", metavar="CONFIG", help="HF config.json or project model YAML of the model you measured")
    _deployment_args(an, concurrency_help="requests in flight when each TPOT was measured, whole deployment "
                                          "(e.g. 1, or a sweep: 1 4 16)")
    an.add_argument("--tpot-ms", type=float, nargs="+", required=True, metavar="MS",
                    help="measured mean time per output token at each --concurrency, ms, in the same order (e.g. a "
                         "benchmark's mean TPOT); several are fitted together (least squares of the log error)")
    an.add_argument("--out", metavar="FILE", default=None, help="write the anchored runtime to this JSON file")
    an.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    return p


def _deployment_args(sp: argparse.ArgumentParser, *, concurrency_help: str | None = None) -> None:
    """The deployment and SLO flags of ``advise``, ``export`` and ``anchor`` (as ``predict`` spells them);
    ``concurrency_help``: ``--concurrency`` takes one or more values (``anchor``: one per measured TPOT)."""
    sp.add_argument("--hardware", default="b200", help="GPU name (default b200; see predict --list-hardware)")
    sp.add_argument("--gpus", type=int, default=None, help="GPUs in the deployment (default tp*pp)")
    sp.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks per replica (default 1)")
    sp.add_argument("--ep", type=int, default=1, help="expert-parallel ranks among the tp ranks (default 1)")
    sp.add_argument("--pp", type=int, default=1, help="pipeline stages (default 1)")
    sp.add_argument("--attention-dp", action="store_true", help="attention data-parallel across the tp ranks")
    sp.add_argument("--helix", type=int, default=1, help="KV-parallel degree for decode attention (default 1)")
    sp.add_argument("--weights", choices=PRECISIONS, default="nvfp4", help="weight format (default nvfp4)")
    sp.add_argument("--activations", choices=PRECISIONS, default=None,
                    help="activation format (default: the --weights format, W8A8 / W4A4)")
    sp.add_argument("--kv-cache", choices=PRECISIONS, default="fp8", help="KV-cache format (default fp8)")
    sp.add_argument("--fp8-scaling", choices=FP8_SCALINGS, default="tensor", help=_FP8_SCALING_HELP)
    sp.add_argument("--isl", type=int, default=1024, help="input tokens per request (default 1024)")
    sp.add_argument("--osl", type=int, default=1024, help="output tokens per request (default 1024)")
    sp.add_argument("--arrivals", choices=ARRIVALS, default="steady", help=_ARRIVALS_HELP)
    if concurrency_help:
        sp.add_argument("--concurrency", type=int, nargs="+", default=None, metavar="N", help=concurrency_help)
    else:
        sp.add_argument("--concurrency", type=int, default=None,
                        help="requests in flight, whole deployment (default: the max-throughput batch)")
    sp.add_argument("--runtime", metavar="FILE", default=None, help=_RUNTIME_HELP)
    _slo_args(sp.add_argument_group("SLO (without --concurrency: the max-throughput batch that meets it)"))


def _slo_args(slo: argparse._ArgumentGroup) -> None:
    """The SLO flags (``co_design.perf.SLO``'s fields, in the units the flags name), into group ``slo``."""
    slo.add_argument("--min-tokens-per-s-per-user", type=float, default=None, metavar="TOK_S", help="e.g. 50")
    slo.add_argument("--max-ttft-ms", type=float, default=None, metavar="MS", help="e.g. 2000")
    slo.add_argument("--max-tpot-ms", type=float, default=None, metavar="MS", help="e.g. 20")
    slo.add_argument("--max-ttft-p99-ms", type=float, default=None, metavar="MS",
                     help="99th-percentile TTFT, e.g. 2000 (with --arrivals poisson: the queue's tail)")
    slo.add_argument("--max-tpot-p99-ms", type=float, default=None, metavar="MS",
                     help="99th-percentile TPOT over requests, e.g. 40 (with --arrivals poisson: each decodes "
                          "beside the prompts admitted meanwhile)")


def _fp8_scaling_error(args: argparse.Namespace) -> str | None:
    """The flag-level message for ``--fp8-scaling block`` without FP8 activations, else None."""
    if args.fp8_scaling == "block" and args.activations != "fp8":
        return (f"--fp8-scaling block scales FP8 activations, but --activations is {args.activations}; "
                "add --weights fp8 --activations fp8, or drop --fp8-scaling")
    return None


def _fail(msg: str, command: str = "predict") -> int:
    print(f"co-design {command}: error: {msg}", file=sys.stderr)
    return 2


def _predict(args: argparse.Namespace) -> int:
    from co_design.arch import Architecture, ArchitectureError
    from co_design.hardware import PRECISION_FIELDS, check_precision, get_gpu, list_gpus
    from co_design.perf import SLO, Deployment, max_throughput, pareto, predict, shape_advice
    from co_design.perf.report import format_hardware, format_pareto, format_report

    if args.list_hardware:
        try:
            gpus = [get_gpu(n) for n in list_gpus()]
        except ValueError as exc:
            return _fail(str(exc))
        if args.json:
            print(json.dumps({"gpus": [_gpu_specs(g) for g in gpus]}, indent=1))
        else:
            print(format_hardware(gpus))
        return 0
    if args.config is None:
        return _fail("CONFIG is required (an HF config.json or a project model YAML)")
    if (msg := _fp8_scaling_error(args)) is not None:
        return _fail(msg)
    try:
        gpu = get_gpu(args.hardware)
    except ValueError as exc:
        return _fail(str(exc))
    try:
        arch = Architecture.load(args.config)
    except (ArchitectureError, ValueError, OSError) as exc:
        msg = str(exc).removeprefix(f"{Path(args.config)}: ")  # the file is named once, here
        return _fail(f"cannot read model CONFIG {args.config!r}: {msg}")
    try:
        dep = Deployment(gpus=args.gpus, tp=args.tp, ep=args.ep, pp=args.pp, attention_dp=args.attention_dp,
                         helix=args.helix, weights=args.weights, activations=args.activations,
                         kv_cache=args.kv_cache, fp8_scaling=args.fp8_scaling, isl=args.isl, osl=args.osl,
                         concurrency=args.concurrency, arrivals=args.arrivals, runtime=_runtime_of(args))
        if dep.gpus > _MAX_GPUS:
            flags = "--gpus" if args.gpus is not None else "--tp x --pp"
            return _fail(f"{flags} asks for {dep.gpus:,} GPUs; use at most {_MAX_GPUS:,}")
        for name in PRECISION_FIELDS:  # one table for predict, the callback and the search; named by flag here
            check_precision(gpu, name, getattr(dep, name), label="--" + name.replace("_", "-"))
        given = [(flag, field, v, v * unit) for flag, field, unit in _SLO_FLAGS
                 if (v := getattr(args, flag[2:].replace("-", "_"))) is not None]
        slo = None
        if given:
            if args.concurrency is not None:
                return _fail("an SLO selects the operating point: use it with --max-throughput or --pareto, "
                             "not with --concurrency")
            slo = SLO(**{field: value for _, field, _, value in given})
        miss = None
        if args.pareto:
            front = pareto(arch, gpu, dep, slo=slo)
            if slo is not None and not front and pareto(arch, gpu, dep):  # points fit, none meets the SLO
                miss = _slo_miss(f"{arch.name} on {gpu.name} x{dep.gpus}", given,
                                 lambda one: bool(pareto(arch, gpu, dep, slo=one)))
            if args.json:
                _say_slo_miss(miss, json_out=True)
                print(json.dumps({"model": arch.name, "pareto": [_point(p) for p in front]}, indent=1))
            elif miss:
                _say_slo_miss(miss, json_out=False)
            else:
                print(format_pareto(arch, gpu.name, front))
            return _EXIT_SLO if miss else 0
        pred = predict(arch, gpu, dep) if args.concurrency is not None else max_throughput(arch, gpu, dep, slo=slo)
        if slo is not None and pred.fits and not slo.met(pred):  # max_throughput fell back to the closest point
            miss = _slo_miss(f"{arch.name} on {gpu.name} x{dep.gpus}", given,
                             lambda one: one.met(max_throughput(arch, gpu, dep, slo=one)))
            miss += "; the nearest point follows"
        advice = [] if args.no_advice else shape_advice(arch, gpu, dep.replace(concurrency=pred.batch))
    except ValueError as exc:
        return _fail(str(exc))
    _say_slo_miss(miss, json_out=args.json)
    if args.json:
        d = pred.to_dict()
        d["model"] = arch.name
        d["advice"] = [a.to_dict() for a in advice]
        print(json.dumps(d, indent=1))
    else:
        print(format_report(arch, pred, advice))
    return _EXIT_SLO if miss else 0


def _load_arch(path: str, command: str):
    """(Architecture, None) or (None, exit code) with the error printed."""
    from co_design.arch import Architecture, ArchitectureError

    try:
        return Architecture.load(path), None
    except (ArchitectureError, ValueError, OSError) as exc:
        msg = str(exc).removeprefix(f"{Path(path)}: ")
        return None, _fail(f"cannot read model CONFIG {path!r}: {msg}", command)


def _deployment_of(args: argparse.Namespace):
    """(GPU, Deployment, SLO or None) from the flags of :func:`_deployment_args`; ValueError naming a flag."""
    from co_design.hardware import PRECISION_FIELDS, check_precision, get_gpu
    from co_design.perf import SLO, Deployment

    if (msg := _fp8_scaling_error(args)) is not None:
        raise ValueError(msg)
    gpu = get_gpu(args.hardware)
    dep = Deployment(gpus=args.gpus, tp=args.tp, ep=args.ep, pp=args.pp, attention_dp=args.attention_dp,
                     helix=args.helix, weights=args.weights, activations=args.activations, kv_cache=args.kv_cache,
                     fp8_scaling=args.fp8_scaling, isl=args.isl, osl=args.osl, concurrency=args.concurrency,
                     arrivals=args.arrivals, runtime=_runtime_of(args))
    if dep.gpus > _MAX_GPUS:
        raise ValueError(f"the deployment asks for {dep.gpus:,} GPUs; use at most {_MAX_GPUS:,}")
    for name in PRECISION_FIELDS:
        check_precision(gpu, name, getattr(dep, name), label="--" + name.replace("_", "-"))
    given = {field: v * unit for flag, field, unit in _SLO_FLAGS
             if (v := getattr(args, flag[2:].replace("-", "_"))) is not None}
    if given and args.concurrency is not None:
        raise ValueError("an SLO selects the operating point: give it without --concurrency")
    return gpu, dep, (SLO(**given) if given else None)


def _runtime_of(args: argparse.Namespace):
    """The Runtime of ``--runtime FILE``, else the fitted defaults; ValueError naming the file and field."""
    from co_design.perf import Runtime

    return Runtime.load(args.runtime) if args.runtime else Runtime()


def _anchor(args: argparse.Namespace) -> int:
    from co_design.perf import TPOTMeasurement, anchor_runtime, predict
    from co_design.perf.anchor import ANCHORED_FIELDS

    if args.concurrency is None:
        return _fail("--concurrency is required: the requests in flight when the TPOT was measured (e.g. 1)", "anchor")
    if len(args.concurrency) != len(args.tpot_ms):
        return _fail(f"--concurrency has {len(args.concurrency)} values and --tpot-ms {len(args.tpot_ms)}: give one "
                     "measured TPOT per concurrency, in the same order", "anchor")
    for tpot_ms in args.tpot_ms:
        if not tpot_ms > 0:
            return _fail(f"--tpot-ms must be > 0 (the measured time per output token, ms), got {tpot_ms:g}", "anchor")
    arch, code = _load_arch(args.config, "anchor")
    if arch is None:
        return code
    try:
        gpu, dep, _ = _deployment_of(argparse.Namespace(**vars(args) | {"concurrency": args.concurrency[0]}))
        deps = [dep.replace(concurrency=c) for c in args.concurrency]
        before = [predict(arch, gpu, d).tpot_s for d in deps]
        runtime, scale = anchor_runtime([TPOTMeasurement(arch, gpu, d, ms / 1e3) for d, ms in zip(deps, args.tpot_ms)],
                                        dep.runtime)
        after = [predict(arch, gpu, d.replace(runtime=runtime)).tpot_s for d in deps]
    except ValueError as exc:
        return _fail(str(exc), "anchor")
    where = f"{arch.name} on {gpu.name} x{dep.gpus} ({dep.label}), ISL/OSL {dep.isl}/{dep.osl}"
    points = [{"concurrency": d.concurrency, "measured_tpot_ms": ms, "predicted_tpot_ms_before": b * 1e3,
               "predicted_tpot_ms_after": a * 1e3} for d, ms, b, a in zip(deps, args.tpot_ms, before, after)]
    record = {"runtime": runtime.to_dict(),
              "anchor": {"model": arch.name, "gpu": gpu.name, "deployment": dep.label, "gpus": dep.gpus,
                         "isl": dep.isl, "osl": dep.osl, "measurements": points,
                         "scale": scale, "scaled_fields": list(ANCHORED_FIELDS)}}
    if args.out:
        try:
            Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
        except OSError as exc:
            return _fail(f"cannot write --out {args.out!r}: {exc.strerror or exc}", "anchor")
    if args.json:
        print(json.dumps(record | ({"out": args.out} if args.out else {}), indent=1))
        return 0
    print(f"anchored on {where}:")
    print("  concurrency  measured TPOT ms  predicted before  predicted after")
    for p in points:
        print(f"  {p['concurrency']:>11}  {p['measured_tpot_ms']:>16.3f}  {p['predicted_tpot_ms_before']:>16.3f}  "
              f"{p['predicted_tpot_ms_after']:>15.3f}")
    print(f"overheads scaled {scale:.3f}x:")
    for f in ANCHORED_FIELDS:
        print(f"  {f}: {getattr(dep.runtime, f):.3g} -> {getattr(runtime, f):.3g} s")
    if args.out:
        print(f"wrote {args.out}; use it with: co-design predict CANDIDATE --runtime {args.out} ..., "
              f"or python -m search deployment.runtime_file={args.out}")
    return 0


def _advise(args: argparse.Namespace) -> int:
    from co_design.advise import advise, format_advisory, plot_advisory

    if not 0 < args.budget_pct < 100:
        return _fail(f"--budget-pct must be in (0, 100) (percent of the model's parameters), got {args.budget_pct:g}",
                     "advise")
    arch, code = _load_arch(args.config, "advise")
    if arch is None:
        return code
    try:
        gpu, dep, slo = _deployment_of(args)
        if slo is not None:  # the SLO picks the model's operating point; neighbours are scored at that load
            from co_design.perf import max_throughput

            dep = dep.replace(concurrency=max_throughput(arch, gpu, dep, slo=slo).batch)
        adv = advise(arch, gpu, dep, budget_pct=args.budget_pct / 100, align=args.align)
        plot = plot_advisory(adv, args.plot, top=args.top) if args.plot else None
    except ValueError as exc:
        return _fail(str(exc), "advise")
    if args.json:
        d = adv.to_dict()
        if plot is not None:
            d["plot"] = str(plot)
        print(json.dumps(d, indent=1))
    else:
        print(format_advisory(adv, top=args.top))
        if plot is not None:
            print(f"\nplot: {plot}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from co_design.arch import ArchitectureError
    from co_design.export import export, trial_architecture

    if (args.config is None) == (args.study_dir is None):
        return _fail("give either CONFIG or --study-dir RUN_DIR --trial N", "export")
    if args.study_dir is not None:
        if args.trial is None:
            return _fail("--study-dir needs --trial N (a trial number of the run, e.g. from pareto.csv)", "export")
        try:
            arch = trial_architecture(args.study_dir, args.trial)
        except (ValueError, OSError, KeyError) as exc:
            return _fail(str(exc), "export")
    else:
        arch, code = _load_arch(args.config, "export")
        if arch is None:
            return code
    try:
        gpu, dep, slo = _deployment_of(args)
        if args.study_dir is not None:  # as the search served it: its throughput point on the study's GPU
            from co_design.export import trial_serving
            from co_design.hardware import get_gpu, load_gpu

            served, hardware = trial_serving(args.study_dir, args.trial)
            if served is not None:
                dep, slo = served, None
            if hardware:
                gpu = load_gpu(hardware) if hardware.endswith((".yaml", ".yml")) else get_gpu(hardware)
        files = export(arch, args.out, gpu=gpu, deployment=dep, slo=slo)
    except (ArchitectureError, ValueError, OSError) as exc:
        return _fail(str(exc), "export")
    figures = json.loads(files["predicted"].read_text())
    if args.study_dir is not None:
        from co_design.export import trial_standing

        standing = trial_standing(args.study_dir, args.trial)
        if standing:  # stderr, so --json output stays JSON
            print(f"co-design export: note: {standing}", file=sys.stderr)
    if args.json:
        print(json.dumps({"files": {k: str(v) for k, v in files.items()}, "predicted": figures}, indent=1))
        return 0
    print(f"co-design export: {arch.name} -> {args.out}")
    for key, path in files.items():
        print(f"  {path}")
    f = figures
    print(f"predicted on {f['gpu']} x{f['gpus']} ({f['layout']}) at concurrency {f['concurrency']}: "
          f"{f['output_tokens_per_s_per_gpu']:,.1f} output tok/s/GPU, {f['output_tokens_per_s_per_user']:,.1f} "
          f"tok/s/user, TTFT {f['ttft_ms']:,.1f} ms, TPOT {f['tpot_ms']:,.2f} ms")
    return 0


def _slo_miss(where: str, given: list, reachable: Callable[[Any], bool]) -> str:
    """One line naming the SLO flag(s) that no operating point of ``where`` meets.

    ``given``: (flag, SLO field, value in the flag's unit, value in the field's unit) per bound given;
    ``reachable(slo)``: whether some operating point meets ``slo``. Each flag that cannot be met even
    alone is named; if every one can alone, the combination is.
    """
    from co_design.perf import SLO

    alone = [(flag, v) for flag, field, v, value in given if not reachable(SLO(**{field: value}))]
    flags = " and ".join(f"{flag} {v:g}" for flag, v in (alone or [(f, v) for f, _, v, _ in given]))
    what = flags if alone or len(given) == 1 else f"{flags} together"
    return (f"co-design predict: SLO cannot be met: no operating point of {where} reaches {what}; "
            "relax it or serve on more or faster GPUs (--gpus, --tp, --hardware, --weights)")


def _say_slo_miss(miss: str | None, *, json_out: bool) -> None:
    """The SLO miss goes first: on stdout above the report, on stderr beside --json (stdout stays JSON)."""
    if miss:
        print(miss, file=sys.stderr if json_out else sys.stdout)


def _gpu_specs(g) -> dict:
    """--list-hardware --json: the key specs of one GPU under the catalog's field names, SI units
    (bytes, bytes/s, dense FLOP/s per precision; NVLink per GPU per direction), and the formats it
    runs natively per tensor class (what --weights / --activations / --kv-cache accept on it)."""
    keys = ("name", "description", "hbm_bytes", "hbm_usable_bytes", "hbm_bytes_per_s", "nvlink_bytes_per_s",
            "nvlink_domain")
    return {**{k: getattr(g, k) for k in keys}, "peak_flops_per_s": dict(g.peak_flops_per_s),
            "precisions": {k: list(v) for k, v in g.precisions.items()}}


def _point(p) -> dict:
    """One Pareto point for --json: the headline metrics and its layout, without the op table."""
    d = p.to_dict()
    d.pop("ops", None)
    d["deployment_label"] = p.deployment.label
    return d


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point (``co-design``); returns the exit code."""
    try:
        code = _run(argv)
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at interpreter exit
    except BrokenPipeError:
        # the reader (e.g. `head`) closed the pipe: the Python docs' recipe (signal module, "Note on
        # SIGPIPE"): point stdout at devnull so the final flush does not fail again, and exit quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return code


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in ("predict", "advise", "export", "anchor", "-h", "--help", "--version"):
        argv = ["predict", *argv]  # `co-design CONFIG ...` works too
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed its message
        return int(exc.code or 0)
    if getattr(args, "activations", "") is None:  # --weights fp8 on its own is W8A8, not FP8 weights x NVFP4 math
        args.activations = args.weights
    if args.command == "predict":
        return _predict(args)
    if args.command == "advise":
        return _advise(args)
    if args.command == "export":
        return _export(args)
    if args.command == "anchor":
        return _anchor(args)
    return _fail(f"unknown command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
