"""The prefill attention kernel law of the serving model, fitted on NVIDIA's published kernel timings (issue #10).

A causal FMHA kernel (TensorRT-LLM's context attention, FlashAttention) gives each 128-row query tile of a
sequence and head to a CTA, which walks the 128-column KV tiles up to the diagonal, the diagonal one whole under
the mask. Around that loop each query tile pays a fixed cost (load Q, the softmax's final rescale, write O) that
does not shrink with the prompt, so short prompts run far below the kernel's long-prompt rate. Per call of
``batch`` sequences of ``isl`` tokens and ``heads`` query heads of head_dim ``d``, the law is the one the serving
model charges (``co_design.perf.ops.prefill_attention_tile_efficiency``, ``eff``)::

    time = t0 + batch * heads * 4 * d * isl (isl + 1) / 2 / (fraction * peak * eff(isl, overhead))
    eff = pairs / (pairs + nq * (1/2 + overhead)), pairs = isl (isl + 1) / 2 / 128^2, nq = ceil(isl / 128)

``peak``: the catalog GPU's dense peak at the attention's precision (bf16, or fp8 for the FP8 context FMHA an
FP8 KV cache runs); ``fraction``: of that peak, reached by the tile loop; ``overhead``: KV tiles' worth of time per
query tile; ``t0``: seconds per call outside the tile loop (the timed op's launch and host side), fitted so it
does not bias the other two, and not carried into the serving model, which charges launches itself.
The serving model (``co_design.perf.ops``) takes ``fraction`` and ``overhead`` per GPU and precision from the
catalog's ``prefill_attention`` entry; this script fits them (grid over ``overhead`` and ``t0``, ``fraction``
in closed form as the median, the score the median absolute log error) and reports each fit against the
calls, beside the flat law it replaced (one fraction of the peak at every prompt length: ``overhead`` 0).

Data: ``benchmarks/data/kernels/prefill_attention_<gpu>.json`` (``published_kernels.py``: AIConfigurator's
TensorRT-LLM 1.3.0rc20 context-attention table, head_dim 128, no window, prompts from 256 tokens whose query
tiles fill the SMs once). Run from the repository root (seconds per GPU)::

    python benchmarks/fit_prefill_attention.py            # writes benchmarks/results/prefill_attention.md
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from co_design.hardware import get_gpu  # noqa: E402
from co_design.perf.ops import prefill_attention_tile_efficiency  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "kernels"
FORMAT = "co-design published prefill attention v1"
HEAD_DIM = 128  # every call in the data
OVERHEAD_GRID = tuple(x / 2 for x in range(0, 41))  # 0 .. 20 KV tiles per query tile
T0_GRID = tuple(x * 2e-6 for x in range(0, 31))  # 0 .. 60 us per call
GPUS = ("h100", "h200", "b200", "b300", "gb200", "gb300")


def loop_s(batch: int, isl: int, heads: int, peak: float, overhead: float) -> float:
    """Seconds of one call's tile loop at the full ``peak`` under the law (module docstring): the causal FLOPs over
    the serving model's tile efficiency."""
    flops = batch * heads * 4.0 * HEAD_DIM * isl * (isl + 1) / 2
    return flops / (peak * prefill_attention_tile_efficiency(isl, None, overhead))


def predict_s(batch: int, isl: int, heads: int, peak: float, fraction: float, overhead: float, t0: float) -> float:
    """Seconds of one call under the law (module docstring)."""
    return t0 + loop_s(batch, isl, heads, peak, overhead) / fraction


def fit(calls: Sequence[tuple[int, int, int, float]], peak: float,
        overheads: Sequence[float] = OVERHEAD_GRID) -> dict[str, float]:
    """``fraction``, ``overhead`` (from ``overheads``), ``t0`` and the median and 90th-percentile absolute error
    (fraction of the measured time) of the law on ``calls`` ``(batch, isl, heads, seconds)``."""
    times = [t for *_, t in calls]
    best: tuple[float, float, float, float] | None = None
    for t0 in T0_GRID:
        if t0 >= min(times):
            break
        for oh in overheads:
            # fraction in closed form: the median of each call's own (its time less t0); the score is the median
            # |log(predicted / measured)| of the whole call
            loops = [loop_s(b, isl, h, peak, oh) for b, isl, h, _ in calls]
            frac = math.exp(statistics.median(math.log(s / (t - t0)) for s, t in zip(loops, times)))
            score = statistics.median(abs(math.log((t0 + s / frac) / t)) for s, t in zip(loops, times))
            if best is None or score < best[0]:
                best = (score, frac, oh, t0)
    assert best is not None
    _, frac, oh, t0 = best
    errs = sorted(abs(predict_s(b, isl, h, peak, frac, oh, t0) / t - 1) for b, isl, h, t in calls)
    return {"fraction": frac, "overhead": oh, "t0_s": t0, "median_error": statistics.median(errs),
            "p90_error": errs[int(0.9 * (len(errs) - 1))]}


def load(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT!r} file (format {doc.get('format')!r})")
    return doc


def calls_by_precision(doc: dict[str, Any]) -> dict[str, list[tuple[int, int, int, float]]]:
    """``precision -> [(batch, isl, heads, seconds), ...]`` of a prefill-attention document."""
    cols = doc["columns"]
    ix = {c: cols.index(c) for c in ("precision", "batch", "isl", "heads", "time_s")}
    out: dict[str, list[tuple[int, int, int, float]]] = {}
    for r in doc["rows"]:
        out.setdefault(r[ix["precision"]], []).append(
            (int(r[ix["batch"]]), int(r[ix["isl"]]), int(r[ix["heads"]]), float(r[ix["time_s"]])))
    return out


def fit_gpu(name: str, data: Path = DATA) -> dict[str, dict[str, float]]:
    """Per precision: the fit (:func:`fit`), the flat law's errors and the catalog's entry, for one GPU."""
    gpu = get_gpu(name)
    out = {}
    for prec, calls in calls_by_precision(load(data / f"prefill_attention_{name}.json")).items():
        peak = gpu.peak(prec)
        res = fit(calls, peak)
        res["calls"] = len(calls)
        flat = fit(calls, peak, overheads=(0.0,))  # the same law without the per-query-tile overhead
        res["flat_fraction"], res["flat_median_error"], res["flat_p90_error"] = (
            flat["fraction"], flat["median_error"], flat["p90_error"])
        res["catalog"] = list(gpu.prefill_attention.get(prec, ())) or None
        out[prec] = res
    return out


def report(fits: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = ["# Prefill attention kernel law: fitted on NVIDIA's published kernel timings", "",
             "`python benchmarks/fit_prefill_attention.py`. Calls: AIConfigurator's TensorRT-LLM 1.3.0rc20",
             "context-attention table (`benchmarks/data/kernels/prefill_attention_<gpu>.json`, head_dim 128, no",
             "window, prompts of 256-16384 tokens). Law and fit: the script's docstring. `fraction` is of the",
             "precision's own dense peak; `overhead` is in 128x128 KV tiles per 128-row query tile; `t0` is per",
             "call, outside the kernel's tile loop, not used by the serving model. Errors: absolute, of the",
             "measured time. Flat: the same law without the per-query-tile overhead (one fraction of the peak at",
             "every prompt length, as the serving model charged before; fraction and t0 refitted).", "",
             "| GPU | precision | calls | fraction | overhead | t0 (us) | median error | p90 error | flat fraction | "
             "flat median | flat p90 | catalog entry |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for gpu, per in fits.items():
        for prec, r in per.items():
            lines.append(f"| {gpu} | {prec} | {r['calls']} | {r['fraction']:.3f} | {r['overhead']:.1f} | "
                         f"{r['t0_s'] * 1e6:.0f} | {r['median_error']:.1%} | {r['p90_error']:.1%} | "
                         f"{r['flat_fraction']:.3f} | {r['flat_median_error']:.1%} | {r['flat_p90_error']:.1%} | "
                         f"{r['catalog']} |")
    return "\n".join(lines) + "\n"


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", nargs="+", default=list(GPUS))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "prefill_attention.md")
    args = ap.parse_args(list(argv) if argv is not None else None)
    fits = {g: fit_gpu(g) for g in args.gpus}
    text = report(fits)
    args.out.write_text(text)
    print(text)
    print("catalog entries (prefill_attention: precision -> [fraction, overhead]):")
    for g, per in fits.items():
        print(f"  {g}: " + ", ".join(f"{p}: [{r['fraction']:.3f}, {r['overhead']:.1f}]" for p, r in per.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
