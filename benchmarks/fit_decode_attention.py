"""The decode attention kernel law of the serving model, fitted on NVIDIA's published kernel timings (issue #10).

A decode attention kernel (TensorRT-LLM's XQA and trtllm-gen generation kernels, FlashInfer's decode) runs one query
token per sequence over that sequence's cached K and V. A grouped-query call gives each sequence and KV head a CTA
(the group's query heads share it; long caches split over more CTAs when there are fewer than SMs), which loads
the queries, streams the cached keys and values, and writes the outputs. Streaming is bandwidth-bound; around it
each CTA pays a fixed cost (query load, the softmax's final rescale and the split reduction, output write) however
short the cache, so a large batch of short caches runs far below the bandwidth the bytes alone would take. Per call
of ``batch`` sequences, ``heads`` query heads and ``kv_heads`` KV heads of head_dim ``d`` over ``kv_len`` cached
tokens in a ``b``-byte format, the law is the one the serving model charges (``co_design.perf.ops
.decode_attention_time_s``)::

    time = t0 + bytes / (fraction * hbm) + ceil(batch * kv_heads / sms) * cta_s
    bytes = batch * (2 d kv_heads (kv_len b + 2 + b) + 2 d heads * 2)     (cache read, new K/V, q in, o out)

``hbm``, ``sms``: the catalog GPU's peak HBM bandwidth and SM count; ``fraction``: of that bandwidth, reached while
streaming, per KV-cache format; ``cta_s``: seconds per wave of CTAs, one per GPU (a CTA's fixed work does not
depend on the cache's format, and one value keeps a narrower cache from being charged a slower kernel); ``t0``:
seconds per call outside the kernel (the timed op's launch, its host side and the small kernels beside it), fitted
so it does not bias the other two, and not carried into the serving model, which charges launches itself. The fit
is a bounded least-squares on the log of predicted over measured time over both formats' calls (``t0, cta_s >=
0``, ``fraction <= 1``), so short calls weigh as much as long ones. The report sets it beside a flat law (the bytes
at one refitted fraction of the bandwidth, no per-CTA cost, ``t0`` refitted) and beside the fraction the serving
model streamed the cache at before (the GPU's ``memory_efficiency``).

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
from co_design.perf.ops import decode_attention_time_s  # noqa: E402
from co_design.perf.roofline import bytes_per_element  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "kernels"
FORMAT = "co-design published decode attention v1"
HEAD_DIM = 128  # every call in the data
GPUS = ("h100", "h200", "b200", "b300", "gb200", "gb300")
MIN_KV_LEN = 128  # the fit's calls: caches a serving step reads (prompts of 128 tokens and up)
Call = tuple[int, int, int, int, float]  # (batch, heads, kv_heads, kv_len, seconds)


def call_bytes(batch: int, heads: int, kv_heads: int, kv_len: int, kv_cache: str) -> float:
    """Bytes one call moves (module docstring): the cached K and V, the new token's K and V read in bf16 and
    written to the cache, the bf16 queries in and outputs out; the serving model's ``attention_decode`` IO."""
    b = bytes_per_element(kv_cache)
    return batch * (2 * HEAD_DIM * kv_heads * (kv_len * b + 2 + b) + 2 * HEAD_DIM * heads * 2)


def predict_s(call: Sequence[float], kv_cache: str, hbm: float, sms: int, fraction: float, cta_s: float,
              t0: float) -> float:
    """Seconds of one call ``(batch, heads, kv_heads, kv_len, ...)`` under the law (module docstring)."""
    batch, heads, kv_heads, kv_len = (int(x) for x in call[:4])
    return t0 + decode_attention_time_s(call_bytes(batch, heads, kv_heads, kv_len, kv_cache), batch * kv_heads, hbm,
                                        sms, fraction, cta_s)


def fit(calls: Mapping[str, Sequence[Call]], hbm: float, sms: int, per_cta: bool = True) -> dict[str, dict[str, float]]:
    """Per KV-cache format of ``calls`` (format -> its calls): ``fraction``, ``cta_s`` (one for every format: a
    CTA's fixed work does not depend on the cache's format; 0 without ``per_cta``, the flat law), ``t0`` and the
    median and 90th-percentile absolute error (fraction of the measured time) of the law on that format's calls.
    The least-squares fit of ``log(predicted / measured)`` over every call (a 10 us call weighs as much as a 10 ms
    one), each ``fraction`` at most 1."""
    kvs = list(calls)
    cols = []  # per format: (calls' times, seconds at the full bandwidth, CTA waves)
    for kv in kvs:
        cs = calls[kv]
        cols.append((np.array([c[-1] for c in cs]), np.array([call_bytes(*c[:4], kv) for c in cs]) / hbm,
                     np.array([decode_attention_time_s(0.0, c[0] * c[2], hbm, sms, 1.0, 1.0) for c in cs])))

    def residual(p: np.ndarray) -> np.ndarray:  # p: cta (us), then t0 (us) and fraction per format
        cta = p[0] * 1e-6 if per_cta else 0.0
        return np.concatenate([np.log((p[1 + 2 * i] * 1e-6 + cta * waves + stream / p[2 + 2 * i]) / times)
                               for i, (times, stream, waves) in enumerate(cols)])

    n = len(kvs)
    sol = least_squares(residual, [1.0 if per_cta else 0.0] + [5.0, 0.8] * n,
                        bounds=([0.0] + [0.0, 0.05] * n, [1e3] + [1e3, 1.0] * n), xtol=1e-12, ftol=1e-12, gtol=1e-12).x
    cta_s = float(sol[0]) * 1e-6 if per_cta else 0.0
    out = {}
    for i, kv in enumerate(kvs):
        t0, fraction = float(sol[1 + 2 * i]) * 1e-6, float(sol[2 + 2 * i])
        errs = sorted(abs(predict_s(c, kv, hbm, sms, fraction, cta_s, t0) / c[-1] - 1) for c in calls[kv])
        out[kv] = {"fraction": fraction, "cta_s": cta_s, "t0_s": t0, "median_error": statistics.median(errs),
                   "p90_error": errs[int(0.9 * (len(errs) - 1))]}
    return out


def load(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT!r} file (format {doc.get('format')!r})")
    return doc


def calls_by_format(doc: dict[str, Any]) -> dict[str, list[Call]]:
    """``KV-cache format -> [(batch, heads, kv_heads, kv_len, seconds), ...]`` of a decode-attention document."""
    cols = doc["columns"]
    ix = [cols.index(c) for c in ("batch", "heads", "kv_heads", "kv_len")]
    out: dict[str, list[Call]] = {}
    for r in doc["rows"]:
        b, h, kv, n = (int(r[i]) for i in ix)
        out.setdefault(r[cols.index("kv_cache")], []).append((b, h, kv, n, float(r[cols.index("time_s")])))
    return out


def catalog_entry(r: dict[str, float]) -> tuple[float, float]:
    """The catalog's ``decode_attention`` entry of a fit: the fraction to 3 decimals, ``cta_s`` to 0.01 us."""
    return round(r["fraction"], 3), round(r["cta_s"] * 1e6, 2) / 1e6


def fit_gpu(name: str, data: Path = DATA) -> dict[str, dict[str, Any]]:
    """Per KV-cache format: the fit (:func:`fit`), the flat law's errors and the catalog's entry, for one GPU."""
    gpu = get_gpu(name)
    calls = {kv: [c for c in every if c[3] >= MIN_KV_LEN]
             for kv, every in calls_by_format(load(data / f"decode_attention_{name}.json")).items()}
    law = fit(calls, gpu.hbm_bytes_per_s, gpu.sms)
    flat = fit(calls, gpu.hbm_bytes_per_s, gpu.sms, per_cta=False)
    out: dict[str, dict[str, Any]] = {}
    for kv, res in law.items():
        out[kv] = {**res, "calls": len(calls[kv]), "flat_fraction": flat[kv]["fraction"],
                   "flat_median_error": flat[kv]["median_error"], "flat_p90_error": flat[kv]["p90_error"],
                   "catalog": list(gpu.decode_attention.get(kv, ())) or None, "before": gpu.memory_efficiency}
    return out


def report(fits: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = ["# Decode attention kernel law: fitted on NVIDIA's published kernel timings", "",
             "`python benchmarks/fit_decode_attention.py`. Calls: AIConfigurator's TensorRT-LLM 1.3.0rc20",
             "generation-attention table (`benchmarks/data/kernels/decode_attention_<gpu>.json`, head_dim 128, no",
             "window, bf16 attention over a bf16 or FP8 KV cache, 2-16 query heads per KV head, batch 1-2048; fitted on",
             f"the calls over {MIN_KV_LEN}-131072 cached tokens, those a serving step reads). Law and fit: the script's docstring. `fraction` is of the GPU's peak HBM bandwidth;",
             "`cta` is seconds per wave of CTAs (one per sequence and KV head) over the SMs; `t0` is per call,",
             "outside the kernel, not used by the serving model. Errors: absolute, of the measured time. Flat: the",
             "bytes at one fraction of the bandwidth, no per-CTA cost (as the serving model charged before;",
             "fraction and t0 refitted). Before: the fraction of the bandwidth the serving model streamed the cache",
             "at before the law (the GPU's `memory_efficiency`, a microbenchmark figure, times the fitted runtime",
             "fractions, 1.0 each).", "",
             "| GPU | KV cache | calls | fraction | cta (us) | t0 (us) | median error | p90 error | flat fraction | "
             "flat median | flat p90 | before | catalog entry |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for gpu, per in fits.items():
        for kv, r in per.items():
            cat = "-" if not r["catalog"] else f"[{r['catalog'][0]}, {r['catalog'][1] * 1e6:.2f} us]"
            lines.append(f"| {gpu} | {kv} | {r['calls']} | {r['fraction']:.3f} | {r['cta_s'] * 1e6:.2f} | "
                         f"{r['t0_s'] * 1e6:.1f} | {r['median_error']:.1%} | {r['p90_error']:.1%} | "
                         f"{r['flat_fraction']:.3f} | {r['flat_median_error']:.1%} | {r['flat_p90_error']:.1%} | "
                         f"{r['before']:.2f} | {cat} |")
    return "\n".join(lines) + "\n"


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", nargs="+", default=list(GPUS))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "decode_attention.md")
    args = ap.parse_args(list(argv) if argv is not None else None)
    fits = {g: fit_gpu(g) for g in args.gpus}
    text = report(fits)
    args.out.write_text(text)
    print(text)
    print("catalog entries (decode_attention: KV-cache format -> [fraction, cta_s]):")
    for g, per in fits.items():
        print(f"  {g}: " + ", ".join(f"{kv}: [{catalog_entry(r)[0]}, {catalog_entry(r)[1]:.3g}]" for kv, r in per.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
