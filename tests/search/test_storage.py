"""Opening storages (search/study.py).

The journal storage survives a crash mid-write: a study with finished trials is cut
inside its last record, as a process killed mid-write leaves it; opening it the
project's way must keep every finished trial, take new ones, reload cleanly afterwards,
keep the original bytes in a backup and say so in one line. A valid journal is never
touched.

A database storage opens for every worker started at once on a new database, although
they race to create Optuna's schema in it.
"""

from __future__ import annotations

import json
import multiprocessing

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from search import study as study_module
from search.config import ConfigError
from search.study import make_storage

optuna.logging.set_verbosity(optuna.logging.WARNING)

VALUES = {0: (1.0, 10.0), 1: (2.0, 20.0), 2: (3.0, 30.0)}  # trial number -> its two objective values


def _journal_with_trials(run_dir):
    """``<run_dir>/study.journal``: three finished trials, then a fourth in flight whose last record is a user attr."""
    storage, _ = make_storage(None, run_dir, say=pytest.fail)
    study = optuna.create_study(storage=storage, study_name="s", directions=["minimize", "maximize"])

    def objective(trial):
        trial.suggest_int("x", 0, 9)
        trial.set_user_attr("x_seen", trial.params["x"])
        return VALUES[trial.number]

    study.optimize(objective, n_trials=3)
    study.ask().set_user_attr("worker", {"host": "h", "pid": 1})  # the record a crash cuts
    return run_dir / "study.journal"


def _load(path):
    return optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(path))))


def _assert_finished_trials_kept(study):
    done = [t for t in study.trials if t.state == TrialState.COMPLETE and t.number in VALUES]
    assert {t.number: tuple(t.values) for t in done} == VALUES
    assert all(t.params["x"] == t.user_attrs["x_seen"] for t in done)


def _last_record_span(data: bytes) -> tuple[int, int]:
    """(start, end) byte offsets of the last record, its newline excluded."""
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    return start, len(data) - 1


@pytest.mark.parametrize("where", ["first_byte", "middle", "all_but_newline"])
def test_a_journal_cut_inside_its_last_record_is_repaired(tmp_path, where):
    path = _journal_with_trials(tmp_path)
    original = path.read_bytes()
    start, end = _last_record_span(original)
    assert json.loads(original[start:end])["op_code"] is not None  # the span is one whole record
    cut = {"first_byte": start + 1, "middle": (start + end) // 2, "all_but_newline": end}[where]
    crashed = original[:cut]
    path.write_bytes(crashed)

    said: list[str] = []
    storage, url = make_storage(None, tmp_path, say=said.append)
    assert url == f"journal://{path}"
    assert len(said) == 1 and f"cut the last {cut - start} byte(s) of {path}" in said[0]
    backups = list(tmp_path.glob("study.journal.bak-*"))
    assert len(backups) == 1 and backups[0].read_bytes() == crashed and str(backups[0]) in said[0]
    assert path.read_bytes() == original[:start]  # exactly the partial record is gone

    study = optuna.load_study(study_name="s", storage=storage)
    _assert_finished_trials_kept(study)
    assert study.trials[3].state == TrialState.RUNNING and "worker" not in study.trials[3].user_attrs
    study.optimize(lambda t: (4.0, 40.0), n_trials=1)  # a new trial is written ...
    again = _load(path)  # ... and the journal reloads cleanly
    _assert_finished_trials_kept(again)
    assert again.trials[-1].state == TrialState.COMPLETE and again.trials[-1].values == [4.0, 40.0]


def test_without_the_repair_the_next_write_breaks_the_journal_and_the_repair_fixes_it(tmp_path):
    """What a crash did before: the next run's record is glued onto the partial one, and later reads fail."""
    path = _journal_with_trials(tmp_path)
    original = path.read_bytes()
    start, end = _last_record_span(original)
    path.write_bytes(original[: (start + end) // 2])
    old_way = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(path))))
    old_way.set_user_attr("a", 1)  # glued onto the partial record
    with pytest.raises(ValueError):  # json.JSONDecodeError: the run dies at its next write ...
        old_way.set_user_attr("b", 2)
    with pytest.raises(ValueError):  # ... and so does every later one
        _load(path)

    said: list[str] = []
    storage, _ = make_storage(None, tmp_path, say=said.append)
    assert len(said) == 1 and "the original is saved as" in said[0]
    _assert_finished_trials_kept(optuna.load_study(study_name="s", storage=storage))
    assert path.read_bytes() == original[:start]
    _assert_finished_trials_kept(_load(path))


def test_a_valid_journal_is_left_byte_identical_without_a_backup(tmp_path):
    path = _journal_with_trials(tmp_path)
    before = path.read_bytes()
    storage, _ = make_storage(None, tmp_path, say=pytest.fail)
    _assert_finished_trials_kept(optuna.load_study(study_name="s", storage=storage))
    assert path.read_bytes() == before
    assert not list(tmp_path.glob("*.bak-*"))


def test_a_journal_given_by_url_is_repaired_too_and_a_new_one_is_created(tmp_path):
    path = _journal_with_trials(tmp_path / "a")
    path.write_bytes(path.read_bytes()[:-5])
    said: list[str] = []
    make_storage(f"journal://{path}", tmp_path, say=said.append)
    assert len(said) == 1 and len(list(path.parent.glob("study.journal.bak-*"))) == 1
    _assert_finished_trials_kept(_load(path))

    fresh = tmp_path / "b" / "new.journal"
    make_storage(str(fresh), tmp_path, say=pytest.fail)
    assert fresh.is_file() and fresh.stat().st_size == 0


# --------------------------------------------------------------------------- database storages
def _open_at_barrier(url, run_dir, barrier, results):
    barrier.wait()  # every worker opens the storage at the same moment, as workers started together do
    try:
        make_storage(url, run_dir)
        results.put("ok")
    except ConfigError as exc:
        results.put(str(exc))


def _open_together(url, run_dir, workers):
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=_open_at_barrier, args=(url, run_dir, barrier, results)) for _ in range(workers)]
    for p in procs:
        p.start()
    outcome = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return outcome


@pytest.mark.slow
def test_workers_opening_a_new_database_together_all_get_the_storage(tmp_path, new_postgres_database):
    # Without the retry most rounds fail: the loser of the race on Optuna's schema gets
    # "duplicate key value violates unique constraint" on CREATE TYPE studydirection
    for _ in range(3):
        with new_postgres_database() as url:
            assert _open_together(url, tmp_path, workers=4) == ["ok"] * 4


class _Collision(Exception):
    pass


def _failing_storage(errors):
    """A stand-in for the heartbeat storage class: raises ``errors`` in turn, then opens."""
    calls = []

    def open_storage(url, **kwargs):
        calls.append(url)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "storage"

    return open_storage, calls


def test_a_schema_collision_is_retried_and_any_other_database_error_is_not(tmp_path, monkeypatch):
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    monkeypatch.setattr(study_module.time, "sleep", lambda s: None)
    dup_type = IntegrityError("CREATE TYPE studydirection", {}, _Collision("duplicate key value"))
    dup_table = ProgrammingError("CREATE TABLE studies", {}, _Collision('relation "studies" already exists'))
    opener, calls = _failing_storage([dup_type, dup_table])
    monkeypatch.setattr(study_module, "_HeartbeatStorage", opener)
    assert make_storage("postgresql+psycopg://u@h/db", tmp_path)[0] == "storage" and len(calls) == 3

    denied = ProgrammingError("SELECT", {}, _Collision("permission denied for schema public"))
    opener, calls = _failing_storage([denied])
    monkeypatch.setattr(study_module, "_HeartbeatStorage", opener)
    with pytest.raises(ConfigError, match="permission denied"):
        make_storage("postgresql+psycopg://u@h/db", tmp_path)
    assert len(calls) == 1  # not retried

    opener, calls = _failing_storage([dup_type] * study_module.SCHEMA_RACE_ATTEMPTS)
    monkeypatch.setattr(study_module, "_HeartbeatStorage", opener)
    with pytest.raises(ConfigError, match="cannot be opened"):
        make_storage("postgresql+psycopg://u@h/db", tmp_path)
    assert len(calls) == study_module.SCHEMA_RACE_ATTEMPTS
