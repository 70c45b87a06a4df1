"""Exact Pareto fronts: score every candidate of the space when no objective needs training.

With only performance objectives a candidate costs milliseconds, so sampling would
only approximate a front that enumeration gives exactly. :func:`enumerate_into`
walks the aligned space once (:func:`search.space.enumerate_candidates`: every
distinct shape, each once), skips candidates outside the parameter band before
scoring them, scores the rest (:func:`search.objective.evaluate`, the same checks
and operating points as a sampled trial) and stores each as an ordinary finished
trial (COMPLETE, or PRUNED when infeasible), so results, plots, the dashboard and
resume work unchanged. Candidates already in the study are skipped: the same
command resumes an interrupted enumeration and re-scores nothing. Workers sharing a run
directory enumerate one after another (search/app.py); workers on other machines sharing a
database check the study again before each batch is stored, so a shape another worker stored
meanwhile is not stored twice (two batches written at the same instant still can be: start one
worker for an enumeration: seconds for the default space, about half an hour for ``space=moe``
on ``gb200_nvl72_dep``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import optuna
from optuna.trial import TrialState, create_trial

from search.config import SearchConfig
from search.objective import evaluate, param_budget
from search.scoring import objective_value
from search.space import candidate_key, grid_size, walk_candidates

__all__ = ["EnumerationResult", "EnumerationProgress", "enumerate_into", "ENUMERATION_ATTR"]

ENUMERATION_ATTR = "enumeration"  # study user attribute: the counts of the last enumeration
_BATCH = 256  # trials written per storage call


@dataclass
class EnumerationResult:
    """Counts of one enumeration (numbers of distinct candidates)."""

    candidates: int  # distinct shapes of the space
    outside_band: int  # skipped before scoring: outside space.params
    already_scored: int  # in the study before this run
    scored: int  # scored and stored by this run
    feasible: int  # of those, COMPLETE
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class EnumerationProgress:
    """Where an enumeration stands after a batch is stored."""

    walked: int  # suggestion combinations walked so far
    combinations: int  # all of them (search.space.grid_size)
    scored: int  # shapes scored and stored so far by this run
    feasible: int  # of those, COMPLETE
    seconds: float  # since the enumeration started

    @property
    def seconds_left(self) -> float:
        """Seconds to walk the rest at the rate so far: a rough figure, as shapes outside the parameter band
        (skipped without scoring) and duplicates cluster in parts of the grid."""
        return self.seconds * (self.combinations - self.walked) / max(self.walked, 1)


def enumerate_into(
    study: optuna.Study,
    cfg: SearchConfig,
    gpu: Any,
    objectives: Sequence[str],
    *,
    on_batch: Callable[[EnumerationProgress], None] | None = None,
) -> EnumerationResult:
    """Score every candidate of ``cfg.space`` not yet in ``study`` and add it as a finished trial.

    Raises ValueError when an objective needs training (``loss``). Trials are written
    in batches of a few hundred; a Ctrl-C loses at most the batch in flight.
    ``on_batch(progress)`` (an :class:`EnumerationProgress`) is called after each write.
    """
    if "loss" in objectives:
        raise ValueError("enumeration scores candidates without training; the loss objective needs a proxy run")
    t0 = time.perf_counter()
    have = {t.user_attrs.get("candidate_key") for t in study.get_trials(deepcopy=False)}
    counts = dict(candidates=0, outside_band=0, already_scored=0, scored=0, feasible=0)
    pending: list[optuna.trial.FrozenTrial] = []
    combinations, walked = grid_size(cfg.space, cfg.deployment), 0

    def flush() -> None:
        if pending:
            # another worker's enumeration (other machines: no shared run-dir lock) may have stored some meanwhile
            held = {t.user_attrs.get("candidate_key") for t in study.get_trials(deepcopy=False)}
            fresh = [t for t in pending if t.user_attrs["candidate_key"] not in held]
            stored_meanwhile = [t for t in pending if t.user_attrs["candidate_key"] in held]
            counts["scored"] -= len(stored_meanwhile)
            counts["feasible"] -= sum(t.state == TrialState.COMPLETE for t in stored_meanwhile)
            counts["already_scored"] += len(stored_meanwhile)
            study.add_trials(fresh)
            pending.clear()
            if on_batch is not None:
                on_batch(EnumerationProgress(walked=walked, combinations=combinations, scored=counts["scored"],
                                             feasible=counts["feasible"], seconds=time.perf_counter() - t0))

    for walked, params, distributions, cand in walk_candidates(cfg.space, cfg.deployment):
        counts["candidates"] += 1
        if candidate_key(cand) in have:
            counts["already_scored"] += 1
            continue
        if param_budget(cand.arch, cfg.space)[1]:  # outside the band: not worth a prediction or a row
            counts["outside_band"] += 1
            continue
        ev = evaluate(cand, cfg, gpu, objectives)
        feasible = ev.reason is None
        pending.append(
            create_trial(
                state=TrialState.COMPLETE if feasible else TrialState.PRUNED,
                values=[objective_value(n, ev.scores, None) for n in objectives] if feasible else None,
                params=params,
                distributions=distributions,
                user_attrs=ev.attrs,
                constraints=ev.constraints,
            )
        )
        counts["scored"] += 1
        counts["feasible"] += feasible
        if len(pending) >= _BATCH:
            flush()
    flush()
    result = EnumerationResult(**counts, seconds=time.perf_counter() - t0)
    study.set_user_attr(ENUMERATION_ATTR, result.to_dict())
    return result
