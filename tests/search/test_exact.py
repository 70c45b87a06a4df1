"""Exact fronts by enumeration, and no duplicate work when sampling (performance-only: seconds, no training)."""

from __future__ import annotations

import csv
import re

import optuna
import pytest
from optuna.trial import TrialState

from search.app import run
from search.compose import compose_config
from search.config import ConfigError, to_search_config
from search.objective import evaluate
from search.study import DUPLICATE_ATTR, finished_count
from search.scoring import objective_value
from search.space import enumerate_candidates

# 2 hidden x 2 layer counts x 2 KV-head choices x 2 FFN widths = 16 distinct dense shapes
SMALL = (
    "space=dense_tiny", "proxy=tiny", "space.hidden=[128,256]", "space.layers=[2,3]", "space.kv_heads=[1,2]",
    "space.ffn_multiplier=[2.0,4.0]", "space.ffn_multiplier_step=2.0", "objectives=perf_only", "tracking=off",
    "plots=false", "quiet=true",
)


def _front(points: list[tuple[float, float]]) -> set[tuple[float, float]]:
    """Non-dominated points, both objectives maximised (brute force)."""
    return {p for p in points if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in points)}


def test_perf_only_enumerates_the_space_and_returns_the_exact_front(tmp_path):
    res = run(compose_config(*SMALL, "study_name=exact"), run_dir=tmp_path / "run")
    cfg = to_search_config(compose_config(*SMALL))
    cands = [c for _, _, c in enumerate_candidates(cfg.space, cfg.deployment)]
    assert len(cands) == 16
    # every distinct shape scored once, as an ordinary finished trial
    trials = res.study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    assert len(trials) == 16 and len({t.user_attrs["shape"] for t in trials}) == 16
    # the front equals the brute-force front of independently scored candidates
    names = ["tokens_per_s_per_gpu", "tokens_per_s_per_user"]
    points = []
    from search.checks import resolve_gpu as _resolve_gpu

    gpu = _resolve_gpu(cfg)
    for c in cands:
        ev = evaluate(c, cfg, gpu, names)
        if ev.reason is None:
            points.append(tuple(objective_value(n, ev.scores, None) for n in names))
    assert {tuple(t.values) for t in res.study.best_trials} == _front(points)
    assert res.summary["enumeration"]["candidates"] == 16 and res.summary["strategy"] == "enumerate"
    # the same command again scores nothing
    again = run(compose_config(*SMALL, "study_name=exact"), run_dir=tmp_path / "run")
    assert again.ran == 0 and len(again.study.trials) == 16


def test_a_parameter_band_is_applied_before_scoring(tmp_path):
    # totals of the 16 shapes: eight of 8.49M-8.98M, eight of 17.5M-19.3M; the band keeps 6 + 2 of them
    band = ("space.params.min_total=8.6e6", "space.params.max_total=1.8e7", "study_name=band")
    res = run(compose_config(*SMALL, *band), run_dir=tmp_path / "run")
    e = res.summary["enumeration"]
    assert (e["scored"], e["outside_band"]) == (8, 8)
    assert len(res.study.trials) == 8
    for t in res.study.trials:
        assert 8.6e6 <= t.user_attrs["params_total"] <= 1.8e7


@pytest.mark.parametrize("strategy", ["enumerate", "sample"])
def test_a_space_with_no_feasible_shape_is_refused_before_any_trial(tmp_path, strategy):
    # every shape of SMALL is below 9M or above 13M parameters: the band is empty
    band = ("space.params.min_total=9e6", "space.params.max_total=1.3e7", f"strategy={strategy}", "n_trials=4")
    with pytest.raises(ConfigError, match=r"no shape of space='dense_tiny' can be kept on b200 .* none of its 16 shapes "
                                          r"is feasible\. Seen: total parameters N below space\.params\.min_total=N "
                                          r"\(8 of 16\); total parameters N exceed space\.params\.max_total=N \(8 of 16\)"):
        run(compose_config(*SMALL, *band), run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before the study was created


def test_enumeration_is_refused_when_loss_is_an_objective():
    with pytest.raises(ConfigError, match="strategy=enumerate .* loss is an objective"):
        run(compose_config("strategy=enumerate", "tracking=off"))


def test_sampling_never_evaluates_a_shape_twice_and_duplicates_do_not_count(tmp_path):
    # random search over 16 shapes: with 12 draws a repeat is near-certain (seeded, so certain here)
    res = run(compose_config(*SMALL, "strategy=sample", "sampler=random", "n_trials=12", "study_name=dups"),
              run_dir=tmp_path / "run")
    dups = [t for t in res.study.trials if DUPLICATE_ATTR in t.user_attrs]
    assert dups, "the seeded random sampler repeated no shape: the test no longer covers duplicates"
    assert all(t.state == TrialState.PRUNED and "prediction" not in t.user_attrs for t in dups)  # nothing evaluated
    assert finished_count(res.study) == 12  # the budget is 12 distinct shapes
    with open(tmp_path / "run" / "trials.csv") as f:
        shapes = [r["shape"] for r in csv.DictReader(f)]
    assert len(shapes) == 12 == len(set(shapes))
    assert res.summary["duplicates_skipped"] == len(dups)


def test_sampling_stops_when_the_space_is_exhausted(tmp_path, capsys):
    res = run(compose_config(*SMALL, "strategy=sample", "sampler=random", "n_trials=40", "study_name=all"),
              run_dir=tmp_path / "run")
    assert finished_count(res.study) == 16
    out = capsys.readouterr().out
    assert "at most 16 distinct shapes, fewer than n_trials=40" in out and "looks exhausted" in out
    keys = [t.user_attrs["candidate_key"] for t in res.study.trials if DUPLICATE_ATTR not in t.user_attrs]
    assert len(keys) == len(set(keys)) == 16


def test_a_duplicate_of_a_running_trial_is_not_evaluated_again():
    from search.study import duplicate_of

    study = optuna.create_study(directions=["maximize", "maximize"])
    running = study.ask()
    running.set_user_attr("candidate_key", "abc")
    assert duplicate_of(study, "abc", number=1) == running.number
    assert duplicate_of(study, "abc", number=running.number) is None  # itself
    study.tell(running, state=TrialState.FAIL)
    assert duplicate_of(study, "abc", number=1) is None  # a failed candidate may be tried again


def test_shapes_another_worker_stored_meanwhile_are_not_stored_twice(monkeypatch):
    # a worker on another machine (no shared run-dir lock) stores the whole space while this one is scoring
    import search.exact
    from search.checks import resolve_gpu
    from search.exact import enumerate_into

    cfg = to_search_config(compose_config(*SMALL))
    gpu, names = resolve_gpu(cfg), list(cfg.objectives.names)
    other = optuna.create_study(directions=["maximize", "maximize"])
    assert enumerate_into(other, cfg, gpu, names).scored == 16
    study = optuna.create_study(directions=["maximize", "maximize"])
    real = search.exact.evaluate

    def meanwhile(*args, **kwargs):
        if not study.trials:
            study.add_trials(other.get_trials())  # the other worker's 16 shapes land during this one's first batch
        return real(*args, **kwargs)

    monkeypatch.setattr(search.exact, "evaluate", meanwhile)
    result = enumerate_into(study, cfg, gpu, names)
    assert (result.scored, result.feasible, result.already_scored) == (0, 0, 16)
    keys = [t.user_attrs["candidate_key"] for t in study.trials]
    assert len(keys) == 16 == len(set(keys))



def test_a_long_enumeration_says_how_far_it_is_and_how_long_is_left(tmp_path, monkeypatch, capsys):
    # space=moe on gb200_nvl72_dep walks 677,376 combinations for about half an hour: say where it stands
    import search.app
    import search.exact

    monkeypatch.setattr(search.exact, "_BATCH", 4)  # 16 shapes: 4 batches
    monkeypatch.setattr(search.app, "PROGRESS_EVERY_S", 0.0)
    run(compose_config(*SMALL, "study_name=progress"), run_dir=tmp_path / "run")
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("enumeration: ")]
    assert [ln.split(" shape(s)")[0] for ln in lines] == [f"enumeration: {n}" for n in (4, 8, 12, 16)]
    assert all(re.search(r"\(\d+ feasible\) in \d+ s, \d+% of the combinations walked; about \d+ s left$", ln)
               for ln in lines)


def test_the_time_left_is_the_rate_so_far_over_the_combinations_not_walked():
    from search.exact import EnumerationProgress

    p = EnumerationProgress(walked=250, combinations=1000, scored=40, feasible=30, seconds=60.0)
    assert p.seconds_left == pytest.approx(180.0)
