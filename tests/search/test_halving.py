"""Successive halving over Pareto rank: the rule (search/halving.py) and a study that uses it."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from search.app import run
from search.compose import compose_config
from search.config import ConfigError, to_search_config, validate
from search.halving import RUNG_LOSSES_ATTR, nondominated_ranks, promotes, rung_steps
from search.train import ProxyResult


def test_rung_budgets_end_at_the_proxy_budget():
    assert rung_steps(450, 3, 3) == [50, 150, 450]
    assert rung_steps(150, 1, 3) == [150]
    assert rung_steps(100, 3, 3) == [12, 34, 100]  # rounded up: never a shorter run than asked
    with pytest.raises(ValueError):
        rung_steps(100, 2, 1)


def test_nondominated_ranks_peel_fronts():
    pts = [(1, 5), (2, 2), (5, 1), (3, 3), (4, 4), (6, 6)]
    assert nondominated_ranks(pts) == [0, 0, 0, 1, 2, 3]
    assert nondominated_ranks([(1, 1), (1, 1)]) == [0, 0]  # equal points do not dominate each other


def test_promotion_takes_the_best_third_by_pareto_rank():
    others = [(3.0, -10.0), (3.1, -9.0), (3.2, -8.0), (3.3, -7.0), (3.4, -6.0)]  # one chain: fronts 0..4
    assert promotes((2.9, -11.0), others, eta=3)  # dominates all: front 0, quota 6 // 3 = 2
    assert promotes((3.05, -9.5), others, eta=3)  # one better trial < quota 2
    assert not promotes((3.15, -8.5), others, eta=3)  # two better trials: not < 2
    assert promotes((9.0, -99.0), others, eta=3)  # slowest loss but fastest: not dominated
    assert not promotes((1.0, -1.0), [(2.0, -2.0)], eta=3)  # fewer than eta at the rung: nobody yet


def test_halving_needs_a_first_rung_of_at_least_one_step():
    cfg = to_search_config(compose_config("proxy.budget.steps=8", "proxy.halving.rungs=3", "tracking=off"))
    with pytest.raises(ConfigError, match=r"proxy\.halving"):
        validate(cfg)
    cfg = to_search_config(compose_config("proxy.halving.eta=1", "tracking=off"))
    with pytest.raises(ConfigError, match=r"proxy\.halving\.eta=1"):
        validate(cfg)


@pytest.mark.slow
def test_a_study_promotes_non_dominated_candidates_to_longer_runs(tmp_path):
    # A fake proxy whose loss falls with the budget and depends on the shape, so promotion is decided
    # by the rule and the losses at each rung are known.
    calls: list[tuple[int, int]] = []

    def fake(*, trial, cfg, proxy_arch, **kw):
        steps = cfg.proxy.budget.steps
        calls.append((trial.number, steps))
        loss = 5.0 - 0.001 * proxy_arch.hidden * proxy_arch.layers - 0.002 * steps
        return ProxyResult(loss=loss, steps=steps, curve=((steps * 4, loss),))

    cfg = compose_config(
        "space=dense_tiny", "proxy=tiny", "proxy.budget.steps=27", "proxy.halving.rungs=3", "proxy.halving.eta=3",
        "n_trials=12", "study_name=sh", "tracking=off", "plots=false", "quiet=true", "sampler=random")
    res = run(cfg, run_dir=tmp_path / "run", train_fn=fake)
    done = [t for t in res.study.trials if t.state == TrialState.COMPLETE]
    assert len(done) == 12
    by_trial: dict[int, list[int]] = {}
    for number, steps in calls:
        by_trial.setdefault(number, []).append(steps)
    for t in done:
        ran = by_trial[t.number]
        assert ran == [3, 9, 27][: len(ran)]  # rungs in order, stopping at the first refusal
        rungs = t.user_attrs[RUNG_LOSSES_ATTR]
        assert list(rungs) == [str(s) for s in ran]
        assert t.values[0] == pytest.approx(rungs[str(ran[-1])])  # the loss at the highest rung reached
        assert t.user_attrs["proxy_steps"] == ran[-1]
    promoted = [n for n, ran in by_trial.items() if len(ran) > 1]
    assert 0 < len(promoted) < len(done)  # some, not all
    assert sum(len(r) for r in by_trial.values()) < 3 * len(done)
    # each promotion was right when made: the trial was in the best third at that rung among earlier trials
    for t in done:
        ran = by_trial[t.number]
        for i, steps in enumerate(ran[:-1]):
            key = str(steps)
            earlier = [u for u in done if u.number < t.number and key in u.user_attrs[RUNG_LOSSES_ATTR]]
            perf = sorted(t.user_attrs["perf_objectives"])
            own = [t.user_attrs[RUNG_LOSSES_ATTR][key], *(-t.user_attrs["perf_objectives"][n] for n in perf)]
            others = [[u.user_attrs[RUNG_LOSSES_ATTR][key], *(-u.user_attrs["perf_objectives"][n] for n in perf)]
                      for u in earlier]
            assert promotes(own, others, eta=3), (t.number, steps)
    rows = {r["trial"]: r for r in res.summary["rows"]}
    assert {rows[n]["proxy_steps"] for n in rows} <= {3, 9, 27}


def test_the_loss_objective_is_defined_in_words():
    from search.results import loss_definition

    cfg = to_search_config(compose_config("tracking=off", "proxy.budget.steps=150", "proxy.data.batch_size=8",
                                          "proxy.data.seq_len=128"))
    text = loss_definition(cfg)
    assert "after 153,600 training tokens (150 steps)" in text and "muP (base width 128" in text
    cfg = to_search_config(compose_config("tracking=off", "proxy.budget.steps=450", "proxy.halving.rungs=3",
                                          "proxy.mup=null"))
    text = loss_definition(cfg)
    assert "51,200 tokens for every candidate, up to 460,800 for the best 1/9" in text
    assert "standard parametrization" in text
