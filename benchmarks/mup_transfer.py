"""Learning-rate transfer across widths: the standard parametrization against μP (issue 9 item 3).

One shape family, the one a ``keep_layout`` proxy moves along: 4 heads, 2 KV heads, 4 layers,
a gated FFN 3x the hidden size, byte vocabulary, and head_dim 8, 16, 32, 64 (hidden 32-256,
the widths from a ``dense_tiny`` candidate's proxy up to the candidate itself). Each width is
trained at each learning rate of a doubling grid, under the standard parametrization (one
learning rate for every width) and under μP (``co_design.model.MuP``, base width 128), with the
proxy's own recipe: 150 steps of 8 x 128 tokens on the built-in corpus, NVFP4 fake-quant, AdamW
with 15 warmup steps and cosine decay, seed 0.

The optimum of each width is the grid minimum refined by a parabola through it and its two
neighbours in log2(lr). Under a parametrization whose hyperparameters transfer, the optimum
does not move with width: the report gives each width's optimum and the spread across widths
in octaves (doublings of the learning rate), and the loss paid at each width for using the
base width's optimum instead of its own.

Writes benchmarks/results/mup_transfer.md and .json. About 17 minutes on one CPU core:
    python benchmarks/mup_transfer.py
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _training import train_lm  # noqa: E402

from co_design.arch import Architecture  # noqa: E402
from co_design.model import MuP  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
HEAD_DIMS = (8, 16, 32, 64)
LRS = tuple(1e-3 * 2**k for k in range(6))
MUP = MuP(base_hidden=128, base_head_dim=16)


def family(head_dim: int) -> Architecture:
    hidden = 4 * head_dim
    return Architecture(name=f"h{hidden}", hidden=hidden, layers=4, heads=4, kv_heads=2, head_dim=head_dim,
                        ffn=3 * hidden, vocab=256)


def optimum(lrs: list[float], losses: list[float]) -> tuple[float, float]:
    """(lr at the minimum, loss there): the grid minimum refined by a parabola in log2(lr)
    through it and its neighbours; at the grid's edge, the edge itself."""
    i = min(range(len(losses)), key=lambda j: losses[j])
    if 0 < i < len(losses) - 1 and all(math.isfinite(v) for v in losses[i - 1:i + 2]):
        x = [math.log2(v) for v in lrs[i - 1:i + 2]]
        y = losses[i - 1:i + 2]
        denom = (x[0] - x[1]) * (x[0] - x[2]) * (x[1] - x[2])
        a = (x[2] * (y[1] - y[0]) + x[1] * (y[0] - y[2]) + x[0] * (y[2] - y[1])) / denom
        b = (x[2] ** 2 * (y[0] - y[1]) + x[1] ** 2 * (y[2] - y[0]) + x[0] ** 2 * (y[1] - y[2])) / denom
        if a > 0:
            xv = -b / (2 * a)
            c = y[1] - a * x[1] ** 2 - b * x[1]
            return 2**xv, a * xv**2 + b * xv + c
    return lrs[i], losses[i]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--report", action="store_true", help="only rewrite the report from mup_transfer.json")
    args = ap.parse_args()
    if args.report:
        write_report(json.loads((RESULTS / "mup_transfer.json").read_text()))
        return
    out: dict = {"steps": args.steps, "lrs": list(LRS), "head_dims": list(HEAD_DIMS),
                 "mup": {"base_hidden": MUP.base_hidden, "base_head_dim": MUP.base_head_dim}, "loss": {}}
    for label, mup in (("standard", None), ("mup", MUP)):
        out["loss"][label] = {}
        for hd in HEAD_DIMS:
            arch = family(hd)
            row = []
            for lr in LRS:
                run = train_lm(arch, steps=args.steps, lr=lr, mup=mup, threads=args.threads)
                row.append(run.loss if math.isfinite(run.loss) else float("inf"))
                print(f"{label:8s} hidden {arch.hidden:4d} lr {lr:.4g}: loss {run.loss:.4f} ({run.seconds:.0f} s)",
                      flush=True)
            out["loss"][label][str(arch.hidden)] = row
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "mup_transfer.json").write_text(json.dumps(out, indent=1))
    write_report(out)


def write_report(out: dict) -> None:
    lrs = out["lrs"]
    lines = [
        "# Learning-rate transfer across widths: standard parametrization vs μP",
        "",
        "Produced by `python benchmarks/mup_transfer.py` (raw losses in mup_transfer.json). Shape family: "
        "4 heads, 2 KV heads, 4 layers, gated FFN 3x hidden, vocab 256; head_dim 8-64 (hidden 32-256). "
        f"{out['steps']} steps x 8 x 128 tokens, NVFP4 fake-quant, seed 0. μP base width "
        f"{out['mup']['base_hidden']}, base head_dim {out['mup']['base_head_dim']}.",
        "",
        "Validation loss (nats/token) by learning rate:",
        "",
    ]
    summary = []
    for label, table in out["loss"].items():
        lines += [f"**{label}**", "", "| hidden | " + " | ".join(f"lr {v:.3g}" for v in lrs) + " | optimum lr | loss at optimum |",
                  "|---|" + "---|" * (len(lrs) + 2)]
        opts = {}
        for hidden, row in table.items():
            lr_opt, loss_opt = optimum(lrs, row)
            opts[hidden] = (lr_opt, loss_opt, row)
            lines.append(f"| {hidden} | " + " | ".join(f"{v:.4f}" for v in row) + f" | {lr_opt:.3g} | {loss_opt:.4f} |")
        lines.append("")
        logs = [math.log2(v[0]) for v in opts.values()]
        spread = max(logs) - min(logs)
        base = opts.get("128") or next(iter(opts.values()))
        i_base = min(range(len(lrs)), key=lambda j: abs(math.log2(lrs[j]) - math.log2(base[0])))
        regret = {h: v[2][i_base] - min(v[2]) for h, v in opts.items()}
        summary.append((label, spread, regret))
    lines += ["| parametrization | optimum's spread across widths (octaves of lr) | "
              "loss paid at each width for the grid lr nearest the hidden-128 optimum (nats) |", "|---|---|---|"]
    for label, spread, regret in summary:
        lines.append(f"| {label} | {spread:.2f} | " + ", ".join(f"h{h}: {v:+.4f}" for h, v in regret.items()) + " |")
    best = {label: {h: min(row) for h, row in table.items()} for label, table in out["loss"].items()}
    widest = max(best["standard"], key=int)
    edge = {label: table[widest].index(min(table[widest])) in (0, len(lrs) - 1) for label, table in out["loss"].items()}
    lines += ["", "Best loss over the grid at each width (nats): " + "; ".join(
        f"{label}: " + ", ".join(f"h{h} {v:.4f}" for h, v in b.items()) for label, b in best.items()) + ". At hidden "
        f"{widest} the standard parametrization's best is {best['standard'][widest] - best['mup'][widest]:+.4f} nats from "
        f"μP's" + (" (its optimum sits at the grid's edge, so it may be lower still)" if edge["standard"] else "") + ": "
        "μP fixes where the optimum lies, not how good it is, and its base constants (attention scale, output "
        "multiplier) are not tuned here."]
    (RESULTS / "mup_transfer.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
