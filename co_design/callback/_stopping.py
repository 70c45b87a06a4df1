"""Stopping rules for proxy runs inside an Optuna trial.

Multi-objective studies cannot use ``trial.report`` / ``trial.should_prune``
(REFERENCE.md §6), so the callback records validation losses by global step in
the trial's user attribute ``"intermediate_values"`` (``{str(step): loss}``) and
a rule compares the running trial with the completed ones' records.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "INTERMEDIATE_VALUES_ATTR",
    "PRUNED_AT_STEP_ATTR",
    "StoppingRule",
    "StopDecision",
    "MedianStoppingRule",
    "value_at_step",
]

INTERMEDIATE_VALUES_ATTR = "intermediate_values"  # trial user attribute: {str(global step): validation loss}
PRUNED_AT_STEP_ATTR = "pruned_at_step"  # trial user attribute: the global step the rule stopped at


@dataclass(frozen=True)
class StopDecision:
    """A rule's verdict; ``reason`` is a sentence for logs and ``optuna.TrialPruned``."""

    stop: bool
    reason: str


@runtime_checkable
class StoppingRule(Protocol):
    """Anything with this method can stop a trial's run early."""

    def decide(
        self, step: int, value: float, history: Sequence[Mapping[int, float]], *, validations: int, minimize: bool
    ) -> StopDecision:
        """``step``: global step; ``value``: monitored metric now; ``history``: each completed
        trial's ``{step: value}``; ``validations``: validations seen so far in this run (1-based)."""
        ...


def value_at_step(values: Mapping[int, float], step: int) -> float | None:
    """The value recorded at ``step``, else at the closest earlier step; None if none is that early."""
    earlier = [s for s in values if s <= step]
    return values[max(earlier)] if earlier else None


@dataclass(frozen=True, kw_only=True)
class MedianStoppingRule:
    """Stop a run whose monitored value is worse than the median of completed trials at the same step.

    Like Optuna's ``MedianPruner``, but over user attributes, so it works in
    multi-objective studies. Each completed trial contributes its value at the
    same global step, or at its closest earlier recorded step; trials with no
    record that early are left out.

    - ``warmup_steps``: never stop before this global step (optimizer steps).
    - ``min_completed_trials``: never stop while fewer completed trials have a
      record at or before the step.
    - ``every_n_validations``: check at every n-th validation (1 = each one).
    - A NaN or infinite value (a diverged run) stops once past the warm-up.
    """

    warmup_steps: int = 0
    min_completed_trials: int = 3
    every_n_validations: int = 1

    def __post_init__(self) -> None:
        for name, low in (("warmup_steps", 0), ("min_completed_trials", 1), ("every_n_validations", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"MedianStoppingRule.{name} must be an integer >= {low}, got {value!r}")

    def decide(
        self, step: int, value: float, history: Sequence[Mapping[int, float]], *, validations: int, minimize: bool
    ) -> StopDecision:
        if step < self.warmup_steps:
            return StopDecision(False, f"step {step} is within the warm-up of {self.warmup_steps} steps")
        if validations % self.every_n_validations:
            return StopDecision(False, f"validation {validations} is not a multiple of {self.every_n_validations}")
        if not math.isfinite(value):
            return StopDecision(True, f"the monitored value is {value} at step {step} (diverged)")
        peers = [v for v in (value_at_step(h, step) for h in history) if v is not None and math.isfinite(v)]
        if len(peers) < self.min_completed_trials:
            return StopDecision(
                False, f"{len(peers)} completed trial(s) recorded by step {step}, need {self.min_completed_trials}"
            )
        median = statistics.median(peers)
        worse = value > median if minimize else value < median
        relation = "worse than" if worse else "not worse than"
        return StopDecision(
            worse, f"{value:.6g} at step {step} is {relation} the median {median:.6g} of {len(peers)} completed trials"
        )
