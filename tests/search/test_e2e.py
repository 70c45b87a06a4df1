"""The search job end to end, in-process: short studies with a tiny proxy (the longer ones marked slow).

Covers: a study to completion with results files that agree with the study, resume,
a failing trial (exception and NaN) recorded as FAIL while the study goes on,
infeasible candidates rejected before any proxy run, the W&B offline Pareto table,
and a PostgreSQL storage.
"""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import socket
import sys
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from search.app import run
from search.config import ConfigError
from search.train import train_proxy

from search.compose import compose_config as compose_cfg

# A proxy small enough for tests: a few steps of a 2-sequence batch of 32 bytes.
TINY_PROXY = [
    "space=dense_tiny",
    "proxy=tiny",
    "proxy.budget.steps=4",
    "proxy.budget.val_every_steps=2",
    "proxy.data.seq_len=32",
    "proxy.data.batch_size=2",
    "proxy.data.val_batches=1",
    "proxy.warmup_steps=1",
    "space.hidden=[128,256]",
    "space.layers=[2,3]",
    "plots=true",
    "quiet=true",
]


@pytest.fixture(autouse=True)
def _wandb_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_SILENT", "true")


def _cfg(*overrides: str):
    return compose_cfg(*TINY_PROXY, *overrides)


@pytest.mark.slow
def test_short_study_writes_results_that_agree_with_the_study(tmp_path):
    res = run(_cfg("n_trials=3", "study_name=e2e", "tracking=wandb"), run_dir=tmp_path / "run")
    study = res.study
    assert res.ran == 3 and res.finished == 3
    trials = study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
    assert len(trials) == 3
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert complete, [t.user_attrs for t in trials]
    for t in complete:
        loss, tps_gpu, tps_user = t.values
        assert math.isfinite(loss) and 0 < loss < 10  # nats/token on bytes: below ln(256)=5.5 after training starts
        pred = t.user_attrs["prediction"]
        assert tps_gpu == pytest.approx(pred["output_tokens_per_s_per_gpu"])
        assert tps_user == pytest.approx(t.user_attrs["interactive_prediction"]["output_tokens_per_s_per_user"])
        assert t.user_attrs["interactive_prediction"]["batch"] == 1  # the interactive point: one request in flight
        assert t.user_attrs["proxy_params"] < t.user_attrs["params_total"]  # the proxy is reduced
        assert t.user_attrs["arch"]["hidden"] % 128 == 0

    # Pareto files == study.best_trials
    run_dir = res.run_dir
    front = {t.number for t in study.best_trials}
    with open(run_dir / "pareto.csv") as f:
        rows = list(csv.DictReader(f))
    assert {int(r["trial"]) for r in rows} == front
    for r in rows:
        t = study.trials[int(r["trial"])]
        assert float(r["loss"]) == pytest.approx(t.values[0])
        assert float(r["tokens_per_s_per_gpu"]) == pytest.approx(t.values[1])
        assert float(r["tokens_per_s_per_user"]) == pytest.approx(t.values[2])
        assert r["limited_by"] and r["max_batch"] == "2048" and r["max_num_tokens"] == "8192"
    pareto_json = json.loads((run_dir / "pareto.json").read_text())
    assert {r["trial"] for r in pareto_json} == front
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["pareto_size"] == len(front) and sum(summary["trials"].values()) == 3
    assert summary["hypervolume"] is not None and summary["hypervolume"] >= 0
    with open(run_dir / "trials.csv") as f:
        assert len(list(csv.DictReader(f))) == 3
    # each proxy's loss against the tokens it had trained on (batch 2 x 32 tokens a step), ending at its objective
    curves = json.loads((run_dir / "loss_curves.json").read_text())
    for t in complete:
        c = curves[str(t.number)]["tokens_loss"]
        assert [x for x, _ in c] == [64 * s for s in sorted(int(k) for k in t.user_attrs["intermediate_values"])]
        assert c[-1][0] == 64 * t.user_attrs["proxy_steps"] and c[-1][1] == pytest.approx(t.values[0])
    for name in ("pairwise.png", "pairwise.html", "serving_curves.png", "serving_curves.html",
                 "hypervolume_history.png", "hypervolume_history.html"):
        assert (run_dir / "plots" / name).stat().st_size > 1000, name
    assert (run_dir / "plots" / "plotly.min.js").exists()  # the HTML opens offline

    # W&B offline: a summary run whose Pareto table is plain JSON, and one run per evaluated trial
    assert res.wandb_summary_dir is not None
    tables = glob.glob(os.path.join(res.wandb_summary_dir, "files", "media", "table", "pareto_front_*.table.json"))
    assert tables, os.listdir(res.wandb_summary_dir)
    table = json.loads(Path(tables[0]).read_text())
    trial_col = table["columns"].index("trial")
    assert {row[trial_col] for row in table["data"]} == front
    all_table = glob.glob(os.path.join(res.wandb_summary_dir, "files", "media", "table", "trials_*.table.json"))
    assert all_table and "pareto" in json.loads(Path(all_table[0]).read_text())["columns"]
    runs = glob.glob(str(run_dir / "wandb" / "offline-run-*"))
    evaluated = [t for t in trials if "infeasible" not in t.user_attrs]
    assert len(runs) == len(evaluated) + 1
    # trial runs hold the proxy's loss curve, the callback's metrics and the prediction (protobuf records
    # in the offline .wandb file; no reader ships with wandb 0.31, so look for the keys)
    trained = [r for r in runs if r.rstrip("/") != res.wandb_summary_dir.rstrip("/")]
    blobs = [Path(f).read_bytes() for r in trained for f in glob.glob(os.path.join(r, "run-*.wandb"))]
    assert any(b"val_loss" in b and b"co_design/output_tokens_per_s_per_gpu" in b for b in blobs)
    assert all(b"prediction/output_tokens_per_s_per_gpu" in b for b in blobs)
    # grouped by study, job_type "trial": RunRecord fields 6 (run_group) and 7 (job_type), protobuf-encoded
    assert all(b"\x32\x03e2e\x3a\x05trial" in b for b in blobs), "trial runs not grouped by the study"


@pytest.mark.slow
def test_resume_runs_only_the_remainder(tmp_path):
    run_dir = tmp_path / "run"
    first = run(_cfg("n_trials=2", "study_name=resume", "tracking=off", "plots=false"), run_dir=run_dir)
    assert first.ran == 2
    again = run(_cfg("n_trials=2", "study_name=resume", "tracking=off", "plots=false"), run_dir=run_dir)
    assert again.ran == 0 and len(again.study.trials) == 2  # nothing to do: the study is complete
    more = run(_cfg("n_trials=3", "study_name=resume", "tracking=off", "plots=false"), run_dir=run_dir)
    assert more.ran == 1 and len(more.study.trials) == 3
    # the resumed sampler does not replay the first run's draws
    assert more.study.trials[2].params != more.study.trials[0].params
    # other objectives on the same study name are refused, not mixed in
    from search.config import ConfigError

    with pytest.raises(ConfigError, match="already exists"):
        run(_cfg("n_trials=4", "study_name=resume", "tracking=off", "objectives=throughput"), run_dir=run_dir)


def test_orphaned_running_trial_of_a_dead_worker_is_failed_and_not_counted(tmp_path):
    run_dir = tmp_path / "run"
    cfg = _cfg("n_trials=1", "study_name=orphan", "tracking=off", "plots=false", "objectives=perf_only", "strategy=sample")
    run(cfg, run_dir=run_dir)
    from search.study import make_storage

    storage, _ = make_storage(None, run_dir)
    study = optuna.load_study(study_name="orphan", storage=storage)
    t = study.ask()  # a worker that died mid-trial: RUNNING forever
    t.set_user_attr("worker", {"host": socket.gethostname(), "pid": 2**22 + 12345})
    res = run(_cfg("n_trials=2", "study_name=orphan", "tracking=off", "plots=false", "objectives=perf_only", "strategy=sample"), run_dir=run_dir)
    orphan = res.study.trials[t.number]
    assert orphan.state == TrialState.FAIL and orphan.user_attrs["fail_reason"].startswith("interrupted")
    assert res.finished == 2 and res.ran == 1


@pytest.mark.slow
def test_failing_trials_are_recorded_and_the_study_goes_on(tmp_path):
    calls = []

    def flaky(**kw):
        calls.append(kw["trial"].number)
        n = len(calls)
        if n == 1:
            raise RuntimeError("injected failure")
        if n == 2:
            from search.train import ProxyResult

            return ProxyResult(loss=float("nan"), steps=1)
        return train_proxy(**kw)

    res = run(
        _cfg("n_trials=3", "study_name=fail", "tracking=off", "plots=false", "proxy.reuse_losses=false",
             "proxy.early_stopping=false"),
        run_dir=tmp_path / "run",
        train_fn=flaky,
    )
    states = [t.state for t in res.study.trials]
    assert states[:2] == [TrialState.FAIL, TrialState.FAIL] and states[2] == TrialState.COMPLETE
    assert res.study.trials[0].user_attrs["fail_reason"] == "RuntimeError: injected failure"
    assert "NonFiniteLossError" in res.study.trials[1].user_attrs["fail_reason"]
    rows = {r["trial"]: r for r in res.summary["rows"]}
    assert rows[0]["state"] == "FAIL" and "injected failure" in rows[0]["reason"]


@pytest.mark.slow
def test_infeasible_candidates_cost_no_proxy_run(tmp_path):
    from search.train import ProxyResult

    trained = []

    def fake(*, trial, **kw):  # a proxy run that only records which trial asked for it
        trained.append(trial.number)
        return ProxyResult(loss=3.0, steps=4, curve=((256, 3.0),))

    # the space's totals run from 8.5M to 19.5M parameters: the band keeps the smaller shapes only
    res = run(
        _cfg("n_trials=6", "study_name=infeasible", "tracking=off", "plots=false", "sampler=random",
             "space.params.max_total=1.2e7"),
        run_dir=tmp_path / "run",
        train_fn=fake,
    )
    pruned = [t for t in res.study.trials if t.state == TrialState.PRUNED]
    kept = [t for t in res.study.trials if t.state == TrialState.COMPLETE]
    assert pruned and kept, "the seeded sampler no longer draws both kinds: the test covers nothing"
    assert sorted(trained) == sorted(t.number for t in kept)  # a proxy ran for each feasible trial, none other
    for t in pruned:
        assert t.constraints["params_total_max"] > 0
        assert "exceed space.params.max_total" in t.user_attrs["infeasible"]
    assert res.summary["infeasible_before_training"] == len(pruned)


def test_a_space_with_no_feasible_shape_stops_before_any_proxy_run(tmp_path):
    def never(**kw):  # pragma: no cover - must not be called
        raise AssertionError("a proxy ran")

    with pytest.raises(ConfigError, match=r"none of its \d+ shapes is feasible\. Seen: total parameters N exceed "
                                          r"space\.params\.max_total=N"):
        run(_cfg("n_trials=3", "study_name=none", "tracking=off", "space.params.max_total=1000"),
            run_dir=tmp_path / "run", train_fn=never)


@pytest.mark.slow
def test_perf_only_study_and_memory_constraint(tmp_path):
    # dense models of 7-8k width on one H100 (80 GB) in BF16: under 30B parameters (60 GB of weights) fit, over 45B
    # (90 GB) do not
    base = ("hardware=h100", "space=dense", "objectives=perf_only", "deployment.weights=bf16",
            "deployment.activations=bf16", "space.hidden=[7168,8192]", "space.params.max_total=null",
            "tracking=off", "plots=false", "quiet=true")
    res = run(compose_cfg(*base, "space.layers=[8,80]", "space.layers_step=72", "study_name=mem"),
              run_dir=tmp_path / "run")
    too_big = [t for t in res.study.trials if t.user_attrs["params_total"] > 45e9]
    fit = [t for t in res.study.trials if t.user_attrs["params_total"] < 30e9]
    assert too_big and fit  # the loops below check trials of both kinds
    for t in too_big:
        assert t.state == TrialState.PRUNED and t.constraints["memory"] > 0, t.user_attrs
        assert "does not fit" in t.user_attrs["infeasible"]
    for t in fit:
        assert t.constraints["memory"] <= 0, t.user_attrs
    # a space of which nothing fits stops before the study starts, saying why
    with pytest.raises(ConfigError, match=r"none of its \d+ shapes is feasible\. Seen: does not fit"):
        run(compose_cfg(*base, "space.layers=[64,80]", "study_name=mem2"), run_dir=tmp_path / "run2")


def test_the_front_records_the_p99s_a_poisson_slo_bounds(tmp_path):
    res = run(compose_cfg("objectives=perf_only", "strategy=sample", "n_trials=3", "study_name=p99", "tracking=off",
                          "plots=false", "quiet=true", "deployment.arrivals=poisson", "deployment.isl=2048",
                          "deployment.osl=256", "deployment.slo.max_ttft_p99_s=0.5", "deployment.slo.max_tpot_p99_s=0.02"),
              run_dir=tmp_path / "run")
    with open(res.run_dir / "pareto.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows
    for r in rows:
        pred = res.study.trials[int(r["trial"])].user_attrs["prediction"]
        assert float(r["ttft_p99_ms_at_throughput"]) == pytest.approx(pred["ttft_p99_ms"]) and pred["ttft_p99_ms"] <= 500
        assert float(r["tpot_p99_ms_at_throughput"]) == pytest.approx(pred["tpot_p99_ms"]) and pred["tpot_p99_ms"] <= 20
        assert pred["tpot_p99_ms"] > pred["tpot_ms"]  # random arrivals spread the requests' TPOTs


def test_postgresql_storage(tmp_path, postgres_url):
    url = postgres_url
    name = f"co-design-test-{uuid.uuid4().hex[:12]}"
    try:
        cfg = ("objectives=perf_only", "strategy=sample", "n_trials=3", f"study_name={name}", f"storage={url}", "tracking=off", "plots=false")
        res = run(_cfg(*cfg), run_dir=tmp_path / "run")
        assert res.ran == 3
        loaded = optuna.load_study(study_name=name, storage=url)
        assert len(loaded.trials) == 3 and loaded.user_attrs["objectives"] == ["tokens_per_s_per_gpu", "tokens_per_s_per_user"]
        again = run(_cfg(*cfg), run_dir=tmp_path / "run")
        assert again.ran == 0  # resumed from the database
        assert not (tmp_path / "run" / "study.journal").exists()
    finally:
        try:
            optuna.delete_study(study_name=name, storage=url)
        except KeyError:
            pass


@pytest.mark.slow
def test_cli_same_command_resumes(tmp_path):
    """`python -m search ...` twice in the same directory: the second run finds the study and runs nothing."""
    import subprocess

    from search.paths import REPO_ROOT

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-m", "search", "objectives=perf_only", "strategy=sample", "n_trials=3", "study_name=cli", "tracking=off",
           "plots=false", "quiet=true"]
    first = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "new study 'cli'" in first.stdout and "Pareto front of 'cli'" in first.stdout
    assert (tmp_path / "outputs" / "cli" / "study.journal").is_file()
    second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming study 'cli': 3 finished trial(s) of n_trials=3; running 0 more" in second.stdout
    assert "Pareto front of 'cli'" in second.stdout
    # output_dir=DIR moves the run dir (the study, its results) there: a new study, not the one above
    moved = subprocess.run([*cmd, f"output_dir={tmp_path / 'elsewhere'}"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=180)
    assert moved.returncode == 0, moved.stderr[-3000:]
    assert "new study 'cli'" in moved.stdout
    assert (tmp_path / "elsewhere" / "study.journal").is_file() and (tmp_path / "elsewhere" / "pareto.csv").is_file()


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "nsga3", "gp", "random"])
def test_every_sampler_runs_a_constrained_study(tmp_path, sampler):
    # performance objectives only (no proxy): seconds per study; a budget that rejects part of the space
    res = run(
        compose_cfg(
            "space=dense_tiny", "proxy=tiny",
            f"sampler={sampler}", "sampler.n_startup_trials=2", "sampler.population_size=2", "objectives=perf_only", "strategy=sample",
            "n_trials=5", f"study_name=s-{sampler}", "tracking=off", "plots=false", "quiet=true",
            "space.params.max_total=4.0e7",
        ),
        run_dir=tmp_path / "run",
    )
    assert res.ran == 5
    for t in res.study.trials:
        if "duplicate_of" in t.user_attrs:
            continue
        assert set(t.constraints) == {"params_total_max", "parallelism", "memory", "slo"}
        feasible = all(v <= 0 for v in t.constraints.values())
        assert (t.state == TrialState.COMPLETE) == feasible, (t.state, t.constraints)


@pytest.mark.slow
def test_ctrl_c_keeps_finished_trials_and_the_rerun_finishes(tmp_path):
    calls = []

    def interrupted_once(**kw):
        calls.append(kw["trial"].number)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return train_proxy(**kw)

    cfg = ("n_trials=3", "study_name=ctrlc", "tracking=off", "plots=false", "proxy.early_stopping=false")
    with pytest.raises(KeyboardInterrupt):
        run(_cfg(*cfg), run_dir=tmp_path / "run", train_fn=interrupted_once)
    assert (tmp_path / "run" / "pareto.csv").exists()  # results written on the way out
    res = run(_cfg(*cfg), run_dir=tmp_path / "run")
    states = [t.state for t in res.study.trials]
    assert states[0] in (TrialState.COMPLETE, TrialState.PRUNED)  # the finished trial survived
    assert states[1] == TrialState.FAIL and res.study.trials[1].user_attrs["fail_reason"].startswith("interrupted")
    assert res.finished == 3 and len(res.study.trials) == 4  # the interrupted one does not count


@pytest.mark.gpu
def test_proxy_runs_on_the_gpu_in_bf16_mixed(tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from search.proxy import trainer_settings

    assert trainer_settings("auto", "auto")["precision"] in ("bf16-mixed", "16-mixed")
    res = run(_cfg("n_trials=2", "study_name=gpu", "tracking=off", "plots=false"), run_dir=tmp_path / "run")
    assert res.ran == 2 and any(t.state == TrialState.COMPLETE for t in res.study.trials)
