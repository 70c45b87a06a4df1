"""How the performance model scores one full-size candidate: two operating points.

A single "max-throughput" point carries no interactivity information: there,
tok/s/user = tok/s/GPU x GPUs / batch, and when the batch sits at the runtime's
cap (``max_batch``) for every candidate, the two numbers are one. So the search
measures a candidate at two operating points that answer different questions:

* **Throughput point** -- the highest output tok/s/GPU over every concurrency that
  fits in memory and meets the deployment's SLO (or at ``deployment.concurrency``
  when it is fixed), over every parallelism choice. This is what the deployment
  costs per token. It is limited by the SLO, the KV cache (HBM), the runtime's
  ``max_batch`` / ``max_num_tokens`` or the GPU itself; :func:`throughput_limits`
  says which, and the results show it.
* **Interactive point** -- ``deployment.interactive_concurrency`` requests in
  flight (default 1: one user alone), on the parallelism choice that serves them
  fastest. Its tok/s/user, TTFT and TPOT are the latency objectives: how fast the
  model can answer at all, set by weight bytes, layer count and per-kernel
  overheads rather than by KV-cache capacity.

The two points react to different parts of the shape (KV heads and layers move
the first; weight bytes and depth the second), so the front shows a real
throughput-vs-interactivity trade-off.

Pure Python on top of :mod:`co_design.perf` (no torch).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any

from co_design.arch import Architecture
from search.config import OBJECTIVES
from search.space import parallel_choices

__all__ = [
    "OperatingPoint",
    "Scores",
    "perf_deployment",
    "perf_slo",
    "throughput_point",
    "interactive_point",
    "throughput_limits",
    "score_candidate",
    "objective_value",
    "prediction_dict",
    "definitions",
]


@dataclass
class OperatingPoint:
    """The best serving point of one candidate over the deployment's parallelism choices."""

    prediction: Any | None  # co_design.perf.Prediction
    deployment: Any | None  # co_design.perf.Deployment
    feasible: bool
    violations: dict[str, float]  # constraint name -> value (<= 0 feasible)
    reasons: list[str] = field(default_factory=list)  # why choices were skipped / infeasible


@dataclass
class Scores:
    """A candidate's two operating points and what limits the first."""

    throughput: OperatingPoint
    interactive: OperatingPoint
    limits: list[str]  # what caps the throughput point's batch (see throughput_limits)

    @property
    def feasible(self) -> bool:
        return self.throughput.feasible and self.interactive.feasible

    @property
    def violations(self) -> dict[str, float]:
        return dict(self.throughput.violations)

    @property
    def reasons(self) -> list[str]:
        return list(dict.fromkeys(self.throughput.reasons + (self.interactive.reasons if not self.interactive.feasible else [])))


def perf_slo(slo: Any) -> Any:
    """:class:`co_design.perf.SLO` of a :class:`search.config.SLOConfig`; None when no field is set."""
    if not slo.is_set:
        return None
    from co_design import perf

    return perf.SLO(
        min_tokens_per_s_per_user=slo.min_tokens_per_s_per_user, max_ttft_s=slo.max_ttft_s, max_tpot_s=slo.max_tpot_s,
        max_ttft_p99_s=slo.max_ttft_p99_s, max_tpot_p99_s=slo.max_tpot_p99_s,
    )


@functools.lru_cache(maxsize=8)
def base_runtime(runtime_file: str | None) -> Any:
    """The :class:`co_design.perf.Runtime` of ``deployment.runtime_file`` (read once per path), else the fitted
    defaults."""
    from co_design import perf

    return perf.Runtime.load(runtime_file) if runtime_file else perf.Runtime()


def perf_deployment(deployment_cfg: Any, combo: dict[str, Any], precision: str | None, concurrency: int | None) -> Any:
    """The :class:`co_design.perf.Deployment` of one parallelism ``combo`` of a :class:`DeploymentConfig`.

    Raises ValueError (from the performance model) for a combination it cannot run.
    """
    from co_design import perf

    d = deployment_cfg
    activations = precision or d.activations
    return perf.Deployment(
        gpus=d.gpus,
        weights=precision or d.weights,
        activations=activations,
        kv_cache=d.kv_cache,
        fp8_scaling=d.fp8_scaling if activations == "fp8" else "tensor",  # block scales only FP8 activations
        isl=d.isl,
        osl=d.osl,
        concurrency=concurrency,
        arrivals=d.arrivals,
        runtime=dataclasses.replace(base_runtime(d.runtime_file), max_batch=int(d.max_batch),
                                    max_num_tokens=int(d.max_num_tokens)),
        **combo,
    )


def _slo_violation(slo: Any, p: Any) -> float:
    """Largest relative shortfall of ``p`` against ``slo`` (<= 0 when met)."""
    worst = -1.0
    if slo.min_tokens_per_s_per_user is not None:
        worst = max(worst, 1 - p.output_tokens_per_s_per_user / slo.min_tokens_per_s_per_user)
    if slo.max_ttft_s is not None:
        worst = max(worst, p.ttft_s / slo.max_ttft_s - 1)
    if slo.max_tpot_s is not None:
        worst = max(worst, p.tpot_s / slo.max_tpot_s - 1)
    if slo.max_ttft_p99_s is not None:
        worst = max(worst, p.ttft_p99_s / slo.max_ttft_p99_s - 1)
    if slo.max_tpot_p99_s is not None:
        worst = max(worst, p.tpot_p99_s / slo.max_tpot_p99_s - 1)
    return worst


def _choices(arch: Architecture, deployment_cfg: Any, precision: str | None, concurrency: int | None,
             reasons: list[str]) -> list[Any]:
    """The perf deployments of every parallelism choice valid for ``arch`` (skipped ones explained in ``reasons``)."""
    from co_design.perf.ops import shards

    out = []
    for combo in parallel_choices(deployment_cfg):
        label = f"tp={combo['tp']} ep={combo['ep']} pp={combo['pp']} adp={combo['attention_dp']} helix={combo['helix']}"
        if arch.is_moe and arch.experts % combo["ep"]:
            reasons.append(f"{label}: experts={arch.experts} not divisible by ep")
            continue
        if not arch.is_moe and combo["ep"] > 1:
            reasons.append(f"{label}: ep > 1 needs an MoE model")
            continue
        try:
            dep = perf_deployment(deployment_cfg, combo, precision, concurrency)
            shards(arch, dep)
        except ValueError as exc:  # e.g. heads not divisible by tp, helix with attention DP
            reasons.append(f"{label}: {exc}")
            continue
        out.append(dep)
    return out


def _pick(scored: list[tuple[tuple, Any, Any, dict[str, float]]], slo: Any, reasons: list[str],
          what: str) -> OperatingPoint:
    if not scored:
        v = {"parallelism": 1.0, "memory": 0.0}
        if slo is not None:
            v["slo"] = 0.0
        return OperatingPoint(None, None, False, v, reasons or ["no parallelism choice"])
    key, pred, dep, v = max(scored, key=lambda s: s[0])
    v = {"parallelism": 0.0, **v}
    feasible = bool(key[0])
    if not feasible:
        if v["memory"] > 0:
            reasons.append(
                f"does not fit: needs {pred.memory.total_bytes / 1e9:.1f} GB of {pred.memory.capacity_bytes / 1e9:.1f} "
                f"GB per GPU even at its best choice ({dep.label}, {what})"
            )
        if v.get("slo", 0) > 0:
            reasons.append(f"misses the SLO by {v['slo']:.0%} at its best choice ({dep.label}, {what})")
    return OperatingPoint(pred, dep, feasible, v, reasons)


def _memory_violation(pred: Any) -> float:
    mem = pred.memory
    v = float(mem.total_bytes / mem.capacity_bytes - 1) if mem.capacity_bytes else 0.0
    return v if pred.fits else max(v, 1e-6)


def throughput_point(arch: Architecture, gpu: Any, deployment_cfg: Any, precision: str | None = None) -> OperatingPoint:
    """The throughput operating point: best output tok/s/GPU over the parallelism choices.

    At ``deployment.concurrency`` when it is set (the SLO, if any, is then a
    constraint at that concurrency), else at the best concurrency that fits and
    meets the SLO (:func:`co_design.perf.max_throughput`). Feasible: fits in memory
    and meets the SLO. Among feasible choices the highest tok/s/GPU wins; when none
    is feasible the least violating is returned with its violations (``memory``:
    needed / capacity - 1; ``slo``: largest relative shortfall; ``parallelism``: 1
    when no choice is valid).
    """
    from co_design import perf

    d = deployment_cfg
    slo = perf_slo(d.slo)
    reasons: list[str] = []
    scored = []
    for dep in _choices(arch, d, precision, d.concurrency, reasons):
        pred = perf.predict(arch, gpu, dep) if d.concurrency is not None else perf.max_throughput(arch, gpu, dep, slo=slo)
        v = {"memory": _memory_violation(pred)}
        if slo is not None:
            v["slo"] = float(_slo_violation(slo, pred))
        violation = sum(max(0.0, x) for x in v.values())
        scored.append(((violation <= 0, -violation, pred.output_tokens_per_s_per_gpu), pred, dep, v))
    return _pick(scored, slo, reasons, "throughput point")


def interactive_point(arch: Architecture, gpu: Any, deployment_cfg: Any, precision: str | None = None) -> OperatingPoint:
    """The interactive operating point: ``deployment.interactive_concurrency`` requests in flight.

    Every parallelism choice is scored at that concurrency (requests in flight over
    the whole deployment, as trtllm-bench counts them); the fastest per user that fits
    wins. Its only constraint is memory: the SLO bounds the throughput point, and a
    candidate that meets it there meets it at lower load too.
    """
    from co_design import perf

    reasons: list[str] = []
    scored = []
    for dep in _choices(arch, deployment_cfg, precision, int(deployment_cfg.interactive_concurrency), reasons):
        pred = perf.predict(arch, gpu, dep)
        v = {"memory": _memory_violation(pred)}
        violation = max(0.0, v["memory"])
        scored.append(((violation <= 0, -violation, pred.output_tokens_per_s_per_user), pred, dep, v))
    return _pick(scored, None, reasons, "interactive point")


def throughput_limits(arch: Architecture, gpu: Any, point: OperatingPoint, deployment_cfg: Any) -> list[str]:
    """What caps the throughput point's batch, in words.

    * ``max_batch=N (runtime)``: the batch sits at the runtime's request cap below what
      the KV cache could hold -- raising ``deployment.max_batch`` would raise throughput;
    * ``KV cache (HBM)``: the batch is the most the KV cache holds;
    * ``max_num_tokens=N (runtime)``: the iteration (decode plus amortized prompt
      tokens) fills at least 90 % of the token budget, beyond which it runs as chunks;
    * ``concurrency=N (fixed)``: the deployment fixes the concurrency;
    * ``SLO``: a ~10 % larger batch would miss the deployment's SLO;
    * ``throughput peak (GPU)``: none of these: a larger batch would be slower per GPU.

    Empty when the point does not fit.
    """
    from co_design import perf
    from co_design.hardware import get_gpu
    from co_design.perf.memory import memory_breakdown
    from co_design.perf.ops import shards

    gpu = get_gpu(gpu)
    p, dep = point.prediction, point.deployment
    if p is None or dep is None or not p.fits:
        return []
    out: list[str] = []
    s = shards(arch, dep)
    per_replica = math.ceil(p.batch / dep.replicas)
    mb = memory_breakdown(arch, gpu, dep, 0)
    kv_cap = int(mb.kv_cache_capacity_bytes // mb.kv_bytes_per_request) * s.a_dp if mb.kv_bytes_per_request else 0
    rt_cap = dep.runtime.max_batch * s.a_dp
    if per_replica >= min(kv_cap, rt_cap):
        out.append(f"max_batch={dep.runtime.max_batch} (runtime)" if rt_cap <= kv_cap else "KV cache (HBM)")
    # decode tokens plus amortized prompt tokens of one iteration, against the budget of the ranks that schedule
    iteration_tokens = per_replica / dep.pp * (1 + dep.isl / dep.osl)
    if iteration_tokens >= 0.9 * dep.runtime.max_num_tokens * s.a_dp:
        out.append(f"max_num_tokens={dep.runtime.max_num_tokens} (runtime)")
    if deployment_cfg.concurrency is not None:
        return out + [f"concurrency={deployment_cfg.concurrency} (fixed)"]
    slo = perf_slo(deployment_cfg.slo)
    if slo is not None and not out:
        bigger = max(per_replica + 1, math.ceil(per_replica * 1.1)) * dep.replicas
        if not slo.met(perf.predict(arch, gpu, dep.replace(concurrency=bigger))):
            out.append("SLO")
    return out or ["throughput peak (GPU)"]


def score_candidate(arch: Architecture, gpu: Any, deployment_cfg: Any, precision: str | None = None) -> Scores:
    """Both operating points of ``arch`` on ``deployment_cfg`` (see the module docstring)."""
    tp = throughput_point(arch, gpu, deployment_cfg, precision)
    ip = interactive_point(arch, gpu, deployment_cfg, precision)
    return Scores(tp, ip, throughput_limits(arch, gpu, tp, deployment_cfg) if tp.feasible else [])


def objective_value(name: str, scores: Scores, loss: float | None) -> float:
    """The value of objective ``name``, in the unit of its label (:data:`search.config.OBJECTIVES`).

    ``tokens_per_s_per_gpu`` comes from the throughput point; ``tokens_per_s_per_user``,
    ``ttft_ms`` and ``tpot_ms`` from the interactive point.
    """
    spec = OBJECTIVES.get(name)
    if spec is None:
        raise ValueError(f"unknown objective {name!r}; known: {', '.join(OBJECTIVES)}")
    if spec.point is None:
        if loss is None:
            raise ValueError(f"the {name} objective needs a proxy loss")
        return float(loss)
    point = scores.throughput if spec.point == "throughput" else scores.interactive
    return float(getattr(point.prediction, spec.field)) * spec.scale


def prediction_dict(p: Any) -> dict[str, Any]:
    """A prediction as plain JSON data, without its op table and deployment (recorded separately)."""
    import json

    d = p.to_dict(ops=False)
    d.pop("ops", None)
    d.pop("deployment", None)
    return json.loads(json.dumps(d, default=lambda o: getattr(o, "__dict__", str(o))))


_ARRIVALS_MEANING = {
    "steady": "requests spread in time, each prompt prefilled beside the others' decoding",
    "burst": "the requests in flight arrive together, each waiting for the prompts ahead of it (mean over the wave)",
    "poisson": "requests arrive at random, each prompt also waiting, in a queue admitted at iteration ends, for the "
               "ones that arrived before it and the later ones that share its last iteration; under attention-DP each "
               "prompt on its request's rank, the busiest rank pacing each iteration (mean, and p99 where the SLO "
               "bounds it)",
}


def definitions(deployment_cfg: Any) -> list[str]:
    """What the performance objectives mean for this deployment, in words (printed under the front)."""
    d = deployment_cfg
    slo = []
    if d.slo.min_tokens_per_s_per_user is not None:
        slo.append(f">= {d.slo.min_tokens_per_s_per_user:g} tok/s/user")
    if d.slo.max_ttft_s is not None:
        slo.append(f"TTFT <= {d.slo.max_ttft_s * 1e3:g} ms")
    if d.slo.max_tpot_s is not None:
        slo.append(f"TPOT <= {d.slo.max_tpot_s * 1e3:g} ms")
    if d.slo.max_ttft_p99_s is not None:
        slo.append(f"p99 TTFT <= {d.slo.max_ttft_p99_s * 1e3:g} ms ({d.arrivals} arrivals)")
    if d.slo.max_tpot_p99_s is not None:
        slo.append(f"p99 TPOT <= {d.slo.max_tpot_p99_s * 1e3:g} ms ({d.arrivals} arrivals)")
    where = f"at {d.concurrency} requests in flight" if d.concurrency is not None else "at the best concurrency that fits"
    meets = f" and meets the SLO ({', '.join(slo)})" if slo else ""
    return [
        f"tok/s/GPU: the throughput point: output tokens/s per GPU {where}{meets}, best parallelism choice",
        f"tok/s/user, TTFT, TPOT: the interactive point: {d.interactive_concurrency} request(s) in flight, "
        "fastest parallelism choice",
        f"TTFT with {d.arrivals} arrivals: " + _ARRIVALS_MEANING[d.arrivals],
        f"runtime limits: max_batch={d.max_batch} requests, max_num_tokens={d.max_num_tokens} tokens per iteration "
        "('limited by' names what caps each throughput point)",
        "runtime overheads: " + (f"from {d.runtime_file} (co_design.perf.Runtime fields; e.g. anchored on a measured "
                                 "TPOT by co-design anchor)" if d.runtime_file
                                 else "the performance model's fitted defaults (deployment.runtime_file: your own)"),
    ]
