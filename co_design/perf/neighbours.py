"""Shapes near a model at the same parameter budget that the performance model says serve it better.

The neighbourhood is enumerated exactly, not sampled: one prediction costs ~0.2 ms, so
thousands of shapes cost seconds. Around the model's shape it varies

* ``hidden`` by up to ``hidden_steps`` multiples of ``align`` either way, head_dim kept and the
  heads scaled with it (heads · new hidden / hidden; a hidden size that makes it fractional is
  skipped; MLA models keep their heads),
* ``layers`` by up to ``layer_steps`` either way,
* ``kv_heads``: the model's count, half and double it (where they divide the heads; an MLA
  model's latent cache is kept),
* the FFN width each layer kind has: ``ffn`` of dense layers (step ``align · tp``, so each GPU's
  shard stays a multiple of ``align``) and, for an MoE, ``expert_ffn`` (step ``align · tp / ep``),
  over every value that keeps the total parameter count within ± ``budget_pct`` of the model's.

Every neighbour is scored at the model's own operating point: the batch ``max_throughput``
picks for the model (or ``deployment.concurrency`` if given). At one batch, output tokens/s
per user is 1 / TPOT and per GPU is replicas · batch / TPOT / gpus, so a neighbour that fits
and has the shorter TPOT serves the same load with *both* more tokens/s per GPU and more
tokens/s per user: it dominates the model on the throughput-vs-interactivity plane at that
load. A neighbour that does not fit in memory at that batch is never kept.

Pure Python (no torch).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Iterator

from co_design.hardware import get_gpu
from co_design.perf.serving import max_throughput, predict
from co_design.perf.types import Deployment, Prediction

if TYPE_CHECKING:
    from co_design.arch import Architecture
    from co_design.hardware import GPU

__all__ = ["Neighbour", "neighbourhood", "dominating_neighbours", "params_front"]

#: Default half-width of the parameter band, a fraction of the model's total parameters.
BUDGET_PCT = 0.10


@dataclasses.dataclass(frozen=True)
class Neighbour:
    """One shape of the neighbourhood, its prediction at the model's batch and the change it makes."""

    arch: "Architecture"
    prediction: Prediction
    throughput_gain: float  # output tokens/s per GPU over the model's, minus 1
    interactivity_gain: float  # output tokens/s per user over the model's, minus 1
    params_change: float  # total parameters over the model's, minus 1

    def changes(self, base: "Architecture") -> dict[str, tuple[int, int]]:
        """Field -> (``base``'s value, this shape's value), for the varied fields that differ."""
        return {k: (getattr(base, k), getattr(self.arch, k)) for k in _VARIED
                if getattr(base, k) != getattr(self.arch, k)}

    def to_dict(self, base: "Architecture") -> dict:
        p, pc = self.prediction, self.arch.param_counts()
        return {
            "changes": {k: list(v) for k, v in self.changes(base).items()},
            "arch": self.arch.to_dict(),
            "params_total": pc.total,
            "params_active": pc.active,
            "params_change": self.params_change,
            "output_tokens_per_s_per_gpu": p.output_tokens_per_s_per_gpu,
            "output_tokens_per_s_per_user": p.output_tokens_per_s_per_user,
            "ttft_ms": p.ttft_s * 1e3,
            "tpot_ms": p.tpot_s * 1e3,
            "throughput_gain": self.throughput_gain,
            "interactivity_gain": self.interactivity_gain,
        }


_VARIED = ("hidden", "heads", "kv_heads", "layers", "ffn", "expert_ffn")


def _kv_options(heads: int, kv_heads: int) -> list[int]:
    """The model's KV heads, half and double them: those that divide ``heads``."""
    return sorted({k for k in (kv_heads // 2, kv_heads, 2 * kv_heads) if k >= 1 and heads % k == 0})


def _ffn_range(make, lo_params: float, hi_params: float, start: int, step: int) -> Iterator[int]:
    """Multiples of ``step`` whose shape ``make(width)`` has total params in [lo, hi] (linear in width)."""
    if step <= 0:
        return
    p0 = make(step).param_counts().total
    p1 = make(2 * step).param_counts().total
    per_step = p1 - p0  # parameters per step of width (the count is linear in it)
    if per_step <= 0:
        yield start
        return
    lo = max(1, math.ceil((lo_params - p0) / per_step) + 1)
    hi = math.floor((hi_params - p0) / per_step) + 1
    for n in range(lo, hi + 1):
        yield n * step


def neighbourhood(arch: "Architecture", *, tp: int = 1, ep: int = 1, budget_pct: float = BUDGET_PCT,
                  align: int = 128, hidden_steps: int = 4, layer_steps: int = 4) -> list["Architecture"]:
    """Every aligned shape near ``arch`` whose total parameters lie within ± ``budget_pct`` of its own.

    See the module docstring for what varies. ``arch`` itself is not included; MLA models keep
    their attention (hidden varies, heads and the latent ranks do not).
    """
    if not 0 < budget_pct < 1:
        raise ValueError(f"budget_pct must be in (0, 1) (0.1 = ±10 %), got {budget_pct}")
    if align < 1:
        raise ValueError(f"align must be >= 1, got {align}")
    total = arch.param_counts().total
    lo_p, hi_p = total * (1 - budget_pct), total * (1 + budget_pct)
    moe_tp = tp // ep if arch.is_moe else tp
    base_h = max(align, round(arch.hidden / align) * align)
    hiddens = sorted({h for k in range(-hidden_steps, hidden_steps + 1)
                      if (h := base_h + k * align) > 0} | {arch.hidden})
    seen: set = set()
    out: list["Architecture"] = []
    for h in hiddens:
        if arch.mla is None and (h * arch.heads) % arch.hidden:
            continue
        heads = arch.heads if arch.mla is not None else h * arch.heads // arch.hidden
        kvs = [arch.kv_heads] if arch.mla is not None else _kv_options(heads, arch.kv_heads)
        for layers in range(max(1, arch.layers - layer_steps), arch.layers + layer_steps + 1):
            if arch.is_moe and arch.dense_layers >= layers:
                continue
            for kv in kvs:
                try:
                    shape = arch.replace(hidden=h, heads=heads, kv_heads=kv, head_dim=arch.head_dim, layers=layers)
                except ValueError:
                    continue
                # the width that the budget moves: expert FFN for an MoE, else the dense FFN
                if arch.is_moe:
                    def make(w, s=shape):
                        return s.replace(expert_ffn=w, shared_expert_ffn=s.shared_expert_ffn)
                    widths = _ffn_range(make, lo_p, hi_p, arch.expert_ffn, align * moe_tp)
                else:
                    def make(w, s=shape):
                        return s.replace(ffn=w)
                    widths = _ffn_range(make, lo_p, hi_p, arch.ffn, align * tp)
                for w in widths:
                    cand = make(w)
                    key = (cand.hidden, cand.heads, cand.kv_heads, cand.layers, cand.ffn, cand.expert_ffn)
                    if key in seen or cand == arch:
                        continue
                    seen.add(key)
                    if lo_p <= cand.param_counts().total <= hi_p:
                        out.append(cand)
    return out


def dominating_neighbours(arch: "Architecture", gpu: "GPU | str", deployment: Deployment, *,
                          budget_pct: float = BUDGET_PCT, align: int = 128, hidden_steps: int = 4,
                          layer_steps: int = 4) -> tuple[Prediction, list[Neighbour], int]:
    """(the model's prediction, the neighbours that dominate it, how many neighbours were scored).

    The model is scored at ``deployment.concurrency`` if given, else at its max-throughput batch;
    every shape of :func:`neighbourhood` at that same batch. Kept: shapes that fit in memory and
    reach strictly more output tokens/s per GPU and per user. Sorted by tokens/s per GPU, best first.
    """
    gpu = get_gpu(gpu)
    base = predict(arch, gpu, deployment) if deployment.concurrency is not None else \
        max_throughput(arch, gpu, deployment)
    dep = deployment.replace(concurrency=base.batch)
    shapes = neighbourhood(arch, tp=dep.tp, ep=dep.ep, budget_pct=budget_pct, align=align,
                           hidden_steps=hidden_steps, layer_steps=layer_steps)
    total = arch.param_counts().total
    g0, u0 = base.output_tokens_per_s_per_gpu, base.output_tokens_per_s_per_user
    kept: list[Neighbour] = []
    for cand in shapes:
        try:
            p = predict(cand, gpu, dep)
        except ValueError:
            continue  # a layout this shape cannot take (e.g. kv_heads the tp ranks cannot split)
        if not p.fits or not (p.output_tokens_per_s_per_gpu > g0 and p.output_tokens_per_s_per_user > u0):
            continue
        kept.append(Neighbour(arch=cand, prediction=p, throughput_gain=p.output_tokens_per_s_per_gpu / g0 - 1,
                              interactivity_gain=p.output_tokens_per_s_per_user / u0 - 1,
                              params_change=cand.param_counts().total / total - 1))
    kept.sort(key=lambda n: -n.prediction.output_tokens_per_s_per_gpu)
    return base, kept, len(shapes)


def params_front(neighbours: list[Neighbour]) -> list[Neighbour]:
    """The neighbours no other beats on both output tokens/s per GPU and total parameters.

    Within the band a smaller model is usually faster; this keeps, for each parameter count, the
    fastest shape, so the shapes that keep the most parameters are not crowded out by the smallest.
    Sorted by total parameters, largest first.
    """
    ranked = sorted(neighbours, key=lambda n: (-n.arch.param_counts().total, -n.prediction.output_tokens_per_s_per_gpu))
    out: list[Neighbour] = []
    best = -math.inf
    for n in ranked:
        if n.prediction.output_tokens_per_s_per_gpu > best:
            out.append(n)
            best = n.prediction.output_tokens_per_s_per_gpu
    return out

