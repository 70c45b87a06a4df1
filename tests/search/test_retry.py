"""Interrupted trials: recorded with their reason, not counted toward n_trials, their shapes evaluated again.

A database storage fails a trial whose heartbeat stopped (Optuna's ``fail_stale_trials``) with the
project's "interrupted" reason and queues its shape (search/study.py); a journal study's trial of a
killed worker (dead pid) or of Ctrl-C is failed as interrupted at the next start, and its shape queued
once (search/app.py). The retry is evaluated by the next run and is no duplicate of its failed original.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from search import study as storage_mod
from search.app import run
from search.compose import compose_config
from search.config import to_search_config
from search.objective import unseen_params
from search.space import candidate_key, suggest_candidate
from search.study import (
    DUPLICATE_ATTR,
    FAIL_REASON_ATTR,
    INTERRUPTED,
    RETRY_OF_ATTR,
    counts_toward_n_trials,
    fail_orphaned_trials,
    finished_count,
    held_count,
    make_storage,
    retry_interrupted,
)

# 16 distinct shapes, performance objectives only: trials take milliseconds
SMALL = (
    "space=dense_tiny", "proxy=tiny", "space.hidden=[128,256]", "space.layers=[2,3]", "space.kv_heads=[1,2]",
    "space.ffn_multiplier=[2.0,4.0]", "space.ffn_multiplier_step=2.0", "objectives=perf_only", "strategy=sample",
    "quiet=true", "tracking=off", "plots=false", "sampler=random",
)


def _cfg(*overrides: str):
    return compose_config(*SMALL, *overrides)


def _start_unseen_trial(study: optuna.Study, cfg, worker: dict) -> optuna.Trial:
    """A RUNNING trial holding a shape the study does not hold yet, as a worker's trial in flight."""
    scfg = to_search_config(cfg)
    params = unseen_params(study, scfg, seed=123)
    assert params is not None
    study.enqueue_trial(params)
    t = study.ask()
    cand = suggest_candidate(t, scfg.space, scfg.deployment)
    t.set_user_attr("candidate_key", candidate_key(cand))
    t.set_user_attr("worker", worker)
    return t


def _check_retried(res, original: int, params: dict) -> None:
    retries = [t for t in res.study.trials if t.user_attrs.get(RETRY_OF_ATTR) == original]
    assert len(retries) == 1
    retry = retries[0]
    assert retry.state == TrialState.COMPLETE and DUPLICATE_ATTR not in retry.user_attrs
    assert retry.params == params and counts_toward_n_trials(retry)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")  # the test starts a trial by hand
@pytest.mark.slow
def test_a_trial_without_heartbeat_is_interrupted_and_its_shape_retried(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(storage_mod, "HEARTBEAT_INTERVAL_S", 1)
    monkeypatch.setattr(storage_mod, "GRACE_PERIOD_S", 1)
    run_dir = tmp_path / "run"
    url = f"sqlite:///{tmp_path / 'study.db'}"
    assert run(_cfg(f"storage={url}", "n_trials=2", "study_name=hb"), run_dir=run_dir).finished == 2

    storage, _ = make_storage(url, run_dir)
    study = optuna.load_study(study_name="hb", storage=storage)
    # a worker on another machine that died mid-trial: its pid tells nothing here, its heartbeat stopped
    t = _start_unseen_trial(study, _cfg(f"storage={url}", "study_name=hb"), {"host": "elsewhere", "pid": 1})
    study._storage.record_heartbeat(t._trial_id)
    time.sleep(2.2)  # past the 1 s grace period (SQLite's clock has whole seconds)

    assert fail_orphaned_trials(study, storage) == [t.number]  # the job's start reaps it
    lost = study.trials[t.number]
    assert lost.state == TrialState.FAIL
    assert lost.user_attrs[FAIL_REASON_ATTR].startswith(f"{INTERRUPTED}: no heartbeat from worker elsewhere pid 1")
    assert not counts_toward_n_trials(lost) and finished_count(study) == 2 and held_count(study) == 2
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert len(waiting) == 1 and waiting[0].system_attrs["fixed_params"] == lost.params
    assert waiting[0].user_attrs[RETRY_OF_ATTR] == t.number
    assert retry_interrupted(study) == []  # queued once

    res = run(_cfg(f"storage={url}", "n_trials=3", "study_name=hb"), run_dir=run_dir)
    assert res.finished == 3 and res.ran == 1  # the one trial run is the retry
    _check_retried(res, t.number, lost.params)


def test_a_killed_or_interrupted_journal_trial_is_retried_once(tmp_path: Path):
    run_dir = tmp_path / "run"
    assert run(_cfg("n_trials=2", "study_name=killed"), run_dir=run_dir).finished == 2

    storage, _ = make_storage(None, run_dir)
    study = optuna.load_study(study_name="killed", storage=storage)
    # a worker of this host killed mid-trial (its pid is gone) ...
    killed = _start_unseen_trial(study, _cfg("study_name=killed"), {"host": socket.gethostname(), "pid": 2**22 + 12345})
    # ... and one stopped by Ctrl-C (the objective records the reason; Optuna marks it FAIL)
    ctrl_c = _start_unseen_trial(study, _cfg("study_name=killed"), {"host": socket.gethostname(), "pid": 2**22 + 12346})
    ctrl_c.set_user_attr(FAIL_REASON_ATTR, f"{INTERRUPTED} (KeyboardInterrupt)")
    study.tell(ctrl_c, state=TrialState.FAIL)
    params = {n: study.trials[n].params for n in (killed.number, ctrl_c.number)}
    assert params[killed.number] != params[ctrl_c.number]

    res = run(_cfg("n_trials=4", "study_name=killed"), run_dir=run_dir)
    for n in (killed.number, ctrl_c.number):
        t = res.study.trials[n]
        assert t.state == TrialState.FAIL and t.user_attrs[FAIL_REASON_ATTR].startswith(INTERRUPTED)
        assert not counts_toward_n_trials(t)
        _check_retried(res, n, params[n])
    assert res.finished == 4 and res.ran == 2  # the two retries, nothing else
    shapes = [r["shape"] for r in res.summary["rows"]]  # trials.csv: the retries, not the interrupted trials
    assert len(shapes) == len(set(shapes)) == 4 and res.summary["interrupted"] == 2
    # a later start queues nothing again: each was retried once
    assert retry_interrupted(res.study) == []
    res = run(_cfg("n_trials=4", "study_name=killed"), run_dir=run_dir)
    assert res.ran == 0 and not res.study.get_trials(states=(TrialState.WAITING,))


@pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")  # the test starts a trial by hand
@pytest.mark.slow
def test_no_retry_is_queued_when_the_study_already_holds_n_trials(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(storage_mod, "HEARTBEAT_INTERVAL_S", 1)
    monkeypatch.setattr(storage_mod, "GRACE_PERIOD_S", 1)
    run_dir, url = tmp_path / "run", f"sqlite:///{tmp_path / 'study.db'}"
    assert run(_cfg(f"storage={url}", "n_trials=2", "study_name=full"), run_dir=run_dir).finished == 2
    storage, _ = make_storage(url, run_dir, n_trials=2)  # as the job opens it: n_trials=2 are held
    study = optuna.load_study(study_name="full", storage=storage)
    t = _start_unseen_trial(study, _cfg(f"storage={url}", "study_name=full"), {"host": "elsewhere", "pid": 1})
    study._storage.record_heartbeat(t._trial_id)
    time.sleep(2.2)
    assert fail_orphaned_trials(study, storage) == [t.number]
    assert study.trials[t.number].user_attrs[FAIL_REASON_ATTR].startswith(INTERRUPTED)
    assert study.get_trials(states=(TrialState.WAITING,)) == []  # nothing is missing: no shape queued


@pytest.mark.parametrize("state", [TrialState.COMPLETE, TrialState.RUNNING])
def test_a_shape_held_by_another_trial_is_not_retried(state):
    study = optuna.create_study(directions=["maximize", "maximize"])
    lost = study.ask()
    lost.suggest_int("x", 0, 9)
    lost.set_user_attr("candidate_key", "k")
    lost.set_user_attr(FAIL_REASON_ATTR, f"{INTERRUPTED}: worker pid 1 is gone")
    study.tell(lost, state=TrialState.FAIL)
    other = study.ask()
    other.set_user_attr("candidate_key", "k")
    if state == TrialState.COMPLETE:
        study.tell(other, [1.0, 1.0])
    assert retry_interrupted(study) == []
