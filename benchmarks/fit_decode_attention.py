"""The decode attention kernel law of the serving model, fitted on NVIDIA's published kernel timings (issue #10).

A decode attention kernel (TensorRT-LLM's XQA and trtllm-gen generation kernels, FlashInfer's decode) runs one query
token per sequence over that sequence's cached K and V. A grouped-query call gives each sequence and KV head a CTA
(the group's query heads share it; long caches split over more CTAs when there are fewer than SMs), which loads
the queries, streams the cached keys and values, and writes the outputs. Streaming is bandwidth-bound; around it
each CTA pays a fixed cost (query load, the softmax's final rescale, output write) however short the cache, so a
large batch of short caches runs far below the bandwidth the bytes alone would take. The stream itself ramps: each
SM's load pipeline fills and drains, and a cache split over several CTAs is reduced at the end, a cost that a long
stream pays once and a short one in proportion to its bytes. Without the ramp one fraction has to cover both: on
Hopper the calls over long caches stream at 0.93-0.97 of the peak and those over short ones far below, and a single
fraction (0.71 on H200) runs the first 25-33 % slow and the second 10-30 % fast. Per call of ``batch`` sequences,
``heads`` query heads and ``kv_heads`` KV heads of head_dim ``d`` over ``kv_len`` cached tokens in a ``b``-byte
format, the law is the one the serving model charges (``co_design.perf.ops.decode_attention_time_s``)::

    time = t0 + bytes / (fraction * hbm) + ceil(batch * kv_heads / sms) * cta_s
              + ramp_s * min(1, bytes / (sms * ramp_bytes))
    bytes = batch * (2 d kv_heads (kv_len b + 2 + b) + 2 d heads * 2)     (cache read, new K/V, q in, o out)

``hbm``, ``sms``: the catalog GPU's peak HBM bandwidth and SM count; ``fraction``: of that bandwidth, reached while
streaming, per KV-cache format; ``cta_s``: seconds per wave of CTAs, one per GPU (a CTA's fixed work does not
depend on the cache's format, and one value keeps a narrower cache from being charged a slower kernel);
``ramp_s``: seconds of the ramp, paid in full once the SMs stream ``ramp_bytes`` each, per format; ``t0``: seconds
per call outside the kernel (the timed op's launch, its host side and the small kernels beside it), fitted so it
does not bias the others, and not carried into the serving model, which charges launches itself. The fit is a
bounded least-squares on the log of predicted over measured time over both formats' calls (``t0, cta_s, ramp_s >=
0``, ``fraction <= 1``), so short calls weigh as much as long ones; the ramp's two terms make it multi-modal, so
it keeps the best of nine starts. The report sets it beside the law without its ramp (refitted), the one the
serving model charged before.

The absorbed MLA decode kernel (DeepSeek's multi-head latent attention: every query head over one shared latent
cache of ``kv_lora + rope`` values per token) does ``heads`` times the math per cached byte of a grouped-query
kernel, so its math can bind, and its queries and outputs (latent-space, bf16, per head) weigh as much as a few
hundred cached tokens at 128 heads; its law (``co_design.perf.ops.decode_mla_time_s``) is::

    time = t0 + max(flops / (compute_fraction * bf16 peak), cache / (fraction * hbm) + io / (io_fraction * hbm))
              + ceil(batch / sms) * cta_s
    flops = 2 batch heads (2 kv_lora + rope) kv_len
    cache = batch (kv_lora + rope) kv_len b
    io    = batch ((kv_lora + rope) (2 + b) + 2 heads (2 kv_lora + rope))     (new latent; q in, o out in bf16)

one CTA per sequence; ``compute_fraction`` of the bf16 dense peak, bounded by the cache format's own peak (a kernel
may run FP8 MMAs over an FP8 cache); ``io_fraction`` and ``cta_s`` one per GPU. The fit is the same least squares
on ``decode_mla_<gpu>.json`` (DeepSeek-V3's MLA, ``kv_lora`` 512, ``rope`` 64, 1-128 query heads on the GPU), held
to laws under which a narrower cache is never slower: its compute fraction at least the wider format's, its cache
fraction at least the wider's times the ratio of their bytes per value. Its report sets it beside what the serving
model charged an MLA model before (the grouped-query law with one CTA per sequence, the math at the GPU's flat
``attention_efficiency``), with the same ``t0``.

Data: ``benchmarks/data/kernels/decode_attention_<gpu>.json`` (``published_kernels.py``: AIConfigurator's
TensorRT-LLM 1.3.0rc20 generation-attention table, head_dim 128, no window, bf16 attention over a bf16 or an FP8
KV cache, 2-16 query heads per KV head); the fit takes the calls over caches of :data:`MIN_KV_LEN` tokens and up,
the lengths a serving step reads (shorter ones run a few microseconds whatever the law). Run from the repository
root (seconds)::

    python benchmarks/fit_decode_attention.py            # writes benchmarks/results/decode_attention.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from co_design.hardware import get_gpu  # noqa: E402
from co_design.perf.ops import decode_attention_time_s, decode_mla_time_s  # noqa: E402
from co_design.perf.roofline import bytes_per_element  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "kernels"
FORMAT = "co-design published decode attention v1"
HEAD_DIM = 128  # every call in the data
GPUS = ("h100", "h200", "b200", "b300", "gb200", "gb300")
MIN_KV_LEN = 128  # the fit's calls: caches a serving step reads (prompts of 128 tokens and up)
Call = tuple[int, int, int, int, float]  # (batch, heads, kv_heads, kv_len, seconds)
MLA_FORMAT = "co-design published decode MLA v1"
MLA_KV_LORA, MLA_ROPE = 512, 64  # DeepSeek-V3's MLA, the shape of every decode_mla call
MlaCall = tuple[int, int, int, float]  # (batch, heads, kv_len, seconds)


def call_bytes(batch: int, heads: int, kv_heads: int, kv_len: int, kv_cache: str) -> float:
    """Bytes one call moves (module docstring): the cached K and V, the new token's K and V read in bf16 and
    written to the cache, the bf16 queries in and outputs out; the serving model's ``attention_decode`` IO."""
    b = bytes_per_element(kv_cache)
    return batch * (2 * HEAD_DIM * kv_heads * (kv_len * b + 2 + b) + 2 * HEAD_DIM * heads * 2)


def predict_s(call: Sequence[float], kv_cache: str, hbm: float, sms: int, fraction: float, cta_s: float,
              t0: float, ramp_s: float = 0.0, ramp_bytes: float = 0.0) -> float:
    """Seconds of one call ``(batch, heads, kv_heads, kv_len, ...)`` under the law (module docstring)."""
    batch, heads, kv_heads, kv_len = (int(x) for x in call[:4])
    return t0 + decode_attention_time_s(call_bytes(batch, heads, kv_heads, kv_len, kv_cache), batch * kv_heads, hbm,
                                        sms, fraction, cta_s, ramp_s, ramp_bytes)


def fit(calls: Mapping[str, Sequence[Call]], hbm: float, sms: int, ramp: bool = True) -> dict[str, dict[str, float]]:
    """Per KV-cache format of ``calls`` (format -> its calls): ``fraction``, ``cta_s`` (one for every format: a
    CTA's fixed work does not depend on the cache's format), ``ramp_s`` and ``ramp_bytes`` (0 without ``ramp``,
    the law without its ramp), ``t0`` and the median and 90th-percentile absolute error (fraction of the measured
    time) and median signed error of the law on that format's calls. The least-squares fit of ``log(predicted /
    measured)`` over every call (a 10 us call weighs as much as a 10 ms one), each ``fraction`` at most 1."""
    kvs = list(calls)
    cols = []  # per format: (calls' times, their bytes, CTA waves)
    for kv in kvs:
        cs = calls[kv]
        cols.append((np.array([c[-1] for c in cs]), np.array([call_bytes(*c[:4], kv) for c in cs]),
                     np.array([decode_attention_time_s(0.0, c[0] * c[2], hbm, sms, 1.0, 1.0) for c in cs])))

    def laws(p: np.ndarray) -> list[tuple[float, float, float, float, float]]:  # per format: t0, fraction, cta, ramp
        # (s) and ramp bytes per SM; p: cta (us), then per format t0 (us), fraction, ramp (us), ramp bytes (MB)
        return [(p[1 + 4 * i] * 1e-6, p[2 + 4 * i], p[0] * 1e-6, p[3 + 4 * i] * 1e-6 if ramp else 0.0,
                 p[4 + 4 * i] * 1e6 if ramp else 0.0) for i in range(len(kvs))]

    def residual(p: np.ndarray) -> np.ndarray:
        out = []
        for (t0, fraction, cta, ramp_s, ramp_bytes), (times, nbytes, waves) in zip(laws(p), cols):
            ramped = ramp_s * np.minimum(1.0, nbytes / (sms * ramp_bytes)) if ramp_bytes > 0 else 0.0
            out.append(np.log((t0 + cta * waves + nbytes / (fraction * hbm) + ramped) / times))
        return np.concatenate(out)

    n = len(kvs)
    # the ramp's two terms make the objective multi-modal (a short ramp reached early against a long one reached
    # late): the best of a few starts, so the fit does not depend on where one start happens to land
    starts = [(ramp_us, ramp_mb) for ramp_us in (5.0, 10.0, 20.0) for ramp_mb in (0.5, 1.0, 2.0)] if ramp else [(0, 1)]
    fits = [least_squares(residual, [1.0] + [5.0, 0.8, ramp_us, ramp_mb] * n,
                          bounds=([0.0] + [0.0, 0.05, 0.0, 1e-3] * n, [1e3] + [1e3, 1.0, 1e3, 1e3] * n),
                          xtol=1e-12, ftol=1e-12, gtol=1e-12) for ramp_us, ramp_mb in starts]
    sol = min(fits, key=lambda r: r.cost).x
    out = {}
    for kv, (t0, fraction, cta_s, ramp_s, ramp_bytes) in zip(kvs, laws(sol)):
        med, p90, signed = _errors((predict_s(c, kv, hbm, sms, fraction, cta_s, t0, ramp_s, ramp_bytes)
                                    for c in calls[kv]), calls[kv])
        out[kv] = {"fraction": float(fraction), "cta_s": float(cta_s), "ramp_s": float(ramp_s),
                   "ramp_bytes": float(ramp_bytes), "t0_s": float(t0), "median_error": med, "p90_error": p90,
                   "signed_error": signed}
    return out


def mla_call_flops(batch: int, heads: int, kv_len: int) -> float:
    """FLOPs of one absorbed MLA decode call (module docstring): the serving model's ``attention_decode`` for MLA."""
    return 2.0 * batch * heads * (2 * MLA_KV_LORA + MLA_ROPE) * kv_len


def mla_call_bytes(batch: int, heads: int, kv_len: int, kv_cache: str) -> tuple[float, float]:
    """Bytes of one absorbed MLA decode call, ``(cache, io)``: the latent cache read, and the rest (the new token's
    latent read in bf16 and cached, the latent-space queries in and outputs out, bf16 per head)."""
    b, d = bytes_per_element(kv_cache), MLA_KV_LORA + MLA_ROPE
    return batch * d * kv_len * b, batch * (d * (2 + b) + 2 * heads * (2 * MLA_KV_LORA + MLA_ROPE))


def predict_mla_s(call: Sequence[float], kv_cache: str, bf16: float, hbm: float, sms: int, compute_fraction: float,
                  fraction: float, io_fraction: float, cta_s: float, t0: float) -> float:
    """Seconds of one MLA call ``(batch, heads, kv_len, ...)`` under the MLA law (module docstring)."""
    batch, heads, kv_len = (int(x) for x in call[:3])
    return t0 + decode_mla_time_s(mla_call_flops(batch, heads, kv_len), *mla_call_bytes(batch, heads, kv_len, kv_cache),
                                  batch, bf16, hbm, sms, compute_fraction, fraction, io_fraction, cta_s)[0]


def _errors(pred: Iterable[float], calls: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    """Median and 90th-percentile absolute error and the median signed error of predictions against calls' times."""
    signed = [p / c[-1] - 1 for p, c in zip(pred, calls)]
    errs = sorted(abs(e) for e in signed)
    return statistics.median(errs), errs[int(0.9 * (len(errs) - 1))], statistics.median(signed)


def fit_mla(calls: Mapping[str, Sequence[MlaCall]], bf16: float, hbm: float, sms: int,
            compute_max: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Per KV-cache format of ``calls``: ``compute_fraction`` (of ``bf16``, at most ``compute_max[format]``),
    ``fraction`` (of ``hbm``, for the cache), ``io_fraction`` and ``cta_s`` (one each for every format: the
    queries and outputs are bf16 whatever the cache), ``t0_s``, the errors of the law and the share of calls it
    finds compute-bound; the least-squares fit of ``log(predicted / measured)``. A narrower format is held to a
    law never slower than a wider one's over its fewer bytes: a compute fraction at least the wider's, a cache
    fraction at least the wider's times the ratio of their bytes per value."""
    kvs = sorted(calls, key=bytes_per_element, reverse=True)  # widest first
    cols = []  # per format: (times, s of math at the bf16 peak, s of cache and of other bytes at the peak, waves)
    for kv in kvs:
        cs = calls[kv]
        split = np.array([mla_call_bytes(*c[:3], kv) for c in cs]) / hbm
        cols.append((np.array([c[-1] for c in cs]), np.array([mla_call_flops(*c[:3]) for c in cs]) / bf16,
                     split[:, 0], split[:, 1], np.array([max(1, -(-c[0] // sms)) for c in cs], dtype=float)))

    def laws(p: Sequence[float]) -> list[tuple[float, float, float]]:  # per format (t0 in us, compute, fraction)
        out = [(p[2], min(p[3], compute_max[kvs[0]]), p[4])]
        for i, kv in enumerate(kvs[1:], 1):  # p: t0, compute step >= 0, cache-fraction step >= 0 over the wider's
            _, compute, frac = out[-1]
            ratio = bytes_per_element(kv) / bytes_per_element(kvs[i - 1])
            out.append((p[2 + 3 * i], min(compute + p[3 + 3 * i], compute_max[kv]), min(1.0, frac * ratio + p[4 + 3 * i])))
        return out

    def residual(p: np.ndarray) -> np.ndarray:  # p: cta (us), io fraction, then three per format
        return np.concatenate([np.log((t0 * 1e-6 + np.maximum(flop_s / compute, cache / frac + io / p[1])
                                       + p[0] * 1e-6 * waves) / times)
                               for (t0, compute, frac), (times, flop_s, cache, io, waves) in zip(laws(p), cols)])

    n = len(kvs)
    lo = [0.0, 0.02, 0.0, 0.02, 0.02] + [0.0, 0.0, 0.0] * (n - 1)
    hi = [1e3, 1.0, 1e3, compute_max[kvs[0]], 1.0] + [1e3, 4.0, 1.0] * (n - 1)
    sol = least_squares(residual, [1.0, 0.5, 10.0, 0.5, 0.7] + [10.0, 0.05, 0.1] * (n - 1), bounds=(lo, hi),
                        xtol=1e-12, ftol=1e-12, gtol=1e-12).x
    cta_s, io_fraction = float(sol[0]) * 1e-6, float(sol[1])
    out = {}
    for (t0, compute, fraction), kv, (_, flop_s, cache, io, _) in zip(laws(sol), kvs, cols):
        t0, compute, fraction = float(t0) * 1e-6, float(compute), float(fraction)
        med, p90, signed = _errors((predict_mla_s(c, kv, bf16, hbm, sms, compute, fraction, io_fraction, cta_s, t0)
                                    for c in calls[kv]), calls[kv])
        out[kv] = {"compute_fraction": compute, "fraction": fraction, "io_fraction": io_fraction, "cta_s": cta_s,
                   "t0_s": t0, "median_error": med, "p90_error": p90, "signed_error": signed,
                   "compute_bound": float(np.mean(flop_s / compute >= cache / fraction + io / io_fraction))}
    return {kv: out[kv] for kv in calls}


def load(path: Path, fmt: str = FORMAT) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    if doc.get("format") != fmt:
        raise ValueError(f"{path}: not a {fmt!r} file (format {doc.get('format')!r})")
    return doc


def fit_gpu_mla(name: str, data: Path = DATA) -> dict[str, dict[str, Any]]:
    """Per KV-cache format: the MLA law's fit (:func:`fit_mla`), what the serving model charged before (the
    grouped-query law with one CTA per sequence, the math at ``attention_efficiency``, the same ``t0``) and the
    catalog's entry, for one GPU."""
    gpu = get_gpu(name)
    bf16, hbm, sms = gpu.peak_flops_per_s["bf16"], gpu.hbm_bytes_per_s, gpu.sms
    calls = {kv: [c for c in every if c[2] >= MIN_KV_LEN]
             for kv, every in calls_by_format(load(data / f"decode_mla_{name}.json", MLA_FORMAT),
                                              ("batch", "heads", "kv_len")).items()}
    law = fit_mla(calls, bf16, hbm, sms, {kv: gpu.peak_flops_per_s.get(kv, bf16) / bf16 for kv in calls})
    out: dict[str, dict[str, Any]] = {}
    for kv, res in law.items():
        gqa = gpu.decode_attention_law(kv) or (gpu.memory_efficiency, 0.0, 0.0, 0.0)
        before = _errors((res["t0_s"] + max(mla_call_flops(*c[:3]) / (bf16 * gpu.attention_efficiency),
                                            decode_attention_time_s(sum(mla_call_bytes(*c[:3], kv)), c[0], hbm, sms,
                                                                    *gqa)) for c in calls[kv]), calls[kv])
        out[kv] = {**res, "calls": len(calls[kv]), "before_median_error": before[0], "before_p90_error": before[1],
                   "before_signed_error": before[2], "catalog": list(gpu.decode_mla.get(kv, ())) or None}
    return out


def mla_catalog_entry(r: dict[str, float]) -> tuple[float, float, float, float]:
    """The catalog's ``decode_mla`` entry of a fit: the fractions to 3 decimals, ``cta_s`` to 0.01 us."""
    return (round(r["compute_fraction"], 3), round(r["fraction"], 3), round(r["io_fraction"], 3),
            round(r["cta_s"] * 1e6, 2) / 1e6)


def mla_report(fits: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = ["", "## Absorbed MLA decode kernel", "",
             "Calls: AIConfigurator's TensorRT-LLM 1.3.0rc20 generation-MLA table (`benchmarks/data/kernels/",
             "decode_mla_<gpu>.json`, DeepSeek-V3's MLA: latent 512 + rope 64 per cached token, bf16 attention over a",
             f"bf16 or FP8 latent cache, 1-128 query heads on the GPU, batch 1-1024, {MIN_KV_LEN}-131072 cached tokens).",
             "Law and fit: the script's docstring. `compute` is of the GPU's bf16 dense peak (above 1: FP8 math over",
             "an FP8 cache), `fraction` of its peak HBM bandwidth for the latent cache, `io` for the rest (per-head",
             "queries and outputs, bf16), `cta` seconds per wave of CTAs (one per sequence).",
             "Compute-bound: share of the calls whose math outlasts their bytes under the fit (where it is near 0,",
             "`compute` is only a floor). Before: what the serving model charged an MLA model before this law",
             "(the grouped-query law above with one CTA per sequence, the math at the GPU's flat",
             "`attention_efficiency`), with the same t0. Errors: of the measured time; signed: median of",
             "predicted / measured - 1.", "",
             "| GPU | KV cache | calls | compute | fraction | io | cta (us) | t0 (us) | compute-bound | median error | "
             "p90 error | signed | before: median | before: signed | catalog entry |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for gpu, per in fits.items():
        for kv, r in per.items():
            cat = "-" if not r["catalog"] else "[{}, {}, {}, {:.2f} us]".format(*r["catalog"][:3], r["catalog"][3] * 1e6)
            lines.append(f"| {gpu} | {kv} | {r['calls']} | {r['compute_fraction']:.3f} | {r['fraction']:.3f} | "
                         f"{r['io_fraction']:.3f} | "
                         f"{r['cta_s'] * 1e6:.2f} | {r['t0_s'] * 1e6:.1f} | {r['compute_bound']:.0%} | "
                         f"{r['median_error']:.1%} | {r['p90_error']:.1%} | {r['signed_error']:+.1%} | "
                         f"{r['before_median_error']:.1%} | {r['before_signed_error']:+.1%} | {cat} |")
    return "\n".join(lines) + "\n"


def calls_by_format(doc: dict[str, Any], keys: Sequence[str] = ("batch", "heads", "kv_heads", "kv_len")
                    ) -> dict[str, list[tuple]]:
    """``KV-cache format -> [(*keys, seconds), ...]`` of a decode document: a decode-attention one by default
    (:data:`Call`), a decode-MLA one with ``keys=("batch", "heads", "kv_len")`` (:data:`MlaCall`)."""
    cols = doc["columns"]
    ix = [cols.index(c) for c in keys]
    out: dict[str, list[tuple]] = {}
    for r in doc["rows"]:
        out.setdefault(r[cols.index("kv_cache")], []).append((*(int(r[i]) for i in ix), float(r[cols.index("time_s")])))
    return out


def catalog_entry(r: dict[str, float]) -> tuple[float, float, float, float]:
    """The catalog's ``decode_attention`` entry of a fit: the fraction to 3 decimals, ``cta_s`` to 0.01 us, ``ramp_s``
    to 0.1 us, ``ramp_bytes`` to 0.01 MB."""
    return (round(r["fraction"], 3), round(r["cta_s"] * 1e6, 2) / 1e6, round(r["ramp_s"] * 1e6, 1) / 1e6,
            round(r["ramp_bytes"] / 1e6, 2) * 1e6)


def fit_gpu(name: str, data: Path = DATA) -> dict[str, dict[str, Any]]:
    """Per KV-cache format: the fit (:func:`fit`), the errors of the law without its ramp (refitted) and the
    catalog's entry, for one GPU."""
    gpu = get_gpu(name)
    calls = {kv: [c for c in every if c[3] >= MIN_KV_LEN]
             for kv, every in calls_by_format(load(data / f"decode_attention_{name}.json")).items()}
    law = fit(calls, gpu.hbm_bytes_per_s, gpu.sms)
    bare = fit(calls, gpu.hbm_bytes_per_s, gpu.sms, ramp=False)
    out: dict[str, dict[str, Any]] = {}
    for kv, res in law.items():
        kept = ("fraction", "cta_s", "median_error", "p90_error", "signed_error")
        out[kv] = {**res, "calls": len(calls[kv]), **{f"bare_{k}": bare[kv][k] for k in kept},
                   "catalog": list(gpu.decode_attention.get(kv, ())) or None}
    return out


def _entry_text(entry: Sequence[float]) -> str:
    return f"[{entry[0]}, {entry[1] * 1e6:.2f} us, {entry[2] * 1e6:.1f} us, {entry[3] / 1e6:.2f} MB]"


def report(fits: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = ["# Decode attention kernel law: fitted on NVIDIA's published kernel timings", "",
             "`python benchmarks/fit_decode_attention.py`. Calls: AIConfigurator's TensorRT-LLM 1.3.0rc20",
             "generation-attention table (`benchmarks/data/kernels/decode_attention_<gpu>.json`, head_dim 128, no",
             "window, bf16 attention over a bf16 or FP8 KV cache, 2-16 query heads per KV head, batch 1-2048; fitted on",
             f"the calls over {MIN_KV_LEN}-131072 cached tokens, those a serving step reads). Law and fit: the script's",
             "docstring. `fraction` is of the GPU's peak HBM bandwidth; `cta` is seconds per wave of CTAs (one per",
             "sequence and KV head) over the SMs; `ramp` is the stream's ramp, paid in full once the SMs stream",
             "`ramp bytes` each, in proportion below that; `t0` is per call, outside the kernel, not used by the",
             "serving model. Errors: of the measured time; signed: median of predicted / measured - 1. Without ramp:",
             "the law the serving model charged before (the same law, no ramp, refitted): its long streams run at",
             "one fraction that also has to cover short ones, so a long cache over many CTAs comes out slow and a",
             "short one fast.", "",
             "| GPU | KV cache | calls | fraction | cta (us) | ramp (us) | ramp bytes (MB per SM) | t0 (us) | "
             "median error | p90 error | signed | without ramp: fraction | cta (us) | median | p90 | signed | "
             "catalog entry |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for gpu, per in fits.items():
        for kv, r in per.items():
            cat = "-" if not r["catalog"] else _entry_text(r["catalog"])
            lines.append(f"| {gpu} | {kv} | {r['calls']} | {r['fraction']:.3f} | {r['cta_s'] * 1e6:.2f} | "
                         f"{r['ramp_s'] * 1e6:.1f} | {r['ramp_bytes'] / 1e6:.2f} | {r['t0_s'] * 1e6:.1f} | "
                         f"{r['median_error']:.1%} | {r['p90_error']:.1%} | {r['signed_error']:+.1%} | "
                         f"{r['bare_fraction']:.3f} | {r['bare_cta_s'] * 1e6:.2f} | {r['bare_median_error']:.1%} | "
                         f"{r['bare_p90_error']:.1%} | {r['bare_signed_error']:+.1%} | {cat} |")
    return "\n".join(lines) + "\n"


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", nargs="+", default=list(GPUS))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "decode_attention.md")
    args = ap.parse_args(list(argv) if argv is not None else None)
    fits = {g: fit_gpu(g) for g in args.gpus}
    mla = {g: fit_gpu_mla(g) for g in args.gpus}
    text = report(fits) + mla_report(mla)
    args.out.write_text(text)
    print(text)
    print("catalog entries (decode_attention: KV-cache format -> [fraction, cta_s, ramp_s, ramp_bytes]):")
    for g, per in fits.items():
        print(f"  {g}: " + ", ".join("{}: [{}, {:.3g}, {:.3g}, {:.3g}]".format(kv, *catalog_entry(r))
                                     for kv, r in per.items()))
    print("catalog entries (decode_mla: KV-cache format -> [compute_fraction, fraction, io_fraction, cta_s]):")
    for g, per in mla.items():
        print(f"  {g}: " + ", ".join("{}: [{}, {}, {}, {:.3g}]".format(kv, *mla_catalog_entry(r)) for kv, r in per.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
