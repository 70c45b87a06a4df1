"""Calibrate the roofline model's GPU numbers on the CUDA GPU at hand (issue #10 item 7).

Usage (from the repository root)::

    python benchmarks/calibrate_gpu.py --hardware h100 [--out benchmarks/results/calibration] [--quick]
    python benchmarks/calibrate_gpu.py --from-json benchmarks/results/calibration/calibration_h100.json
    python benchmarks/calibrate_gpu.py --from-json benchmarks/data/kernels/b200.json \
        --out benchmarks/results/calibration_published --no-json

The last form fits NVIDIA's published kernel measurements (AIConfigurator's perf database, copied
by ``benchmarks/published_kernels.py``) instead of a run of this script; ``--no-json`` leaves the
measurements where they are instead of copying them into ``--out``.

``--hardware`` names the catalog GPU the device is (default: guessed from
``torch.cuda.get_device_name()``: "NVIDIA H100 80GB HBM3" -> h100, "NVIDIA H200" -> h200,
"NVIDIA B200" -> b200; the script refuses when it cannot guess). Without a CUDA device it
exits with status 2; ``--from-json`` redoes the fit and the report from a saved run on any
machine, measuring nothing. ``--quick`` runs a smaller sweep (under 2 minutes on an H100).

What is measured (CUDA events around each call, a few warm-up calls, the median of N
calls, L2 flushed before every call by writing a buffer of 4x the catalog's ``l2_bytes``):

* GEMMs ``(M x K) @ (K x N)`` in nn.Linear's layout (weights stored ``N x K``), M in
  {1, 16, 64, 128, 129, 256, 512, 1024, 4096, 8192} (128 -> 129 crosses a tile row),
  N in {4096, 4224, 5120, 8192, 14336, 28672} (4096 + 128 crosses a tile column and, with
  the tile counts, a wave), K in {4096, 8192}: bf16 via ``torch.matmul``; fp8 (e4m3
  operands, per-tensor fp32 scales, fast accumulation) via ``torch._scaled_mm`` on sm_89+; nvfp4
  (``float4_e2m1fn_x2`` operands, ``float8_e4m3fn`` scales per 16-element block) via
  ``torch._scaled_mm`` on sm_100+ when the installed torch has it. A precision the
  catalog GPU has no tensor-core rate for is skipped; a case the kernel library refuses is
  recorded as "unsupported: <reason>", never a crash.
* HBM: ``dst.copy_(src)`` (bytes moved = 2 x buffer) from 64 KiB (kernel-overhead probes)
  to 2 GiB, and a read-only ``sum`` of a float32 buffer (bytes moved = buffer).
* Attention: ``torch.nn.functional.scaled_dot_product_attention`` in bf16, 32 heads of
  128: causal prefill (batch 1-8, sequence 1k-8k) and decode (one query over a 1k-32k KV
  cache). This times PyTorch's SDPA kernels (FlashAttention-2 class on Hopper, not FA3),
  so the fitted ``attention_efficiency`` is that of SDPA. The serving model's prompt attention
  follows the GPU's ``prefill_attention`` law instead where the catalog has one for the
  precision (the runtimes' FMHA, fitted by ``fit_prefill_attention.py`` on NVIDIA's published
  timings; SDPA is another kernel); this file's ``attention_efficiency`` sets the rest. Decode
  attention likewise follows the GPU's ``decode_attention`` law for the KV-cache format
  (``fit_decode_attention.py``); the measured decode cases are reported, not fitted to it.
* All-reduce (bf16, 1 MiB-1 GiB, NCCL, every visible GPU) when ``torch.cuda.device_count()
  > 1``, in worker processes started by ``torch.multiprocessing.spawn``; otherwise
  recorded as "skipped: one GPU".

Predictions (the catalog GPU "before", the fitted one "after"), with the functions the
model itself uses: GEMM ``co_design.perf.roofline.gemm(gpu, m, n, k, weights=p,
activations=p).time_s``; HBM ``bytes / (hbm_bytes_per_s * memory_efficiency) +
kernel_overhead_s``; attention ``roofline(FLOPs / (peak bf16 * attention_efficiency),
bytes / (hbm_bytes_per_s * memory_efficiency), kernel_overhead_s)`` with the FLOPs and
FlashAttention IO of ``co_design.perf.ops`` (prefill ``2 * heads * (d_qk + d_v) * pairs``,
pairs = L(L+1)/2 per sequence; Q, K, V and O moved once); all-reduce
``co_design.perf.comm.collective_time_s("all_reduce", bytes, gpus, gpu, algorithm="two_shot")`` (NCCL
at MiB sizes pays more than one synchronization; the model's two-shot form has two).

How each field is fitted (pure Python, :func:`fit`; the first four alternate for three
rounds since each uses the others, from the catalog values):

* ``memory_efficiency``: median over the large HBM cases (predicted memory time >= 10
  x the overhead and >= 10 us) of ``bytes / ((measured - kernel_overhead_s) * hbm_bytes_per_s)``.
* ``kernel_overhead_s``: over the smallest one-kernel cases (bf16 GEMM, HBM, attention whose
  predicted time without overhead is <= 1 us; else the 5 smallest), the median of measured minus
  predicted-without-overhead, clamped at >= 0. Quantized GEMMs are left out: timed as a runtime
  runs them (``benchmarks/published_kernels.py``), an fp8 or nvfp4 linear layer includes its
  activation-quantization kernels (13 us for the smallest fp8 GEMMs on H100, 4 us for bf16).
* ``gemm_efficiency``: over the large compute-bound GEMMs (predicted compute time >= 2 x
  memory time and >= 10 x overhead and >= 10 us), each case's efficiency is
  ``gemm_efficiency * compute_s / (measured - overhead)`` (tile and wave quantization
  stay in the model); ``gemm_efficiency`` is the value that minimises the median absolute
  log error over all those cases (a log grid over [0.02, 1] plus the per-case medians,
  refined by golden-section search), and ``gemm_efficiency_by_precision`` the same, per
  precision, over that precision's cases (fp8 and nvfp4 GEMMs reach less of their peaks
  than bf16 ones: 0.51 and 0.39 against 0.70 on B200, ``benchmarks/results/calibration_published``).
* ``attention_efficiency``: median over the compute-bound prefill cases (same test) of
  ``FLOPs / (peak bf16 * (measured - overhead))``. Decode is memory-bound; it is reported,
  not fitted.
* ``collective_efficiency`` and ``collective_latency_s`` (only when an NCCL all-reduce was
  measured; cases with an ``"algorithm"`` other than ``"two_shot"``, e.g. a runtime's own
  all-reduce predicted with the model's one-shot / two-shot choice, are reported, not fitted):
  weighted least squares (weights 1/measured^2, i.e. relative errors) of
  ``measured = 2 latency + 2 (n-1)/n * bytes / link_peak / efficiency`` (two-shot: two steps).

``gemm_tiles`` (``[rows, cols, sms_per_tile]`` or ``[rows, cols, sms_per_tile, rate]``)
is not fitted: per-tile rates cannot be separated robustly from the global efficiency
with a sweep this size. The report shows, per tile the model picks, the median
measured/predicted ratio after calibration, which is where a per-tile rate would come from.

Outputs in ``--out`` (default ``benchmarks/results/calibration``):

* ``<gpu>.yaml``: a catalog override file (``name: <gpu>``, no ``base``, so it replaces
  those numbers of the catalog GPU) with each fitted field as ``{value, source}``;
* ``calibration_<gpu>.md``: per class of case, each shape's measured time, predicted
  before and after, errors before and after, and the median absolute error per class;
* ``calibration_<gpu>.json``: the raw measurements (input of ``--from-json``).

Applying the result: ``co-design predict`` looks GPUs up with
``co_design.hardware.get_gpu``, which reads every ``*.yaml`` in the directories of
``CO_DESIGN_HARDWARE_PATH``, so::

    CO_DESIGN_HARDWARE_PATH=benchmarks/results/calibration co-design predict model.yaml --hardware h100

(or ``co_design.hardware.load_gpu("benchmarks/results/calibration/h100.yaml")`` in Python).
Note "before" is the GPU as ``get_gpu`` returns it when the script runs: with an earlier
calibration already on ``CO_DESIGN_HARDWARE_PATH``, that one.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from co_design.hardware import GPU, get_gpu, list_gpus, load_gpu
from co_design.perf.comm import collective_time_s, link_bytes_per_s
from co_design.perf.roofline import gemm, roofline

if TYPE_CHECKING:
    import torch

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "calibration"
FORMAT = "co-design calibrate_gpu v1"
FITTED_FIELDS = ("gemm_efficiency", "memory_efficiency", "attention_efficiency", "kernel_overhead_s",
                 "collective_efficiency", "collective_latency_s")
GEMM_PRECISIONS = ("bf16", "fp8", "nvfp4")  # in the order they are measured
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PROBE_S = 1e-6  # cases predicted to do <= 1 us of work (overhead aside) measure the overhead
LARGE_S = 10e-6  # "large" cases: >= 10 us of predicted work (and >= 10 x the overhead)
ROUNDS = 3  # rounds of the alternating fit (memory -> overhead -> gemm -> attention)
SIG_DIGITS = 4  # significant digits of the written values


# ----------------------------------------------------------------------------- sweep and cases


@dataclass(frozen=True)
class Sweep:
    """The cases to measure. Sizes in elements unless named ``*_bytes``; ``prefill`` is
    (batch, sequence length), ``decode`` (batch, KV length)."""

    gemm_m: tuple[int, ...]
    gemm_n: tuple[int, ...]
    gemm_k: tuple[int, ...]
    copy_bytes: tuple[int, ...]  # buffer sizes of dst.copy_(src); bytes moved = 2x
    read_bytes: tuple[int, ...]  # buffer sizes of a float32 sum; bytes moved = 1x
    prefill: tuple[tuple[int, int], ...]
    decode: tuple[tuple[int, int], ...]
    all_reduce_bytes: tuple[int, ...]
    heads: int = 32
    head_dim: int = 128
    warmup: int = 3  # untimed calls before timing
    reps: int = 15  # timed calls; the median is kept
    all_reduce_iters: int = 10  # back-to-back all-reduces per timed call (amortizes rank skew)


FULL = Sweep(
    gemm_m=(1, 16, 64, 128, 129, 256, 512, 1024, 4096, 8192),
    gemm_n=(4096, 4096 + 128, 5120, 8192, 14336, 28672),
    gemm_k=(4096, 8192),
    copy_bytes=(64 * KiB, 256 * KiB, 1 * MiB, 256 * MiB, 2 * GiB),
    read_bytes=(256 * MiB, 2 * GiB),
    prefill=((1, 1024), (1, 4096), (1, 8192), (4, 2048), (8, 1024), (8, 4096)),
    decode=((1, 1024), (1, 8192), (1, 32768), (16, 4096), (16, 32768)),
    all_reduce_bytes=(1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB),
)
QUICK = Sweep(
    gemm_m=(1, 64, 128, 129, 1024, 4096),
    gemm_n=(4096, 4096 + 128, 14336),
    gemm_k=(4096,),
    copy_bytes=(64 * KiB, 256 * KiB, 1 * MiB, 1 * GiB),
    read_bytes=(1 * GiB,),
    prefill=((1, 1024), (1, 4096), (4, 4096)),
    decode=((1, 4096), (16, 32768)),
    all_reduce_bytes=(1 * MiB, 16 * MiB, 256 * MiB),
    warmup=2,
    reps=7,
    all_reduce_iters=5,
)


@dataclass(frozen=True)
class Measurement:
    """One case and its measured time.

    ``kind`` is ``"gemm"`` (params precision, m, n, k), ``"hbm"`` (op "copy" | "read",
    bytes = bytes moved), ``"attention"`` (phase "prefill" | "decode", batch, heads,
    head_dim, q_len, kv_len, causal) or ``"all_reduce"`` (bytes per GPU, gpus).
    ``time_s`` is the median measured time in seconds (None until measured); ``status`` is
    ``"ok"`` or says why there is no time ("unsupported: ...", "skipped: ...", "failed: ...").
    """

    kind: str
    params: Mapping[str, Any]
    time_s: float | None = None
    status: str = "ok"

    @property
    def ok(self) -> bool:
        """Measured and usable by the fit."""
        return self.status == "ok" and self.time_s is not None and self.time_s > 0

    @property
    def seconds(self) -> float:
        """The measured time in seconds; only for measured (``ok``) cases."""
        assert self.time_s is not None, f"{self.group} {self.shape} was not measured ({self.status})"
        return self.time_s

    @property
    def group(self) -> str:
        """Class of case for the report: "gemm bf16", "hbm copy", "attention decode", "all_reduce"."""
        p = self.params
        sub = {"gemm": p.get("precision"), "hbm": p.get("op"), "attention": p.get("phase"),
               "all_reduce": p.get("algorithm")}.get(self.kind)
        return f"{self.kind} {sub}" if sub else self.kind

    @property
    def shape(self) -> str:
        """The case's shape as text for the report."""
        p = self.params
        if self.kind == "gemm" and {"m", "n", "k"} <= set(p):
            return f"M={p['m']} N={p['n']} K={p['k']}"
        if self.kind == "hbm" and "bytes" in p:
            return _bytes_label(p["bytes"]) + " moved"
        if self.kind == "attention" and "batch" in p:
            return (f"B={p['batch']} H={p['heads']} D={p['head_dim']} q={p['q_len']} kv={p['kv_len']}"
                    + (" causal" if p.get("causal") else ""))
        if self.kind == "all_reduce" and "bytes" in p:
            return f"{_bytes_label(p['bytes'])} x {p['gpus']} GPUs"
        return ", ".join(f"{k}={v}" for k, v in p.items())

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "params": dict(self.params), "time_s": self.time_s, "status": self.status}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> "Measurement":
        if not isinstance(row, Mapping) or "kind" not in row or not isinstance(row.get("params"), Mapping):
            raise ValueError(f"a measurement needs 'kind' and a 'params' mapping, got {row!r}")
        t = row.get("time_s")
        m = cls(str(row["kind"]), dict(row["params"]), None if t is None else float(t), str(row.get("status", "ok")))
        if m.kind not in _PARAMS:
            raise ValueError(f"unknown measurement kind {m.kind!r}; use one of {sorted(_PARAMS)}")
        missing = [k for k in _PARAMS[m.kind] if k not in m.params]
        if m.ok and missing:
            raise ValueError(f"measured {m.kind} case {dict(m.params)} lacks {missing}")
        return m


_PARAMS = {"gemm": ("precision", "m", "n", "k"), "hbm": ("op", "bytes"), "all_reduce": ("bytes", "gpus"),
           "attention": ("phase", "batch", "heads", "head_dim", "q_len", "kv_len")}  # needed by a measured case


def _bytes_label(n: float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:g} B"


def plan(gpu: GPU, sweep: Sweep, *, gpus: int = 1) -> list[Measurement]:
    """The cases of ``sweep`` for ``gpu`` (times not measured yet).

    GEMMs run at every precision the GPU has a tensor-core rate for; the others get one
    "skipped" entry each. All-reduce cases need ``gpus > 1``, else one "skipped: one GPU" entry.
    """
    cases: list[Measurement] = []
    for p in GEMM_PRECISIONS:
        if p not in gpu.peak_flops_per_s:
            why = f"skipped: {gpu.name} has no {p} rate in the catalog"
            cases.append(Measurement("gemm", {"precision": p}, status=why))
            continue
        cases += [Measurement("gemm", {"precision": p, "m": m, "n": n, "k": k})
                  for k in sweep.gemm_k for n in sweep.gemm_n for m in sweep.gemm_m]
    cases += [Measurement("hbm", {"op": "copy", "bytes": 2 * b}) for b in sweep.copy_bytes]
    cases += [Measurement("hbm", {"op": "read", "bytes": b}) for b in sweep.read_bytes]
    h, d = sweep.heads, sweep.head_dim
    cases += [Measurement("attention", {"phase": "prefill", "batch": b, "heads": h, "head_dim": d, "q_len": s,
                                        "kv_len": s, "causal": True}) for b, s in sweep.prefill]
    cases += [Measurement("attention", {"phase": "decode", "batch": b, "heads": h, "head_dim": d, "q_len": 1,
                                        "kv_len": s, "causal": False}) for b, s in sweep.decode]
    if gpus > 1:
        cases += [Measurement("all_reduce", {"bytes": b, "gpus": gpus}) for b in sweep.all_reduce_bytes]
    else:
        cases.append(Measurement("all_reduce", {"gpus": gpus}, status="skipped: one GPU"))
    return cases


# ----------------------------------------------------------------------------- prediction (pure Python)


def attention_work(params: Mapping[str, Any]) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of one attention call, as ``co_design.perf.ops`` counts them.

    FLOPs = 2 * heads * (d_qk + d_v) * pairs * batch (QK^T and PV), pairs = L(L+1)/2 for a
    causal prompt of L tokens, q_len * kv_len otherwise. Bytes (bf16, FlashAttention IO):
    Q and O once per query token, K and V once per key token: 2 * batch * heads * head_dim *
    (2 q_len + 2 kv_len).
    """
    b, h, d = params["batch"], params["heads"], params["head_dim"]
    lq, lk = params["q_len"], params["kv_len"]
    pairs = lq * (lq + 1) / 2 if params.get("causal") and lq == lk else lq * lk
    flops = 2.0 * h * (d + d) * pairs * b
    nbytes = 2.0 * b * h * d * (2 * lq + 2 * lk)
    return flops, nbytes


def predict_s(gpu: GPU, m: Measurement) -> float:
    """Seconds the model predicts for case ``m`` on ``gpu`` (formulas in the module docstring)."""
    p = m.params
    if m.kind == "gemm":
        prec = p["precision"]
        return gemm(gpu, p["m"], p["n"], p["k"], weights=prec, activations=prec).time_s
    bw = gpu.hbm_bytes_per_s * gpu.memory_efficiency  # bytes/s
    if m.kind == "hbm":
        return roofline(0.0, p["bytes"] / bw, gpu.kernel_overhead_s)[0]
    if m.kind == "attention":
        flops, nbytes = attention_work(p)
        compute_s = flops / (gpu.peak_flops_per_s["bf16"] * gpu.attention_efficiency)
        return roofline(compute_s, nbytes / bw, gpu.kernel_overhead_s)[0]
    if m.kind == "all_reduce":
        return collective_time_s("all_reduce", p["bytes"], p["gpus"], gpu, algorithm=p.get("algorithm", "two_shot"))
    raise ValueError(f"unknown measurement kind {m.kind!r}; use gemm, hbm, attention or all_reduce")


def _work_s(gpu: GPU, m: Measurement) -> float:
    """Predicted seconds without the per-kernel overhead (GEMM, HBM, attention cases)."""
    return predict_s(gpu, m) - gpu.kernel_overhead_s


def _abs_log_error(gpu: GPU, ms: Sequence[Measurement]) -> float:
    """Median |log(predicted / measured)| over ``ms`` (0 for none)."""
    if not ms:
        return 0.0
    return statistics.median(abs(math.log(predict_s(gpu, m) / m.seconds)) for m in ms)


def errors_by_group(gpu: GPU, measurements: Iterable[Measurement]) -> dict[str, float]:
    """Median absolute relative error |predicted / measured - 1| per class of case (a fraction)."""
    by: dict[str, list[float]] = {}
    for m in measurements:
        if m.ok:
            by.setdefault(m.group, []).append(abs(predict_s(gpu, m) / m.seconds - 1.0))
    return {g: statistics.median(v) for g, v in by.items()}


# ----------------------------------------------------------------------------- fit (pure Python)


@dataclass(frozen=True)
class FitResult:
    """Fitted GPU fields (rounded to 4 significant digits), how many cases each came from, and
    ``gemm_efficiency_by_precision`` as fitted per precision (with its case counts)."""

    values: Mapping[str, float]
    cases: Mapping[str, int]
    gemm_by_precision: Mapping[str, float] = field(default_factory=dict)
    gemm_cases_by_precision: Mapping[str, int] = field(default_factory=dict)

    def apply(self, gpu: GPU) -> GPU:
        """``gpu`` with the fitted fields (its per-precision GEMM efficiencies replaced when any was fitted)."""
        if self.gemm_by_precision:
            return gpu.replace(**self.values, gemm_efficiency_by_precision=dict(self.gemm_by_precision))
        return gpu.replace(**self.values)


def _round_sig(x: float, digits: int = SIG_DIGITS) -> float:
    return float(f"{x:.{digits}g}")


def _large(gpu: GPU, work_s: float) -> bool:
    return work_s >= max(10 * gpu.kernel_overhead_s, LARGE_S)


def _minimise(f: Callable[[float], float], lo: float, hi: float, extra: Iterable[float] = (), points: int = 121,
              refine: int = 40) -> float:
    """argmin of ``f`` on [lo, hi]: a log-spaced grid plus ``extra``, then golden-section
    search between the best point's neighbours; the best value seen wins (f need not be unimodal)."""
    xs = sorted({lo * (hi / lo) ** (i / (points - 1)) for i in range(points)} | {x for x in extra if lo <= x <= hi})
    ys = [f(x) for x in xs]
    i = min(range(len(xs)), key=lambda j: (ys[j], xs[j]))
    best_x, best_y = xs[i], ys[i]
    a, b = xs[max(i - 1, 0)], xs[min(i + 1, len(xs) - 1)]
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(refine):
        for x, y in ((c, fc), (d, fd)):
            if y < best_y:
                best_x, best_y = x, y
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    for x, y in ((c, fc), (d, fd)):
        if y < best_y:
            best_x, best_y = x, y
    return best_x


def _fit_memory(gpu: GPU, ms: Sequence[Measurement]) -> tuple[float, int] | None:
    """memory_efficiency from the large HBM cases: bytes / ((measured - overhead) * peak bandwidth)."""
    est = []
    for m in ms:
        if m.kind == "hbm" and _large(gpu, _work_s(gpu, m)) and m.seconds > gpu.kernel_overhead_s:
            est.append(m.params["bytes"] / ((m.seconds - gpu.kernel_overhead_s) * gpu.hbm_bytes_per_s))
    return (min(1.0, statistics.median(est)), len(est)) if est else None


def _fit_overhead(gpu: GPU, ms: Sequence[Measurement]) -> tuple[float, int] | None:
    """kernel_overhead_s: median of (measured - predicted work) over the smallest one-kernel cases, >= 0
    (bf16 GEMMs, HBM, attention: a quantized GEMM may carry its activation-quantization kernels)."""
    one_kernel = [m for m in ms if m.kind in ("hbm", "attention") or (m.kind == "gemm" and m.params["precision"] == "bf16")]
    pool = sorted(((_work_s(gpu, m), m) for m in one_kernel), key=lambda x: x[0])
    probes = [(w, m) for w, m in pool if w <= PROBE_S]
    if len(probes) < 3:
        probes = pool[:5]
    if not probes:
        return None
    return max(0.0, statistics.median(m.seconds - w for w, m in probes)), len(probes)


def compute_bound_gemms(gpu: GPU, ms: Iterable[Measurement]) -> list[tuple[Measurement, float]]:
    """The measured GEMMs that are large and compute-bound on ``gpu`` (predicted compute time >= 2 x
    memory time, >= 10 x the overhead and >= 10 us), each with the gemm_efficiency that makes it exact:
    ``gpu.gemm_efficiency * compute_s / (measured - overhead)``, since compute_s scales as 1 / gemm_efficiency."""
    out = []
    for m in ms:
        if m.kind != "gemm" or not m.ok:
            continue
        p = m.params
        g = gemm(gpu, p["m"], p["n"], p["k"], weights=p["precision"], activations=p["precision"])
        busy = m.seconds - gpu.kernel_overhead_s
        if g.bound == "compute" and g.compute_s >= 2 * g.memory_s and _large(gpu, g.compute_s) and busy > 0:
            out.append((m, gpu.gemm_efficiency_at(p["precision"]) * g.compute_s / busy))
    return out


def gemm_efficiency_by_precision(gpu: GPU, ms: Iterable[Measurement]) -> dict[str, float]:
    """Per precision, the median of the per-case efficiencies of :func:`compute_bound_gemms`."""
    by: dict[str, list[float]] = {}
    for m, eff in compute_bound_gemms(gpu, ms):
        by.setdefault(m.params["precision"], []).append(eff)
    return {p: statistics.median(v) for p, v in by.items()}


def _fit_gemm(gpu: GPU, ms: Sequence[Measurement]) -> tuple[float, int] | None:
    """gemm_efficiency: the value with the least median absolute log error over the large compute-bound GEMMs."""
    picked = compute_bound_gemms(gpu, ms)
    if not picked:
        return None
    chosen = [m for m, _ in picked]
    candidates = [*gemm_efficiency_by_precision(gpu, chosen).values(), statistics.median(e for _, e in picked)]
    best = _minimise(lambda e: _abs_log_error(gpu.replace(gemm_efficiency=e), chosen), 0.02, 1.0, extra=candidates)
    return best, len(chosen)


def _fit_attention(gpu: GPU, ms: Sequence[Measurement]) -> tuple[float, int] | None:
    """attention_efficiency: median over compute-bound prefill cases of FLOPs / (peak * (measured - overhead))."""
    est = []
    bw = gpu.hbm_bytes_per_s * gpu.memory_efficiency
    for m in ms:
        if m.kind != "attention":
            continue
        flops, nbytes = attention_work(m.params)
        compute_s = flops / (gpu.peak_flops_per_s["bf16"] * gpu.attention_efficiency)
        busy = m.seconds - gpu.kernel_overhead_s
        if compute_s >= 2 * nbytes / bw and _large(gpu, compute_s) and busy > 0:
            est.append(flops / (gpu.peak_flops_per_s["bf16"] * busy))
    return (min(1.0, statistics.median(est)), len(est)) if est else None


def _fit_collective(gpu: GPU, ms: Sequence[Measurement]) -> dict[str, tuple[float, int]]:
    """collective_efficiency and collective_latency_s from all-reduce times.

    x = 2 (n-1)/n * bytes / link peak (seconds at efficiency 1); measured = 2 latency + x / eff
    (two-shot: two synchronization steps): weighted least squares with weights 1 / measured^2
    (relative errors). With one message size only the efficiency is fitted (latency kept).
    """
    rows = []
    for m in ms:
        if m.kind == "all_reduce" and m.params.get("algorithm", "two_shot") == "two_shot":
            n = m.params["gpus"]
            peak = link_bytes_per_s(gpu.replace(collective_efficiency=1.0), n)
            rows.append((2.0 * (n - 1) / n * m.params["bytes"] / peak, m.seconds))
    if not rows:
        return {}
    if len({x for x, _ in rows}) < 2:
        lat = gpu.collective_latency_s
        est = [x / (t - 2 * lat) for x, t in rows if t > 2 * lat]
        return {"collective_efficiency": (min(1.0, statistics.median(est)), len(rows))} if est else {}
    w = [1.0 / t ** 2 for _, t in rows]
    s0, s1 = sum(w), sum(wi * x for wi, (x, _) in zip(w, rows))
    s2 = sum(wi * x * x for wi, (x, _) in zip(w, rows))
    t0, t1 = sum(wi * t for wi, (_, t) in zip(w, rows)), sum(wi * x * t for wi, (x, t) in zip(w, rows))
    slope = (s0 * t1 - s1 * t0) / (s0 * s2 - s1 * s1)
    lat = (t0 - slope * s1) / s0 / 2  # the intercept is two steps' latency
    if lat < 0:  # clamp and refit the slope through the origin
        lat, slope = 0.0, t1 / s2
    if slope <= 0:
        return {}
    return {"collective_efficiency": (min(1.0, 1.0 / slope), len(rows)), "collective_latency_s": (lat, len(rows))}


def fit(gpu: GPU, measurements: Iterable[Measurement], *, rounds: int = ROUNDS) -> FitResult:
    """Fit the model's GPU fields to ``measurements`` (unmeasured ones are ignored), starting from ``gpu``.

    Returns only the fields some case informs; values rounded to 4 significant digits.
    """
    ms = [m for m in measurements if m.ok]
    cur = gpu.replace(gemm_efficiency_by_precision={})  # one GEMM efficiency while the fields are fitted together
    raw: dict[str, float] = {}
    cases: dict[str, int] = {}
    steps: tuple[tuple[str, Callable[[GPU, Sequence[Measurement]], tuple[float, int] | None]], ...] = (
        ("memory_efficiency", _fit_memory), ("kernel_overhead_s", _fit_overhead),
        ("gemm_efficiency", _fit_gemm), ("attention_efficiency", _fit_attention))
    for _ in range(rounds):
        for name, step in steps:
            got = step(cur, ms)
            if got is not None:
                raw[name], cases[name] = got
                cur = cur.replace(**{name: raw[name]})
    for name, (value, n) in _fit_collective(cur, ms).items():
        raw[name], cases[name] = value, n
    values = {k: _round_sig(raw[k]) for k in FITTED_FIELDS if k in raw}
    by_prec: dict[str, float] = {}
    by_prec_cases: dict[str, int] = {}
    for prec in GEMM_PRECISIONS:
        got = _fit_gemm(cur, [m for m in ms if m.kind == "gemm" and m.params["precision"] == prec])
        if got is not None:
            by_prec[prec], by_prec_cases[prec] = _round_sig(got[0]), got[1]
    return FitResult(values, {k: cases[k] for k in values}, by_prec, by_prec_cases)


# ----------------------------------------------------------------------------- outputs


def _source(meta: Mapping[str, Any], n: int, extra: str = "") -> str:
    return (f"benchmarks/calibrate_gpu.py on {meta.get('name', 'unknown device')}, torch {meta.get('torch', '?')}, "
            f"CUDA {meta.get('cuda', '?')}, {meta.get('date', '?')}; {n} cases{extra}")


def write_override(path: Path, gpu: GPU, result: FitResult, meta: Mapping[str, Any]) -> Path:
    """Write the catalog override file for ``gpu`` and check that it loads back to the fitted values.

    Format of ``co_design/hardware/data/*.yaml``: ``name`` equal to the catalog GPU's and no
    ``base``, so :func:`co_design.hardware.load_gpu` and the ``CO_DESIGN_HARDWARE_PATH``
    catalog start from that GPU and replace only the fields written here.
    """
    import yaml

    doc: dict[str, Any] = {"name": gpu.name}
    for key, value in result.values.items():
        doc[key] = {"value": value, "source": _source(meta, result.cases[key])}
    if result.gemm_by_precision:
        doc["gemm_efficiency_by_precision"] = {
            p: {"value": v, "source": _source(meta, result.gemm_cases_by_precision[p], f" of {p}")}
            for p, v in result.gemm_by_precision.items()}
    header = (f"# Calibrated numbers for {gpu.name} written by benchmarks/calibrate_gpu.py; the other fields come\n"
              f"# from the catalog. Use: CO_DESIGN_HARDWARE_PATH=<this directory> co-design predict ... --hardware {gpu.name}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=200))
    loaded = load_gpu(path)
    wrong = {k: (getattr(loaded, k), v) for k, v in result.values.items() if getattr(loaded, k) != v}
    if result.gemm_by_precision and dict(loaded.gemm_efficiency_by_precision) != dict(result.gemm_by_precision):
        wrong["gemm_efficiency_by_precision"] = (dict(loaded.gemm_efficiency_by_precision), dict(result.gemm_by_precision))
    if wrong:  # our own invariant: the file must say what was fitted
        raise RuntimeError(f"{path} loads back different values (loaded, written): {wrong}")
    return path


def _us(t: float | None) -> str:
    return "-" if t is None else f"{t * 1e6:.4g}"


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def format_tiles(tiles: Iterable[Sequence[float]]) -> str:
    """``gemm_tiles`` as text, "rows x cols/SMs per tile", plus " @rate" when a tile gives a rate (the
    optional 4th element, fraction of the per-SM peak) other than 1."""
    out = []
    for t in tiles:
        s = f"{int(t[0])}x{int(t[1])}/{int(t[2])}"
        out.append(s + (f" @{t[3]:g}" if len(t) > 3 and float(t[3]) != 1.0 else ""))
    return ", ".join(out)


def _tile_table(gpu: GPU, ms: Sequence[Measurement]) -> list[str]:
    """Median measured / predicted (after calibration) of the compute-bound GEMMs, per tile the model picks."""
    by: dict[str, list[float]] = {}
    for m in ms:
        if m.kind == "gemm" and m.ok:
            p = m.params
            g = gemm(gpu, p["m"], p["n"], p["k"], weights=p["precision"], activations=p["precision"])
            if g.bound == "compute":
                by.setdefault("x".join(str(x) for x in g.tile), []).append(m.seconds / g.time_s)
    if not by:
        return []
    lines = ["", "## Compute-bound GEMMs by the tile the model picks (after calibration)", "",
             "Tile as `GemmCost.tile` gives it: rows x cols x K mode (1 data-parallel waves, 2-16 split-K ways, "
             "0 stream-K). A ratio above 1: the GPU is slower than the model with that tile, the evidence for a "
             "per-tile rate (the optional 4th element of `gemm_tiles`).", "",
             "| tile | cases | median measured / predicted |", "|---|---:|---:|"]
    lines += [f"| {t} | {len(v)} | {statistics.median(v):.3f} |" for t, v in sorted(by.items())]
    return lines


PAIR_BANDS = ((1.0, 1.1), (1.1, 1.25), (1.25, 1.5), (1.5, 2.0))


def ordered_by_band(pairs: Iterable[tuple[float, float, float, float]]
                    ) -> dict[tuple[float, float], tuple[float, int]]:
    """Per band of ``PAIR_BANDS``: (pairs the model orders as measured, pairs), from (measured a, measured b,
    predicted a, predicted b) tuples. The band is the measured ratio slower / faster; a measured tie or a ratio
    of 2 or more counts nowhere; a predicted tie counts half (a coin toss)."""
    counts = {band: [0.0, 0] for band in PAIR_BANDS}
    for ma, mb, pa, pb in pairs:
        ratio = max(ma, mb) / min(ma, mb)
        band = next((bd for bd in PAIR_BANDS if bd[0] <= ratio < bd[1]), None)
        if band is None or ratio == 1.0:
            continue
        counts[band][0] += 0.5 if pa == pb else float((pa > pb) == (ma > mb))
        counts[band][1] += 1
    return {band: (c[0], int(c[1])) for band, c in counts.items()}


def gemm_close_pairs(gpu: GPU, ms: Sequence[Measurement]) -> dict[str, dict[tuple[float, float], tuple[float, int]]]:
    """Per precision, :func:`ordered_by_band` of the pairs of measured GEMMs of that precision that share N and K
    and differ in M, or share M and differ in N or K: a shape change a search makes."""
    by: dict[str, list[tuple[Measurement, float]]] = {}
    for m in ms:
        if m.kind == "gemm" and m.ok:
            p = m.params
            by.setdefault(p["precision"], []).append((m, gemm(gpu, p["m"], p["n"], p["k"], weights=p["precision"],
                                                               activations=p["precision"]).time_s))

    def shape_change(x: Mapping[str, Any], y: Mapping[str, Any]) -> bool:
        return (x["n"], x["k"]) == (y["n"], y["k"]) or x["m"] == y["m"]

    return {prec: ordered_by_band((a.seconds, b.seconds, pa, pb)
                                  for i, (a, pa) in enumerate(cases) for b, pb in cases[i + 1:]
                                  if shape_change(a.params, b.params))
            for prec, cases in by.items()}


def _pairs_table(before: GPU, after: GPU, ms: Sequence[Measurement]) -> list[str]:
    pb, pa = gemm_close_pairs(before, ms), gemm_close_pairs(after, ms)
    if not pb:
        return []

    def cell(c: tuple[float, int]) -> str:
        return f"{c[0]:g}/{c[1]} ({100 * c[0] / c[1]:.0f} %)" if c[1] else "-"

    lines = ["", "## GEMM shape pairs the model orders as measured", "",
             "Pairs of one precision that share N and K, or share M: a shape change. Banded by the measured "
             "time ratio (slower / faster); a tie in the prediction counts half.", "",
             "| precision | " + " | ".join(f"{lo:g}-{hi:g}x before | after" for lo, hi in PAIR_BANDS) + " |",
             "|---|" + "---:|---:|" * len(PAIR_BANDS)]
    for prec in pb:
        lines.append(f"| {prec} | " + " | ".join(f"{cell(pb[prec][bd])} | {cell(pa[prec][bd])}" for bd in PAIR_BANDS) + " |")
    return lines


def format_report(before: GPU, after: GPU, result: FitResult, measurements: Sequence[Measurement],
                  meta: Mapping[str, Any]) -> str:
    """The Markdown report: fitted fields, per-class summary, per-shape tables, skipped cases."""
    ok = [m for m in measurements if m.ok]
    err_b, err_a = errors_by_group(before, ok), errors_by_group(after, ok)
    lines = [f"# Calibration of `{before.name}` on {meta.get('name', 'unknown device')}", "",
             f"torch {meta.get('torch', '?')}, CUDA {meta.get('cuda', '?')}, compute capability "
             f"{meta.get('capability', '?')}, {meta.get('date', '?')}; {len(ok)} measured cases"
             f"{' (quick sweep)' if meta.get('quick') else ''}. Written by `benchmarks/calibrate_gpu.py` "
             "(fit rules in its docstring). Catalog GEMM tiles: " + format_tiles(before.gemm_tiles) + ".", "",
             "## Fitted fields", "", "| field | catalog | fitted | cases |", "|---|---:|---:|---:|"]
    for k in FITTED_FIELDS:
        if k in result.values:
            lines.append(f"| {k} | {getattr(before, k):.4g} | {result.values[k]:.4g} | {result.cases[k]} |")
        else:
            lines.append(f"| {k} | {getattr(before, k):.4g} | (not measured) | 0 |")
    for prec, v in result.gemm_by_precision.items():
        lines.append(f"| gemm_efficiency_by_precision.{prec} | {before.gemm_efficiency_at(prec):.4g} | {v:.4g} "
                     f"| {result.gemm_cases_by_precision[prec]} |")
    if result.gemm_by_precision:
        lines += ["", "`gemm_efficiency` is fitted over every precision's large compute-bound GEMMs, "
                  "`gemm_efficiency_by_precision` over each precision's own; the model uses the latter."]
    lines += ["", "## Median absolute error per class", "", "| class | cases | before | after |", "|---|---:|---:|---:|"]
    groups = list(dict.fromkeys(m.group for m in ok))  # in measurement order
    lines += [f"| {g} | {sum(m.group == g for m in ok)} | {err_b[g] * 100:.1f}% | {err_a[g] * 100:.1f}% |" for g in groups]
    for g in groups:
        lines += ["", f"## {g}", "", "| shape | measured (us) | predicted before (us) | predicted after (us) "
                  "| error before | error after |", "|---|---:|---:|---:|---:|---:|"]
        for m in ok:
            if m.group == g:
                pb, pa = predict_s(before, m), predict_s(after, m)
                lines.append(f"| {m.shape} | {_us(m.time_s)} | {_us(pb)} | {_us(pa)} | {_pct(pb / m.seconds - 1)} "
                             f"| {_pct(pa / m.seconds - 1)} |")
        lines.append(f"| **median absolute error** | | | | {err_b[g] * 100:.1f}% | {err_a[g] * 100:.1f}% |")
    lines += _pairs_table(before, after, ok)
    lines += _tile_table(after, ok)
    skipped = [m for m in measurements if not m.ok]
    if skipped:
        lines += ["", "## Not measured", ""] + [f"- {m.group} {m.shape}: {m.status}" for m in skipped]
    return "\n".join(lines) + "\n"


def calibrate(gpu: GPU, measurements: Sequence[Measurement], meta: Mapping[str, Any], out: Path,
              *, save_json: bool = True) -> tuple[FitResult, dict[str, Path]]:
    """Fit, then write ``<gpu>.yaml``, ``calibration_<gpu>.md`` and (``save_json``) ``calibration_<gpu>.json``
    into ``out``. Returns the fit and the written paths by kind ("yaml", "report", "json")."""
    result = fit(gpu, measurements)
    after = result.apply(gpu)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"yaml": out / f"{gpu.name}.yaml", "report": out / f"calibration_{gpu.name}.md"}
    if result.values:
        write_override(paths["yaml"], gpu, result, meta)
    else:
        del paths["yaml"]
        print("calibrate_gpu: warning: no case informs any field; no override file written", file=sys.stderr)
    paths["report"].write_text(format_report(gpu, after, result, measurements, meta))
    if save_json:
        paths["json"] = out / f"calibration_{gpu.name}.json"
        save_measurements(paths["json"], gpu.name, measurements, meta)
    return result, paths


def save_measurements(path: Path, gpu_name: str, measurements: Sequence[Measurement], meta: Mapping[str, Any]) -> None:
    """The raw run as JSON: ``{"format", "gpu", "device": meta, "measurements": [...]}``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, "gpu": gpu_name, "device": dict(meta), "measurements": [m.to_json() for m in measurements]}
    path.write_text(json.dumps(doc, indent=1) + "\n")


def load_measurements(path: Path) -> tuple[str, dict[str, Any], list[Measurement]]:
    """Read a saved run: (catalog GPU name, device metadata, measurements). ValueError if malformed."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {str(path)!r}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("measurements"), list) or "gpu" not in doc:
        raise ValueError(f"{str(path)!r} is not a calibrate_gpu run: it needs 'gpu' and a 'measurements' list")
    return str(doc["gpu"]), dict(doc.get("device", {})), [Measurement.from_json(r) for r in doc["measurements"]]


# ----------------------------------------------------------------------------- measurement (CUDA only)

_NAME_RE = re.compile(r"\b(gb300|gb200|b300|b200|h200|h100)\b")


def guess_hardware(device_name: str) -> str | None:
    """The catalog GPU a CUDA device name denotes ("NVIDIA H100 80GB HBM3" -> "h100"), or None.

    Whole words only, so "NVIDIA GH200 480GB" (a different part) is not taken for an H200.
    """
    found = _NAME_RE.search(device_name.lower())
    return found.group(1) if found else None


class _Unsupported(Exception):
    """The device or the installed torch cannot run this case."""


class _CudaTimer:
    """Median seconds of a CUDA call: ``warmup`` untimed calls, then ``reps`` calls each between
    two CUDA events, L2 flushed before each by zeroing a buffer of ``flush_bytes``."""

    def __init__(self, flush_bytes: int, warmup: int, reps: int) -> None:
        import torch

        self.flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")
        self.warmup, self.reps = warmup, reps

    def __call__(self, fn: Callable[[], Any]) -> float:
        import torch

        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(self.reps)]
        for start, end in events:
            self.flush.zero_()  # writes 4 x L2: nothing of the operands stays cached
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in events) * 1e-3  # elapsed_time is in ms


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _gemm_op(prec: str, m: int, n: int, k: int, capability: tuple[int, int]) -> Callable[[], "torch.Tensor"]:
    """A call computing (m x k) @ (k x n) at ``prec`` (weights stored n x k, as nn.Linear keeps them)."""
    import torch

    dev = "cuda"
    if prec == "bf16":
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)  # (M, K)
        w_t = torch.randn(n, k, device=dev, dtype=torch.bfloat16).t()  # (K, N), column-major
        return lambda: torch.matmul(a, w_t)
    if not hasattr(torch, "_scaled_mm"):
        raise _Unsupported(f"torch {torch.__version__} has no torch._scaled_mm")
    if prec == "fp8":
        if capability < (8, 9):
            raise _Unsupported(f"fp8 tensor cores need sm_89 or newer; this device is sm_{capability[0]}{capability[1]}")
        a8 = torch.randn(m, k, device=dev, dtype=torch.bfloat16).to(torch.float8_e4m3fn)  # (M, K) row-major
        w8 = torch.randn(n, k, device=dev, dtype=torch.bfloat16).to(torch.float8_e4m3fn).t()  # (K, N) column-major
        one = torch.ones((), device=dev, dtype=torch.float32)  # per-tensor scales
        # fast accumulation, as serving's fp8 forward GEMMs run (torchao's float8 inference, TensorRT-LLM)
        fn = lambda: torch._scaled_mm(a8, w8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,  # noqa: E731
                                      use_fast_accum=True)
    elif prec == "nvfp4":
        if capability < (10, 0):
            raise _Unsupported(f"fp4 tensor cores need sm_100 or newer; this device is sm_{capability[0]}{capability[1]}")
        if not hasattr(torch, "float4_e2m1fn_x2"):
            raise _Unsupported(f"torch {torch.__version__} has no float4_e2m1fn_x2")
        if k % 32:
            raise _Unsupported(f"nvfp4 needs K divisible by 32 (two values per byte, 16 packed bytes), got {k}")
        # two e2m1 values per byte: every bit pattern is a finite value; (M, K/2) row-major, (K/2, N) column-major
        a4 = torch.randint(0, 256, (m, k // 2), device=dev, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
        w4 = torch.randint(0, 256, (n, k // 2), device=dev, dtype=torch.uint8).view(torch.float4_e2m1fn_x2).t()
        # one e4m3 scale per 16 values, in cuBLAS's swizzled layout: 128-row blocks x (K/16 padded to 4);
        # all ones, so the swizzle order does not matter
        k_blocks = _ceil_div(_ceil_div(k, 16), 4) * 4
        sa = torch.ones(128 * _ceil_div(m, 128) * k_blocks, device=dev, dtype=torch.float32).to(torch.float8_e4m3fn)
        sb = torch.ones(128 * _ceil_div(n, 128) * k_blocks, device=dev, dtype=torch.float32).to(torch.float8_e4m3fn)
        fn = lambda: torch._scaled_mm(a4, w4, sa, sb, out_dtype=torch.bfloat16)  # noqa: E731
    else:
        raise ValueError(f"unknown precision {prec!r}; use one of {GEMM_PRECISIONS}")
    fn()  # a shape or layout the library refuses raises here, before timing
    torch.cuda.synchronize()
    return fn


def _hbm_op(op: str, moved_bytes: int) -> Callable[[], "torch.Tensor"]:
    """A copy (``moved_bytes`` / 2 read and written) or a float32 sum (``moved_bytes`` read)."""
    import torch

    if op == "copy":
        src = torch.randint(0, 256, (moved_bytes // 2,), device="cuda", dtype=torch.uint8)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    x = torch.randn(moved_bytes // 4, device="cuda", dtype=torch.float32)
    return lambda: x.sum()


def _attention_op(p: Mapping[str, Any]) -> Callable[[], "torch.Tensor"]:
    """SDPA in bf16: q (B, H, q_len, D), k and v (B, H, kv_len, D)."""
    import torch
    import torch.nn.functional as F

    b, h, d = p["batch"], p["heads"], p["head_dim"]
    q_BHTD = torch.randn(b, h, p["q_len"], d, device="cuda", dtype=torch.bfloat16)
    k_BHSD = torch.randn(b, h, p["kv_len"], d, device="cuda", dtype=torch.bfloat16)
    v_BHSD = torch.randn(b, h, p["kv_len"], d, device="cuda", dtype=torch.bfloat16)
    causal = bool(p.get("causal"))
    return lambda: F.scaled_dot_product_attention(q_BHTD, k_BHSD, v_BHSD, is_causal=causal)


def _measure_one(case: Measurement, timer: _CudaTimer, capability: tuple[int, int]) -> Measurement:
    """``case`` with its measured time, or with the reason it has none."""
    import torch

    p = case.params
    try:
        if case.kind == "gemm":
            fn = _gemm_op(p["precision"], p["m"], p["n"], p["k"], capability)
        elif case.kind == "hbm":
            fn = _hbm_op(p["op"], p["bytes"])
        else:
            fn = _attention_op(p)
        t = timer(fn)
    except _Unsupported as exc:
        return dataclasses.replace(case, status=f"unsupported: {exc}")
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return dataclasses.replace(case, status="failed: out of GPU memory")
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:  # a kernel library refusing the case
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return dataclasses.replace(case, status=f"unsupported: {type(exc).__name__}: {first}")
    return dataclasses.replace(case, time_s=t)


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _all_reduce_worker(rank: int, world: int, port: int, sizes: Sequence[int], iters: int, warmup: int, reps: int,
                       out_path: str) -> None:
    """One rank of the all-reduce sweep (run by ``torch.multiprocessing.spawn``): per size, the
    median over ``reps`` of the mean time of ``iters`` back-to-back all-reduces; rank 0 writes the
    maximum over ranks to ``out_path`` as a JSON list of seconds."""
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        medians = []
        for nbytes in sizes:
            x = torch.zeros(nbytes // 2, device="cuda", dtype=torch.bfloat16)
            for _ in range(warmup):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            times = []
            for _ in range(reps):
                dist.barrier()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    dist.all_reduce(x)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) * 1e-3 / iters)
            medians.append(statistics.median(times))
            del x
        worst = torch.tensor(medians, device="cuda", dtype=torch.float64)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        if rank == 0:
            Path(out_path).write_text(json.dumps(worst.tolist()))
    finally:
        dist.destroy_process_group()


def _measure_all_reduce(cases: Sequence[Measurement], sweep: Sweep) -> list[Measurement]:
    """Time the all-reduce cases over every visible GPU, or mark why they were skipped."""
    import tempfile

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as tmp

    todo = [c for c in cases if c.status == "ok"]
    if not todo:
        return list(cases)
    if not dist.is_available() or not dist.is_nccl_available():
        return [dataclasses.replace(c, status="skipped: torch.distributed with NCCL is not available") for c in todo]
    world = todo[0].params["gpus"]
    sizes = [c.params["bytes"] for c in todo]
    torch.cuda.empty_cache()  # rank 0 shares GPU 0 with this process
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "all_reduce.json"
        try:
            tmp.spawn(_all_reduce_worker, args=(world, _free_port(), sizes, sweep.all_reduce_iters, sweep.warmup,
                                                sweep.reps, str(out)), nprocs=world, join=True)
            times = json.loads(out.read_text())
        except Exception as exc:  # noqa: BLE001 - any failure of the workers: record it, keep the other results
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            return [dataclasses.replace(c, status=f"skipped: all-reduce failed: {first}") for c in todo]
    return [dataclasses.replace(c, time_s=float(t)) for c, t in zip(todo, times)]


def device_meta(quick: bool) -> dict[str, Any]:
    """Name, compute capability, torch and CUDA versions, date and GPU count of the current device."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    return {"name": torch.cuda.get_device_name(), "capability": f"{major}.{minor}", "torch": torch.__version__,
            "cuda": torch.version.cuda, "date": datetime.date.today().isoformat(),
            "gpus": torch.cuda.device_count(), "quick": quick}


def measure(gpu: GPU, sweep: Sweep, *, log: Callable[[str], None] = print) -> list[Measurement]:
    """Run ``plan(gpu, sweep)`` on the current CUDA device; prints each case with its prediction."""
    import torch

    capability = torch.cuda.get_device_capability()
    cases = plan(gpu, sweep, gpus=torch.cuda.device_count())
    flush_bytes = max(4 * int(gpu.l2_bytes), 256 * MiB)  # >= 256 MiB: longer than the next call's launch on the CPU
    timer = _CudaTimer(flush_bytes, sweep.warmup, sweep.reps)
    done: list[Measurement] = []
    for case in cases:
        if case.kind == "all_reduce" or case.status != "ok":
            continue
        m = _measure_one(case, timer, capability)
        done.append(m)
        if m.ok:
            log(f"{m.group:18s} {m.shape:40s} {_us(m.time_s):>10s} us  (catalog {_us(predict_s(gpu, m))} us)")
        else:
            log(f"{m.group:18s} {m.shape:40s} {m.status}")
    del timer
    reduce_cases = _measure_all_reduce([c for c in cases if c.kind == "all_reduce"], sweep)
    for m in reduce_cases:
        log(f"{m.group:18s} {m.shape:40s} " + (f"{_us(m.time_s):>10s} us" if m.ok else m.status))
    skipped_up_front = [c for c in cases if c.status != "ok" and c.kind != "all_reduce"]
    return skipped_up_front + done + reduce_cases


# ----------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hardware", default=None,
                   help="catalog GPU the device is (default: guessed from the device name; with --from-json: the run's)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT.relative_to(ROOT)})")
    p.add_argument("--quick", action="store_true", help="smaller sweep (under 2 minutes on an H100)")
    p.add_argument("--from-json", type=Path, default=None, metavar="PATH",
                   help="redo the fit and report from a saved calibration_<gpu>.json; measures nothing, needs no GPU")
    p.add_argument("--no-json", action="store_true",
                   help="with --from-json: do not copy the measurements into --out (they stay where they are)")
    return p


def _fail(msg: str) -> int:
    print(f"calibrate_gpu: error: {msg}", file=sys.stderr)
    return 2


def _catalog_gpu(name: str) -> GPU:
    try:
        return get_gpu(name)
    except ValueError:
        raise ValueError(f"unknown GPU {name!r}; known: {', '.join(list_gpus())}") from None


def _summary(gpu: GPU, result: FitResult, measurements: Sequence[Measurement], paths: Mapping[str, Path]) -> None:
    after = result.apply(gpu)
    ok = [m for m in measurements if m.ok]
    before_err, after_err = errors_by_group(gpu, ok), errors_by_group(after, ok)
    print(f"\n{gpu.name}: fitted " + (", ".join(f"{k}={v:.4g}" for k, v in result.values.items()) or "nothing"))
    for g in before_err:
        print(f"  {g:20s} median |error| {before_err[g] * 100:6.1f}% -> {after_err[g] * 100:6.1f}%")
    for kind, path in paths.items():
        print(f"  {kind:6s} {path}")
    if "yaml" in paths:
        print(f"Use it: CO_DESIGN_HARDWARE_PATH={paths['yaml'].parent} co-design predict ... --hardware {gpu.name}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 2 no CUDA device or bad input)."""
    args = build_parser().parse_args(argv)
    if args.from_json is not None:
        try:
            name, meta, measurements = load_measurements(args.from_json)
            gpu = _catalog_gpu(args.hardware or name)
        except ValueError as exc:
            return _fail(str(exc))
        if args.hardware and name.lower() not in (gpu.name, *gpu.aliases):
            print(f"calibrate_gpu: warning: the run was for {name!r}; fitting it against {gpu.name!r}", file=sys.stderr)
        same = (args.out / f"calibration_{gpu.name}.json").resolve() == args.from_json.resolve()
        result, paths = calibrate(gpu, measurements, meta, args.out, save_json=not (same or args.no_json))
        _summary(gpu, result, measurements, paths)
        return 0

    import torch

    if not torch.cuda.is_available():
        return _fail(f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}); run it on the "
                     "GPU you want to calibrate, or refit a saved run with --from-json PATH")
    device = torch.cuda.get_device_name()
    hardware = args.hardware or guess_hardware(device)
    if hardware is None:
        return _fail(f"cannot tell which catalog GPU {device!r} is; pass --hardware NAME (known: {', '.join(list_gpus())})")
    try:
        gpu = _catalog_gpu(hardware)
    except ValueError as exc:
        return _fail(str(exc))
    guessed = guess_hardware(device)
    if args.hardware and guessed not in (None, gpu.name):
        print(f"calibrate_gpu: warning: {device!r} looks like {guessed}, calibrating it as {gpu.name}", file=sys.stderr)
    if re.search(r"\b(pcie|nvl)\b", device.lower()):
        print(f"calibrate_gpu: warning: {device!r} is not the SXM part the catalog's {gpu.name} describes; the fitted "
              "efficiencies are relative to its peaks", file=sys.stderr)
    sweep = QUICK if args.quick else FULL
    print(f"calibrating {device} as {gpu.name} ({'quick' if args.quick else 'full'} sweep); times in us")
    measurements = measure(gpu, sweep)
    result, paths = calibrate(gpu, measurements, device_meta(args.quick), args.out)
    _summary(gpu, result, measurements, paths)
    return 0


if __name__ == "__main__":
    sys.exit(main())
