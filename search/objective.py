"""One trial: suggest a shape, check it, score it with the performance model, train its proxy.

Order (cheap first; an infeasible candidate costs no proxy run):

1. :func:`search.space.suggest_candidate` proposes a full-size, aligned shape.
2. Checks before training, each recorded with ``trial.set_constraint`` (value <= 0 is
   feasible): parameter budgets (total/active), a parallelism choice that works for
   the shape, memory fit, and the SLO.
3. :func:`operating_point` scores the FULL-size candidate on the deployment: every
   valid parallelism choice at the fixed concurrency, or at the best-throughput
   concurrency (meeting the SLO); the best output tok/s/GPU wins. Its tok/s/GPU,
   tok/s/user, TTFT and TPOT are the performance objectives.
4. The proxy trains a REDUCED version (:func:`search.proxy.reduce_architecture`) with
   ``CoDesignCallback`` (QAT in the candidate's precision); its final validation loss
   is the accuracy objective.

How a trial ends:

- COMPLETE with the objective values.
- PRUNED, infeasible before training: the constraints stay on the trial and the
  reason is in the ``infeasible`` user attribute. No loss is invented. Why PRUNED
  (optuna 5.0 source): ``TPESampler._split_trials`` reads PRUNED trials and puts any
  trial with a positive constraint into its "infeasible" group, ranked after feasible
  ones by total violation, so TPE learns to avoid the region; ``NSGAIISampler``,
  ``NSGAIIISampler`` and ``GPSampler`` build their models from COMPLETE trials only,
  so an infeasible trial simply does not enter their population. A COMPLETE trial
  would need a loss we never measured, and FAIL would hide that the shape itself,
  not the machinery, was the problem. ``study.best_trials`` never includes them.
- PRUNED, stopped early: the run was dominated (:class:`DominatedStoppingRule`).
- FAIL with the reason in the ``fail_reason`` user attribute: any exception
  (including out of memory) or a non-finite loss. The study goes on
  (``study.optimize(catch=(Exception,))``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import optuna
from optuna.trial import TrialState

from co_design.arch import Architecture
from search.config import OBJECTIVES, SearchConfig, steps_of
from search.space import Candidate, parallel_choices, shape_label, suggest_candidate

__all__ = [
    "Objective",
    "OperatingPoint",
    "NonFiniteLossError",
    "DominatedStoppingRule",
    "operating_point",
    "objective_value",
    "perf_slo",
    "PERF_ATTR",
    "FAIL_REASON_ATTR",
    "INFEASIBLE_ATTR",
    "INTERRUPTED",
]

PERF_ATTR = "prediction"  # user attribute: the chosen operating point's prediction (JSON)
FAIL_REASON_ATTR = "fail_reason"
INFEASIBLE_ATTR = "infeasible"
INTERRUPTED = "interrupted"  # FAIL reasons starting with it: Ctrl-C or a killed worker; not counted toward n_trials


class NonFiniteLossError(RuntimeError):
    """The proxy's loss became NaN or infinite."""


# --------------------------------------------------------------------------- performance
@dataclass
class OperatingPoint:
    """The best serving point of one candidate over the deployment's parallelism choices."""

    prediction: Any | None  # co_design.perf.Prediction
    deployment: Any | None  # co_design.perf.Deployment
    feasible: bool
    violations: dict[str, float]  # constraint name -> value (<= 0 feasible)
    reasons: list[str] = field(default_factory=list)  # why choices were skipped / infeasible


def _slo_violation(slo: Any, p: Any) -> float:
    """Largest relative shortfall of ``p`` against ``slo`` (<= 0 when met)."""
    worst = -1.0
    if slo.min_tokens_per_s_per_user is not None:
        worst = max(worst, 1 - p.output_tokens_per_s_per_user / slo.min_tokens_per_s_per_user)
    if slo.max_ttft_s is not None:
        worst = max(worst, p.ttft_s / slo.max_ttft_s - 1)
    if slo.max_tpot_s is not None:
        worst = max(worst, p.tpot_s / slo.max_tpot_s - 1)
    return worst


def perf_slo(slo: Any) -> Any:
    """:class:`co_design.perf.SLO` of a :class:`search.config.SLOConfig`; None when no field is set."""
    if not slo.is_set:
        return None
    from co_design import perf

    return perf.SLO(
        min_tokens_per_s_per_user=slo.min_tokens_per_s_per_user, max_ttft_s=slo.max_ttft_s, max_tpot_s=slo.max_tpot_s
    )


def operating_point(arch: Architecture, gpu: Any, deployment_cfg: Any, precision: str | None = None) -> OperatingPoint:
    """Score ``arch`` under every valid parallelism choice; keep the best feasible one.

    Feasible: fits in memory and meets the SLO (when one is set). Among feasible
    choices the highest output tok/s/GPU wins; when none is feasible the least
    violating is returned with the violations (``memory``: needed / capacity - 1;
    ``slo``: largest relative shortfall; ``parallelism``: 1 when no choice is valid).
    """
    from co_design import perf

    d = deployment_cfg
    slo = perf_slo(d.slo)
    weights = precision or d.weights
    activations = precision or d.activations
    reasons: list[str] = []
    scored: list[tuple[tuple, Any, Any, dict[str, float]]] = []
    for combo in parallel_choices(d):
        label = f"tp={combo['tp']} ep={combo['ep']} pp={combo['pp']} adp={combo['attention_dp']} helix={combo['helix']}"
        if arch.is_moe and arch.experts % combo["ep"]:
            reasons.append(f"{label}: experts={arch.experts} not divisible by ep")
            continue
        if not arch.is_moe and combo["ep"] > 1:
            reasons.append(f"{label}: ep > 1 needs an MoE model")
            continue
        try:
            dep = perf.Deployment(
                gpus=d.gpus,
                weights=weights,
                activations=activations,
                kv_cache=d.kv_cache,
                isl=d.isl,
                osl=d.osl,
                concurrency=d.concurrency,
                **combo,
            )
            if d.concurrency is None:
                pred = perf.max_throughput(arch, gpu, dep, slo=slo)
            else:
                pred = perf.predict(arch, gpu, dep)
        except ValueError as exc:  # e.g. heads not divisible by tp, helix with attention DP
            reasons.append(f"{label}: {exc}")
            continue
        mem = pred.memory
        v = {"memory": float(mem.total_bytes / mem.capacity_bytes - 1) if mem.capacity_bytes else 0.0}
        if not pred.fits:
            v["memory"] = max(v["memory"], 1e-6)
        if slo is not None:
            v["slo"] = float(_slo_violation(slo, pred))
        violation = sum(max(0.0, x) for x in v.values())
        scored.append(((violation <= 0, -violation, pred.output_tokens_per_s_per_gpu), pred, dep, v))
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
                f"GB per GPU even at its best choice ({dep.label})"
            )
        if v.get("slo", 0) > 0:
            reasons.append(f"misses the SLO by {v['slo']:.0%} at its best choice ({dep.label})")
    return OperatingPoint(pred, dep, feasible, v, reasons)


def objective_value(name: str, prediction: Any, loss: float | None) -> float:
    """The value of objective ``name`` (see :data:`search.config.OBJECTIVES`)."""
    if name == "loss":
        assert loss is not None
        return float(loss)
    if name == "tokens_per_s_per_gpu":
        return float(prediction.output_tokens_per_s_per_gpu)
    if name == "tokens_per_s_per_user":
        return float(prediction.output_tokens_per_s_per_user)
    if name == "ttft_ms":
        return float(prediction.ttft_s) * 1e3
    if name == "tpot_ms":
        return float(prediction.tpot_s) * 1e3
    raise ValueError(f"unknown objective {name!r}; known: {', '.join(OBJECTIVES)}")


# --------------------------------------------------------------------------- early stopping
@dataclass
class DominatedStoppingRule:
    """Stop a proxy run that is on course to be dominated.

    A loss-only median rule would stop every small, fast model (its loss is worse than
    the median) and so cut the fast end off the Pareto front. This rule compares the
    run only with completed trials that are at least as good on every performance
    objective (known before training): if its validation loss is worse than the median
    of those peers at the same step, those peers will dominate it. Delegates the
    median test (warm-up, minimum peers, diverged runs) to
    :class:`co_design.callback.MedianStoppingRule`.
    """

    peers: Sequence[Mapping[int, float]]
    inner: Any  # MedianStoppingRule

    def decide(self, step: int, value: float, history: Sequence[Mapping[int, float]], *, validations: int, minimize: bool) -> Any:
        decision = self.inner.decide(step, value, list(self.peers), validations=validations, minimize=minimize)
        if decision.stop:
            from co_design.callback import StopDecision

            return StopDecision(True, decision.reason.replace("completed trials", "completed trials that are at least as fast"))
        return decision


def _dominating_peers(study: optuna.Study, perf_values: dict[str, float], number: int) -> list[dict[int, float]]:
    from co_design.callback import INTERMEDIATE_VALUES_ATTR

    peers = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.number == number:
            continue
        theirs = t.user_attrs.get("perf_objectives") or {}
        if not perf_values or set(theirs) != set(perf_values):
            continue
        at_least_as_good = all(
            (theirs[k] >= v) if OBJECTIVES[k][0] == "maximize" else (theirs[k] <= v) for k, v in perf_values.items()
        )
        raw = t.user_attrs.get(INTERMEDIATE_VALUES_ATTR)
        if at_least_as_good and isinstance(raw, Mapping):
            curve = {int(k): float(v) for k, v in raw.items() if v is not None}
            if curve:
                peers.append(curve)
    return peers


# --------------------------------------------------------------------------- the objective
def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=lambda o: getattr(o, "__dict__", str(o))))


def _prediction_dict(p: Any) -> dict[str, Any]:
    d = p.to_dict(ops=False)
    d.pop("ops", None)
    d.pop("deployment", None)  # recorded separately as the "deployment" attribute
    return _jsonable(d)


class Objective:
    """The callable handed to ``study.optimize``; returns the values of ``cfg.objectives.names``.

    ``train_fn`` (tests, custom training) replaces :func:`search.train.train_proxy` and gets
    the same keyword arguments; ``datamodule_factory`` replaces the configured data.
    """

    def __init__(
        self,
        cfg: SearchConfig,
        *,
        gpu: Any,
        run_dir: str,
        tracker: Any,
        datamodule_factory: Callable[[], Any] | None = None,
        train_fn: Callable[..., Any] | None = None,
    ) -> None:
        self.cfg, self.gpu, self.run_dir, self.tracker = cfg, gpu, run_dir, tracker
        self.names = list(cfg.objectives.names)
        self.needs_proxy = "loss" in self.names
        self._datamodule_factory = datamodule_factory
        self._datamodule = None
        self._train_fn = train_fn

    # The data module is built once per process (the corpus is cached on disk).
    def datamodule(self) -> Any:
        if self._datamodule is None:
            if self._datamodule_factory is None:
                from search.data import make_datamodule

                self._datamodule = make_datamodule(
                    self.cfg.proxy.data,
                    seed=self.cfg.seed,
                    run_dir=self.run_dir,
                    vocab_fold=self.cfg.proxy.reduction.vocab,
                )
            else:
                self._datamodule = self._datamodule_factory()
        return self._datamodule

    def __call__(self, trial: optuna.Trial) -> tuple[float, ...]:
        trial.set_user_attr("worker", {"host": socket.gethostname(), "pid": os.getpid()})
        try:
            return self._run(trial)
        except optuna.TrialPruned:
            raise
        except KeyboardInterrupt:
            trial.set_user_attr(FAIL_REASON_ATTR, f"{INTERRUPTED} (KeyboardInterrupt)")
            raise
        except Exception as exc:  # recorded, then re-raised: study.optimize(catch=...) marks FAIL and goes on
            trial.set_user_attr(FAIL_REASON_ATTR, _reason(exc))
            _free_accelerator_memory()
            raise

    def _run(self, trial: optuna.Trial) -> tuple[float, ...]:
        cfg = self.cfg
        cand = suggest_candidate(trial, cfg.space, cfg.deployment)
        arch = cand.arch
        counts = arch.param_counts()
        trial.set_user_attr("arch", arch.to_dict())
        trial.set_user_attr("shape", shape_label(arch))
        trial.set_user_attr("params_total", counts.total)
        trial.set_user_attr("params_active", counts.active)
        precision = cand.precision or cfg.deployment.weights
        trial.set_user_attr("precision", precision)

        # ---- checks before training, each a constraint (<= 0 feasible)
        constraints: dict[str, float] = {}
        reasons: list[str] = []
        b = cfg.space.params
        for key, count in (("total", counts.total), ("active", counts.active)):
            hi, lo = getattr(b, f"max_{key}"), getattr(b, f"min_{key}")
            if hi is not None:
                constraints[f"params_{key}_max"] = count / hi - 1
                if count > hi:
                    reasons.append(f"{key} parameters {count:,} exceed space.params.max_{key}={hi:,.0f}")
            if lo is not None:
                constraints[f"params_{key}_min"] = 1 - count / lo
                if count < lo:
                    reasons.append(f"{key} parameters {count:,} below space.params.min_{key}={lo:,.0f}")
        op = operating_point(arch, self.gpu, cfg.deployment, cand.precision)
        constraints.update(op.violations)
        if not op.feasible:
            reasons.extend(op.reasons)
        for key, value in sorted(constraints.items()):
            trial.set_constraint(key, float(value))
        if op.prediction is not None:
            trial.set_user_attr(PERF_ATTR, _prediction_dict(op.prediction))
            trial.set_user_attr("deployment", _jsonable(op.deployment.to_dict()))
            trial.set_user_attr("deployment_label", op.deployment.label)
        if reasons or any(v > 0 for v in constraints.values()):
            reason = "; ".join(reasons) or "constraint violated: " + ", ".join(
                f"{k}={v:.3g}" for k, v in constraints.items() if v > 0
            )
            trial.set_user_attr(INFEASIBLE_ATTR, reason)
            raise optuna.TrialPruned(f"infeasible before training: {reason}")

        pred = op.prediction
        perf_values = {n: objective_value(n, pred, None) for n in self.names if n != "loss"}
        trial.set_user_attr("perf_objectives", perf_values)

        loss = None
        if self.needs_proxy:
            loss = self._proxy_loss(trial, cand, op, perf_values)
        values = tuple(objective_value(n, pred, loss) for n in self.names)
        return values

    # ---- proxy
    def _proxy_loss(self, trial: optuna.Trial, cand: Candidate, op: OperatingPoint, perf_values: dict[str, float]) -> float:
        from search.proxy import reduce_architecture

        cfg = self.cfg
        dm = self.datamodule()
        reduced = reduce_architecture(cand.arch, cfg.proxy.reduction, int(dm.vocab_size))
        quant = cand.precision or cfg.proxy.quant or cfg.deployment.weights
        key = _proxy_key(reduced, quant, cfg)
        trial.set_user_attr("proxy_arch", reduced.to_dict())
        trial.set_user_attr("proxy_params", reduced.param_counts().total)
        trial.set_user_attr("proxy_key", key)
        trial.set_user_attr("quant", quant)
        if cfg.proxy.reuse_losses:
            for t in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
                if t.user_attrs.get("proxy_key") == key and "proxy_loss" in t.user_attrs:
                    loss = float(t.user_attrs["proxy_loss"])
                    trial.set_user_attr("proxy_loss", loss)
                    trial.set_user_attr("proxy_loss_reused_from", t.number)
                    for attr in ("intermediate_values", "proxy_steps"):
                        if attr in t.user_attrs:
                            trial.set_user_attr(attr, t.user_attrs[attr])
                    return loss

        stopping = None
        if cfg.proxy.early_stopping:
            from co_design.callback import MedianStoppingRule

            steps = steps_of(cfg.proxy)
            stopping = DominatedStoppingRule(
                peers=_dominating_peers(trial.study, perf_values, trial.number),
                inner=MedianStoppingRule(warmup_steps=max(1, steps // 3), min_completed_trials=2),
            )
        if self._train_fn is None:
            from search.train import train_proxy

            train_fn = train_proxy
        else:
            train_fn = self._train_fn
        t0 = time.perf_counter()
        result = train_fn(
            trial=trial,
            cfg=cfg,
            full_arch=cand.arch,
            proxy_arch=reduced,
            gpu=self.gpu,
            deployment=op.deployment,
            quant=quant,
            datamodule=dm,
            stopping=stopping,
            tracker=self.tracker,
            run_dir=self.run_dir,
        )
        seconds = time.perf_counter() - t0
        trial.set_user_attr("proxy_seconds", round(seconds, 2))
        trial.set_user_attr("proxy_steps", int(result.steps))
        if result.pruned_reason:
            raise optuna.TrialPruned(result.pruned_reason)
        loss = float(result.loss)
        if not math.isfinite(loss):
            raise NonFiniteLossError(f"proxy validation loss is {loss} after {result.steps} steps (diverged)")
        trial.set_user_attr("proxy_loss", loss)
        return loss


def _proxy_key(reduced: Architecture, quant: str, cfg: SearchConfig) -> str:
    """Identity of a proxy run: same key, same training (shape, QAT format, data, budget, optimizer, seed)."""
    p = cfg.proxy
    ident = {
        "arch": {k: v for k, v in reduced.to_dict().items() if k != "name"},
        "quant": quant,
        "data": {k: getattr(p.data, k) for k in ("source", "path", "val_path", "seq_len", "batch_size", "val_batches")},
        "budget": steps_of(p),
        "opt": [p.lr, p.min_lr_ratio, p.warmup_steps, p.weight_decay, p.grad_clip, p.aux_loss_coef],
        "seed": cfg.seed,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _reason(exc: BaseException) -> str:
    name = type(exc).__name__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if "out of memory" in str(exc).lower() or name == "OutOfMemoryError":
        return f"out of memory ({name}): {text}"[:500]
    return f"{name}: {text}"[:500]


def _free_accelerator_memory() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # pragma: no cover - best effort
        pass

