"""One proxy transformer block, forward+backward, with NVFP4 QAT (``quantize_model``) vs without, on CPU.

What it measures
----------------
A single :class:`co_design.model.Block` (pre-norm attention + FFN; no embedding, no lm_head) trained
on random activations: ``loss = mean(block(x)**2) (+ 0.01 * aux_loss)``, ``loss.backward()``, grads
cleared. The same block (same weights) is timed plain and after
``co_design.quant.quantize_model(block, QuantConfig())`` (W4A4 NVFP4 fake-quant of every Linear and
of the grouped experts; the MoE router stays high precision). Variants are interleaved rep by rep so
a noisy shared machine hits both alike; the report gives the median and the minimum per step and
the QAT/plain ratio of the medians.

Default sizes (CPU-sensible: one step is about a second on 2 threads):
  dense: hidden 1024, heads 8 (head_dim 128), kv_heads 8, SwiGLU ffn 2816
  moe:   hidden 1024, heads 8, kv_heads 8, 8 experts, top-2, expert_ffn 512 (SwiGLU), no shared
  batch 4 x seq 512 = 2048 tokens, fp32, torch threads 2.

Run from the repository root::

    python benchmarks/block_qat.py                      # writes benchmarks/results/block_qat.md
    python benchmarks/block_qat.py --reps 3 --batch 2   # quicker
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import time
from pathlib import Path

# Idle OpenMP threads sleep instead of spinning, so process CPU time counts work, not waiting
# (must be set before torch loads its OpenMP runtime).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from co_design.arch import Architecture  # noqa: E402
from co_design.model import Block, RotaryEmbedding  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "block_qat.md"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _quant_source_id() -> str:
    """Short hash of co_design/quant/*.py, naming the fake-quant implementation that was timed."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted((REPO_ROOT / "co_design" / "quant").glob("*.py")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:12]


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _arch(args: argparse.Namespace, moe: bool) -> Architecture:
    kw = dict(hidden=args.hidden, layers=1, heads=args.heads, kv_heads=args.kv_heads, ffn=args.ffn, vocab=32)
    if moe:
        kw.update(experts=args.experts, experts_per_token=args.top_k, expert_ffn=args.expert_ffn)
    return Architecture(**kw, name="moe" if moe else "dense")


def _step(block: Block, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, autocast: bool) -> tuple[float, float]:
    """One forward+backward; returns (wall seconds, process CPU seconds summed over threads)."""
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = block(x, cos, sin)  # (B, T, hidden)
        loss = y.float().square().mean()
        if block.is_moe:
            loss = loss + 0.01 * block.ffn.aux_loss
    loss.backward()
    block.zero_grad(set_to_none=True)
    return time.perf_counter() - t0, time.process_time() - c0


def bench(args: argparse.Namespace, moe: bool) -> dict:
    from co_design.quant import QuantConfig, dequantize_model, quantize_model

    torch.manual_seed(0)
    arch = _arch(args, moe)
    block = Block(arch, 0)
    for name, p in block.named_parameters():  # weights as Transformer would initialize them
        if p.dim() >= 2:
            torch.nn.init.normal_(p, std=0.02)
    cos, sin = RotaryEmbedding(arch.head_dim, max_seq_len=args.seq, theta=arch.rope_theta)(args.seq)
    x = torch.randn(args.batch, args.seq, arch.hidden)  # (B, T, hidden)

    times: dict[str, list[float]] = {"plain": [], "qat": []}
    cpu: dict[str, list[float]] = {"plain": [], "qat": []}
    swapped: list[str] = []
    for rep in range(args.warmup + args.reps):
        for variant in ("plain", "qat"):
            if variant == "qat":
                swapped = quantize_model(block, QuantConfig(format=args.format))
            t, c = _step(block, x, cos, sin, args.autocast)
            if variant == "qat":
                dequantize_model(block)
            if rep >= args.warmup:
                times[variant].append(t)
                cpu[variant].append(c)
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    return {
        "variant": "moe" if moe else "dense",
        "arch": arch,
        "params": sum(p.numel() for p in block.parameters()),
        "swapped": swapped,
        "plain_median_s": med["plain"],
        "plain_min_s": min(times["plain"]),
        "qat_median_s": med["qat"],
        "qat_min_s": min(times["qat"]),
        "ratio_median": med["qat"] / med["plain"],
        "ratio_min": min(times["qat"]) / min(times["plain"]),
        # adjacent plain/QAT steps see similar machine load: the median of their ratios is the headline
        "ratio_paired": statistics.median(q / p for p, q in zip(times["plain"], times["qat"])),
        "plain_cpu_s": cpu_med["plain"],
        "qat_cpu_s": cpu_med["qat"],
        "ratio_cpu": cpu_med["qat"] / cpu_med["plain"],
    }


def _describe(arch: Architecture) -> str:
    if arch.is_moe:
        ffn = f"{arch.experts} experts top-{arch.experts_per_token}, expert_ffn {arch.expert_ffn}"
    else:
        ffn = f"ffn {arch.ffn}"
    return f"hidden {arch.hidden}, heads {arch.heads}/{arch.kv_heads} kv, head_dim {arch.head_dim}, {ffn}, SwiGLU"


def report(args: argparse.Namespace, rows: list[dict]) -> str:
    tokens = args.batch * args.seq
    lines = [
        "# One proxy block: NVFP4 QAT vs plain, forward+backward on CPU",
        "",
        f"Measured {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC on {_cpu_name()}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{'bf16 autocast' if args.autocast else 'fp32'}; batch {args.batch} x seq {args.seq} = {tokens} tokens; "
        f"{args.warmup} warm-up + {args.reps} timed steps per variant, interleaved; "
        f"co_design/quant sources sha256[:12] {_quant_source_id()}.",
        "",
        f"Command: `python benchmarks/block_qat.py {' '.join(args.argv)}`".rstrip(),
        "",
        "| block | shape | params | plain wall s/step (median, min) | QAT wall s/step (median, min) "
        "| QAT / plain: paired median | medians | minima | CPU s/step plain, QAT (median) | CPU-time ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {_describe(r['arch'])} | {r['params'] / 1e6:.1f} M | "
            f"{r['plain_median_s']:.3f}, {r['plain_min_s']:.3f} | {r['qat_median_s']:.3f}, {r['qat_min_s']:.3f} | "
            f"**{r['ratio_paired']:.2f}x** | {r['ratio_median']:.2f}x | {r['ratio_min']:.2f}x | "
            f"{r['plain_cpu_s']:.3f}, {r['qat_cpu_s']:.3f} | {r['ratio_cpu']:.2f}x |"
        )
    lines += [
        "",
        "Quantized modules (`quantize_model` return value):",
        "",
    ]
    for r in rows:
        lines.append(f"- {r['variant']}: {', '.join(r['swapped'])}")
    lines += [
        "",
        "What the QAT step adds: NVFP4 quantize-dequantize (16-element blocks, E4M3 block scales, fp32",
        "global scale) of every matmul weight and every matmul input in the forward pass, and the",
        "straight-through (identity) gradient in the backward pass; the matmuls themselves are unchanged",
        "fp32. The MoE router stays unquantized (default skip list).",
        "",
        "Caveat: the 2 CPU cores were shared with other jobs while this ran (load average "
        f"{_load()} at the end); wall times swung 2-3x from step to step at load 5-6. Two readings:",
        "the median over reps of QAT-step / preceding-plain-step wall time (adjacent steps see similar",
        "load), and the ratio of median process CPU time (`time.process_time`, both threads, with",
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')} so idle threads do not spin): the work each step does,",
        "least disturbed by sharing. Ratios of medians and of minima show the spread.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=2816, help="dense SwiGLU width")
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--expert-ffn", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--format", default="nvfp4", choices=["nvfp4", "fp8", "bf16"])
    p.add_argument("--autocast", action="store_true", help="run under torch.autocast(cpu, bfloat16)")
    p.add_argument("--variants", default="dense,moe", help="comma list of dense, moe")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown report path ('-' for stdout only)")
    import sys

    args = p.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(args.threads)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in ("dense", "moe")]
    if bad:
        p.error(f"--variants: unknown {bad}; choose from dense, moe")
    rows = []
    for v in variants:
        r = bench(args, moe=v == "moe")
        print(
            f"{v}: plain {r['plain_median_s']:.3f} s, qat {r['qat_median_s']:.3f} s (medians); QAT/plain paired "
            f"{r['ratio_paired']:.2f}x, medians {r['ratio_median']:.2f}x, minima {r['ratio_min']:.2f}x, "
            f"CPU-time {r['ratio_cpu']:.2f}x",
            flush=True,
        )
        rows.append(r)
    text = report(args, rows)
    if str(args.out) != "-":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text)


if __name__ == "__main__":
    main()
