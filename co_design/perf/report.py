"""Readable plain-text report of a prediction (what ``co-design predict`` prints without --json)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

from co_design.perf.types import Advice, Prediction, Runtime

if TYPE_CHECKING:
    from co_design.arch import Architecture
    from co_design.hardware import GPU

__all__ = ["format_report", "format_pareto", "format_hardware"]


def _table(header: Sequence[str], rows: list[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return [line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]


def _si(x: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {prefix}{unit}"
    return f"{x:.0f} {unit}"


def _runtime_changes(runtime: Runtime) -> str:
    """The fields of ``runtime`` that differ from the fitted :class:`Runtime` defaults, as ``name value``
    (seconds for ``*_s``), comma-separated; empty when none differ."""
    default = Runtime()
    return ", ".join(f"{f.name} {getattr(runtime, f.name):.3g}" for f in dataclasses.fields(Runtime)
                     if getattr(runtime, f.name) != getattr(default, f.name))


def format_report(arch: "Architecture", pred: Prediction, advice: Sequence[Advice] = (), *, max_ops: int = 40) -> str:
    """Summary, memory breakdown, per-op table (decode iteration, then the prompt's iteration) and advice."""
    d = pred.deployment
    pc = arch.param_counts()
    out = [
        f"co-design predict: {arch.name} on {pred.gpu} x{d.gpus} ({d.label})",
        f"  params {pc.total / 1e9:.2f} B total, {pc.active / 1e9:.2f} B active; weights {d.weights}, "
        f"activations {d.activations}, KV cache {d.kv_cache}; ISL {d.isl}, OSL {d.osl}",
    ]
    changed = _runtime_changes(d.runtime)
    if changed:
        out.append(f"  runtime: {changed} (fitted defaults otherwise)")
    out.append("")
    if not pred.fits:
        m = pred.memory
        out += [
            f"  DOES NOT FIT: {m.total_bytes / 1e9:,.1f} GB per GPU needed at batch {pred.batch}, "
            f"{m.capacity_bytes / 1e9:,.1f} GB usable (weights alone {m.weights_bytes / 1e9:,.1f} GB).",
            "  Shard it over more GPUs (--tp/--ep/--pp), use a smaller weight or KV-cache format, or a",
            "  GPU with more memory; the speed figures below are what the model would run at if it fit.",
            "",
        ]
    summary = [
        ("fits in memory", "yes" if pred.fits else "NO"),
        ("requests in flight (batch)", f"{pred.batch}"),
        *([("requests waiting for a slot", f"{pred.deployment.concurrency - pred.batch}")]
          if pred.deployment.concurrency and pred.deployment.concurrency > pred.batch else []),
        ("output tokens/s per GPU", f"{pred.output_tokens_per_s_per_gpu:,.1f}"),
        ("output tokens/s per user", f"{pred.output_tokens_per_s_per_user:,.1f}"),
        ("output tokens/s (deployment)", f"{pred.output_tokens_per_s:,.1f}"),
        (f"TTFT ({pred.deployment.arrivals} arrivals, mean)", f"{pred.ttft_s * 1e3:,.1f} ms"),
        (f"TTFT ({pred.deployment.arrivals} arrivals, p99)", f"{pred.ttft_p99_s * 1e3:,.1f} ms"),
        ("TPOT (mean)", f"{pred.tpot_s * 1e3:,.2f} ms"),
        (f"TPOT ({pred.deployment.arrivals} arrivals, p99 over requests)", f"{pred.tpot_p99_s * 1e3:,.2f} ms"),
        ("decode iteration bound", pred.bound),
    ]
    out += _table(("metric", "value"), summary, {1})
    m = pred.memory
    out += ["", "Memory per GPU"]
    mem_rows = [
        ("weights", f"{m.weights_bytes / 1e9:,.2f} GB"),
        ("KV cache (batch at ISL+OSL)", f"{m.kv_cache_bytes / 1e9:,.2f} GB"),
        ("activations", f"{m.activation_bytes / 1e9:,.2f} GB"),
        ("runtime reserve", f"{m.reserve_bytes / 1e9:,.2f} GB"),
        ("total", f"{m.total_bytes / 1e9:,.2f} GB"),
        ("usable HBM", f"{m.capacity_bytes / 1e9:,.2f} GB"),
        ("KV pool the runtime would allocate", f"{m.kv_cache_capacity_bytes / 1e9:,.2f} GB"),
        ("KV per request (ISL+OSL)", f"{m.kv_bytes_per_request / 1e6:,.2f} MB"),
    ]
    out += _table(("item", "per GPU"), mem_rows, {1})
    for phase, title in (("decode", "Decode iteration (steady state, per GPU; prompt share amortized)"),
                         ("prefill", "Iteration(s) a new request waits through to its first token (TTFT)")):
        ops = [o for o in pred.ops if o.phase == phase]
        if not ops:
            continue
        total = sum(o.time_s for o in ops) or 1.0
        ops = sorted(ops, key=lambda o: -o.time_s)[:max_ops]
        rows = [(o.name, f"{o.time_s * 1e3:.3f}", f"{100 * o.time_s / total:.1f}", o.bound, o.precision,
                 "x".join(str(v) for v in o.shape) if o.shape else "", f"{o.count:g}", _si(o.flops, "FLOP"),
                 _si(o.bytes, "B"), f"{o.achieved_fraction:.2f}",
                 f"{o.tile_efficiency:.2f}/{o.wave_efficiency:.2f}" if o.kind == "gemm" else "")
                for o in ops]
        out += ["", f"{title}: {total * 1e3:.3f} ms of GPU work"]
        out += _table(("op", "ms", "%", "bound", "prec", "MxNxK", "count", "FLOPs", "bytes", "of peak", "tile/wave"),
                      rows, {1, 2, 6, 7, 8, 9})
    if advice:
        out += ["", "Shape advice (model-computed, same deployment and batch)"]
        out += [f"  - {a.message}" for a in advice]
    for n in pred.notes:
        out.append(f"note: {n}")
    return "\n".join(out)


def format_pareto(arch: "Architecture", gpu_name: str, front: Sequence[Prediction]) -> str:
    """The throughput-vs-interactivity front as a table, most interactive last.

    "concurrency" is requests in flight in the whole deployment (``Prediction.batch``, all replicas).
    """
    if not front:
        return f"{arch.name} on {gpu_name}: no operating point fits (and meets the SLO)"
    rows = [
        [p.deployment.label, f"{p.batch:,}", f"{p.output_tokens_per_s_per_gpu:,.1f}",
         f"{p.output_tokens_per_s_per_user:,.1f}", f"{p.ttft_s * 1e3:,.1f}", f"{p.tpot_s * 1e3:,.2f}",
         f"{p.memory_per_gpu_bytes / 1e9:,.1f}", p.bound]
        for p in front
    ]
    header = ["deployment", "concurrency", "tok/s/GPU", "tok/s/user", "TTFT ms", "TPOT ms", "GB/GPU", "bound"]
    title = f"Pareto front of {arch.name} on {gpu_name} x{front[0].deployment.gpus}: {len(front)} operating points"
    return "\n".join([title, ""] + _table(header, rows, right={1, 2, 3, 4, 5, 6}))


def format_hardware(gpus: Sequence["GPU"]) -> str:
    """The GPUs' key specs, one row each, in the units the header names.

    HBM (physical, and what the runtime can use) in GiB (2**30 bytes, how the datasheets' "80 GB" /
    "192 GB" are meant), HBM bandwidth in TB/s (1e12 bytes/s), dense (non-sparse) tensor-core peaks
    in TFLOPS (1e12 FLOP/s; "-" where the GPU has no path at that precision), NVLink in GB/s (1e9
    bytes/s) per GPU per direction, and the GPUs one NVLink domain reaches.
    """

    def tflops(g: "GPU", prec: str) -> str:
        v = g.peak_flops_per_s.get(prec)
        return "-" if v is None else f"{v / 1e12:,.0f}"

    rows = [[g.name, f"{g.hbm_bytes / 2**30:,.0f}", f"{g.hbm_usable_bytes / 2**30:,.1f}",
             f"{g.hbm_bytes_per_s / 1e12:.2f}", tflops(g, "bf16"), tflops(g, "fp8"), tflops(g, "nvfp4"),
             f"{g.nvlink_bytes_per_s / 1e9:,.0f}", f"{g.nvlink_domain}", g.description] for g in gpus]
    header = ["gpu", "HBM GiB", "usable GiB", "HBM TB/s", "BF16 TFLOPS", "FP8 TFLOPS", "NVFP4 TFLOPS", "NVLink GB/s",
              "NVLink GPUs", "description"]
    title = "Known GPUs (dense peaks; NVLink per GPU per direction; --hardware takes the name)"
    return "\n".join([title, ""] + _table(header, rows, right={1, 2, 3, 4, 5, 6, 7, 8}))
