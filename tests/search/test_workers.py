"""Parallel workers on one study: distinct sampler seeds, no shape evaluated twice, exactly n_trials,
whole results files, one W&B summary run, and one shared corpus built once.

The multi-process tests start real ``python -m search`` workers (performance objectives only, the
performance model slowed to 0.3 s a trial so that trials overlap as training trials do) on one
journal file, and on PostgreSQL when one answers at 127.0.0.1:5432/test (required under CI=true).
"""

from __future__ import annotations

import collections
import csv
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from search.paths import REPO_ROOT

# 2 hidden x 2 layer counts x 2 KV-head choices x 2 FFN widths = 16 distinct shapes: small enough that
# workers proposing alike collide, large enough for 9 distinct trials.
SMALL = (
    "space=dense_tiny", "proxy=tiny", "space.hidden=[128,256]", "space.layers=[2,3]", "space.kv_heads=[1,2]",
    "space.ffn_multiplier=[2.0,4.0]", "space.ffn_multiplier_step=2.0", "objectives=perf_only", "strategy=sample",
    "quiet=true",
)
WORKERS = 3
N_TRIALS = 9

# `python -m search` with the performance model slowed down: a trial stays in flight for 0.3 s, as a
# training trial stays for minutes, so that workers' trials overlap (a stand-in, like a monkeypatched
# hardware gate; nothing else changes).
LAUNCHER = textwrap.dedent(
    """
    import runpy, sys, time
    import search.objective as objective
    evaluate = objective.evaluate
    def slow(*args, **kwargs):
        time.sleep(0.3)
        return evaluate(*args, **kwargs)
    objective.evaluate = slow
    sys.argv[0] = "search"
    runpy.run_module("search", run_name="__main__", alter_sys=False)
    """
)


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "OMP_NUM_THREADS": "1",
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "NETRC": str(tmp_path / "no-netrc"),
        "WANDB_API_KEY": "",
    }


def _start_workers(tmp_path: Path, *overrides: str) -> list[subprocess.CompletedProcess]:
    """WORKERS processes started together in one directory (one run dir, outputs/<study_name>)."""
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    cmd = [sys.executable, str(launcher), *SMALL, f"n_trials={N_TRIALS}", *overrides]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(WORKERS)]
    done = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    for d in done:
        assert d.returncode == 0, d.stderr[-3000:]
        assert "Traceback" not in d.stderr + d.stdout, d.stderr[-3000:]
    return done


def _check_trials(study: optuna.Study) -> dict[str, int]:
    """No shape evaluated twice; exactly N_TRIALS evaluated; the rest are duplicates or surplus."""
    trials = study.get_trials()
    evaluated = [t for t in trials if "prediction" in t.user_attrs]  # the performance model ran
    keys = collections.Counter(t.user_attrs["candidate_key"] for t in evaluated)
    assert not [k for k, n in keys.items() if n > 1], f"shapes evaluated twice: {keys}"
    complete = [t.user_attrs["candidate_key"] for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == len(set(complete))
    # exactly n_trials: trials started when the study already held n_trials (finished or in flight on
    # another worker) evaluate nothing and are marked surplus
    assert len(evaluated) == N_TRIALS, [(t.number, t.state.name, sorted(t.user_attrs)) for t in trials]
    skipped = [t for t in trials if "prediction" not in t.user_attrs]
    assert all(t.state == TrialState.PRUNED and ("duplicate_of" in t.user_attrs or "surplus" in t.user_attrs)
               for t in skipped), [(t.number, t.state.name, t.user_attrs) for t in skipped]
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    workers = {t.user_attrs["worker"]["pid"] for t in evaluated}
    return {"trials": len(trials), "evaluated": len(evaluated), "workers": len(workers),
            "duplicates": sum("duplicate_of" in t.user_attrs for t in trials),
            "surplus": sum("surplus" in t.user_attrs for t in trials)}


def _check_files(run_dir: Path, *, plots: bool) -> None:
    """Every results file parses as its extension says; no temporary file is left behind."""
    found = collections.Counter()
    for path in run_dir.rglob("*"):
        if "wandb" in path.relative_to(run_dir).parts or not path.is_file():
            continue
        assert ".tmp" not in path.name, f"temporary file left behind: {path}"
        if path.suffix == ".csv":
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
            assert rows and list(rows[0])[0] == "trial" and all(r["trial"].isdigit() for r in rows), path
        elif path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".yaml":
            yaml.safe_load(path.read_text())
        elif path.suffix == ".html":
            assert path.read_text().lstrip().startswith("<"), path
        elif path.suffix == ".png":
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
        found[path.suffix] += 1
    assert found[".csv"] == 2 and found[".json"] >= 2 and found[".yaml"] >= 3, found  # pareto, trials, summary, Hydra's
    assert found[".png"] >= 1 if plots else not (run_dir / "plots").exists(), found


@pytest.mark.slow
def test_three_workers_share_a_journal_study(tmp_path):
    t0 = time.perf_counter()
    done = _start_workers(tmp_path, "study_name=together", "tracking=wandb", "plots=true")
    seconds = time.perf_counter() - t0
    run_dir = tmp_path / "outputs" / "together"
    study = optuna.load_study(study_name="together", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(run_dir / "study.journal"))))
    counts = _check_trials(study)
    print(f"{WORKERS} workers, journal: {counts}, {seconds:.1f} s")
    assert counts["workers"] >= 2  # the workers shared the work
    summary = json.loads((run_dir / "summary.json").read_text())
    assert sum(summary["trials"].values()) == N_TRIALS  # the last files written hold every trial
    with open(run_dir / "trials.csv") as f:
        shapes = [r["shape"] for r in csv.DictReader(f)]
    assert len(shapes) == N_TRIALS == len(set(shapes))
    _check_files(run_dir, plots=True)

    # one W&B summary run for the study: written by the worker that finished last
    written = [line for d in done for line in d.stdout.splitlines() if line.startswith("W&B summary run: ")]
    assert len(written) == 1, written
    runs = sorted((run_dir / "wandb").glob("offline-run-*"))
    summaries = [r for r in runs if f"summary-{study.user_attrs['study_uid']}" in r.name]
    assert len(summaries) == 1 and written[0].split()[3] == str(summaries[0]), (written, [r.name for r in runs])
    assert len(runs) == N_TRIALS + 1  # one run per evaluated trial (all feasible here) and the summary
    # the other workers said why they did not write it
    assert sum("W&B summary run not written by this worker" in d.stdout for d in done) == WORKERS - 1


@pytest.mark.slow
def test_workers_launched_as_a_joblib_sweep_share_one_study(tmp_path):
    # python -m search -m worker=0,1,2 hydra/launcher=joblib: three processes, one run dir, one study
    cmd = [sys.executable, "-m", "search", "-m", "worker=0,1,2", "hydra/launcher=joblib", "hydra.launcher.n_jobs=3",
           *SMALL, f"n_trials={N_TRIALS}", "study_name=sweep", "tracking=off", "plots=false"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dirs = [p.parent for p in (tmp_path / "outputs" / "multirun" / "sweep").rglob("study.journal")]
    assert len(run_dirs) == 1  # the worker key names no run dir of its own
    study = optuna.load_study(study_name="sweep", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(run_dirs[0] / "study.journal"))))
    _check_trials(study)  # N_TRIALS distinct shapes evaluated, the rest duplicates or surplus
    assert proc.stdout.count("Pareto front of 'sweep'") == 3  # each worker reported the one study


@pytest.mark.slow
def test_workers_enumerating_one_space_score_each_shape_once(tmp_path):
    # performance objectives, strategy=enumerate: the first worker scores the 16 shapes, the others wait for the
    # run dir's lock and find every shape scored
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    args = [a for a in SMALL if a != "strategy=sample"] + ["strategy=enumerate", "study_name=enum", "tracking=off",
                                                           "plots=false"]
    procs = [subprocess.Popen([sys.executable, str(launcher), *args], cwd=tmp_path, env=_env(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(WORKERS)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0] * WORKERS, [e[-2000:] for _, e in outs]
    run_dir = tmp_path / "outputs" / "enum"
    study = optuna.load_study(study_name="enum", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(run_dir / "study.journal"))))
    keys = [t.user_attrs["candidate_key"] for t in study.get_trials()]
    assert len(keys) == 16 == len(set(keys))
    scored = sorted(int(line.split()[1]) for out, _ in outs for line in out.splitlines() if line.startswith("scored "))
    assert scored == [0] * (WORKERS - 1) + [16], scored


@pytest.mark.slow
def test_three_workers_share_a_postgresql_study(tmp_path, postgres_url):
    url = postgres_url
    name = f"co-design-workers-{uuid.uuid4().hex[:12]}"
    try:
        _start_workers(tmp_path, f"study_name={name}", f"storage={url}", "tracking=off", "plots=false")
        counts = _check_trials(optuna.load_study(study_name=name, storage=url))
        print(f"{WORKERS} workers, PostgreSQL: {counts}")
        _check_files(tmp_path / "outputs" / name, plots=False)
        with open(tmp_path / "outputs" / name / "trials.csv", newline="") as f:
            assert len(list(csv.DictReader(f))) == N_TRIALS
    finally:
        try:
            optuna.delete_study(study_name=name, storage=url)
        except KeyError:
            pass


# --------------------------------------------------------------------------- in-process, fast
def test_each_worker_seeds_its_sampler_from_its_first_trial():
    from search.study import open_study
    from search.compose import compose_config
    from search.config import to_search_config

    cfg = to_search_config(compose_config(*SMALL, "sampler=random", "tracking=off", "study_name=seeds"))
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def draws(study: optuna.Study, n: int = 4) -> list[float]:
        out = []
        for _ in range(n):
            t = study.ask()
            out.append(t.suggest_float("x", 0.0, 1.0))
            study.tell(t, [1.0, 1.0])
        return out

    storage = optuna.storages.InMemoryStorage()
    a, b = open_study(cfg, storage), open_study(cfg, storage)  # two workers started together
    first_a, first_b = a.ask(), b.ask()  # trials 0 and 1: the seeds are seed+0 and seed+1
    xa, xb = first_a.suggest_float("x", 0.0, 1.0), first_b.suggest_float("x", 0.0, 1.0)
    assert xa != xb  # the old rule seeded both with seed + 0 and they drew alike
    assert (a.sampler.first_trial, b.sampler.first_trial) == (0, 1)
    # a worker alone is reproducible: a fresh study draws the same values every time ...
    alone = [draws(open_study(cfg, optuna.storages.InMemoryStorage())) for _ in range(2)]
    assert alone[0] == alone[1] and alone[0][0] == xa
    # ... and a resumed one continues with seed + trials already held, not the first run's draws
    storage = optuna.storages.InMemoryStorage()
    first = draws(open_study(cfg, storage))
    resumed = open_study(cfg, storage)
    assert draws(resumed) != first and resumed.sampler.first_trial == 4


def test_a_shape_in_flight_on_another_worker_is_a_duplicate():
    from search.study import duplicate_of

    study = optuna.create_study(directions=["maximize", "maximize"])
    low, high = study.ask(), study.ask()  # both RUNNING, as on two workers
    high.set_user_attr("candidate_key", "k")
    # the higher-numbered trial waits for the lower one, still sampling, to post its shape
    threading.Timer(0.2, lambda: low.set_user_attr("candidate_key", "k")).start()
    t0 = time.perf_counter()
    assert duplicate_of(study, "k", high.number, wait_s=5.0) == low.number
    assert 0.15 < time.perf_counter() - t0 < 3.0
    # the lower-numbered trial holds the shape: it is not a duplicate of the higher one
    assert duplicate_of(study, "k", low.number, wait_s=5.0) is None
    # a lower-numbered trial that never posts a shape delays a check by at most wait_s
    other = study.ask()
    third = study.ask()
    third.set_user_attr("candidate_key", "z")
    t0 = time.perf_counter()
    assert duplicate_of(study, "z", third.number, wait_s=0.3) is None
    assert 0.25 < time.perf_counter() - t0 < 2.0
    study.tell(other, state=TrialState.FAIL)


def test_in_flight_trials_count_toward_n_trials():
    from search.study import held_count

    study = optuna.create_study(directions=["maximize", "maximize"])
    done = study.ask()
    done.set_user_attr("candidate_key", "a")
    study.tell(done, [1.0, 1.0])
    dup = study.ask()
    dup.set_user_attr("duplicate_of", 0)
    study.tell(dup, state=TrialState.PRUNED)
    flying = study.ask()
    flying.set_user_attr("candidate_key", "b")
    study.ask()  # a trial still sampling: no shape posted yet
    me = study.ask()
    assert held_count(study, before=me.number) == 2  # the finished trial and the one in flight
    assert held_count(study, before=flying.number) == 1
    assert held_count(study) == 2


def test_results_files_written_concurrently_stay_whole(tmp_path):
    # pareto.csv and pareto.json share a stem: with one fixed temporary name (pareto.tmp) for both,
    # one writer moved the other's file into place or found its temporary file gone
    from search.results import _write_csv, _write_json

    rows = [{"trial": i, "shape": f"s{i}"} for i in range(200)]
    errors: list[BaseException] = []
    stop = time.perf_counter() + 1.0

    def writer(kind: str) -> None:
        try:
            while time.perf_counter() < stop:
                if kind == "csv":
                    _write_csv(tmp_path / "pareto.csv", rows, ["trial", "shape"])
                else:
                    _write_json(tmp_path / "pareto.json", rows)
        except BaseException as exc:  # pragma: no cover - the failure being tested
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in ("csv", "json", "csv", "json")]
    for t in threads:
        t.start()
    reads = 0
    while any(t.is_alive() for t in threads):
        for name in ("pareto.csv", "pareto.json"):
            path = tmp_path / name
            if path.exists():
                text = path.read_text()
                if name.endswith(".csv"):
                    assert text.startswith("trial,shape") and len(list(csv.DictReader(text.splitlines()))) == 200
                else:
                    assert len(json.loads(text)) == 200
                reads += 1
    for t in threads:
        t.join()
    assert not errors, errors
    assert reads > 10 and sorted(p.name for p in tmp_path.iterdir()) == ["pareto.csv", "pareto.json"]


# --------------------------------------------------------------------------- the shared corpus
CORPUS_BUILDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from search.corpus import build_stdlib_corpus
    cache, ready, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    (ready / sys.argv[4]).touch()
    while len(list(ready.iterdir())) < n:  # all processes imported: start together
        time.sleep(0.005)
    train, val = build_stdlib_corpus(cache)
    assert "torch" not in sys.modules  # the corpus is checked before a worker loads the training stack
    print(train, val)
    """
)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_concurrent_processes_build_one_corpus(tmp_path):
    from search.corpus import build_stdlib_corpus

    reference = build_stdlib_corpus(tmp_path / "reference")
    cache, ready = tmp_path / "shared", tmp_path / "ready"
    ready.mkdir()
    script = tmp_path / "build.py"
    script.write_text(CORPUS_BUILDER)
    n = 4
    procs = [subprocess.Popen([sys.executable, str(script), str(cache), str(ready), str(n), str(i)], env=_env(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]
    results = [p.communicate(timeout=240) + (p.returncode,) for p in procs]
    for out, err, code in results:
        assert code == 0, err[-3000:]
    assert len({out for out, _, _ in results}) == 1  # every process got the same paths
    train, val = map(Path, results[0][0].split())
    assert (_sha(train), _sha(val)) == tuple(map(_sha, reference))
    assert sorted(p.name for p in cache.iterdir() if p.suffix != ".lock") == sorted(
        [train.name, val.name, train.name.replace(".train.bin", ".json")])  # no temporary file left


def test_a_damaged_corpus_is_rebuilt_with_a_notice(tmp_path):
    from search.corpus import build_stdlib_corpus

    notes: list[str] = []
    train, val = build_stdlib_corpus(tmp_path, say=notes.append)
    assert notes == []  # a first build is not a repair
    good = (_sha(train), _sha(val))
    size = train.stat().st_size

    with open(train, "r+b") as f:  # cut short, as by a killed writer
        f.truncate(size // 2)
    build_stdlib_corpus(tmp_path, say=notes.append)
    assert len(notes) == 1 and f"has {size // 2:,} bytes" in notes[0] and "rebuilding" in notes[0], notes
    assert (_sha(train), _sha(val)) == good

    with open(val, "r+b") as f:  # same size, other bytes
        f.seek(100)
        f.write(b"\x00" * 16)
    build_stdlib_corpus(tmp_path, say=notes.append)
    assert len(notes) == 2 and "SHA-256" in notes[1], notes
    assert (_sha(train), _sha(val)) == good

    meta = train.with_name(train.name.replace(".train.bin", ".json"))
    meta.write_text(meta.read_text()[:20])  # metadata cut short
    build_stdlib_corpus(tmp_path, say=notes.append)
    assert len(notes) == 3 and "metadata" in notes[2], notes
    mtime = train.stat().st_mtime_ns
    build_stdlib_corpus(tmp_path, say=notes.append)  # intact: used as it is
    assert len(notes) == 3 and train.stat().st_mtime_ns == mtime


def test_shapes_queued_after_the_study_is_full_are_drained_as_surplus():
    from search.study import SURPLUS_ATTR, counts_toward_n_trials, drain_queue

    study = optuna.create_study(directions=["maximize", "maximize"])
    for key in ("a", "b"):
        t = study.ask()
        t.set_user_attr("candidate_key", key)
        study.tell(t, [1.0, 1.0])
    study.enqueue_trial({"x": 1})
    assert drain_queue(study, n_trials=3) == 0  # the study needs a third trial: the queued shape stays
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 1
    assert drain_queue(study, n_trials=2) == 1
    assert not study.get_trials(states=(TrialState.WAITING,))
    drained = study.trials[-1]
    assert drained.state == TrialState.PRUNED and drained.user_attrs[SURPLUS_ATTR] == 2
    assert not counts_toward_n_trials(drained) and sum(map(counts_toward_n_trials, study.trials)) == 2


def test_a_written_summary_is_not_rewritten_and_says_what_it_counted(tmp_path):
    # the front counts finished trials toward n_trials; a duplicate is stored but not counted, so the note
    # must not read as a different trial count than the front's
    from search.study import DUPLICATE_ATTR
    from search.workers import record_summary, summary_turn

    study = optuna.create_study(directions=["minimize"])
    for number, state in enumerate((TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED)):
        study.add_trial(optuna.trial.create_trial(
            state=state, values=[1.0 + number] if state == TrialState.COMPLETE else None,
            params={}, distributions={}, user_attrs={DUPLICATE_ATTR: 0} if state == TrialState.PRUNED else {}))
    assert summary_turn(study, tmp_path) == (True, "")
    record_summary(study, tmp_path, "wandb-dir")
    turn, note = summary_turn(study, tmp_path)
    assert not turn and "(3 stored trials, duplicates included)" in note and note.endswith(": wandb-dir")
    study.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, values=[5.0], params={}, distributions={}))
    assert summary_turn(study, tmp_path) == (True, "")  # a new trial: the summary is due again
