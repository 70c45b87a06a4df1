"""Search efficiency: hypervolume against trials for each sampler, relative to the exact front.

What it measures (issue item 6). The default study -- ``space=dense_1b`` on one B200, the
default deployment (NVFP4, 1k/1k, >= 50 tok/s/user), objectives loss (min), output
tok/s/GPU (max) and output tok/s/user (max) -- is run with each sampler and several seeds
through the product's own trial loop, :class:`search.objective.Objective`: a shape the
study already holds ends PRUNED as a duplicate and is not counted (the job then queues a
random unseen shape as the next trial, a "fill-in"), a shape outside the parameter band
or memory/SLO ends PRUNED with its constraints, the rest are scored by the performance
model. Only the proxy training is replaced, by an analytic loss estimate
(``train_fn``), so a 200-trial study costs seconds:

    L(N, D) = E + A / N**alpha + B / D**beta
    Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models", arXiv:2203.15556,
    Approach 3: E = 1.69, A = 406.4, B = 410.7, alpha = 0.34, beta = 0.28

with N the candidate's TOTAL parameter count (embedding and LM head included: the fit was
made on total counts, see Pearce & Song 2024, arXiv:2406.12907) and D = 20 N tokens (the
compute-optimal ratio of the same paper; ``--token-budget`` fixes D instead). This is a
loss ESTIMATE used only to benchmark the samplers on a realistic-looking three-objective
problem; it is not a prediction of any trained model's loss.

The evaluation is deterministic, so every distinct shape of the space is scored once up
front (:func:`search.space.enumerate_candidates`) and the trials of every study look it up
(``search.objective.evaluate`` is wrapped by a cache for the run). That also gives the
exact Pareto front and its hypervolume up to a fixed reference point: the nadir of the
feasible set pushed out by 10 % of each objective's range (the rule of
:func:`search.results.reference_point`, applied to all feasible shapes). After each
counted trial (the product's count, :func:`search.study.finished_count`: finished trials
that are not duplicates; infeasible proposals count) the hypervolume of the study's
feasible trials is recorded as a fraction of the exact one.

Targets: the default sampler reaches >= 95 % of the exact hypervolume within 100 trials,
and needs >= 2x fewer trials than random search to reach 90 % (medians over seeds).

Writes benchmarks/results/search_efficiency.md, .json (raw curves) and .png.

Usage (defaults: 10 seeds x 200 trials; GP, whose proposals cost seconds each, 2 seeds x
100 trials; about 6-8 minutes on 2 CPU cores):
    python benchmarks/search_efficiency.py
    python benchmarks/search_efficiency.py --seeds 20 --samplers tpe,random
    python benchmarks/search_efficiency.py --samplers "tpe,tpe(n_startup_trials=20)" --gp-seeds 5 --gp-trials 200
Sampler specs: a name of search.config.SAMPLERS builds exactly what the job builds
(search.study.make_sampler); ``name(key=value, ...)`` builds the Optuna sampler with those
keyword arguments (a candidate default).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import math
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"

DEFAULT_SAMPLERS = "tpe,nsga2,gp,random"
CHECKPOINTS = (25, 50, 100, 200)  # and the job's own n_trials (14 in conf/config.yaml)
TARGETS = (0.90, 0.95)

# --------------------------------------------------------------------------- loss estimate
#: Hoffmann et al. 2022 (arXiv:2203.15556), Approach 3 parametric fit; N, D in parameters, tokens; L in nats/token.
CHINCHILLA = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


def chinchilla_loss(n_params: float, n_tokens: float) -> float:
    """L(N, D) = E + A / N^alpha + B / D^beta (nats/token), the Chinchilla Approach-3 fit."""
    if n_params <= 0 or n_tokens <= 0:
        raise ValueError(f"n_params and n_tokens must be positive, got {n_params}, {n_tokens}")
    c = CHINCHILLA
    return c["E"] + c["A"] / n_params ** c["alpha"] + c["B"] / n_tokens ** c["beta"]


@dataclass(frozen=True)
class LossEstimate:
    """The benchmark's loss: Chinchilla's L(N, D), N = total parameters, D = ``tokens_per_param`` N or a fixed budget."""

    tokens_per_param: float = 20.0
    token_budget: float | None = None

    def tokens(self, n_params: float) -> float:
        return float(self.token_budget) if self.token_budget is not None else self.tokens_per_param * n_params

    def __call__(self, n_params: float) -> float:
        return chinchilla_loss(n_params, self.tokens(n_params))

    @property
    def label(self) -> str:
        d = f"D = {self.token_budget:.3g} tokens" if self.token_budget is not None else f"D = {self.tokens_per_param:g} N"
        return f"Chinchilla L(N, D), N = total parameters, {d}"


class EstimateTrainer:
    """A ``train_fn`` for :class:`search.objective.Objective`: no training, the loss estimate of the full-size shape."""

    def __init__(self, loss: LossEstimate) -> None:
        self.loss = loss

    def __call__(self, *, full_arch: Any, **_: Any) -> Any:
        from search.train import ProxyResult

        return ProxyResult(loss=self.loss(full_arch.param_counts().total), steps=0)


# --------------------------------------------------------------------------- fronts and hypervolume
def _minimised(point: Sequence[float], directions: Sequence[str]) -> tuple[float, ...]:
    return tuple(x if d == "minimize" else -x for x, d in zip(point, directions))


def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    """``a`` is at least as good as ``b`` in every objective and better in one."""
    ma, mb = _minimised(a, directions), _minimised(b, directions)
    return all(x <= y for x, y in zip(ma, mb)) and any(x < y for x, y in zip(ma, mb))


def pareto_front(points: Sequence[Sequence[float]], directions: Sequence[str]) -> list[tuple[float, ...]]:
    """The non-dominated points (each distinct point once)."""
    unique = list(dict.fromkeys(tuple(float(x) for x in p) for p in points))
    return [p for p in unique if not any(dominates(q, p, directions) for q in unique)]


def nadir_reference(points: Sequence[Sequence[float]], directions: Sequence[str], margin: float = 0.1) -> list[float]:
    """The worst value of each objective pushed out by ``margin`` of its range (max objectives not below 0).

    The rule of :func:`search.results.reference_point`, on a list of feasible points.
    """
    ref = []
    for i, d in enumerate(directions):
        vals = [p[i] for p in points]
        lo, hi = min(vals), max(vals)
        span = (hi - lo) or (abs(hi) or 1.0)
        if d == "minimize":
            ref.append(hi + margin * span)
        else:
            ref.append(max(0.0, lo - margin * span) if lo >= 0 else lo - margin * span)
    return ref


class FrontTracker:
    """A growing front and its hypervolume; the hypervolume is recomputed only when the front changes."""

    def __init__(self, ref: Sequence[float], directions: Sequence[str]) -> None:
        self.ref, self.directions = list(ref), list(directions)
        self.front: list[tuple[float, ...]] = []
        self.hypervolume = 0.0

    def add(self, point: Sequence[float]) -> float:
        from search.results import hypervolume

        p = tuple(float(x) for x in point)
        if any(q == p or dominates(q, p, self.directions) for q in self.front):
            return self.hypervolume
        self.front = [q for q in self.front if not dominates(p, q, self.directions)] + [p]
        self.hypervolume = hypervolume(self.front, self.ref, self.directions)
        return self.hypervolume


def checkpoints(job_n_trials: int, n_trials: int) -> list[int]:
    """Trial counts to report: :data:`CHECKPOINTS` and the job's default ``n_trials``, up to ``n_trials``."""
    return sorted(c for c in {job_n_trials, *CHECKPOINTS} if 0 < c <= n_trials)


def trials_to_reach(curve: Sequence[float], fraction: float) -> int | None:
    """The first trial count (1-based) at which ``curve`` reaches ``fraction``; None if it never does."""
    for i, v in enumerate(curve):
        if v >= fraction - 1e-12:
            return i + 1
    return None


def at_trial(curve: Sequence[float], n: int) -> float | None:
    """The curve's value after ``n`` trials (its last value if the study stopped earlier; None if empty)."""
    if not curve:
        return None
    return curve[min(n, len(curve)) - 1]


def median_trials(values: Sequence[int | None]) -> float | None:
    """Median of trials-to-target over seeds, a seed that never reached it counting as infinitely many; None if inf."""
    xs = sorted(math.inf if v is None else float(v) for v in values)
    if not xs:
        return None
    m = statistics.median(xs)
    return None if math.isinf(m) else m


# --------------------------------------------------------------------------- sampler specs
_SPEC = re.compile(r"^\s*([a-z0-9]+)\s*(?:\((.*)\))?\s*$")
_CLASSES = {"tpe": "TPESampler", "nsga2": "NSGAIISampler", "nsga3": "NSGAIIISampler", "gp": "GPSampler", "random": "RandomSampler"}


@dataclass(frozen=True)
class SamplerSpec:
    """``tpe`` (the job's own sampler, via make_sampler) or ``tpe(n_startup_trials=20, ...)`` (Optuna kwargs)."""

    name: str
    kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        if not self.kwargs:
            return self.name
        return f"{self.name}(" + ", ".join(f"{k}={v!r}" for k, v in self.kwargs) + ")"

    def build(self, cfg: Any, seed: int) -> Any:
        """The sampler for ``cfg`` (whose top-level ``seed`` the job's sampler takes) seeded with ``seed``."""
        import optuna

        if not self.kwargs:  # exactly what `python -m search seed=<seed> sampler=<name>` builds
            from search.study import make_sampler

            return make_sampler(dataclasses.replace(cfg, seed=seed, sampler=dataclasses.replace(cfg.sampler, name=self.name, seed=None)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return getattr(optuna.samplers, _CLASSES[self.name])(seed=seed, **dict(self.kwargs))


def parse_samplers(text: str) -> list[SamplerSpec]:
    """``"tpe,nsga2,tpe(n_startup_trials=20, multivariate=False)"`` -> specs (commas inside parentheses kept)."""
    from search.config import SAMPLERS

    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    specs = []
    for part in filter(str.strip, parts):
        m = _SPEC.match(part)
        if not m or m.group(1) not in SAMPLERS:
            raise ValueError(f"--samplers: cannot read {part.strip()!r}; use one of {', '.join(SAMPLERS)}, "
                             "optionally with Optuna keyword arguments, e.g. tpe(n_startup_trials=20)")
        kwargs: list[tuple[str, Any]] = []
        if m.group(2) and m.group(2).strip():
            call = ast.parse(f"f({m.group(2)})", mode="eval").body
            if call.args:
                raise ValueError(f"--samplers: {part.strip()!r}: keyword arguments only")
            kwargs = [(kw.arg, ast.literal_eval(kw.value)) for kw in call.keywords]
        specs.append(SamplerSpec(m.group(1), tuple(kwargs)))
    return specs


# --------------------------------------------------------------------------- the problem
@dataclass
class Problem:
    """The default study's config and GPU, every shape's evaluation, and the exact front."""

    cfg: Any
    gpu: Any
    loss: LossEstimate
    names: list[str]
    directions: list[str]
    evaluations: dict[str, Any]  # candidate_key -> search.objective.Evaluation
    distinct: int
    in_band: int
    feasible_points: list[tuple[float, ...]]
    front: list[tuple[float, ...]]
    ref: list[float]
    hypervolume: float
    hypervolume_optuna: float
    seconds: float


def build_problem(loss: LossEstimate, overrides: Sequence[str] = ()) -> Problem:
    """Compose the default study, score every distinct shape once, and compute the exact front and hypervolume."""
    import numpy as np
    from optuna._hypervolume import compute_hypervolume

    from search.checks import resolve_gpu as _resolve_gpu
    from search.compose import compose_config
    from search.config import OBJECTIVES, to_search_config, validate
    from search.objective import evaluate, param_budget
    from search.results import hypervolume
    from search.space import candidate_key, enumerate_candidates

    t0 = time.perf_counter()
    cfg = validate(to_search_config(compose_config("tracking=off", *overrides)))
    # the benchmark's loss is a function of the full-size shape: no early stopping, and no reuse of another
    # shape's loss through a shared proxy (two shapes can reduce to the same proxy)
    cfg = dataclasses.replace(cfg, proxy=dataclasses.replace(cfg.proxy, early_stopping=False, reuse_losses=False))
    gpu = _resolve_gpu(cfg)
    names = list(cfg.objectives.names)
    if "loss" not in names:
        raise ValueError(f"objectives {names} have no loss: the benchmark's loss estimate would not be used")
    directions = [OBJECTIVES[n].direction for n in names]
    evaluations: dict[str, Any] = {}
    points = []
    distinct = in_band = 0
    for _, _, cand in enumerate_candidates(cfg.space, cfg.deployment):
        distinct += 1
        ev = evaluate(cand, cfg, gpu, names)  # out-of-band shapes too: a sampler may propose them
        evaluations[candidate_key(cand)] = ev
        in_band += not param_budget(cand.arch, cfg.space)[1]
        if ev.reason is None:
            n_total = cand.arch.param_counts().total
            points.append(tuple(loss(n_total) if n == "loss" else ev.perf_values[n] for n in names))
    if not points:
        raise ValueError("no feasible shape in the space: nothing to search")
    front = pareto_front(points, directions)
    ref = nadir_reference(points, directions)
    hv = hypervolume(front, ref, directions)
    signs = np.array([1.0 if d == "minimize" else -1.0 for d in directions])
    hv_optuna = float(compute_hypervolume(np.array(front) * signs, np.array(ref) * signs))
    if not math.isclose(hv, hv_optuna, rel_tol=1e-9):
        raise AssertionError(f"exact hypervolume disagrees: search.results {hv!r}, optuna {hv_optuna!r}")
    return Problem(cfg, gpu, loss, names, directions, evaluations, distinct, in_band, points, front, ref, hv,
                   hv_optuna, time.perf_counter() - t0)


@contextlib.contextmanager
def cached_evaluations(evaluations: dict[str, Any]) -> Iterator[None]:
    """``search.objective.evaluate`` answers from ``evaluations`` (deterministic; a miss is scored and kept)."""
    import search.objective as so
    from search.space import candidate_key

    original = so.evaluate

    def lookup(cand: Any, cfg: Any, gpu: Any, objectives: Sequence[str]) -> Any:
        key = candidate_key(cand)
        if key not in evaluations:
            evaluations[key] = original(cand, cfg, gpu, objectives)
        return evaluations[key]

    so.evaluate = lookup
    try:
        yield
    finally:
        so.evaluate = original


# --------------------------------------------------------------------------- one study
def run_study(problem: Problem, spec: SamplerSpec, seed: int, n_trials: int) -> dict[str, Any]:
    """One study of up to ``n_trials`` counted trials; the hypervolume fraction after each."""
    import optuna
    from optuna.trial import TrialState

    from search.study import MAX_CONSECUTIVE_DUPLICATES
    from search.objective import EXHAUSTED_ATTR, PROPOSED_BY_ATTR, Objective
    from search.study import DUPLICATE_ATTR, SURPLUS_ATTR
    from search.tracking import NullTracker

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # as `python -m search seed=<seed> n_trials=<n_trials>`: the seed also seeds the fill-ins; the job prunes every
    # trial past its n_trials as surplus, so the study's n_trials is this study's
    cfg = dataclasses.replace(problem.cfg, seed=seed, n_trials=n_trials)
    study = optuna.create_study(directions=problem.directions, sampler=spec.build(cfg, seed))
    front = FrontTracker(problem.ref, problem.directions)
    curve: list[float] = []
    state = {"duplicates": 0, "in_a_row": 0, "infeasible": 0, "failed": 0, "exhausted": False}
    fill_ins: list[int] = []  # counted trials (1-based) that the job proposed itself after a duplicate
    proposals: list[int] = []  # proposals so far (trials incl. duplicates) at each counted trial

    def after_trial(study: optuna.Study, trial: Any) -> None:
        if SURPLUS_ATTR in trial.user_attrs:  # nothing was evaluated: a curve counting it would be wrong
            raise RuntimeError(f"trial {trial.number} was pruned as surplus to the study's n_trials={cfg.n_trials}")
        if DUPLICATE_ATTR in trial.user_attrs:  # not counted, as in the job
            state["duplicates"] += 1
            state["in_a_row"] += 1
            if trial.user_attrs.get(EXHAUSTED_ATTR) or state["in_a_row"] >= MAX_CONSECUTIVE_DUPLICATES:
                state["exhausted"] = True
                study.stop()
            return
        state["in_a_row"] = 0
        if trial.state == TrialState.COMPLETE:
            front.add(trial.values)
        elif trial.state == TrialState.FAIL:
            state["failed"] += 1
        else:
            state["infeasible"] += 1
        curve.append(front.hypervolume / problem.hypervolume)
        proposals.append(trial.number + 1)
        if PROPOSED_BY_ATTR in trial.user_attrs:
            fill_ins.append(len(curve))
        if len(curve) >= n_trials:
            study.stop()

    with tempfile.TemporaryDirectory(prefix="search_efficiency_") as run_dir:
        objective = Objective(
            cfg,
            gpu=problem.gpu,
            run_dir=run_dir,
            tracker=NullTracker(),
            datamodule_factory=lambda: SimpleNamespace(vocab_size=256),  # only the proxy's shape reads it
            train_fn=EstimateTrainer(problem.loss),
        )
        t0 = time.perf_counter()
        with cached_evaluations(problem.evaluations), warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"optuna\.")  # e.g. GP's independent-sampling notes, per trial
            while len(curve) < n_trials and not state["exhausted"]:
                study.optimize(objective, n_trials=n_trials - len(curve), callbacks=[after_trial], catch=(Exception,))
        wall_s = time.perf_counter() - t0
    return {
        "sampler": spec.label,
        "seed": seed,
        "curve": curve,
        "counted": len(curve),
        "proposals": len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))),
        "duplicates": state["duplicates"],
        "duplicates_by_100": (proposals[99] - 100) if len(proposals) >= 100 else None,
        "fill_ins": len(fill_ins),
        "fill_ins_by_100": sum(i <= 100 for i in fill_ins) if len(curve) >= 100 else None,
        "fill_in_trials": fill_ins,
        "proposals_at_trial": proposals,
        "infeasible": state["infeasible"],
        "failed": state["failed"],
        "exhausted": state["exhausted"],
        "front_size": len(front.front),
        "wall_s": wall_s,
    }


# --------------------------------------------------------------------------- many studies
_PROBLEM: Problem | None = None  # set before the worker processes fork


def _job(args: tuple[SamplerSpec, int, int]) -> dict[str, Any]:
    spec, seed, n_trials = args
    assert _PROBLEM is not None
    return run_study(_PROBLEM, spec, seed, n_trials)


def _worker_init() -> None:
    try:
        import torch

        torch.set_num_threads(1)  # one study per core
    except ImportError:  # pragma: no cover
        pass


def run_all(problem: Problem, jobs_list: list[tuple[SamplerSpec, int, int]], workers: int,
            on_done: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """Run every (sampler, seed, trials) study; ``workers`` > 1 forks that many processes."""
    global _PROBLEM
    _PROBLEM = problem
    if workers <= 1:
        out = []
        for j in jobs_list:
            out.append(_job(j))
            on_done(out[-1])
        return out
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # slowest first (GP), so the pool does not end waiting on one long study
    order = sorted(jobs_list, key=lambda j: j[0].name != "gp")
    out = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork"), initializer=_worker_init) as pool:
        futures = [pool.submit(_job, j) for j in order]
        for f in as_completed(futures):
            out.append(f.result())
            on_done(out[-1])
    return out


# --------------------------------------------------------------------------- summary
def summarise(runs: list[dict[str, Any]], labels: list[str], checkpoints: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per sampler: fraction at each checkpoint (median, min, max, quartiles), trials to each target, duplicates, time.

    A study contributes at checkpoint ``n`` if it ran ``n`` trials, or stopped earlier because the sampler
    found no new shape (its last value then stands).
    """
    out = {}
    for label in labels:
        mine = sorted((r for r in runs if r["sampler"] == label), key=lambda r: r["seed"])
        if not mine:
            continue
        s: dict[str, Any] = {"seeds": [r["seed"] for r in mine], "at": {}, "to": {}}
        for n in checkpoints:
            vals = [at_trial(r["curve"], n) for r in mine if r["curve"] and (r["counted"] >= n or r["exhausted"])]
            if vals:
                q = statistics.quantiles(vals, n=4, method="inclusive") if len(vals) > 1 else [vals[0]] * 3
                s["at"][n] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
                              "q1": q[0], "q3": q[2], "n": len(vals)}
        for f in TARGETS:
            per_seed = [trials_to_reach(r["curve"], f) for r in mine]
            s["to"][f] = {"per_seed": per_seed, "median": median_trials(per_seed),
                          "reached": sum(v is not None for v in per_seed), "of": len(per_seed)}
        s["duplicates"] = {"median": statistics.median(r["duplicates"] for r in mine),
                           "min": min(r["duplicates"] for r in mine), "max": max(r["duplicates"] for r in mine)}
        s["duplicates_by_100"] = [r["duplicates_by_100"] for r in mine if r["duplicates_by_100"] is not None]
        s["fill_ins_by_100"] = [r["fill_ins_by_100"] for r in mine if r["fill_ins_by_100"] is not None]
        s["fill_ins_median"] = statistics.median(r["fill_ins"] for r in mine)
        s["trials_max"] = max(r["counted"] for r in mine)
        s["proposals_median"] = statistics.median(r["proposals"] for r in mine)
        s["infeasible_median"] = statistics.median(r["infeasible"] for r in mine)
        s["failed"] = sum(r["failed"] for r in mine)
        s["exhausted"] = sum(r["exhausted"] for r in mine)
        s["counted_min"] = min(r["counted"] for r in mine)
        s["wall_s_median"] = statistics.median(r["wall_s"] for r in mine)
        s["wall_s_total"] = sum(r["wall_s"] for r in mine)
        out[label] = s
    return out


def verdict(summary: dict[str, dict[str, Any]], default: str, n_trials: int, baseline: str = "random") -> dict[str, Any]:
    """Both targets for sampler ``default``: >= 95 % at 100 trials; >= 2x fewer trials than ``baseline`` to 90 %.

    When the baseline never reaches 90 % (median), its trials-to-90 % exceed ``n_trials``, so the ratio is
    at least ``n_trials / t90`` (``ratio_bound``).
    """
    if default not in summary:
        return {"sampler": default, "measured": False, "target1_met": None, "target2_met": None}
    d = summary[default]
    at100 = d.get("at", {}).get(100, {}).get("median")
    t90 = d.get("to", {}).get(0.90, {}).get("median")
    r90 = summary.get(baseline, {}).get("to", {}).get(0.90)
    out: dict[str, Any] = {"sampler": default, "measured": True, "hv_at_100": at100, "target1_met": at100 is not None and at100 >= 0.95,
                           "t90": t90, "baseline_t90": None if r90 is None else r90["median"]}
    if t90 is None or r90 is None:
        out.update(ratio=None, ratio_bound=False, target2_met=False)
    elif r90["median"] is None:
        out.update(ratio=n_trials / t90, ratio_bound=True, target2_met=n_trials / t90 >= 2.0)
    else:
        ratio = r90["median"] / t90
        out.update(ratio=ratio, ratio_bound=False, target2_met=ratio >= 2.0)
    return out


# --------------------------------------------------------------------------- report
def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def _median_or_dash(xs: Sequence[float]) -> str:
    return f"{statistics.median(xs):g}" if xs else "—"


def _trials(t: dict[str, Any], n_trials: int) -> str:
    if t["median"] is None:
        return f"not reached (> {n_trials}; {t['reached']}/{t['of']} seeds)"
    m = t["median"]
    txt = f"{m:g}" if m == int(m) else f"{m:.1f}"
    return txt if t["reached"] == t["of"] else f"{txt} ({t['reached']}/{t['of']} seeds)"


def plot(runs: list[dict[str, Any]], labels: list[str], n_trials: int, path: Path, title: str) -> None:
    """Median hypervolume fraction against counted trials per sampler, with the interquartile band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    for label in labels:
        curves = [r["curve"] for r in runs if r["sampler"] == label and r["curve"]]
        if not curves:
            continue
        n = min(n_trials, max(len(c) for c in curves))
        m = np.array([[c[min(i, len(c) - 1)] for i in range(n)] for c in curves])  # carry the last value
        x = np.arange(1, n + 1)
        med = np.median(m, axis=0)
        style = "--" if label == "random" else "-"  # the baseline; nsga2's first generation is the same draws
        (line,) = ax.plot(x, med, style, label=f"{label} ({len(curves)} seeds)", lw=1.8)
        if len(curves) > 1:
            ax.fill_between(x, np.percentile(m, 25, axis=0), np.percentile(m, 75, axis=0), color=line.get_color(),
                            alpha=0.18, lw=0)
    for y, style in ((0.95, "--"), (0.90, ":")):
        ax.axhline(y, color="grey", ls=style, lw=0.9)
        ax.text(n_trials, y, f" {y:.0%}", va="center", fontsize=8, color="grey")
    ax.axvline(100, color="grey", ls="-", lw=0.6, alpha=0.6)
    ax.set_xlim(1, n_trials)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("counted trials (finished, not duplicates)")
    ax.set_ylabel("hypervolume / exact hypervolume")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _verdict_lines(v: dict[str, Any], n: int) -> list[str]:
    lines = []
    t1 = "MET" if v["target1_met"] else "NOT MET"
    lines.append(f"- Target 1 (default sampler `{v['sampler']}` reaches >= 95 % of the exact hypervolume within 100 "
                 f"trials): **{t1}** — median {_pct(v['hv_at_100'])} at 100 trials.")
    t2 = "MET" if v["target2_met"] else "NOT MET"
    if v.get("ratio") is None:
        lines.append(f"- Target 2 (>= 2x fewer trials than random search to reach 90 %): **{t2}** — `{v['sampler']}` "
                     f"did not reach 90 % within {n} trials (median).")
    elif v.get("ratio_bound"):
        lines.append(f"- Target 2 (>= 2x fewer trials than random search to reach 90 %): **{t2}** — random search did "
                     f"not reach 90 % within {n} trials (median), `{v['sampler']}` needed {v['t90']:g}: ratio "
                     f">= {v['ratio']:.2f}x.")
    else:
        lines.append(f"- Target 2 (>= 2x fewer trials than random search to reach 90 %): **{t2}** — random needs "
                     f"{v['baseline_t90']:g} trials, `{v['sampler']}` {v['t90']:g}: {v['ratio']:.2f}x (medians).")
    return lines


def report(problem: Problem, summary: dict[str, dict[str, Any]], labels: list[str], v: dict[str, Any],
           args: argparse.Namespace, command: str, total_s: float, png: str) -> str:
    cfg = problem.cfg
    d = cfg.deployment
    n = args.trials
    cps = checkpoints(cfg.n_trials, n)
    lines = [
        "# Search efficiency: hypervolume against trials, per sampler",
        "",
        f"Produced by `{command}` ({total_s / 60:.1f} min on {os.cpu_count()} CPU cores, "
        f"{platform.python_implementation()} {platform.python_version()}, optuna {_optuna_version()}). "
        "Raw curves: `search_efficiency.json`; plot: `search_efficiency.png`.",
        "",
        "## Verdict",
        "",
    ]
    if not v["measured"]:
        lines.append(f"- The default sampler `{v['sampler']}` was not among the samplers run: no verdict.")
    else:
        lines += _verdict_lines(v, n)
    lines += [
        "",
        "## Hypervolume fraction after N counted trials",
        "",
        "Median over seeds [min – max]; a counted trial is a finished trial that is not a duplicate (the job's "
        "count, `search.study.finished_count`).",
        "",
        "| sampler | seeds | " + " | ".join(f"{c} trials" + (" (job default)" if c == cfg.n_trials else "")
                                            for c in cps) + " |",
        "|---|---:|" + "---:|" * len(cps),
    ]
    for label in labels:
        s = summary.get(label)
        if not s:
            continue
        cells = []
        for c in cps:
            a = s["at"].get(c)
            cells.append("—" if a is None else f"{_pct(a['median'])} [{100 * a['min']:.1f} – {100 * a['max']:.1f}]")
        lines.append(f"| `{label}` | {len(s['seeds'])} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Trials to reach 90 % and 95 % of the exact hypervolume",
        "",
        "Median over seeds (a seed that never reaches the target counts as infinitely many); per-seed values in "
        "the JSON. Duplicates: proposals of a shape the study already held (PRUNED, not counted, no evaluation). "
        "After each duplicate the job queues a random in-band shape the study does not hold "
        "(`search.objective.unseen_params`), so the next trial is that fill-in, not the sampler's: fill-ins are "
        "part of every sampler's curve, as in the job (median count among the first 100 counted trials shown). "
        "Infeasible: "
        "counted trials outside the parameter band (or memory / SLO), median per study. Wall time: median per study "
        "(sampler time and the job's per-trial bookkeeping; evaluations are cached).",
        "",
        "| sampler | to 90 % | to 95 % | random ÷ this (90 %) | duplicates / study, median [min – max] | "
        "fill-ins among the first 100 trials | infeasible / study | wall s / study |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    r90 = summary.get("random", {}).get("to", {}).get(0.90, {}).get("median")
    for label in labels:
        s = summary.get(label)
        if not s:
            continue
        t90 = s["to"][0.90]["median"]
        ratio = "—" if r90 is None or t90 is None else f"{r90 / t90:.2f}x"
        dup = s["duplicates"]
        lines.append(
            f"| `{label}` | {_trials(s['to'][0.90], s['trials_max'])} | {_trials(s['to'][0.95], s['trials_max'])} | {ratio} | "
            f"{dup['median']:g} [{dup['min']} – {dup['max']}] | {_median_or_dash(s['fill_ins_by_100'])} | "
            f"{s['infeasible_median']:g} | {s['wall_s_median']:.1f} |"
        )
    notes = []
    for label in labels:
        s = summary.get(label, {})
        if s.get("failed"):
            notes.append(f"`{label}`: {s['failed']} failed trial(s) in all (counted, as in the job).")
        if s.get("exhausted"):
            notes.append(f"`{label}`: {s['exhausted']} study(ies) stopped after {100} duplicate proposals in a row "
                         f"(the job's rule), with at least {s['counted_min']} counted trials.")
    if "nsga2" in labels and "random" in labels:
        notes.append("`nsga2` draws its first generation (Optuna's default population_size 50) with a RandomSampler "
                     "seeded like `random`, so the two curves coincide for about the first 50 trials; by 200 trials it "
                     "has bred only a few generations.")
    if notes:
        lines += [""] + [f"- {x}" for x in notes]
    lines += [
        "",
        f"![hypervolume fraction against trials]({png})",
        "",
        "## Setup",
        "",
        f"- Study: the default config (`python -m search` with no overrides): space `{cfg.space.name}` "
        f"({problem.distinct} distinct shapes, {problem.in_band} inside the parameter band "
        f"[{cfg.space.params.min_total:.2g}, {cfg.space.params.max_total:.2g}] total parameters, "
        f"{len(problem.feasible_points)} feasible), GPU `{problem.gpu.name}`, deployment `default` "
        f"({d.weights} weights / {d.activations} activations / {d.kv_cache} KV cache, ISL {d.isl} / OSL {d.osl}, "
        f"SLO >= {d.slo.min_tokens_per_s_per_user:g} tok/s/user, max_batch {d.max_batch}), objectives "
        + ", ".join(f"{nm} ({dr[:3]})" for nm, dr in zip(problem.names, problem.directions)) + ".",
        "- Trial loop: the job's `search.objective.Objective` (duplicates PRUNED and not counted, each followed by "
        "a random unseen in-band fill-in; infeasible shapes PRUNED with constraints; the job's stop when the space "
        "is exhausted), in-memory storage, one "
        "study per (sampler, seed), `proxy.early_stopping=false`, `proxy.reuse_losses=false`. Every shape's "
        "evaluation is computed once up front and looked up (the performance model is deterministic).",
        f"- Loss: an ESTIMATE, not a trained proxy: {problem.loss.label}; Hoffmann et al. 2022 (arXiv:2203.15556) "
        "Approach-3 fit L = 1.69 + 406.4 / N^0.34 + 410.7 / D^0.28. Total parameters because the fit was made on "
        "total counts (Pearce & Song 2024, arXiv:2406.12907). It serves only to give the sampler a realistic "
        "accuracy-vs-speed trade-off; with D = 20 N it is a decreasing function of N alone.",
        f"- Exact front: {len(problem.front)} non-dominated shapes of the {len(problem.feasible_points)} feasible "
        f"ones; exact hypervolume {problem.hypervolume:.6g} (search.results.hypervolume; optuna's "
        f"compute_hypervolume agrees: {problem.hypervolume_optuna:.6g}).",
        "- Reference point: the nadir of the feasible set pushed out by 10 % of each objective's range "
        "(search.results.reference_point's rule): "
        + ", ".join(f"{nm} = {x:.6g}" for nm, x in zip(problem.names, problem.ref)) + ".",
        f"- Samplers: {', '.join(f'`{x}`' for x in labels)}. A bare name is built by `search.study.make_sampler` "
        "exactly as the job builds it (Optuna defaults); a name with arguments is the Optuna sampler with those "
        "keyword arguments. Seeds: "
        + "; ".join(f"`{x}` {_seed_range(summary[x]['seeds'])}" for x in labels if x in summary) + ".",
        f"- Up to {n} counted trials per study"
        + (f" ({args.gp_trials} for GP, whose proposals cost seconds each)" if any(x.startswith("gp") for x in labels)
           and args.gp_trials < n else "")
        + f". Scoring every shape up front took {problem.seconds:.1f} s. Code: commit {_git_commit()}.",
    ]
    return "\n".join(lines) + "\n"


def _seed_range(seeds: list[int]) -> str:
    if seeds and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}–{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    return ", ".join(map(str, seeds))


def _git_commit() -> str:
    import subprocess

    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "search", "co_design", "conf"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"`{sha}`" + (" with uncommitted changes in search/, co_design/ or conf/" if dirty else "")


def _optuna_version() -> str:
    import optuna

    return optuna.__version__


# --------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samplers", default=DEFAULT_SAMPLERS,
                   help=f"comma-separated sampler specs (default {DEFAULT_SAMPLERS}); e.g. 'tpe(n_startup_trials=20)'")
    p.add_argument("--seeds", type=int, default=10, help="seeds per sampler (default 10)")
    p.add_argument("--gp-seeds", type=int, default=2,
                   help="at most this many seeds for GP samplers, which are slow (default 2)")
    p.add_argument("--gp-trials", type=int, default=100,
                   help="at most this many counted trials for GP samplers (default 100: ~2 s a trial by then)")
    p.add_argument("--trials", type=int, default=200, help="counted trials per study (default 200)")
    p.add_argument("--seed0", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="studies run in parallel (default 2)")
    p.add_argument("--tokens-per-param", type=float, default=20.0, help="D = this x N for the loss estimate (default 20)")
    p.add_argument("--token-budget", type=float, default=None, help="a fixed D (tokens) instead of tokens-per-param")
    p.add_argument("--out", default=str(RESULTS / "search_efficiency"), help="output path without suffix")
    p.add_argument("override", nargs="*", help="Hydra overrides of the study (default: none, the default study)")
    args = p.parse_args(argv)
    if args.trials < 1 or args.seeds < 1:
        p.error("--trials and --seeds must be >= 1")
    specs = parse_samplers(args.samplers)
    labels = list(dict.fromkeys(s.label for s in specs))
    command = "python benchmarks/search_efficiency.py" + ("" if argv is None and len(sys.argv) == 1 else " " + " ".join(
        _quote(a) for a in (sys.argv[1:] if argv is None else argv)))

    t_start = time.perf_counter()
    loss = LossEstimate(args.tokens_per_param, args.token_budget)
    problem = build_problem(loss, args.override)
    print(f"scored {problem.distinct} shapes in {problem.seconds:.1f} s: {len(problem.feasible_points)} feasible, "
          f"exact front {len(problem.front)} shapes, hypervolume {problem.hypervolume:.6g}, ref {problem.ref}")

    jobs_list = []
    for spec in specs:
        n_seeds = min(args.gp_seeds, args.seeds) if spec.name == "gp" else args.seeds
        n = min(args.gp_trials, args.trials) if spec.name == "gp" else args.trials
        jobs_list += [(spec, args.seed0 + i, n) for i in range(n_seeds)]

    def on_done(r: dict[str, Any]) -> None:
        c = r["curve"]
        print(f"  {r['sampler']:<34} seed {r['seed']:>2}: {r['counted']} trials, {r['duplicates']:>3} duplicates, "
              f"HV@100 {_pct(at_trial(c, 100))}, HV@end {_pct(c[-1] if c else None)}, "
              f"90 % at {trials_to_reach(c, 0.9)}, {r['wall_s']:.1f} s", flush=True)

    runs = run_all(problem, jobs_list, args.jobs, on_done)
    summary = summarise(runs, labels, checkpoints(problem.cfg.n_trials, args.trials))
    default = problem.cfg.sampler.name  # the configured default (tpe)
    v = verdict(summary, default, args.trials)
    total_s = time.perf_counter() - t_start

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_suffix(".png")
    plot(runs, labels, args.trials, png,
         f"{problem.cfg.space.name} on {problem.gpu.name}: {', '.join(problem.names)} (loss: Chinchilla estimate)")
    md = report(problem, summary, labels, v, args, command, total_s, png.name)
    out.with_suffix(".md").write_text(md)
    data = {
        "command": command,
        "setup": {
            "space": problem.cfg.space.name, "gpu": problem.gpu.name, "deployment": "default",
            "objectives": problem.names, "directions": problem.directions, "loss_estimate": loss.label,
            "chinchilla": CHINCHILLA, "tokens_per_param": loss.tokens_per_param, "token_budget": loss.token_budget,
            "distinct_shapes": problem.distinct, "in_band": problem.in_band, "feasible": len(problem.feasible_points),
            "reference_point": problem.ref, "exact_hypervolume": problem.hypervolume,
            "exact_front": [list(p) for p in problem.front], "trials": args.trials, "overrides": args.override,
        },
        "summary": {k: {**s, "at": {str(c): a for c, a in s["at"].items()}, "to": {str(f): t for f, t in s["to"].items()}}
                    for k, s in summary.items()},
        "verdict": v,
        "runs": [{**r, "curve": [round(x, 6) for x in r["curve"]]} for r in runs],  # 1e-6 of the exact hypervolume
        "wall_s": total_s,
    }
    out.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str))
    print(md)
    print(f"wrote {out.with_suffix('.md')}, .json, .png")
    return 0


def _quote(a: str) -> str:
    return a if re.fullmatch(r"[\w.,=/:+-]+", a) else "'" + a.replace("'", "'\\''") + "'"


if __name__ == "__main__":
    raise SystemExit(main())
