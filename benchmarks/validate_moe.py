"""The performance model's MoE layer against NVIDIA's published MoE-layer measurements (issue #10 item 3).

``benchmarks/data/kernels/moe_<gpu>.json`` (copied by ``benchmarks/published_kernels.py`` from
AIConfigurator's perf database) times TensorRT-LLM 1.3.0rc20's fused MoE op on one GPU: ``tokens`` tokens
into the layer, balanced routing, the rank holding ``experts / moe_ep`` experts, each split ``moe_tp``
ways. This script predicts the same call with the serving model's own op table
(:func:`co_design.perf.ops.step_ops` on a one-layer model of that expert shape, ``Deployment(tp=moe_tp *
moe_ep, ep=moe_ep)``, attention TP so every rank sees every token, ``Runtime()`` defaults, and the calls'
even routing, ``step_ops(even_routing=True)``: each rank computes exactly its share of the token-expert
assignments, where serving's random routing loads its busiest rank more, and at a tile boundary a few more
tokens per expert cost a whole tile) and sums its MoE ops: ``moe_permute``, ``experts_gate_up``,
``experts_down`` and ``moe_finalize`` (the router, the shared expert and the collectives are outside the
measured call).

It reports, in seconds per layer on one GPU, the error per GPU and precision, per token range, and the
two orderings a search relies on: the split (MoE TP n vs EP n at the same tokens) and close pairs of
cases on one GPU, precision and token count (another model or split), banded by measured ratio.

It also fits ``Runtime.idle_expert_tile_s`` per GPU family on the block-scaled FP8 calls (the tiles TensorRT-LLM's
block-FP8 grouped GEMM launches for experts with no tokens; the value ``recipes/runtimes/tensorrt_llm_hopper.json``
ships) and sets TP n against EP n as each runtime's block-FP8 kernels take it beside the model: TensorRT-LLM from
these calls, SGLang 0.5.14 and vLLM 0.24.0 from ``benchmarks/data/kernels/runtime_moe_<gpu>.json`` (the same
package's databases of those runtimes).

``--fit`` also fits the serving model's two grouped-GEMM factors, ``Runtime.grouped_gemm_efficiency`` and
``Runtime.expert_tile_overhead_s``, on these calls alone (a grid, least mean absolute log error; the other
``Runtime()`` defaults kept) and reports the same figures with them: the kernel-level measurement of what the
serving fit sets from whole-model rows.

Usage (from the repository root; seconds, about a minute with ``--fit``)::

    python benchmarks/validate_moe.py [--fit] [--out benchmarks/results]

Writes ``moe_kernels.md`` and ``moe_kernels.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from co_design.arch import Architecture
from co_design.hardware import get_gpu
from co_design.perf.ops import step_ops
from co_design.perf.roofline import BYTES_PER_ELEMENT
from co_design.perf.types import Deployment, Runtime

from calibrate_gpu import ordered_by_band  # benchmarks/ (the script's directory) is on sys.path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "kernels"
MOE_OPS = ("moe_permute", "experts_gate_up", "experts_down", "moe_finalize")
TOKEN_RANGES = ((1, 16, "1-16 tokens"), (64, 1024, "64-1024 tokens"), (4096, 16384, "4096-16384 tokens"))
GROUPED_GRID = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # Runtime.grouped_gemm_efficiency
TILE_GRID = (0.0, 0.5e-6, 1e-6, 2e-6, 3e-6, 4e-6, 8e-6)  # Runtime.expert_tile_overhead_s, seconds
SPLIT_APART = 1.1  # TP-vs-EP pairs measured at least this far apart: the split a search must order
IDLE_GRID = (0.0, 0.2e-6, 0.4e-6, 0.5e-6, 0.6e-6, 0.7e-6, 0.8e-6, 0.9e-6, 1.0e-6, 1.2e-6, 1.5e-6)  # idle_expert_tile_s
# the runtime file that carries TensorRT-LLM's Hopper value to `co-design predict --runtime` and validate_perf
TENSORRT_LLM_RUNTIME = ROOT / "recipes" / "runtimes" / "tensorrt_llm_hopper.json"
HOPPER, BLACKWELL = ("h100", "h200"), ("b200", "b300", "gb200", "gb300")
RUNTIME_FORMAT = "co-design published runtime MoE v1"  # runtime_moe_<gpu>.json (published_kernels.py)
# the block-FP8 checkpoints' expert shapes and the widest TP n with an EP n to compare it with on every runtime
RUNTIME_SPLITS = {"DeepSeek-R1": 8, "Qwen3-235B-A22B": 4}


def layer(case: Mapping[str, Any]) -> Architecture:
    """A one-layer MoE model of the case's expert shape (attention sized to the hidden width; it is not summed)."""
    h = case["hidden"]
    return Architecture(hidden=h, layers=1, heads=max(1, h // 128), ffn=case["expert_ffn"], vocab=32000,
                        experts=case["experts"], experts_per_token=case["top_k"], expert_ffn=case["expert_ffn"],
                        name=case["model"])


def case_format(case: Mapping[str, Any]) -> tuple[str, str]:
    """(format, ``Deployment.fp8_scaling``) of a case: ``fp8_block`` is FP8 with one scale per 128 values."""
    return ("fp8", "block") if case["precision"] == "fp8_block" else (case["precision"], "tensor")


def predict_s(case: Mapping[str, Any], gpu_name: str, runtime: Runtime) -> float:
    """Seconds the serving model gives the case's MoE ops on one GPU (see the module docstring)."""
    prec, scaling = case_format(case)
    dep = Deployment(tp=case["moe_tp"] * case["moe_ep"], ep=case["moe_ep"], weights=prec, activations=prec,
                     kv_cache="bf16" if prec == "bf16" else "fp8", fp8_scaling=scaling, runtime=runtime)
    ops = step_ops(layer(case), get_gpu(gpu_name), dep, decode=float(case["tokens"]), context=1024.0,
                   prefill_tokens=0.0, prefill_len=1024.0, even_routing=True)
    return sum(o.time_s for o in ops if o.name in MOE_OPS)


def load(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every case of the given ``moe_<gpu>.json`` files, each with its ``gpu``."""
    out = []
    for path in paths:
        doc = json.loads(Path(path).read_text())
        if doc.get("format") != "co-design published MoE v1":
            raise ValueError(f"{path}: not a published MoE file (format {doc.get('format')!r})")
        out += [{**c, "gpu": doc["gpu"]} for c in doc["measurements"]]
    return out


def predict_all(cases: list[dict[str, Any]], runtime: Runtime) -> list[dict[str, Any]]:
    """The cases with ``predicted_s`` (None where the model refuses the split, e.g. experts not divisible)."""
    out = []
    for c in cases:
        try:
            p = predict_s(c, c["gpu"], runtime)
        except ValueError:
            p = None
        out.append({**c, "predicted_s": p})
    return out


def _summary(errs: list[float]) -> dict[str, float]:
    return {"n": len(errs), "mdape": statistics.median(abs(e) for e in errs) if errs else float("nan"),
            "signed": statistics.median(errs) if errs else float("nan"),
            "within_25": sum(abs(e) <= 0.25 for e in errs)}


def errors(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Relative error (predicted / measured - 1) summaries by GPU and precision, and by token range."""
    by_gpu: dict[str, list[float]] = {}
    by_tokens: dict[str, list[float]] = {}
    for r in rows:
        if r["predicted_s"] is None:
            continue
        e = r["predicted_s"] / r["time_s"] - 1
        by_gpu.setdefault(f"{r['gpu']} {r['precision']}", []).append(e)
        for lo, hi, label in TOKEN_RANGES:
            if lo <= r["tokens"] <= hi:
                by_tokens.setdefault(label, []).append(e)
    return {"by_gpu_precision": {k: _summary(v) for k, v in by_gpu.items()},
            "by_tokens": {label: _summary(by_tokens.get(label, [])) for _, _, label in TOKEN_RANGES}}


def split_pairs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """MoE TP n against EP n (n > 1) at one GPU, precision, model and token count: measured and predicted
    time ratio TP / EP."""
    index = {(r["gpu"], r["precision"], r["model"], r["tokens"], r["moe_tp"], r["moe_ep"]): r for r in rows}
    out = []
    for (g, p, m, t, tp, ep), r in index.items():
        if ep != 1 or tp == 1:
            continue
        other = index.get((g, p, m, t, 1, tp))
        if other is None or r["predicted_s"] is None or other["predicted_s"] is None:
            continue
        out.append({"gpu": g, "precision": p, "model": m, "tokens": t, "n": tp,
                    "measured": r["time_s"] / other["time_s"], "predicted": r["predicted_s"] / other["predicted_s"]})
    return out


def close_pairs(rows: list[dict[str, Any]]) -> dict[tuple[float, float], tuple[float, int]]:
    """:func:`calibrate_gpu.ordered_by_band` of the pairs of cases on one GPU, precision and token count (another
    model or split): (pairs the model orders as measured, a predicted tie counting half; pairs) per band."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r["predicted_s"] is not None:
            groups.setdefault((r["gpu"], r["precision"], r["tokens"]), []).append(r)
    return ordered_by_band((a["time_s"], b["time_s"], a["predicted_s"], b["predicted_s"])
                           for group in groups.values() for i, a in enumerate(group) for b in group[i + 1:])


def log_error(rows: list[dict[str, Any]]) -> float:
    """Mean |log(predicted / measured)| over the predicted rows (a mean, not a median: each call counts, so the
    calls the factors do not move, such as memory-bound ones, cannot leave a flat minimum)."""
    errs = [abs(math.log(r["predicted_s"] / r["time_s"])) for r in rows if r["predicted_s"]]
    return sum(errs) / len(errs)


def fit_grouped(cases: list[dict[str, Any]], base: Runtime) -> tuple[Runtime, float]:
    """``base`` with the grouped-GEMM factors of least :func:`log_error` on ``cases`` over
    :data:`GROUPED_GRID` x :data:`TILE_GRID`, and that error."""
    best: tuple[float, Runtime] | None = None
    for g in GROUPED_GRID:
        for oh in TILE_GRID:
            rt = dataclasses.replace(base, grouped_gemm_efficiency=g, expert_tile_overhead_s=oh)
            e = log_error(predict_all(cases, rt))
            if best is None or e < best[0]:
                best = (e, rt)
    assert best is not None
    return best[1], best[0]


def fit_idle(cases: list[dict[str, Any]], base: Runtime) -> tuple[Runtime, float]:
    """``base`` with the ``idle_expert_tile_s`` of least :func:`log_error` on the block-scaled FP8 ``cases`` over
    :data:`IDLE_GRID` (the other fields kept), and that error."""
    block = [c for c in cases if c["precision"] == "fp8_block"]
    best = min(((log_error(predict_all(block, rt)), i, rt) for i, rt in
                enumerate(dataclasses.replace(base, idle_expert_tile_s=v) for v in IDLE_GRID)))
    return best[2], best[0]


def idle_report(cases: list[dict[str, Any]], runtime: Runtime) -> tuple[str, dict[str, Any]]:
    """The idle-expert-tile section: ``Runtime.idle_expert_tile_s`` fitted per GPU family on the block-scaled FP8
    calls, the error before and after, the TP-vs-EP time ratios, and the value the TensorRT-LLM Hopper runtime
    file ships."""
    shipped = Runtime.load(TENSORRT_LLM_RUNTIME).idle_expert_tile_s if TENSORRT_LLM_RUNTIME.exists() else None
    grid = ", ".join(f"{v * 1e6:g}" for v in IDLE_GRID)
    lines = ["", "## Idle expert tiles of block-scaled FP8", "",
             "TensorRT-LLM's block-scaled FP8 grouped GEMM launches its grid over every expert the rank holds, so "
             "the tiles of experts that got no tokens still start and exit; splitting experts by TP keeps all of "
             "them on every rank. `Runtime.idle_expert_tile_s` (seconds of one SM per such tile, one tile per 128 "
             f"output columns) is fitted per GPU family on its block-FP8 calls over [{grid}] us, the other fields at "
             "`Runtime()` defaults. Hopper runs TensorRT-LLM's CUTLASS path; Blackwell's calls are DeepGEMM, the "
             "only path AIConfigurator measured block FP8 on there."
             + (f" `{TENSORRT_LLM_RUNTIME.relative_to(ROOT)}` ships {shipped * 1e6:g} us (Hopper)." if shipped is not None
                else "")
             + " SGLang's and vLLM's block-FP8 MoE kernels (AIConfigurator's SGLang 0.5.14 / vLLM 0.24.0 databases) "
             "are faster at TP8 than at EP8 at 1-16 tokens, so the product default stays 0.", "",
             "| GPUs (path) | calls | fitted | tokens | mean abs. log error before | after |", "|---|---:|---:|---|---:|---:|"]
    summary: dict[str, Any] = {"shipped_s": shipped, "families": {}, "tp_vs_ep": []}
    fitted_rows: dict[int, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {}
    for fam_name, fam in (("Hopper (CUTLASS)", HOPPER), ("Blackwell (DeepGEMM)", BLACKWELL)):
        block = [c for c in cases if c["precision"] == "fp8_block" and c["gpu"] in fam]
        if not block:
            continue
        fitted, err = fit_idle(block, runtime)
        before, after = predict_all(block, runtime), predict_all(block, fitted)
        fitted_rows.update({id(c): (c, b, a) for c, b, a in zip(block, before, after)})
        fam_summary = summary["families"][fam_name] = {"calls": len(block), "fitted_s": fitted.idle_expert_tile_s,
                                                       "log_error_before": log_error(before), "log_error_after": err}
        for lo, hi, label in ((1, 16384, "all"),) + TOKEN_RANGES:
            sel = [i for i, c in enumerate(block) if lo <= c["tokens"] <= hi]
            if not sel:
                continue
            b, a = log_error([before[i] for i in sel]), log_error([after[i] for i in sel])
            fam_summary[label] = {"calls": len(sel), "log_error_before": b, "log_error_after": a}
            lines.append(f"| {fam_name} | {len(sel)} | {fitted.idle_expert_tile_s * 1e6:g} us | {label} | {b:.3f} | {a:.3f} |")
    lines += ["", "TP n against EP n of the block-FP8 checkpoints' models at few tokens (time ratio; above 1: expert "
              "parallelism is faster), each family at its fitted value:", "",
              "| GPU | model | split | tokens | measured us (TP / EP) | ratio measured | predicted before | after |",
              "|---|---|---|---:|---:|---:|---:|---:|"]
    index = {(c["gpu"], c["model"], c["tokens"], c["moe_tp"], c["moe_ep"]): v for v in fitted_rows.values()
             for c in (v[0],)}
    for (g, m, t, tp, ep), (c, b, a) in sorted(index.items()):
        other = index.get((g, m, t, 1, tp))
        if ep != 1 or other is None or m not in ("DeepSeek-R1", "Qwen3-235B-A22B") or t > 64 \
                or tp != max(k[3] for k in index if k[:3] == (g, m, t)) or g not in ("h200", "b200") \
                or None in (b["predicted_s"], other[1]["predicted_s"]):
            continue
        row = {"gpu": g, "model": m, "n": tp, "tokens": t, "measured": c["time_s"] / other[0]["time_s"],
               "before": b["predicted_s"] / other[1]["predicted_s"], "after": a["predicted_s"] / other[2]["predicted_s"]}
        summary["tp_vs_ep"].append(row)
        lines.append(f"| {g} | {m} | TP{tp} vs EP{tp} | {t} | {c['time_s'] * 1e6:.0f} / {other[0]['time_s'] * 1e6:.0f} "
                     f"| {row['measured']:.2f} | {row['before']:.2f} | {row['after']:.2f} |")
    return "\n".join(lines) + "\n", summary


def load_runtime_moe(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every case of the given ``runtime_moe_<gpu>.json`` files (SGLang's and vLLM's block-FP8 MoE layers), each
    with its ``gpu``."""
    out = []
    for path in paths:
        doc = json.loads(Path(path).read_text())
        if doc.get("format") != RUNTIME_FORMAT:
            raise ValueError(f"{path}: not a published runtime MoE file (format {doc.get('format')!r})")
        out += [{**c, "gpu": doc["gpu"]} for c in doc["measurements"]]
    return out


def runtime_split_report(cases: list[dict[str, Any]], others: list[dict[str, Any]],
                         runtimes: Mapping[str, Runtime]) -> tuple[str, list[dict[str, Any]]]:
    """TP n against EP n of the block-FP8 checkpoints' expert shapes (:data:`RUNTIME_SPLITS`) at 1-64 tokens as
    each runtime's kernels take it (TensorRT-LLM: ``cases``; SGLang and vLLM: ``others``) and as the model
    predicts it under each of ``runtimes`` (label -> Runtime)."""
    measured: dict[tuple, dict[str, float]] = {}
    kernels: dict[str, set[str]] = {}
    for c in cases:
        if c["precision"] == "fp8_block":
            measured.setdefault((c["gpu"], c["model"], c["tokens"], c["moe_tp"], c["moe_ep"]), {})["TensorRT-LLM 1.3.0rc20"] = c["time_s"]
    for c in others:
        label = f"{c['runtime']} {c['version']}"
        measured.setdefault((c["gpu"], c["model"], c["tokens"], c["moe_tp"], c["moe_ep"]), {})[label] = c["time_s"]
        kernels.setdefault(label, set()).add(c["kernel"])
    labels = ["TensorRT-LLM 1.3.0rc20"] + sorted(kernels)
    lines = ["", "### Each runtime's kernels against the model", "",
             "Time ratio TP n / EP n at one GPU, model and token count, measured on each runtime's block-FP8 MoE "
             "kernels (TensorRT-LLM: the calls above; " + "; ".join(f"{k}: {', '.join(sorted(v))}" for k, v in kernels.items())
             + " -- `benchmarks/data/kernels/runtime_moe_<gpu>.json`) and predicted; above 1: expert parallelism is "
             "faster. The runtime file's column on B200 shows what it would do there; it is for Hopper.", "",
             "| GPU | model | split | tokens | " + " | ".join(f"{x}" for x in labels) + " | "
             + " | ".join(f"model, {k}" for k in runtimes) + " |",
             "|---|---|---|---:|" + "---:|" * (len(labels) + len(runtimes))]
    rows = []
    for (g, m, t, tp, ep), by in sorted(measured.items()):
        n = RUNTIME_SPLITS.get(m)
        if (tp, ep) != (n, 1) or (g, m, t, 1, n) not in measured or g not in ("h100", "h200", "b200"):
            continue
        other = measured[g, m, t, 1, n]
        case = {"model": m, "precision": "fp8_block", "tokens": t, **{k: v for k, v in next(
            c for c in cases + others if c["model"] == m).items() if k in ("hidden", "expert_ffn", "top_k", "experts")}}
        ratios = {x: by[x] / other[x] for x in labels if x in by and x in other}
        pred = {k: predict_s({**case, "moe_tp": n, "moe_ep": 1}, g, rt) / predict_s({**case, "moe_tp": 1, "moe_ep": n}, g, rt)
                for k, rt in runtimes.items()}
        rows.append({"gpu": g, "model": m, "n": n, "tokens": t, "measured": ratios, "predicted": pred})
        lines.append(f"| {g} | {m} | TP{n} vs EP{n} | {t} | " + " | ".join(
            f"{ratios[x]:.2f}" if x in ratios else "-" for x in labels) + " | "
            + " | ".join(f"{pred[k]:.2f}" for k in runtimes) + " |")
    return "\n".join(lines) + "\n", rows


def achieved_fraction(case: Mapping[str, Any]) -> tuple[float, float]:
    """(fraction of its precision's dense tensor-core peak, fraction of the peak HBM bandwidth) a measured call
    reaches: the expert GEMMs' FLOPs (gate, up and down: 6 x routed tokens x hidden x expert_ffn) and the rank's
    expert weights read once, over the whole op's time (permute, activation and finalize included, so both are
    floors of the GEMMs' own rates)."""
    gpu = get_gpu(case["gpu"])
    prec = case_format(case)[0]
    split = case["moe_tp"] * case["moe_ep"]
    flops = 6.0 * case["tokens"] * case["top_k"] * case["hidden"] * case["expert_ffn"] / split
    weights = 3.0 * case["experts"] * case["hidden"] * case["expert_ffn"] * BYTES_PER_ELEMENT[prec] / split
    return (flops / case["time_s"] / gpu.peak_flops_per_s[prec], weights / case["time_s"] / gpu.hbm_bytes_per_s)


def reach_table(rows: list[dict[str, Any]]) -> tuple[str, dict[str, dict[str, list[float | None]]]]:
    """:func:`achieved_fraction` at the most tokens measured, the experts whole on one GPU (MoE TP1 EP1), per GPU,
    model and precision, beside the model's own fraction of the peak for the call (its ``predicted_s``): what one
    grouped-GEMM factor per precision would have to fit, and whether the model follows the expert shape."""
    most = max(r["tokens"] for r in rows)
    sel = [r for r in rows if r["tokens"] == most and r["moe_tp"] == 1 and r["moe_ep"] == 1]
    precs = sorted({r["precision"] for r in sel}, key=("bf16", "fp8", "fp8_block", "nvfp4").index)
    table: dict[str, dict[str, list[float | None]]] = {}
    for r in sel:
        flops, hbm = achieved_fraction(r)
        model = flops * r["time_s"] / r["predicted_s"] if r.get("predicted_s") else None
        table.setdefault(f"{r['gpu']} {r['model']}", {})[r["precision"]] = [flops, hbm, model]

    def cell(v: list[float | None] | None) -> str:
        if v is None:
            return "-"
        flops, hbm, model = v
        return (f"{flops:.2f}" + (f" / {model:.2f}" if model is not None else "")
                + (f" (HBM {hbm:.2f})" if hbm is not None and hbm >= 0.4 else ""))

    lines = ["", "## What the calls reach", "",
             f"Fraction of the precision's dense peak the measured op reaches at {most} tokens, the experts whole on "
             "one GPU (expert-GEMM FLOPs over the whole op's time), then the model's for the same call at `Runtime()` "
             "defaults; in parentheses where it is 0.4 or more, the fraction of peak HBM bandwidth the expert weights "
             "alone take (Maverick: 128 tokens per expert, bound by the weights). A grouped-GEMM factor per precision "
             "would need one value per column.", "",
             "| GPU, model | " + " | ".join(f"{p}: measured / model" for p in precs) + " |",
             "|---|" + "---:|" * len(precs)]
    for key in sorted(table):
        lines.append(f"| {key} | " + " | ".join(cell(table[key].get(p)) for p in precs) + " |")
    return "\n".join(lines) + "\n", table


def _pct(x: float) -> str:
    return f"{x * 100:+.0f} %"


def report(rows: list[dict[str, Any]], runtime: Runtime) -> tuple[str, dict[str, Any]]:
    """The Markdown report and its JSON summary."""
    errs = errors(rows)
    splits = split_pairs(rows)
    pairs = close_pairs(rows)
    refused = sum(r["predicted_s"] is None for r in rows)
    lines = ["# The MoE layer against published MoE-layer measurements", "",
             "Command: `python benchmarks/validate_moe.py`. Measured: TensorRT-LLM 1.3.0rc20's fused MoE op on one GPU "
             "(AIConfigurator perf database, `benchmarks/data/kernels/moe_*.json`, balanced routing). Predicted: the "
             "serving model's MoE ops (" + ", ".join(f"`{name}`" for name in MOE_OPS) + ") for the same "
             f"call at `Runtime()` defaults, routed evenly as the calls are (`step_ops(even_routing=True)`). {len(rows) - refused} cases"
             + (f" ({refused} splits the model refuses left out)" if refused else "") + ". Error = predicted / "
             "measured - 1, seconds per layer on one GPU.", "",
             "## Error by GPU and precision", "", "| GPU, precision | cases | MdAPE | median signed | within 25 % |",
             "|---|---:|---:|---:|---:|"]
    for k, v in sorted(errs["by_gpu_precision"].items()):
        lines.append(f"| {k} | {v['n']} | {v['mdape'] * 100:.0f} % | {_pct(v['signed'])} | {v['within_25']} |")
    lines += ["", "## Error by tokens into the layer", "", "| tokens | cases | MdAPE | median signed |", "|---|---:|---:|---:|"]
    for label, v in errs["by_tokens"].items():
        if v["n"]:
            lines.append(f"| {label} | {v['n']} | {v['mdape'] * 100:.0f} % | {_pct(v['signed'])} |")
    lines += ["", "## MoE TP n against EP n", "",
              "Time ratio TP / EP at one GPU, precision, model and token count (above 1: expert parallelism is faster). "
              f"The last column keeps the pairs measured at least {SPLIT_APART:g}x apart, the choices a search "
              "should get right; closer ones are nearly ties.", "",
              "| precision | tokens | pairs | measured ratio, median | predicted ratio, median | ordered as measured "
              f"| ordered, measured {SPLIT_APART:g}x+ apart |", "|---|---|---:|---:|---:|---:|---:|"]
    split_summary = {}

    def ordered(pairs: list[dict[str, Any]]) -> int:
        return sum((s["measured"] > 1) == (s["predicted"] > 1) for s in pairs if s["measured"] != 1)

    for prec in ["all"] + sorted({s["precision"] for s in splits}):
        for lo, hi, label in TOKEN_RANGES:
            sel = [s for s in splits if lo <= s["tokens"] <= hi and prec in ("all", s["precision"])]
            if not sel:
                continue
            apart = [s for s in sel if max(s["measured"], 1 / s["measured"]) >= SPLIT_APART]
            v = split_summary[label if prec == "all" else f"{prec} {label}"] = {
                "pairs": len(sel), "measured_median": statistics.median(s["measured"] for s in sel),
                "predicted_median": statistics.median(s["predicted"] for s in sel), "ordered": ordered(sel),
                "pairs_apart": len(apart), "ordered_apart": ordered(apart)}
            lines.append(f"| {prec} | {label} | {v['pairs']} | {v['measured_median']:.2f} | {v['predicted_median']:.2f} "
                         f"| {v['ordered']}/{len(sel)} | {v['ordered_apart']}/{len(apart)} |")
    lines += ["", "## Close pairs", "",
              "Two cases on one GPU, precision and token count (another model or split), banded by the measured time "
              "ratio; a predicted tie counts half.", "", "| band | ordered as measured |", "|---|---:|"]
    for (lo, hi), (ok, n) in pairs.items():
        lines.append(f"| {lo:g}-{hi:g}x | " + (f"{ok:g}/{n} ({100 * ok / n:.0f} %)" if n else "-") + " |")
    lines += ["", "## Largest errors", "", "| GPU | precision | model | MoE TP x EP | tokens | measured (us) | predicted (us) "
              "| error |", "|---|---|---|---|---:|---:|---:|---:|"]
    worst = sorted((r for r in rows if r["predicted_s"] is not None),
                   key=lambda r: -abs(r["predicted_s"] / r["time_s"] - 1))[:15]
    for r in worst:
        lines.append(f"| {r['gpu']} | {r['precision']} | {r['model']} | {r['moe_tp']} x {r['moe_ep']} | {r['tokens']} "
                     f"| {r['time_s'] * 1e6:.1f} | {r['predicted_s'] * 1e6:.1f} | {_pct(r['predicted_s'] / r['time_s'] - 1)} |")
    summary = {"runtime": runtime.to_dict(), "cases": len(rows) - refused, "errors": errs, "splits": split_summary,
               "close_pairs": {f"{lo:g}-{hi:g}": {"ordered": ok, "pairs": n} for (lo, hi), (ok, n) in pairs.items()}}
    return "\n".join(lines) + "\n", summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA, help="directory of moe_<gpu>.json files")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--fit", action="store_true", help="also fit the two grouped-GEMM factors on these calls")
    args = ap.parse_args(argv)
    paths = sorted(args.data.glob("moe_*.json"))
    if not paths:
        print(f"validate_moe: no moe_*.json in {args.data} (benchmarks/published_kernels.py writes them)", file=sys.stderr)
        return 2
    try:
        cases = load(paths)
    except (ValueError, KeyError) as exc:
        print(f"validate_moe: {exc}", file=sys.stderr)
        return 2
    runtime = Runtime()
    rows = predict_all(cases, runtime)
    text, summary = report(rows, runtime)
    text_reach, summary["reach_at_most_tokens"] = reach_table(rows)
    text += text_reach
    text_idle, summary["idle_expert_tiles"] = idle_report(cases, runtime)
    text += text_idle
    others = load_runtime_moe(sorted(args.data.glob("runtime_moe_*.json")))
    if others:
        trt = {"default (0)": runtime}
        if TENSORRT_LLM_RUNTIME.exists():
            trt[f"`{TENSORRT_LLM_RUNTIME.name}`"] = Runtime.load(TENSORRT_LLM_RUNTIME)
        text_rt, summary["runtime_splits"] = runtime_split_report(cases, others, trt)
        text += text_rt
    if args.fit:
        fitted, err = fit_grouped(cases, runtime)
        fitted_rows = predict_all(cases, fitted)
        text_fit, summary_fit = report(fitted_rows, fitted)
        text_reach_fit, summary_fit["reach_at_most_tokens"] = reach_table(fitted_rows)
        text_fit += text_reach_fit
        head = (f"\n# With the grouped-GEMM factors fitted on these calls\n\n`grouped_gemm_efficiency` "
                f"{runtime.grouped_gemm_efficiency:g} -> {fitted.grouped_gemm_efficiency:g}, `expert_tile_overhead_s` "
                f"{runtime.expert_tile_overhead_s:g} -> {fitted.expert_tile_overhead_s:g} s (grid "
                f"{list(GROUPED_GRID)} x {list(TILE_GRID)}); mean |log error| {log_error(rows):.3f} "
                f"-> {err:.3f}. The other `Runtime()` defaults are kept.\n")
        text += head + text_fit.split("\n", 1)[1].replace("\n## ", "\n### ")
        summary["fitted"] = summary_fit | {"log_error": err}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "moe_kernels.md").write_text(text)
    (args.out / "moe_kernels.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
