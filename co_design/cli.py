"""``co-design predict CONFIG``: predicted serving performance of a model on a GPU deployment.

CONFIG is a Hugging Face ``config.json`` or a project model YAML. Parallel flags
follow TensorRT-LLM: ``--tp`` ranks per replica, ``--ep`` expert-parallel ranks
among them, ``--attention-dp`` runs attention data-parallel across the tp ranks,
``--helix`` splits decode attention's KV cache along the sequence. ``--concurrency``
counts requests in flight for the whole deployment (as trtllm-bench does);
without it (or with ``--max-throughput``) the model picks the batch with the
highest output tokens/s per GPU that fits.

Exit codes: 0 ok, 2 bad input (message on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

__all__ = ["main", "build_parser"]

_PRECISIONS = ("bf16", "fp8", "nvfp4")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="co-design", description="co-design: hardware-aware LLM architecture tools")
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("predict", help="predict serving performance of a model on a GPU deployment",
                        description=__doc__.split("\n\n")[0])
    pr.add_argument("config", metavar="CONFIG", nargs="?", help="HF config.json or project model YAML")
    pr.add_argument("--hardware", default="b200", help="GPU name (default b200; see --list-hardware)")
    pr.add_argument("--gpus", type=int, default=None, help="GPUs in the deployment (default tp*pp)")
    pr.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks per replica (default 1)")
    pr.add_argument("--ep", type=int, default=1, help="expert-parallel ranks among the tp ranks (default 1)")
    pr.add_argument("--pp", type=int, default=1, help="pipeline stages (default 1)")
    pr.add_argument("--attention-dp", action="store_true", help="attention data-parallel across the tp ranks (DEP)")
    pr.add_argument("--helix", type=int, default=1, help="KV-parallel degree for decode attention (default 1)")
    pr.add_argument("--weights", choices=_PRECISIONS, default="nvfp4", help="weight format (default nvfp4)")
    pr.add_argument("--activations", choices=_PRECISIONS, default="nvfp4", help="activation format (default nvfp4)")
    pr.add_argument("--kv-cache", choices=_PRECISIONS, default="fp8", help="KV-cache format (default fp8)")
    pr.add_argument("--isl", type=int, default=1024, help="input tokens per request (default 1024)")
    pr.add_argument("--osl", type=int, default=1024, help="output tokens per request (default 1024)")
    mode = pr.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", type=int, default=None, help="requests in flight, whole deployment")
    mode.add_argument("--max-throughput", action="store_true", help="pick the batch of highest tokens/s per GPU (default)")
    mode.add_argument("--pareto", action="store_true",
                      help="the throughput-vs-interactivity front over concurrency and the parallel layouts of --gpus")
    slo = pr.add_argument_group("SLO (with --max-throughput or --pareto: keep only points that meet it)")
    slo.add_argument("--min-tokens-per-s-per-user", type=float, default=None, metavar="TOK_S", help="e.g. 50")
    slo.add_argument("--max-ttft-ms", type=float, default=None, metavar="MS", help="e.g. 2000")
    slo.add_argument("--max-tpot-ms", type=float, default=None, metavar="MS", help="e.g. 20")
    pr.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    pr.add_argument("--no-advice", action="store_true", help="skip shape advice (faster)")
    pr.add_argument("--list-hardware", action="store_true", help="list known GPUs and exit")
    return p


def _fail(msg: str) -> int:
    print(f"co-design predict: error: {msg}", file=sys.stderr)
    return 2


def _predict(args: argparse.Namespace) -> int:
    from co_design.arch import Architecture, ArchitectureError
    from co_design.hardware import get_gpu, list_gpus
    from co_design.perf import SLO, Deployment, max_throughput, pareto, predict, shape_advice
    from co_design.perf.report import format_pareto, format_report

    if args.list_hardware:
        print("\n".join(list_gpus()))
        return 0
    if args.config is None:
        return _fail("CONFIG is required (an HF config.json or a project model YAML)")
    try:
        gpu = get_gpu(args.hardware)
    except ValueError as exc:
        return _fail(str(exc))
    try:
        arch = Architecture.load(args.config)
    except (ArchitectureError, ValueError, OSError) as exc:
        return _fail(f"cannot read model CONFIG {args.config!r}: {exc}")
    try:
        dep = Deployment(gpus=args.gpus, tp=args.tp, ep=args.ep, pp=args.pp, attention_dp=args.attention_dp,
                         helix=args.helix, weights=args.weights, activations=args.activations,
                         kv_cache=args.kv_cache, isl=args.isl, osl=args.osl, concurrency=args.concurrency)
        bounds = (args.min_tokens_per_s_per_user, args.max_ttft_ms, args.max_tpot_ms)
        slo = None
        if any(b is not None for b in bounds):
            if args.concurrency is not None:
                return _fail("an SLO selects the operating point: use it with --max-throughput or --pareto, "
                             "not with --concurrency")
            slo = SLO(min_tokens_per_s_per_user=bounds[0],
                      max_ttft_s=None if bounds[1] is None else bounds[1] / 1e3,
                      max_tpot_s=None if bounds[2] is None else bounds[2] / 1e3)
        if args.pareto:
            front = pareto(arch, gpu, dep, slo=slo)
            if args.json:
                print(json.dumps({"model": arch.name, "pareto": [_point(p) for p in front]}, indent=1))
            else:
                print(format_pareto(arch, gpu.name, front))
            return 0
        pred = predict(arch, gpu, dep) if args.concurrency is not None else max_throughput(arch, gpu, dep, slo=slo)
        advice = [] if args.no_advice else shape_advice(arch, gpu, dep.replace(concurrency=pred.batch))
    except ValueError as exc:
        return _fail(str(exc))
    if args.json:
        d = pred.to_dict()
        d["model"] = arch.name
        d["advice"] = [a.to_dict() for a in advice]
        print(json.dumps(d, indent=1))
    else:
        print(format_report(arch, pred, advice))
    return 0


def _point(p) -> dict:
    """One Pareto point for --json: the headline metrics and its layout, without the op table."""
    d = p.to_dict()
    d.pop("ops", None)
    d["deployment_label"] = p.deployment.label
    return d


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point (``co-design``); returns the exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in ("predict", "-h", "--help"):
        argv = ["predict", *argv]  # `co-design CONFIG ...` works too
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed its message
        return int(exc.code or 0)
    if args.command == "predict":
        return _predict(args)
    return _fail(f"unknown command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
