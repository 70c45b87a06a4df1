"""Successive halving over Pareto rank: short proxy runs for every candidate, longer ones for the
candidates that are not dominated at the shorter budget.

Optuna has no multi-objective pruner (``trial.report`` raises in a multi-objective study), so the
schedule is built here, asynchronously like ASHA (Li et al. 2020, arXiv 1810.05934): a trial trains
its proxy at the first rung's budget and is promoted to the next rung when, among every trial
that has a loss at that rung, it lies in the best ``1/eta`` by non-dominated sorting on (loss at
the rung, the performance objectives). The performance objectives are exact at any fidelity, so
only the loss changes between rungs. Each rung is a fresh run with its own warmup and cosine
schedule over the rung's budget, the way the single-budget proxy trains. With ``rungs`` rungs of
``top / eta**(rungs-1-i)`` steps and a fraction ``1/eta`` promoted at each, the expected compute
per candidate is ``rungs x top / eta**(rungs-1)`` steps: for rungs=3, eta=3 and a top rung of 450
steps, 150 steps a candidate, the cost of the single-budget proxy, with the best ninth trained 3x
longer. A trial's loss objective is the loss at the highest rung it reached, and the study's
front is built from those values. Every rung's loss is stored on the trial, so a resumed or
parallel study promotes against the same records.
"""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["rung_steps", "nondominated_ranks", "promotes", "RUNG_LOSSES_ATTR"]

RUNG_LOSSES_ATTR = "rung_losses"  # user attribute: {"<steps>": validation loss at that rung}


def rung_steps(top_steps: int, rungs: int, eta: int) -> list[int]:
    """Training steps of each rung, shortest first: ``ceil(top_steps / eta**(rungs-1-i))``."""
    if rungs < 1 or eta < 2:
        raise ValueError(f"rungs={rungs} must be >= 1 and eta={eta} >= 2")
    return [max(1, math.ceil(top_steps / eta ** (rungs - 1 - i))) for i in range(rungs)]


def nondominated_ranks(points: Sequence[Sequence[float]]) -> list[int]:
    """Front index of each point (0: not dominated by any point), all objectives minimised."""
    n = len(points)

    def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))

    dominated_by = [sum(dominates(points[j], points[i]) for j in range(n) if j != i) for i in range(n)]
    beaten = [[j for j in range(n) if j != i and dominates(points[i], points[j])] for i in range(n)]
    ranks = [0] * n
    front = [i for i in range(n) if dominated_by[i] == 0]
    level = 0
    while front:
        nxt = []
        for i in front:
            ranks[i] = level
            for j in beaten[i]:
                dominated_by[j] -= 1
                if dominated_by[j] == 0:
                    nxt.append(j)
        front, level = nxt, level + 1
    return ranks


def promotes(own: Sequence[float], others: Sequence[Sequence[float]], eta: int) -> bool:
    """Whether a trial scoring ``own`` at a rung goes on to the next rung, given the scores
    ``others`` of every other trial at that rung (all objectives minimised).

    Of the ``n`` trials at the rung, ``n // eta`` may go on: the trial does when fewer than that
    many trials lie on fronts better than its own (a whole front is promoted together, so a
    wide first front can promote more). Fewer than ``eta`` trials at the rung promote none yet,
    as in ASHA.
    """
    points = [*others, own]
    quota = len(points) // eta
    if quota < 1:
        return False
    ranks = nondominated_ranks(points)
    return sum(r < ranks[-1] for r in ranks) < quota
