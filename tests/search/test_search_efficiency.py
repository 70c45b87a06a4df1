"""benchmarks/search_efficiency.py: its pure pieces (loss estimate, fronts, hypervolume, curves, verdict)
on hand-computed cases, and one tiny end-to-end run (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import search_efficiency as se  # benchmarks/ is on pytest's pythonpath (pyproject.toml)

MIN_MAX = ["minimize", "maximize"]


def test_chinchilla_loss_by_hand() -> None:
    # N = 1e9, D = 2e10: 406.4 / 1e9^0.34 = 406.4 / 10^3.06 = 0.35396; 410.7 / 2e10^0.28 = 410.7 / 766.01 = 0.53609
    assert se.chinchilla_loss(1e9, 2e10) == pytest.approx(1.69 + 0.35396 + 0.53609, abs=1e-4)
    assert se.LossEstimate()(1e9) == pytest.approx(2.58005, abs=1e-4)  # D = 20 N
    assert se.LossEstimate(token_budget=2e10)(1e9) == pytest.approx(2.58005, abs=1e-4)
    assert se.LossEstimate()(2e9) < se.LossEstimate()(1e9)  # more parameters (and tokens): lower loss
    with pytest.raises(ValueError, match="positive"):
        se.chinchilla_loss(0, 1e9)


def test_estimate_trainer_uses_total_parameters() -> None:
    from co_design.arch import Architecture

    arch = Architecture(hidden=1024, layers=8, heads=16, kv_heads=4, head_dim=64, ffn=4096, vocab=32000)
    result = se.EstimateTrainer(se.LossEstimate())(full_arch=arch, proxy_arch=None, trial=None)
    assert result.loss == pytest.approx(se.LossEstimate()(arch.param_counts().total))
    assert result.pruned_reason is None


def test_front_and_reference_by_hand() -> None:
    pts = [(1.0, 3.0), (2.0, 5.0), (3.0, 2.0), (1.0, 3.0)]  # (3, 2) is dominated by (1, 3); (1, 3) repeats
    assert sorted(se.pareto_front(pts, MIN_MAX)) == [(1.0, 3.0), (2.0, 5.0)]
    assert se.dominates((1, 3), (3, 2), MIN_MAX) and not se.dominates((1, 3), (1, 3), MIN_MAX)
    # loss range 1..3 -> 3 + 0.2; speed range 2..5 -> 2 - 0.3
    assert se.nadir_reference(pts, MIN_MAX) == pytest.approx([3.2, 1.7])
    assert se.nadir_reference([(1.0, 0.5), (3.0, 30.0)], MIN_MAX)[1] == 0.0  # a maximised metric's ref stays >= 0


def test_front_tracker_hypervolume_by_hand() -> None:
    # ref (4, 0): (1, 3) covers [1,4] x [0,3] = 9; (2, 5) adds [2,4] x [3,5] = 4 -> 13
    t = se.FrontTracker([4.0, 0.0], MIN_MAX)
    assert t.add((1, 3)) == pytest.approx(9.0)
    assert t.add((2, 5)) == pytest.approx(13.0)
    assert t.add((3, 2)) == pytest.approx(13.0) and len(t.front) == 2  # dominated: front unchanged
    assert t.add((0.5, 6)) == pytest.approx(3.5 * 6) and t.front == [(0.5, 6.0)]  # dominates both


def test_curve_helpers() -> None:
    curve = [0.1, 0.5, 0.9, 0.95]
    assert se.trials_to_reach(curve, 0.9) == 3
    assert se.trials_to_reach(curve, 0.99) is None
    assert se.at_trial(curve, 2) == 0.5 and se.at_trial(curve, 100) == 0.95 and se.at_trial([], 5) is None
    assert se.median_trials([10, None, 30]) == 30  # a miss counts as infinitely many
    assert se.median_trials([None, None, 5]) is None
    assert se.checkpoints(14, 200) == [14, 25, 50, 100, 200] and se.checkpoints(14, 60) == [14, 25, 50]


def test_parse_samplers() -> None:
    specs = se.parse_samplers("tpe, tpe(n_startup_trials=20, multivariate=False),random")
    assert [s.label for s in specs] == ["tpe", "tpe(n_startup_trials=20, multivariate=False)", "random"]
    assert specs[1].kwargs == (("n_startup_trials", 20), ("multivariate", False))
    sampler = specs[1].build(cfg=None, seed=3)  # with arguments: the Optuna class, not make_sampler
    assert type(sampler).__name__ == "TPESampler"
    with pytest.raises(ValueError, match="tpe, nsga2"):
        se.parse_samplers("tpee")
    with pytest.raises(ValueError, match="keyword arguments only"):
        se.parse_samplers("tpe(20)")


def _summary(at100: float, t90: int | None, random_t90: int | None) -> dict:
    return {
        "tpe": {"at": {100: {"median": at100}}, "to": {0.9: {"median": t90}}},
        "random": {"at": {}, "to": {0.9: {"median": random_t90}}},
    }


def test_verdict() -> None:
    v = se.verdict(_summary(0.96, 30, 90), "tpe", 200)
    assert v["target1_met"] and v["target2_met"] and v["ratio"] == pytest.approx(3.0)
    v = se.verdict(_summary(0.94, 50, 90), "tpe", 200)
    assert not v["target1_met"] and not v["target2_met"]
    v = se.verdict(_summary(0.96, 80, None), "tpe", 200)  # random never reached 90 %: ratio >= 200 / 80
    assert v["ratio_bound"] and v["ratio"] == pytest.approx(2.5) and v["target2_met"]
    assert se.verdict(_summary(0.96, 30, 90), "gp", 200)["measured"] is False


@pytest.mark.slow
def test_tiny_run_writes_report(tmp_path: Path) -> None:
    out = tmp_path / "se"
    assert se.main(["--samplers", "tpe,random", "--seeds", "1", "--trials", "12", "--jobs", "1", "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    runs = {r["sampler"]: r for r in data["runs"]}
    assert set(runs) == {"tpe", "random"}
    for r in runs.values():
        assert r["counted"] == 12 and len(r["curve"]) == 12
        assert all(0.0 <= x <= 1.0 + 1e-12 for x in r["curve"])
        assert r["curve"] == sorted(r["curve"])  # the front only grows
    assert data["setup"]["exact_hypervolume"] > 0 and len(data["setup"]["exact_front"]) >= 3
    assert "## Verdict" in out.with_suffix(".md").read_text() and out.with_suffix(".png").stat().st_size > 0
