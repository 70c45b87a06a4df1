"""``co-design advise CONFIG``: how a model you already have compares with shapes near it.

Three answers, all from the performance model (:mod:`co_design.perf`, no torch):

1. the model's predicted serving: output tokens/s per GPU and per user, TTFT, TPOT, at its
   max-throughput batch (or ``--concurrency``);
2. every GEMM-facing dimension or per-GPU shard off a multiple of 128/256, with what the nearest
   aligned value would change (:func:`co_design.perf.shape_advice` with no gain threshold: a
   diagnostic, gains may be negative);
3. the shapes within ± ``budget_pct`` of its parameters that dominate it at that load — more
   output tokens/s per GPU *and* per user (:func:`co_design.perf.neighbours.dominating_neighbours`,
   an exact enumeration). The table shows, for each parameter count, the fastest of them
   (:func:`~co_design.perf.neighbours.params_front`); ``--json`` lists all.

The plot (plotly, a dependency of the search job) puts the model and its neighbours on the
throughput-vs-interactivity plane, with the model's curve over concurrency.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from co_design.perf import Deployment, predict, shape_advice
from co_design.perf.neighbours import BUDGET_PCT, Neighbour, dominating_neighbours, params_front

if TYPE_CHECKING:
    from co_design.arch import Architecture
    from co_design.hardware import GPU
    from co_design.perf import Advice, Prediction

__all__ = ["Advisory", "advise", "format_advisory", "plot_advisory"]


@dataclasses.dataclass(frozen=True)
class Advisory:
    """What :func:`advise` found for one model on one deployment."""

    arch: "Architecture"
    gpu: str
    prediction: "Prediction"
    misalignments: list["Advice"]
    neighbours: list[Neighbour]  # every dominating neighbour, fastest first
    scored: int  # neighbourhood size (shapes scored)
    budget_pct: float

    @property
    def front(self) -> list[Neighbour]:
        return params_front(self.neighbours)

    def to_dict(self) -> dict[str, Any]:
        p, pc = self.prediction, self.arch.param_counts()
        return {
            "model": self.arch.name,
            "gpu": self.gpu,
            "deployment": p.deployment.to_dict(),
            "deployment_label": p.deployment.label,
            "arch": self.arch.to_dict(),
            "params_total": pc.total,
            "params_active": pc.active,
            "prediction": p.to_dict(ops=False),
            "misalignments": [a.to_dict() for a in self.misalignments],
            "budget_pct": self.budget_pct,
            "neighbours_scored": self.scored,
            "dominating": [n.to_dict(self.arch) for n in self.neighbours],
            "front": [n.to_dict(self.arch) for n in self.front],
        }


def advise(arch: "Architecture", gpu: "GPU | str", deployment: Deployment, *, budget_pct: float = BUDGET_PCT,
           align: int = 128, hidden_steps: int = 4, layer_steps: int = 4) -> Advisory:
    """The model's prediction, its misalignments and the neighbours that dominate it (module docstring)."""
    from co_design.hardware import get_gpu

    gpu = get_gpu(gpu)
    base, kept, scored = dominating_neighbours(arch, gpu, deployment, budget_pct=budget_pct, align=align,
                                               hidden_steps=hidden_steps, layer_steps=layer_steps)
    mis = shape_advice(arch, gpu, deployment.replace(concurrency=base.batch), min_gain=-math.inf)
    return Advisory(arch=arch, gpu=gpu.name, prediction=base, misalignments=mis, neighbours=kept, scored=scored,
                    budget_pct=budget_pct)


def _fmt_changes(n: Neighbour, base: "Architecture") -> str:
    return ", ".join(f"{k} {a}->{b}" for k, (a, b) in n.changes(base).items())


def format_advisory(adv: Advisory, *, top: int = 10) -> str:
    """Plain-text report: the prediction, the misalignments, the dominating neighbours."""
    from co_design.perf.report import _table

    p, a = adv.prediction, adv.arch
    pc = a.param_counts()
    d = p.deployment
    out = [
        f"co-design advise: {a.name} on {adv.gpu} x{d.gpus} ({d.label}); weights {d.weights}, "
        f"KV cache {d.kv_cache}; ISL {d.isl}, OSL {d.osl}",
        f"  params {pc.total / 1e9:.2f} B total, {pc.active / 1e9:.2f} B active; batch {p.batch}"
        f"{'' if p.fits else ' (DOES NOT FIT in memory)'}",
        f"  output tokens/s per GPU {p.output_tokens_per_s_per_gpu:,.1f}; per user "
        f"{p.output_tokens_per_s_per_user:,.1f}; TTFT {p.ttft_s * 1e3:,.1f} ms; TPOT {p.tpot_s * 1e3:,.2f} ms",
        "",
    ]
    if adv.misalignments:
        out.append("Misaligned dimensions and per-GPU shards (gain: output tokens/s per GPU at the aligned value):")
        out += ["  " + x.message for x in adv.misalignments]
    else:
        out.append("Every GEMM-facing dimension and per-GPU shard is a multiple of 128 (and of 256 where it matters).")
    out.append("")
    front = adv.front
    out.append(f"Neighbours within ±{adv.budget_pct:.0%} of the parameters: {adv.scored} scored at batch {p.batch}, "
               f"{len(adv.neighbours)} dominate the model (more tokens/s per GPU and per user).")
    if front:
        out.append(f"The fastest at each parameter count ({len(front)}; top {min(top, len(front))}, most parameters first):")
        rows = [(f"{n.arch.param_counts().total / 1e9:.2f}", f"{n.params_change:+.1%}",
                 f"{n.prediction.output_tokens_per_s_per_gpu:,.0f}", f"{n.throughput_gain:+.1%}",
                 f"{n.prediction.output_tokens_per_s_per_user:,.1f}", f"{n.prediction.ttft_s * 1e3:,.0f}",
                 _fmt_changes(n, a)) for n in front[:top]]
        out += [("  " + r).rstrip() for r in _table(("params B", "Δparams", "tok/s/GPU", "gain", "tok/s/user", "TTFT ms",
                                          "changes"), rows, {0, 1, 2, 3, 4, 5})]
    return "\n".join(out)


def _curve(arch: "Architecture", gpu: str, dep: Deployment, top_batch: int) -> list["Prediction"]:
    """Predictions over concurrency (powers of two up to ``top_batch`` and it), those that fit."""
    batches = sorted({2 ** k for k in range(int(math.log2(max(1, top_batch))) + 1)} | {top_batch})
    out = []
    for b in batches:
        p = predict(arch, gpu, dep.replace(concurrency=b))
        if p.fits:
            out.append(p)
    return out


def plot_advisory(adv: Advisory, path: str | Path, *, top: int = 10) -> Path:
    """Write the throughput-vs-interactivity plot to ``path`` (.html; .png needs kaleido)."""
    try:
        import plotly.graph_objects as go
    except ImportError:  # pragma: no cover - plotly is a dependency of the package
        raise ValueError("--plot needs plotly: pip install plotly") from None
    path = Path(path)
    if path.suffix not in (".html", ".png"):
        raise ValueError(f"--plot {str(path)!r}: use a .html or .png file name")
    p, dep = adv.prediction, adv.prediction.deployment
    fig = go.Figure()
    base_curve = _curve(adv.arch, adv.gpu, dep, p.batch)
    fig.add_trace(go.Scatter(x=[q.output_tokens_per_s_per_user for q in base_curve],
                             y=[q.output_tokens_per_s_per_gpu for q in base_curve], mode="lines+markers",
                             name=f"{adv.arch.name} over concurrency", text=[f"batch {q.batch}" for q in base_curve]))
    others = adv.neighbours
    fig.add_trace(go.Scatter(x=[n.prediction.output_tokens_per_s_per_user for n in others],
                             y=[n.prediction.output_tokens_per_s_per_gpu for n in others], mode="markers",
                             marker=dict(size=5, color="lightgray"), name=f"dominating neighbours ({len(others)})",
                             text=[_fmt_changes(n, adv.arch) for n in others]))
    front = adv.front[:top]
    fig.add_trace(go.Scatter(x=[n.prediction.output_tokens_per_s_per_user for n in front],
                             y=[n.prediction.output_tokens_per_s_per_gpu for n in front], mode="markers",
                             marker=dict(size=9, color="green"), name="fastest at each parameter count",
                             text=[f"{n.params_change:+.1%} params: {_fmt_changes(n, adv.arch)}" for n in front]))
    if front:
        best = front[0]
        curve = _curve(best.arch, adv.gpu, dep, p.batch)
        fig.add_trace(go.Scatter(x=[q.output_tokens_per_s_per_user for q in curve],
                                 y=[q.output_tokens_per_s_per_gpu for q in curve], mode="lines",
                                 line=dict(dash="dot", color="green"), name="its largest shape over concurrency"))
    fig.add_trace(go.Scatter(x=[p.output_tokens_per_s_per_user], y=[p.output_tokens_per_s_per_gpu], mode="markers",
                             marker=dict(size=14, symbol="star", color="red"), name=f"{adv.arch.name} (batch {p.batch})"))
    fig.update_layout(title=f"{adv.arch.name} on {adv.gpu} x{dep.gpus} ({dep.label}), neighbours within "
                            f"±{adv.budget_pct:.0%} params",
                      xaxis_title="output tokens/s per user", yaxis_title="output tokens/s per GPU")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".html":
        fig.write_html(str(path), include_plotlyjs="cdn")
    else:
        try:
            fig.write_image(str(path))
        except (ImportError, ValueError, RuntimeError) as exc:
            raise ValueError(f"--plot {str(path)!r}: plotly needs kaleido to write a PNG (pip install kaleido), "
                             f"or use a .html name ({exc.__class__.__name__})") from None
    return path
