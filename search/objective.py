"""One trial: suggest a shape, check it, score it with the performance model, train its proxy.

Order (cheap first; an infeasible candidate costs no proxy run):

1. :func:`search.space.suggest_candidate` proposes a full-size, aligned shape. A shape
   the study already holds (:func:`duplicate_of`), finished or in flight on another
   worker, ends PRUNED at once as a duplicate: no second proxy run, no second row in
   the results, no count toward ``n_trials``.
2. Checks before training, each recorded with ``trial.set_constraint`` (value <= 0 is
   feasible): parameter budgets (total/active), a parallelism choice that works for
   the shape, memory fit, and the SLO.
3. :func:`search.scoring.score_candidate` scores the FULL-size candidate at two
   operating points: throughput (best tok/s/GPU that fits and meets the SLO, over
   concurrency and every valid parallelism choice) and interactivity (tok/s/user,
   TTFT, TPOT at ``deployment.interactive_concurrency``).
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
- PRUNED, duplicate: the ``duplicate_of`` user attribute names the trial that holds
  the candidate. TPE ranks PRUNED trials after the evaluated ones, which steers it
  away from shapes it has already seen.
- PRUNED, surplus (parallel workers): ``n_trials`` trials were finished or in flight on
  other workers when this one started (:func:`held_count`); it evaluates nothing and
  does not count, so a study run by several workers ends with ``n_trials`` trials.
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
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import optuna
from optuna.trial import TrialState

from co_design.arch import Architecture
from search.config import OBJECTIVES, SearchConfig, steps_of
from search.study import (
    DUPLICATE_ATTR,
    FAIL_REASON_ATTR,
    INTERRUPTED,
    SURPLUS_ATTR,
    CLAIM_WAIT_S,
    duplicate_of,
    held_count,
)
from search.halving import RUNG_LOSSES_ATTR, promotes, rung_steps
from search.scoring import OperatingPoint, Scores, objective_value, prediction_dict, score_candidate
from search.space import Candidate, candidate_from_params, candidate_key, shape_label, space_grid, suggest_candidate

__all__ = [
    "Objective",
    "Evaluation",
    "NonFiniteLossError",
    "DominatedStoppingRule",
    "evaluate",
    "param_budget",
    "PERF_ATTR",
    "INTERACTIVE_ATTR",
    "PROPOSED_BY_ATTR",
    "EXHAUSTED_ATTR",
    "LOSS_CURVE_ATTR",
    "unseen_params",
    "INFEASIBLE_ATTR",
]

PERF_ATTR = "prediction"  # user attribute: the throughput point's prediction (JSON)
INTERACTIVE_ATTR = "interactive_prediction"  # user attribute: the interactive point's prediction (JSON)
PROPOSED_BY_ATTR = "proposed_by"  # user attribute of a trial not proposed by the sampler
EXHAUSTED_ATTR = "space_exhausted"  # user attribute of a duplicate after which no unseen shape was found
LOSS_CURVE_ATTR = "loss_curve"  # user attribute: the proxy's [[training tokens, validation loss], ...]
INFEASIBLE_ATTR = "infeasible"


class NonFiniteLossError(RuntimeError):
    """The proxy's loss became NaN or infinite."""


# --------------------------------------------------------------------------- evaluation
@dataclass
class Evaluation:
    """What the performance model and the pre-training checks say of one candidate.

    ``attrs`` are the trial's user attributes, ``constraints`` its ``set_constraint``
    values (<= 0 feasible), ``reason`` why it is infeasible (None when feasible) and
    ``perf_values`` the performance objectives by name.
    """

    candidate: Candidate
    scores: Scores
    attrs: dict[str, Any]
    constraints: dict[str, float]
    reason: str | None
    perf_values: dict[str, float]


def param_budget(arch: Architecture, space: Any) -> tuple[dict[str, float], list[str]]:
    """Constraints and reasons of the space's parameter budgets (``space.params``) for ``arch``."""
    counts = arch.param_counts()
    constraints: dict[str, float] = {}
    reasons: list[str] = []
    b = space.params
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
    return constraints, reasons


def evaluate(cand: Candidate, cfg: SearchConfig, gpu: Any, objectives: Sequence[str]) -> Evaluation:
    """Score ``cand`` with the performance model and run the checks that come before training."""
    arch = cand.arch
    counts = arch.param_counts()
    attrs: dict[str, Any] = {
        "arch": arch.to_dict(),
        "shape": shape_label(arch),
        "candidate_key": candidate_key(cand),
        "params_total": counts.total,
        "params_active": counts.active,
        "precision": cand.precision or cfg.deployment.weights,
    }
    constraints, reasons = param_budget(arch, cfg.space)
    scores = score_candidate(arch, gpu, cfg.deployment, cand.precision)
    constraints.update(scores.violations)
    if not scores.feasible:
        reasons.extend(scores.reasons)
    tp, ip = scores.throughput, scores.interactive
    if tp.prediction is not None:
        attrs[PERF_ATTR] = prediction_dict(tp.prediction)
        attrs["deployment"] = _jsonable(tp.deployment.to_dict())
        attrs["deployment_label"] = tp.deployment.label
        attrs["limited_by"] = scores.limits
    if ip.prediction is not None:
        attrs[INTERACTIVE_ATTR] = prediction_dict(ip.prediction)
        attrs["interactive_deployment"] = _jsonable(ip.deployment.to_dict())
        attrs["interactive_deployment_label"] = ip.deployment.label
    reason = None
    if reasons or any(v > 0 for v in constraints.values()):
        reason = "; ".join(reasons) or "constraint violated: " + ", ".join(
            f"{k}={v:.3g}" for k, v in constraints.items() if v > 0
        )
        attrs[INFEASIBLE_ATTR] = reason
    perf_values: dict[str, float] = {}
    if reason is None:
        perf_values = {n: objective_value(n, scores, None) for n in objectives if n != "loss"}
        attrs["perf_objectives"] = perf_values
    return Evaluation(cand, scores, attrs, constraints, reason, perf_values)


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
            (theirs[k] >= v) if OBJECTIVES[k].direction == "maximize" else (theirs[k] <= v) for k, v in perf_values.items()
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


def unseen_params(study: optuna.Study, cfg: SearchConfig, *, seed: int, tries: int = 2000) -> dict[str, Any] | None:
    """Suggestion values of a random grid point whose candidate the study does not hold (None if none found).

    Draws grid points uniformly (:func:`search.space.space_grid`) rather than enumerating the
    space, so it costs ~0.2 ms a draw whatever the space's size; ``tries`` draws bound the
    search in a nearly exhausted space. Candidates outside the parameter band are skipped
    too: the search wants shapes it may keep.
    """
    import random

    held = {t.user_attrs.get("candidate_key") for t in study.get_trials(deepcopy=False)}
    queued = [t.system_attrs.get("fixed_params")  # enqueue_trial's parameters (a WAITING trial has no params yet)
              for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))]
    grid = space_grid(cfg.space, cfg.deployment)
    rng = random.Random(seed)
    for _ in range(tries):
        params = {name: rng.choice(values) for name, values in grid.items()}
        cand = candidate_from_params(cfg.space, cfg.deployment, params)
        if candidate_key(cand) in held or params in queued or param_budget(cand.arch, cfg.space)[1]:
            continue
        return params
    return None


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
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (search.signals.Terminated)
            trial.set_user_attr(FAIL_REASON_ATTR, f"{INTERRUPTED} ({exc or type(exc).__name__})")
            raise
        except Exception as exc:  # recorded, then re-raised: study.optimize(catch=...) marks FAIL and goes on
            trial.set_user_attr(FAIL_REASON_ATTR, _reason(exc))
            _free_accelerator_memory()
            raise

    def _run(self, trial: optuna.Trial) -> tuple[float, ...]:
        cfg = self.cfg
        cand = suggest_candidate(trial, cfg.space, cfg.deployment)
        key = candidate_key(cand)
        trial.set_user_attr("candidate_key", key)  # posted before the check: parallel workers see it in flight
        original = duplicate_of(trial.study, key, trial.number, wait_s=CLAIM_WAIT_S)
        if original is not None:
            # Evaluated (or being evaluated) already: no second proxy run, no second row in the results, and
            # it does not count toward n_trials. PRUNED, so TPE ranks it after the evaluated trials; and the
            # next trial is a shape the study does not hold yet, drawn at random from the space's grid, since
            # a model-based sampler (GP) whose acquisition optimum rounds onto an evaluated shape would
            # otherwise propose it again and again.
            trial.set_user_attr(DUPLICATE_ATTR, original)
            trial.set_user_attr("shape", shape_label(cand.arch))
            fresh = unseen_params(trial.study, cfg, seed=cfg.seed + trial.number)
            if fresh is not None:
                trial.study.enqueue_trial(fresh, user_attrs={PROPOSED_BY_ATTR: f"random, after duplicate trial {trial.number}"})
            else:
                trial.set_user_attr(EXHAUSTED_ATTR, True)
            raise optuna.TrialPruned(f"duplicate of trial {original}")
        held = held_count(trial.study, before=trial.number)
        if held >= cfg.n_trials:
            # Parallel workers: the study holds n_trials, finished or in flight on other workers, though this
            # worker's study.optimize had not stopped yet when Optuna created the trial. Not evaluated, not counted.
            trial.set_user_attr(SURPLUS_ATTR, held)
            trial.set_user_attr("shape", shape_label(cand.arch))
            raise optuna.TrialPruned(f"not evaluated: {held} trials toward n_trials={cfg.n_trials} are finished or in flight")
        ev = evaluate(cand, cfg, self.gpu, self.names)
        for key, value in ev.attrs.items():
            trial.set_user_attr(key, value)
        for key, value in sorted(ev.constraints.items()):
            trial.set_constraint(key, float(value))
        if ev.reason is not None:
            raise optuna.TrialPruned(f"infeasible before training: {ev.reason}")

        loss = None
        if self.needs_proxy:
            loss = self._proxy_loss(trial, cand, ev.scores.throughput, ev.perf_values)
        return tuple(objective_value(n, ev.scores, loss) for n in self.names)

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
        trial.set_user_attr("proxy_shape", shape_label(reduced))
        trial.set_user_attr("proxy_key", key)
        trial.set_user_attr("quant", quant)
        if cfg.proxy.reuse_losses:
            for t in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
                if t.user_attrs.get("proxy_key") == key and "proxy_loss" in t.user_attrs:
                    loss = float(t.user_attrs["proxy_loss"])
                    trial.set_user_attr("proxy_loss", loss)
                    trial.set_user_attr("proxy_loss_reused_from", t.number)
                    for attr in ("intermediate_values", "proxy_steps", LOSS_CURVE_ATTR, RUNG_LOSSES_ATTR, "proxy_rung"):
                        if attr in t.user_attrs:
                            trial.set_user_attr(attr, t.user_attrs[attr])
                    return loss

        rungs = rung_steps(steps_of(cfg.proxy), cfg.proxy.halving.rungs, cfg.proxy.halving.eta)
        if len(rungs) > 1:  # successive halving decides who trains longer; no in-run stopping rule
            return self._halving_loss(trial, cand, op, perf_values, reduced, quant, rungs)
        stopping = None
        if cfg.proxy.early_stopping:
            from co_design.callback import MedianStoppingRule

            steps = steps_of(cfg.proxy)
            stopping = DominatedStoppingRule(
                peers=_dominating_peers(trial.study, perf_values, trial.number),
                inner=MedianStoppingRule(warmup_steps=max(1, steps // 3), min_completed_trials=2),
            )
        result = self._train(trial, cfg, cand, reduced, op, quant, stopping)
        if result.pruned_reason:
            raise optuna.TrialPruned(result.pruned_reason)
        loss = self._finite(result)
        trial.set_user_attr("proxy_loss", loss)
        return loss

    def _train(self, trial: optuna.Trial, cfg: SearchConfig, cand: Candidate, reduced: Architecture,
               op: OperatingPoint, quant: str, stopping: Any) -> Any:
        """One proxy run under ``cfg``; records its time, steps and loss curve on the trial."""
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
            datamodule=self.datamodule(),
            stopping=stopping,
            tracker=self.tracker,
            run_dir=self.run_dir,
        )
        seconds = time.perf_counter() - t0
        trial.set_user_attr("proxy_seconds", round(seconds + float(trial.user_attrs.get("proxy_seconds", 0.0)), 2))
        trial.set_user_attr("proxy_steps", int(result.steps))
        if result.curve:
            trial.set_user_attr(LOSS_CURVE_ATTR, [[int(t), float(v)] for t, v in result.curve])
        return result

    @staticmethod
    def _finite(result: Any) -> float:
        loss = float(result.loss)
        if not math.isfinite(loss):
            raise NonFiniteLossError(f"proxy validation loss is {loss} after {result.steps} steps (diverged)")
        return loss

    def _halving_loss(self, trial: optuna.Trial, cand: Candidate, op: OperatingPoint, perf_values: dict[str, float],
                      reduced: Architecture, quant: str, rungs: list[int]) -> float:
        """Successive halving (search/halving.py): train at each rung while the trial is promoted;
        the loss is the one at the highest rung reached."""
        import dataclasses

        cfg = self.cfg
        eta = cfg.proxy.halving.eta
        perf_names = sorted(perf_values)
        signs = [1.0 if OBJECTIVES[n].direction == "minimize" else -1.0 for n in perf_names]
        own_perf = [s * perf_values[n] for s, n in zip(signs, perf_names)]
        losses: dict[str, float] = {}
        loss = math.nan
        for i, steps in enumerate(rungs):
            budget = dataclasses.replace(cfg.proxy.budget, steps=steps, tokens=None)
            rung_cfg = dataclasses.replace(cfg, proxy=dataclasses.replace(cfg.proxy, budget=budget))
            result = self._train(trial, rung_cfg, cand, reduced, op, quant, None)
            loss = self._finite(result)
            losses[str(steps)] = loss
            trial.set_user_attr(RUNG_LOSSES_ATTR, dict(losses))
            trial.set_user_attr("proxy_rung", i)
            if i == len(rungs) - 1:
                break
            others = []
            for t in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
                theirs = (t.user_attrs.get(RUNG_LOSSES_ATTR) or {}).get(str(steps))
                perf = t.user_attrs.get("perf_objectives") or {}
                if t.number != trial.number and theirs is not None and sorted(perf) == perf_names:
                    others.append([float(theirs), *(s * float(perf[n]) for s, n in zip(signs, perf_names))])
            if not promotes([loss, *own_perf], others, eta):
                break
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
        **({"halving": [p.halving.rungs, p.halving.eta]} if p.halving.rungs > 1 else {}),
        "opt": [p.lr, p.min_lr_ratio, p.warmup_steps, p.weight_decay, p.grad_clip, p.aux_loss_coef],
        **({"mup": [p.mup.base_hidden, p.mup.base_head_dim]} if p.mup is not None else {}),
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

