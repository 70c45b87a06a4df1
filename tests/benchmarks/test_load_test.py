"""benchmarks/load_test.py: its audit finds a duplicated shape, a lost trial and a broken results file
on hand-made studies and passes a clean one; a tiny real run of 2 workers on PostgreSQL loses and
duplicates nothing (slow)."""

from __future__ import annotations

import pytest

import load_test as lt  # benchmarks/ is on pytest's pythonpath (pyproject.toml)

T = lt.TrialRecord


def _clean() -> list:
    """Four counted trials (one an infeasible PRUNED), a skipped duplicate and a surplus trial."""
    return [T(0, "COMPLETE", "a"), T(1, "PRUNED", "b"), T(2, "PRUNED", "a", skipped="duplicate"),
            T(3, "COMPLETE", "c"), T(4, "FAIL", "d"), T(5, "PRUNED", None, skipped="surplus")]


def _rows(trials) -> list[dict[str, str]]:
    """trials.csv as the job writes it: one row per trial that evaluated something."""
    return [{"trial": str(t.number), "shape": f"shape-{t.key}", "reason": ""} for t in trials if t.skipped is None]


def test_a_clean_study_passes():
    trials = _clean()
    a = lt.audit(trials, _rows(trials), n_trials=4)
    assert a.ok and a.lost == 0 and a.duplicated_count == 0
    assert (a.trials, a.complete, a.pruned, a.fail, a.counted) == (6, 2, 3, 1, 4)
    assert (a.duplicates_skipped, a.surplus_skipped, a.interrupted) == (1, 1, 0)


def test_a_shape_evaluated_twice_is_a_duplicate():
    trials = _clean() + [T(6, "COMPLETE", "c")]  # c again, not marked duplicate_of
    a = lt.audit(trials, _rows(trials), n_trials=5)
    assert a.duplicated == ["c"] and a.csv_duplicated == ["shape-c"] and not a.ok


def test_a_shape_twice_in_trials_csv_is_a_duplicate():
    trials = _clean()
    rows = _rows(trials) + [{"trial": "3", "shape": "shape-c", "reason": ""}]
    a = lt.audit(trials, rows, n_trials=4)
    assert a.duplicated == [] and a.csv_duplicated == ["shape-c"] and not a.ok


def test_a_counted_trial_missing_from_trials_csv_is_lost():
    trials = _clean()
    rows = [r for r in _rows(trials) if r["trial"] != "3"]
    a = lt.audit(trials, rows, n_trials=4)
    assert a.missing_from_csv == [3] and a.lost == 1 and not a.ok


def test_a_row_without_a_counted_trial_is_lost():
    trials = _clean()
    rows = _rows(trials) + [{"trial": "9", "shape": "shape-z", "reason": ""}]
    a = lt.audit(trials, rows, n_trials=4)
    assert a.phantom_rows == [9] and a.lost == 1


def test_too_few_trials_are_lost_unless_the_space_is_exhausted():
    trials = _clean()
    assert lt.audit(trials, _rows(trials), n_trials=6).shortfall == 2
    exhausted = trials + [T(6, "PRUNED", "a", skipped="duplicate", exhausted=True)]
    a = lt.audit(exhausted, _rows(exhausted), n_trials=6)
    assert a.exhausted and a.shortfall == 0 and a.ok


def test_too_many_trials_fail_the_check():
    trials = _clean()
    a = lt.audit(trials, _rows(trials), n_trials=3)
    assert a.overshoot == 1 and a.lost == 0 and not a.ok


def test_a_trial_left_running_is_lost():
    trials = _clean() + [T(6, "RUNNING", "e")]
    a = lt.audit(trials, _rows(trials[:-1]), n_trials=4)
    assert a.running_left == [6] and not a.ok


def test_an_interrupted_trial_retried_is_no_duplicate_and_a_trial_gone_after_the_kill_is_lost():
    trials = _clean() + [T(6, "FAIL", "e", interrupted=True), T(7, "COMPLETE", "e")]
    rows = _rows(trials)
    rows[-2]["reason"] = "interrupted: worker pid 12 is gone"  # the job keeps the interrupted trial's row
    a = lt.audit(trials, rows, n_trials=5, counted_at_kill=[0, 1, 3])
    assert a.ok and a.interrupted == 1 and a.counted == 5
    gone = [t for t in trials if t.number != 3]
    b = lt.audit(gone, [r for r in rows if r["trial"] != "3"], n_trials=4, counted_at_kill=[0, 1, 3])
    assert b.lost_after_kill == [3] and not b.ok


def test_check_files_finds_a_broken_file_and_a_leftover(tmp_path):
    (tmp_path / "trials.csv").write_text("trial,shape\n0,a\n")
    (tmp_path / "pareto.csv").write_text("trial,shape\n0,a\n")
    (tmp_path / "pareto.json").write_text("[]")
    (tmp_path / "summary.json").write_text("{}")
    assert lt.check_files(tmp_path) == []
    (tmp_path / "summary.json").write_text('{"trials": ')  # cut short
    (tmp_path / "pareto.tmp.json").write_text("{}")
    bad = lt.check_files(tmp_path)
    assert len(bad) == 2 and any(b.startswith("summary.json: JSONDecodeError") for b in bad), bad
    assert any("temporary file" in b for b in bad)


def test_the_trial_span_excludes_process_start_up():
    trials = [T(0, "COMPLETE", "a", start_s=10.0, complete_s=11.0), T(1, "COMPLETE", "b", start_s=10.5, complete_s=13.5),
              T(2, "RUNNING", "c", start_s=12.0)]
    assert lt.trial_span_s(trials) == 3.5


@pytest.mark.slow
def test_two_workers_on_postgresql_lose_and_duplicate_nothing(postgres_url):
    r = lt.run_once(postgres_url, 2, 12)
    a = r["audit"]
    # the errors in full (a worker's own error line is in them): pytest would cut the run's repr short
    assert r["errors"] == [], "\n".join(r["errors"])
    assert a["ok"], a
    assert a["counted"] == 12 and a["lost"] == 0 and a["duplicated_count"] == 0 and a["unparseable"] == []
    assert r["per_min"] > 0 and r["trial_span_s"] < r["wall_s"]
