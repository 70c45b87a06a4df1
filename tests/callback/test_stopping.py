"""MedianStoppingRule: hand-computed medians over completed trials' recorded values."""

import math

import pytest

from co_design.callback import MedianStoppingRule, StoppingRule
from co_design.callback._stopping import value_at_step

HISTORY = [  # three completed trials, recorded at different global steps
    {10: 3.0, 20: 2.0, 30: 1.5},
    {10: 3.2, 20: 2.4},
    {20: 2.2, 40: 1.0},
]


def test_is_a_stopping_rule():
    assert isinstance(MedianStoppingRule(), StoppingRule)


def test_value_at_same_or_closest_earlier_step():
    values = {10: 3.0, 20: 2.0, 30: 1.5}
    assert value_at_step(values, 20) == 2.0
    assert value_at_step(values, 25) == 2.0  # closest earlier step
    assert value_at_step(values, 99) == 1.5
    assert value_at_step(values, 9) is None  # nothing that early


def test_stops_when_worse_than_median():
    rule = MedianStoppingRule(min_completed_trials=3)
    # at step 20 the completed trials had 2.0, 2.4, 2.2 -> median 2.2
    worse = rule.decide(20, 2.3, HISTORY, validations=1, minimize=True)
    better = rule.decide(20, 2.1, HISTORY, validations=1, minimize=True)
    assert worse.stop and "median 2.2" in worse.reason
    assert not better.stop
    assert not rule.decide(20, 2.2, HISTORY, validations=1, minimize=True).stop  # equal is not worse


def test_closest_earlier_step_and_missing_trials():
    # at step 35: 1.5 (step 30), 2.4 (step 20), 2.2 (step 20) -> median 2.2
    rule = MedianStoppingRule(min_completed_trials=3)
    assert rule.decide(35, 2.25, HISTORY, validations=1, minimize=True).stop
    # at step 15 only two trials have a record (3.0 and 3.2): fewer than 3, never stop
    d = rule.decide(15, 99.0, HISTORY, validations=1, minimize=True)
    assert not d.stop and "2 completed trial(s)" in d.reason
    assert MedianStoppingRule(min_completed_trials=2).decide(15, 3.2, HISTORY, validations=1, minimize=True).stop


def test_warmup_and_interval():
    rule = MedianStoppingRule(warmup_steps=25, min_completed_trials=1, every_n_validations=2)
    assert not rule.decide(20, 99.0, HISTORY, validations=2, minimize=True).stop  # in warm-up
    assert not rule.decide(30, 99.0, HISTORY, validations=3, minimize=True).stop  # odd validation
    assert rule.decide(30, 99.0, HISTORY, validations=4, minimize=True).stop


def test_maximize_and_diverged():
    rule = MedianStoppingRule(min_completed_trials=3)
    assert rule.decide(20, 2.1, HISTORY, validations=1, minimize=False).stop  # lower is worse when maximizing
    assert rule.decide(20, math.nan, [], validations=1, minimize=True).stop  # diverged, even without peers
    assert not MedianStoppingRule(warmup_steps=50).decide(20, math.inf, [], validations=1, minimize=True).stop


@pytest.mark.parametrize(
    "kwargs, field",
    [({"warmup_steps": -1}, "warmup_steps"), ({"min_completed_trials": 0}, "min_completed_trials"),
     ({"every_n_validations": 1.5}, "every_n_validations")],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        MedianStoppingRule(**kwargs)
