"""The search space: an Optuna trial's suggestions -> a full-size :class:`Architecture`.

Shapes are aligned by construction: ``hidden`` steps in multiples of the alignment
(and of ``heads_multiple`` heads, so attention heads split evenly over TP ranks);
the heads are ``hidden / head_dim``; the dense FFN width is a multiple of
``alignment * max(TP choice)`` and the expert FFN width a multiple of ``alignment *
max(TP / EP)``, so every per-GPU shard of those GEMMs stays a whole number of tiles
under every parallelism choice. KV heads always divide the heads. What cannot be
guaranteed by construction (heads per TP rank, expert counts per EP rank, memory,
parameter budgets, an SLO) is checked before training in :mod:`search.objective`.

Pure Python (no torch): thousands of candidates cost milliseconds.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterator

from co_design.arch import Architecture

__all__ = [
    "Candidate",
    "suggest_candidate",
    "candidate_key",
    "candidate_from_params",
    "space_grid",
    "grid_size",
    "enumerate_candidates",
    "walk_candidates",
    "parallel_choices",
    "ffn_units",
    "shape_label",
    "human_count",
    "hidden_step",
    "largest_divisor_at_most",
    "parallelism_coverage",
    "space_corners",
]


@dataclass(frozen=True)
class Candidate:
    """A full-size architecture and, when searched, its serving/QAT precision."""

    arch: Architecture
    precision: str | None  # None: the deployment's weights/activations precision


def parallel_choices(deployment: Any) -> Iterator[dict[str, Any]]:
    """Every combination of the deployment's parallelism choices (tp, ep, pp, attention_dp, helix)."""
    for tp, ep, pp, adp, helix in itertools.product(
        deployment.tp, deployment.ep, deployment.pp, deployment.attention_dp, deployment.helix
    ):
        yield {"tp": int(tp), "ep": int(ep), "pp": int(pp), "attention_dp": bool(adp), "helix": int(helix)}


def ffn_units(space: Any, deployment: Any) -> tuple[int, int]:
    """Rounding units (elements) of the dense FFN and of the expert FFN widths.

    A dense FFN is split over all TP ranks, an expert over ``tp / ep`` ranks
    (:class:`co_design.perf.Deployment`): width = k * alignment * ranks keeps each
    per-GPU shard a multiple of the alignment.
    """
    a = space.alignment
    combos = list(parallel_choices(deployment))
    dense_ranks = max(c["tp"] for c in combos)
    expert_ranks = max(max(1, c["tp"] // c["ep"]) for c in combos)
    return a * dense_ranks, a * expert_ranks


def hidden_step(space: Any) -> int:
    """Step of ``hidden``: the alignment, and whole multiples of ``heads_multiple`` heads of the widest head_dim."""
    return math.lcm(int(space.alignment), max(int(h) for h in space.head_dim) * int(space.heads_multiple))


def _round_to(value: float, unit: int) -> int:
    return max(unit, int(round(value / unit)) * unit)


def largest_divisor_at_most(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is <= ``limit`` (at least 1)."""
    for d in range(min(n, max(1, limit)), 0, -1):
        if n % d == 0:
            return d
    return 1


def suggest_candidate(trial: Any, space: Any, deployment: Any) -> Candidate:
    """Ask ``trial`` for one candidate of ``space`` (a :class:`search.config.SpaceConfig`).

    Parameter names (as seen by the sampler and the dashboard): ``hidden``,
    ``layers``, ``head_dim``, ``kv_heads`` (the KV-head count asked for; the
    architecture uses the largest divisor of the heads not above it),
    ``ffn_multiplier``; for MoE ``experts``, ``experts_per_token`` (capped at the
    experts), ``shared_experts``, ``expert_ffn_multiplier``, ``dense_layers``
    (capped at layers - 1); ``precision`` when searched.
    """
    ffn_unit, expert_unit = ffn_units(space, deployment)
    hidden = trial.suggest_int("hidden", int(space.hidden[0]), int(space.hidden[-1]), step=hidden_step(space))
    layers = trial.suggest_int("layers", int(space.layers[0]), int(space.layers[-1]), step=int(space.layers_step))
    head_dim = int(trial.suggest_categorical("head_dim", [int(h) for h in space.head_dim]))
    heads = max(1, hidden // head_dim)
    kv_asked = int(trial.suggest_categorical("kv_heads", [int(k) for k in space.kv_heads]))
    kv_heads = largest_divisor_at_most(heads, kv_asked)
    lo, hi = float(space.ffn_multiplier[0]), float(space.ffn_multiplier[-1])
    step = float(space.ffn_multiplier_step)
    mult = trial.suggest_float("ffn_multiplier", lo, hi, step=step) if hi - lo >= step else lo
    ffn = _round_to(mult * hidden, ffn_unit)
    kw: dict[str, Any] = dict(
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=ffn,
        vocab=int(space.vocab),
        gated_ffn=bool(space.gated_ffn),
        tied_embeddings=bool(space.tied_embeddings),
    )
    if space.experts:
        experts = int(trial.suggest_categorical("experts", [int(e) for e in space.experts]))
        k_lo, k_hi = int(space.experts_per_token[0]), int(space.experts_per_token[-1])
        top_k = min(experts, trial.suggest_int("experts_per_token", k_lo, k_hi)) if k_hi > k_lo else k_lo
        s_lo, s_hi = int(space.shared_experts[0]), int(space.shared_experts[-1])
        shared = trial.suggest_int("shared_experts", s_lo, s_hi) if s_hi > s_lo else s_lo
        e_lo, e_hi = float(space.expert_ffn_multiplier[0]), float(space.expert_ffn_multiplier[-1])
        e_step = float(space.expert_ffn_multiplier_step)
        e_mult = trial.suggest_float("expert_ffn_multiplier", e_lo, e_hi, step=e_step) if e_hi - e_lo >= e_step else e_lo
        d_lo, d_hi = int(space.dense_layers[0]), int(space.dense_layers[-1])
        dense = trial.suggest_int("dense_layers", d_lo, d_hi) if d_hi > d_lo else d_lo
        kw.update(
            experts=experts,
            experts_per_token=top_k,
            shared_experts=shared,
            expert_ffn=_round_to(e_mult * hidden, expert_unit),
            dense_layers=min(dense, layers - 1),
        )
        if kw["dense_layers"] == 0:  # no dense FFN layer: its width is moot, so one canonical value
            kw["ffn"] = _round_to(lo * hidden, ffn_unit)
    precision = None
    if space.precisions:
        precision = str(trial.suggest_categorical("precision", [str(p) for p in space.precisions]))
    arch = Architecture(**kw, name=space.name)
    arch = arch.replace(name=shape_label(arch))
    return Candidate(arch=arch, precision=precision)


def candidate_key(cand: Candidate) -> str:
    """Identity of a candidate: its full-size architecture (name aside) and precision.

    Different suggestions can give the same shape (a KV-head count lowered to a divisor
    of the heads, top-k capped at the experts); equal keys are the same candidate, whose
    scores and proxy run would be the same.
    """
    import dataclasses
    import hashlib

    # field values in declaration order (nested MLA by its repr): stable across processes, ~10x cheaper
    # than hashing to_dict()'s JSON, which matters when a whole space is enumerated
    ident = [(f.name, getattr(cand.arch, f.name)) for f in dataclasses.fields(cand.arch) if f.name != "name"]
    return hashlib.sha256(repr((ident, cand.precision)).encode()).hexdigest()[:16]


class _GridTrial:
    """A stand-in trial that answers each suggestion from ``params`` (else its low end).

    With ``record=True`` it also keeps each suggestion's Optuna distribution (what
    :func:`space_grid` reads); answering alone costs no distribution objects.
    """

    def __init__(self, params: dict[str, Any] | None = None, *, record: bool = False) -> None:
        self.params = params or {}
        self.record = record
        self.distributions: dict[str, Any] = {}

    def suggest_int(self, name: str, low: int, high: int, step: int = 1) -> int:
        if self.record:
            from optuna.distributions import IntDistribution

            self.distributions[name] = IntDistribution(low, high, step=step)
        return self.params.get(name, low)

    def suggest_float(self, name: str, low: float, high: float, step: float | None = None) -> float:
        if self.record:
            from optuna.distributions import FloatDistribution

            self.distributions[name] = FloatDistribution(low, high, step=step)
        return self.params.get(name, low)

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        if self.record:
            from optuna.distributions import CategoricalDistribution

            self.distributions[name] = CategoricalDistribution(choices)
        return self.params.get(name, choices[0])


def candidate_from_params(space: Any, deployment: Any, params: dict[str, Any]) -> Candidate:
    """The candidate a trial holding suggestion values ``params`` proposes (no Optuna trial needed)."""
    return suggest_candidate(_GridTrial(params), space, deployment)


def _grid_values(dist: Any) -> list[Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution):
        return list(range(dist.low, dist.high + 1, dist.step))
    if isinstance(dist, FloatDistribution) and dist.step is not None:
        n = int(math.floor((dist.high - dist.low) / dist.step + 1e-9))
        return [round(dist.low + i * dist.step, 12) for i in range(n + 1)]
    raise ValueError(f"cannot enumerate a continuous distribution {dist!r}")  # the spaces here are all discrete


def space_grid(space: Any, deployment: Any) -> dict[str, list[Any]]:
    """Every value each suggestion of :func:`suggest_candidate` can take, by parameter name.

    The space's suggestions do not depend on each other's values (caps are applied
    after), so the grid is the product of these lists. Its size bounds the number of
    distinct candidates from above (several suggestions can give one shape).
    """
    return {name: _grid_values(dist) for name, dist in _distributions(space, deployment).items()}


def _distributions(space: Any, deployment: Any) -> dict[str, Any]:
    rec = _GridTrial(record=True)
    suggest_candidate(rec, space, deployment)
    return rec.distributions


def grid_size(space: Any, deployment: Any) -> int:
    """The number of suggestion combinations of the space (an upper bound on its distinct candidates)."""
    return math.prod(len(v) for v in space_grid(space, deployment).values())


def enumerate_candidates(space: Any, deployment: Any) -> Iterator[tuple[dict[str, Any], dict[str, Any], Candidate]]:
    """Every distinct candidate of the space once: ``(params, distributions, candidate)``.

    ``params``/``distributions`` are what an Optuna trial proposing this candidate would
    hold (the first suggestion combination that gives it), so enumerated candidates can
    be stored as ordinary trials (every suggestion is made whatever the values, so all
    share one distributions mapping). About 0.1 ms per combination.
    """
    for _, params, dists, cand in walk_candidates(space, deployment):
        yield params, dists, cand


def walk_candidates(space: Any, deployment: Any) -> Iterator[tuple[int, dict[str, Any], dict[str, Any], Candidate]]:
    """:func:`enumerate_candidates` with, first in each tuple, how many suggestion combinations have been
    walked when the candidate is found (out of :func:`grid_size`): the progress of an enumeration."""
    dists = _distributions(space, deployment)
    grid = {name: _grid_values(d) for name, d in dists.items()}
    names = list(grid)
    seen: set[str] = set()
    for walked, values in enumerate(itertools.product(*(grid[n] for n in names)), start=1):
        params = dict(zip(names, values))
        cand = suggest_candidate(_GridTrial(params), space, deployment)
        key = candidate_key(cand)
        if key in seen:
            continue
        seen.add(key)
        yield walked, params, dists, cand


def shape_label(arch: Architecture) -> str:
    """A compact shape string, e.g. ``h2048 L16 H16/kv4 d128 f8192`` (+ ``E64k4s1 ef1024 dense1``)."""
    s = f"h{arch.hidden} L{arch.layers} H{arch.heads}/kv{arch.kv_heads} d{arch.head_dim} f{arch.ffn}"
    if arch.is_moe:
        s += f" E{arch.experts}k{arch.experts_per_token}s{arch.shared_experts} ef{arch.expert_ffn}"
        if arch.dense_layers:
            s += f" dense{arch.dense_layers}"
    return s


def human_count(n: float) -> str:
    """1234567 -> '1.23M' (parameters)."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


def parallelism_coverage(space: Any, deployment: Any) -> tuple[int, int, list[str]]:
    """How many attention layouts of ``space`` some parallelism choice of ``deployment`` can serve.

    A layout is one (heads, KV heads, head_dim) the space can propose (every hidden
    step x head_dim x KV-head choice). Each is checked the way the performance model
    checks a deployment (:func:`co_design.perf.ops.shards`: TP/Helix dividing the heads,
    KV heads splitting or replicating evenly, EP dividing TP and the experts, ...),
    on the widest FFN-aligned shape at the deepest layer count. Returns (servable
    layouts, all layouts, a few reasons for the unservable ones). Milliseconds.
    """
    from co_design.perf import Deployment
    from co_design.perf.ops import shards

    ffn_unit, expert_unit = ffn_units(space, deployment)
    step = hidden_step(space)
    layouts = set()
    for hidden in range(int(space.hidden[0]), int(space.hidden[-1]) + 1, step):
        for head_dim in space.head_dim:
            heads = max(1, hidden // int(head_dim))
            for kv in space.kv_heads:
                layouts.add((heads, largest_divisor_at_most(heads, int(kv)), int(head_dim)))
    moe: dict[str, Any] = {}
    if space.experts:
        experts = max(int(e) for e in space.experts)
        moe = dict(
            experts=experts,
            experts_per_token=min(experts, int(space.experts_per_token[0])),
            expert_ffn=expert_unit,
        )
    deployments, reasons = [], []
    for combo in parallel_choices(deployment):
        try:
            deployments.append(Deployment(gpus=deployment.gpus, concurrency=1, **combo))
        except ValueError as exc:
            reasons.append(str(exc))
    ok = 0
    for heads, kv, head_dim in sorted(layouts):
        arch = Architecture(
            hidden=heads * head_dim, layers=int(space.layers[-1]), heads=heads, kv_heads=kv, head_dim=head_dim,
            ffn=ffn_unit, vocab=int(space.vocab), **moe,
        )
        servable = False
        for dep in deployments:
            try:
                shards(arch, dep)
                servable = True
                break
            except ValueError as exc:
                reasons.append(str(exc))
        ok += servable
    return ok, len(layouts), list(dict.fromkeys(reasons))[:3]


def space_corners(space: Any, deployment: Any) -> tuple[Candidate, Candidate]:
    """The smallest and the largest candidate of ``space`` (every suggestion at its low / high end)."""
    grid = space_grid(space, deployment)
    low = {name: min(values) for name, values in grid.items()}
    high = {name: max(values) for name, values in grid.items()}
    return candidate_from_params(space, deployment, low), candidate_from_params(space, deployment, high)
