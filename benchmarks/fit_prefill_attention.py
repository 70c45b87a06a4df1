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
tiles fill the SMs once). Run from the repository root (about a minute)::

    python benchmarks/fit_prefill_attention.py            # writes benchmarks/results/prefill_attention.md

MLA (DeepSeek-V3/R1) runs its own prompt kernel: each head attends with its expanded 192-dim key (128 no-position
+ 64 rotary) and 128-dim value, so the FLOPs per attended pair are ``2 * (192 + 128)``. The report's second table
fits the same law to AIConfigurator's ``context_mla_perf`` calls (``prefill_mla_<gpu>.json``), with each prompt
token's RoPE and latent-cache write added at the HBM rate (:func:`mla_io_s`, the serving model's own op around the
kernel), scores it on held-out calls, and scores the grouped-query entry the serving model applies to MLA today.
The catalog's ``prefill_mla`` entries are these fits (``[fraction, overhead]``); the serving model charges MLA
prompts at them.
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

from co_design.arch import MLA  # noqa: E402
from co_design.hardware import get_gpu  # noqa: E402
from co_design.perf.ops import prefill_attention_tile_efficiency  # noqa: E402
from co_design.perf.roofline import bytes_per_element  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "kernels"
FORMAT = "co-design published prefill attention v1"
HEAD_DIM = 128  # every call in the data
OVERHEAD_GRID = tuple(x / 2 for x in range(0, 41))  # 0 .. 20 KV tiles per query tile
T0_GRID = tuple(x * 2e-6 for x in range(0, 31))  # 0 .. 60 us per call
GPUS = ("h100", "h200", "b200", "b300", "gb200", "gb300")
MLA_FORMAT = "co-design published prefill MLA v1"
# the MLA AIConfigurator times: DeepSeek-V3's (config.json of deepseek-ai/DeepSeek-V3: kv_lora_rank 512,
# qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128)
DEEPSEEK_V3_MLA = MLA(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
MLA_QK_V = DEEPSEEK_V3_MLA.qk_head_dim + DEEPSEEK_V3_MLA.v_head_dim  # 192 + 128 per head and attended pair
MLA_HELD_HEADS = (16, 128)  # the head counts of TP 8 and of one GPU (or attention-DP), held out of one fit


def loop_s(batch: int, isl: int, heads: int, peak: float, overhead: float, qk_v: int = 2 * HEAD_DIM) -> float:
    """Seconds of one call's tile loop at the full ``peak`` under the law (module docstring): the causal FLOPs over
    the serving model's tile efficiency. ``qk_v``: the query-key plus the value head dims (2 x 128 here; MLA's
    prompt kernel :data:`MLA_QK_V`)."""
    flops = batch * heads * 2.0 * qk_v * isl * (isl + 1) / 2
    return flops / (peak * prefill_attention_tile_efficiency(isl, None, overhead))


def predict_s(batch: int, isl: int, heads: int, peak: float, fraction: float, overhead: float, t0: float,
              qk_v: int = 2 * HEAD_DIM) -> float:
    """Seconds of one call under the law (module docstring)."""
    return t0 + loop_s(batch, isl, heads, peak, overhead, qk_v) / fraction


def errors(calls: Sequence[tuple[int, int, int, float]], peak: float, fraction: float, overhead: float, t0: float,
           qk_v: int = 2 * HEAD_DIM, extra: Sequence[float] | None = None) -> dict[str, float]:
    """Median and 90th-percentile absolute error and median signed error (fractions of the measured time) of the
    law at these constants on ``calls`` ``(batch, isl, heads, seconds)``, each call's ``extra`` seconds added."""
    extra = extra if extra is not None else [0.0] * len(calls)
    signed = [(predict_s(b, isl, h, peak, fraction, overhead, t0, qk_v) + x) / t - 1
              for (b, isl, h, t), x in zip(calls, extra)]
    errs = sorted(abs(e) for e in signed)
    return {"median_error": statistics.median(errs), "p90_error": errs[int(0.9 * (len(errs) - 1))],
            "median_signed": statistics.median(signed)}


def fit(calls: Sequence[tuple[int, int, int, float]], peak: float,
        overheads: Sequence[float] = OVERHEAD_GRID, qk_v: int = 2 * HEAD_DIM,
        fraction: float | None = None, extra: Sequence[float] | None = None) -> dict[str, float]:
    """``fraction``, ``overhead`` (from ``overheads``), ``t0`` and the :func:`errors` of the law on ``calls``
    ``(batch, isl, heads, seconds)``; a given ``fraction`` is kept (then only ``overhead`` and ``t0`` are fitted);
    ``extra``: known seconds of each call outside the tile loop, added to the law's (MLA's :func:`mla_io_s`)."""
    extra = list(extra) if extra is not None else [0.0] * len(calls)
    times = [t - x for (*_, t), x in zip(calls, extra)]  # what the tile loop and t0 must explain
    best: tuple[float, float, float, float] | None = None
    for t0 in T0_GRID:
        if t0 >= min(times):
            break
        for oh in overheads:
            # fraction in closed form: the median of each call's own (its time less t0); the score is the median
            # |log(predicted / measured)| of the whole call
            loops = [loop_s(b, isl, h, peak, oh, qk_v) for b, isl, h, _ in calls]
            frac = fraction if fraction is not None else math.exp(statistics.median(math.log(s / (t - t0)) for s, t in zip(loops, times)))
            score = statistics.median(abs(math.log((t0 + x + s / frac) / (t + x)))
                                      for s, t, x in zip(loops, times, extra))
            if best is None or score < best[0]:
                best = (score, frac, oh, t0)
    assert best is not None
    _, frac, oh, t0 = best
    return {"fraction": frac, "overhead": oh, "t0_s": t0, **errors(calls, peak, frac, oh, t0, qk_v, extra)}


def load(path: Path, fmt: str = FORMAT) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    if doc.get("format") != fmt:
        raise ValueError(f"{path}: not a {fmt!r} file (format {doc.get('format')!r})")
    return doc


def mla_io_s(batch: int, isl: int, heads: int, kv_cache: str, hbm_bytes_per_s: float) -> float:
    """Seconds of the per-prompt-token memory work around MLA's prompt kernel that the serving model charges as its
    own op (``rope_kv_write`` in ``co_design.perf.ops``): each token's query read and written in bf16 (RoPE) and
    its latent read in bf16 and written to the cache in ``kv_cache``'s width, at the GPU's HBM rate."""
    m = DEEPSEEK_V3_MLA
    latent = m.kv_lora_rank + m.qk_rope_head_dim
    per_token = heads * m.qk_head_dim * 2 * 2 + latent * (2 + bytes_per_element(kv_cache))
    return batch * isl * per_token / hbm_bytes_per_s


def _mla_io(calls: Sequence[tuple[int, int, int, float]], kv_cache: str, gpu: Any) -> list[float]:
    """:func:`mla_io_s` of each call on ``gpu``."""
    return [mla_io_s(b, isl, h, kv_cache, gpu.hbm_bytes_per_s) for b, isl, h, _ in calls]


def fit_mla(calls: Sequence[tuple[int, int, int, float]], kv_cache: str, name: str,
            overheads: Sequence[float] = OVERHEAD_GRID, fraction: float | None = None) -> dict[str, float]:
    """:func:`fit` of the prompt law to MLA calls ``(batch, isl, heads, seconds)`` over a ``kv_cache`` latent cache
    on GPU ``name``: the FLOPs of :data:`MLA_QK_V` head dims at the peak of the precision the serving model runs
    the kernel in (FP8 over an FP8 cache), :func:`mla_io_s` added to every call."""
    gpu = get_gpu(name)
    return fit(calls, gpu.peak(kv_cache), overheads, MLA_QK_V, fraction, _mla_io(calls, kv_cache, gpu))


def _score_mla(calls: Sequence[tuple[int, int, int, float]], kv_cache: str, name: str,
               law: dict[str, Any]) -> float:
    """Median absolute error of the MLA prompt law at ``law``'s fraction, overhead and t0 on ``calls``."""
    gpu = get_gpu(name)
    return errors(calls, gpu.peak(kv_cache), law["fraction"], law["overhead"], law["t0_s"], MLA_QK_V,
                  _mla_io(calls, kv_cache, gpu))["median_error"]


def mla_gpu(name: str, data: Path = DATA) -> dict[str, dict[str, Any]]:
    """Per latent-cache format of one GPU's MLA prompt calls: the fit on all of them (:func:`fit_mla`) and its
    median absolute error at :data:`MLA_HELD_HEADS` heads, the fits' errors on held-out calls (fitted on every
    other call, scored on the rest; fitted without :data:`MLA_HELD_HEADS`, scored on them), and the law MLA
    prompts took before ``prefill_mla`` (the grouped-query ``prefill_attention`` entry, t0 refitted)."""
    gpu = get_gpu(name)
    out = {}
    for kv, calls in calls_by_precision(load(data / f"prefill_mla_{name}.json", MLA_FORMAT), "kv_cache").items():
        res: dict[str, Any] = fit_mla(calls, kv, name)
        res["calls"] = len(calls)
        held = [c for c in calls if c[2] in MLA_HELD_HEADS]
        on = {k: res[k] for k in ("fraction", "overhead", "t0_s")}
        res["held_heads_in_sample"] = _score_mla(held, kv, name, on)
        half = fit_mla(calls[0::2], kv, name)
        res["held_half"] = _score_mla(calls[1::2], kv, name, half)
        rest = fit_mla([c for c in calls if c[2] not in MLA_HELD_HEADS], kv, name)
        res["held_heads"] = _score_mla(held, kv, name, rest)
        frac, oh = gpu.prefill_attention[kv]
        before = fit_mla(calls, kv, name, (oh,), frac)
        res["before"] = {"entry": [frac, oh], "median_error": before["median_error"],
                         "median_signed": before["median_signed"]}
        out[kv] = res
    return out


def calls_by_precision(doc: dict[str, Any], key: str = "precision"
                       ) -> dict[str, list[tuple[int, int, int, float]]]:
    """``precision -> [(batch, isl, heads, seconds), ...]`` of a prefill-attention document (of a prefill-MLA one
    with ``key="kv_cache"``: its latent-cache format)."""
    cols = doc["columns"]
    ix = {c: cols.index(c) for c in (key, "batch", "isl", "heads", "time_s")}
    out: dict[str, list[tuple[int, int, int, float]]] = {}
    for r in doc["rows"]:
        out.setdefault(r[ix[key]], []).append(
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


def report_mla(fits: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = ["## MLA prompt kernel (`GPU.prefill_mla`)", "",
             "Calls: AIConfigurator's TensorRT-LLM 1.3.0rc20 `context_mla_perf` table",
             "(`benchmarks/data/kernels/prefill_mla_<gpu>.json`: DeepSeek-V3's MLA, bf16 attention over a bf16 or FP8",
             "latent cache, 1-128 query heads on the GPU, prompts of 256-32768 tokens whose query tiles fill the SMs).",
             f"The same law with {MLA_QK_V} head dims per attended pair (query-key 192 + value 128), at the peak of the",
             "precision the serving model runs the kernel in (FP8 over an FP8 cache), plus each prompt token's",
             "RoPE and latent-cache write at the HBM rate (`mla_io_s`: the serving model's own `rope_kv_write` op,",
             "not fitted). Held out: fitted on every other call and scored on the rest; fitted without the",
             f"{' and '.join(map(str, MLA_HELD_HEADS))}-head calls (TP 8; one GPU or attention-DP) and scored on them.",
             "Before: the grouped-query entry the serving model applied to MLA before (its fraction and overhead kept,",
             "t0 refitted). Errors: median absolute (signed where marked), of the measured time.", "",
             "| GPU | latent cache | calls | fraction | overhead | t0 (us) | median error | p90 error | "
             f"median at {'+'.join(map(str, MLA_HELD_HEADS))} heads | held-out half | held-out heads | "
             "before: entry | before: median | before: signed |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for gpu, per in fits.items():
        for kv, r in per.items():
            b = r["before"]
            lines.append(f"| {gpu} | {kv} | {r['calls']} | {r['fraction']:.3f} | {r['overhead']:.1f} | "
                         f"{r['t0_s'] * 1e6:.0f} | {r['median_error']:.1%} | {r['p90_error']:.1%} | "
                         f"{r['held_heads_in_sample']:.1%} | {r['held_half']:.1%} | {r['held_heads']:.1%} | "
                         f"{b['entry']} | {b['median_error']:.1%} | {b['median_signed']:+.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", nargs="+", default=list(GPUS))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "prefill_attention.md")
    args = ap.parse_args(list(argv) if argv is not None else None)
    fits = {g: fit_gpu(g) for g in args.gpus}
    text = report(fits) + "\n" + report_mla({g: mla_gpu(g) for g in args.gpus})
    args.out.write_text(text)
    print(text)
    print("catalog entries (prefill_attention: precision -> [fraction, overhead]):")
    for g, per in fits.items():
        print(f"  {g}: " + ", ".join(f"{p}: [{r['fraction']:.3f}, {r['overhead']:.1f}]" for p, r in per.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
