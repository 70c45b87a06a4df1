"""A study's lifecycle: its storage, its sampler, opening or resuming it, and counting its trials.

**Storage** (:func:`make_storage`). A journal file (the default, ``<run dir>/study.journal``)
or a database URL. A crash must not cost the finished trials. Optuna's
``JournalFileBackend`` appends one JSON record per line and its reader skips a last line
without its newline (optuna/storages/journal/_file.py, ``read_logs``). A process killed
mid-write leaves exactly that: a partial record. The next run's first append is glued
onto it, the glued line is no longer JSON, and from the line after it every read raises
``JSONDecodeError``. So before a journal is opened, :func:`repair_journal` cuts it back to
its complete records (keeping a byte-for-byte backup beside it) and says so in one line.
Database storages run Optuna's heartbeat: a trial whose worker stopped beating is failed
as interrupted and its shape queued again.

**Sampler** (:func:`make_sampler`): one of :data:`search.config.SAMPLERS`, seeded per worker
(:class:`search.workers.WorkerSeededSampler`).

**Opening and resuming** (:func:`open_study`, :func:`resume`): a study keeps the settings it
was created with (:func:`search.config.study_settings`) and refuses to resume under others.
``n_trials`` is the number of trials that count (:func:`counts_toward_n_trials`): COMPLETE,
PRUNED and FAIL, except trials interrupted by Ctrl-C, a killed worker or a lost heartbeat,
whose shapes are queued once more (:func:`retry_interrupted`), and trials that evaluated
nothing (a duplicate shape, or a surplus trial started after ``n_trials`` were held).
Trials a killed worker left RUNNING in a journal are reaped (:func:`fail_orphaned_trials`).

**No shape twice across workers** (:func:`duplicate_of`): a trial posts its shape before it
is evaluated; the lowest-numbered trial holding a shape evaluates it.

Public Optuna interfaces throughout, with one exception: Optuna fails a heartbeat-stale
trial before calling the callback, when the trial can no longer take the reason, so
:class:`_HeartbeatStorage` records it in the one hook Optuna runs first
(``RDBStorage._get_stale_trial_ids``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from search.config import OBJECTIVES, SAMPLERS, ConfigError, SearchConfig, study_settings
from search.redact import redact
from search.workers import WorkerSeededSampler, ensure_study_uid, worker_is_gone

__all__ = [
    "make_storage",
    "repair_journal",
    "make_sampler",
    "open_study",
    "Resume",
    "resume",
    "drain_queue",
    "finished_count",
    "fail_orphaned_trials",
    "counts_toward_n_trials",
    "held_count",
    "evaluated_nothing",
    "is_interrupted",
    "retry_interrupted",
    "duplicate_of",
    "DUPLICATE_ATTR",
    "SURPLUS_ATTR",
    "FAIL_REASON_ATTR",
    "INTERRUPTED",
    "RETRY_OF_ATTR",
    "SETTINGS_ATTR",
    "MAX_CONSECUTIVE_DUPLICATES",
    "CLAIM_WAIT_S",
]

log = logging.getLogger("search")

SETTINGS_ATTR = "settings"  # study user attribute: config.study_settings of the run that created it
DUPLICATE_ATTR = "duplicate_of"  # user attribute: the trial that already holds this candidate
SURPLUS_ATTR = "surplus"  # user attribute of a trial not evaluated: n_trials were finished or in flight when it started
FAIL_REASON_ATTR = "fail_reason"
INTERRUPTED = "interrupted"  # FAIL reasons starting with it: Ctrl-C or a killed worker; not counted toward n_trials
RETRY_OF_ATTR = "retry_of"  # user attribute of a queued trial: the interrupted trial whose shape it evaluates again


# --------------------------------------------------------------------------- storage
#: bytes read per step when looking for the journal's last line from its end
_TAIL_CHUNK = 1 << 16


def make_storage(
    url: str | None, run_dir: Path, *, n_trials: int | None = None, say: Callable[[str], None] = log.warning
) -> tuple[Any, str]:
    """An Optuna storage and its display URL (password hidden).

    None -> journal file ``<run_dir>/study.journal``; ``journal:///path`` or a path ending
    in ``.journal``/``.log`` -> that journal file, repaired first if a crash cut its last
    record (:func:`repair_journal`; ``say`` gets the one line saying what was cut); anything
    else is a database URL (``sqlite:///x.db``, ``postgresql+psycopg://user@host/db``,
    ``mysql+pymysql://...``) opened with ``RDBStorage`` and a heartbeat, so trials of a
    killed worker are failed (reason "interrupted: ...", not counted toward ``n_trials``) and
    their shapes queued again (:class:`_HeartbeatStorage`) while the study holds fewer than
    ``n_trials`` counted trials, finished or in flight (None: always). Journal files have no heartbeat in
    Optuna 5.0; the job reaps their killed workers' trials itself (``fail_orphaned_trials``).
    """
    path: str | None = None
    if url is None:
        path = str(run_dir / "study.journal")
    elif url.startswith("journal://"):
        path = url[len("journal://") :]
    elif url.endswith((".journal", ".log")) and "://" not in url:
        path = url
    if path is not None:
        return _open_journal(Path(path), say), f"journal://{os.path.abspath(path)}"
    shown = redact(url)  # shown in logs and summary.json: no password
    try:
        storage = _open_database(url, n_trials)
    except Exception as exc:  # unknown dialect, missing driver, unreachable server, bad credentials
        text = redact(" ".join(str(exc).split())[:300])
        raise ConfigError(
            [
                f"storage={shown!r} cannot be opened ({type(exc).__name__}: {text}); give a reachable Optuna storage "
                "URL (sqlite:///study.db, postgresql+psycopg://user@host/db, mysql+pymysql://user@host/db, "
                "journal:///path/study.journal) or storage=null for the journal file in the run dir"
            ]
        ) from None
    return storage, shown


#: attempts at opening a database storage whose schema another worker is creating at the same moment
SCHEMA_RACE_ATTEMPTS = 5


def _open_database(url: str, n_trials: int | None) -> "_HeartbeatStorage":
    """``_HeartbeatStorage`` on ``url``, tolerating workers that create a new database's schema together.

    Optuna creates its tables when a storage first opens a database. Workers started at once on
    a new database race on that: the loser's ``CREATE TYPE``/``CREATE TABLE`` or its version row
    collides with the winner's (``IntegrityError``, or ``ProgrammingError`` "already exists" on
    PostgreSQL). Such an attempt is repeated (the schema is then there, and is only checked), up
    to :data:`SCHEMA_RACE_ATTEMPTS` times; any other error is raised at once.
    """
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    attempt = 1
    while True:
        try:
            with warnings.catch_warnings():  # heartbeat_interval is marked experimental in optuna 5.0
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return _HeartbeatStorage(
                    url,
                    engine_kwargs={"pool_pre_ping": True},
                    heartbeat_interval=HEARTBEAT_INTERVAL_S,
                    grace_period=GRACE_PERIOD_S,
                    heartbeat_stale_trial_callback=functools.partial(_retry_stale_trial, n_trials=n_trials),
                )
        except (IntegrityError, ProgrammingError) as exc:
            collided = isinstance(exc, IntegrityError) or "already exists" in str(exc)
            if not collided or attempt == SCHEMA_RACE_ATTEMPTS:
                raise
            log.info("storage schema being created by another worker (%s); opening again", type(exc).__name__)
            time.sleep(0.2 * attempt)
            attempt += 1


#: seconds between a running trial's heartbeats, and without one after which it is failed as interrupted
HEARTBEAT_INTERVAL_S = 60
GRACE_PERIOD_S = 180


class _HeartbeatStorage(RDBStorage):
    """``RDBStorage`` whose heartbeat-stale trials are failed with the project's "interrupted" reason.

    Optuna fails a stale trial (``fail_stale_trials``: at each trial's start, and at the
    job's start) and only then calls the callback, when the trial can no longer take a
    user attribute; so the reason is recorded here, while the stale trial is still RUNNING.
    """

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        stale = super()._get_stale_trial_ids(study_id)
        grace = self.grace_period or 2 * (self.heartbeat_interval or 0)
        for trial_id in stale:
            try:
                worker = self.get_trial(trial_id).user_attrs.get("worker") or {}
                who = f"worker {worker.get('host', '?')} pid {worker.get('pid', '?')}"
                self.set_trial_user_attr(
                    trial_id, FAIL_REASON_ATTR, f"{INTERRUPTED}: no heartbeat from {who} for over {grace} s"
                )
            except optuna.exceptions.UpdateFinishedTrialError:  # another worker failed it first
                pass
        return stale


def _retry_stale_trial(study: optuna.Study, trial: FrozenTrial, *, n_trials: int | None) -> None:
    """Heartbeat callback: queue the shape of the trial a dead worker left once more, unless the
    study already holds ``n_trials`` counted trials (finished or in flight): then nothing is missing."""
    try:
        if n_trials is not None and held_count(study) >= n_trials:
            return
        retried = retry_interrupted(study, [trial])
    except Exception as exc:  # a retry is a convenience; the job goes on without it
        log.warning("trial %d not queued for a retry: %s: %s", trial.number, type(exc).__name__, exc)
        return
    if retried:
        log.warning("trial %d of a worker without heartbeat marked FAIL (interrupted); its shape is queued again",
                    trial.number)


def _open_journal(path: Path, say: Callable[[str], None]) -> Any:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path.parent.mkdir(parents=True, exist_ok=True)
    note = repair_journal(path)
    try:
        storage = JournalStorage(JournalFileBackend(str(path)))
    except ValueError:  # JSONDecodeError inside: a journal glued by an older run, its tail intact
        note = repair_journal(path, check_every_line=True)
        if note is None:
            raise
        storage = JournalStorage(JournalFileBackend(str(path)))
    if note:
        say(note)
    return storage


def repair_journal(path: str | Path, *, check_every_line: bool = False) -> str | None:
    """Cut a journal back to its complete records; return the one line saying so, or None.

    A record is complete when its line ends with a newline and holds valid JSON. The
    journal is cut at its first incomplete record, after a copy of the original to
    ``<journal>.bak-<UTC time>`` beside it. Optuna's reader never gets past that record,
    so nothing a run has read is lost. Only the last line is read unless it is
    incomplete or ``check_every_line`` (for a journal an older run glued together: an
    incomplete record with complete ones after it); a journal whose records are all
    complete is never written. The journal's lock is held meanwhile, so a record another
    worker is writing is not taken for a crash's (a lock a killed writer left behind is
    released after Optuna's 30 s grace period).
    """
    from optuna.storages.journal import JournalFileSymlinkLock

    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return None
    lock = JournalFileSymlinkLock(str(path))  # the lock JournalFileBackend's writers take
    lock.acquire()
    try:
        with open(path, "rb") as f:
            if not check_every_line and _is_record(_last_line(f)):
                return None
            f.seek(0)
            cut_at, records = _first_incomplete(f)
        size = path.stat().st_size
        if cut_at is None:
            return None
        backup = _backup_path(path)
        shutil.copy2(path, backup)
        os.truncate(path, cut_at)
    finally:
        lock.release()
    return (
        f"storage: cut the last {size - cut_at} byte(s) of {path}, from an incomplete record on (a crash "
        f"mid-write), keeping its {records} complete record(s); the original is saved as {backup}"
    )


def _is_record(line: bytes) -> bool:
    if not line.endswith(b"\n"):
        return False
    try:
        json.loads(line)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return False
    return True


def _last_line(f: Any) -> bytes:
    """The file's last line (with its newline, if it has one), read backwards from the end."""
    end = f.seek(0, os.SEEK_END)
    pos, tail = end, b""
    while pos > 0:
        step = min(_TAIL_CHUNK, pos)
        pos -= step
        f.seek(pos)
        tail = f.read(step) + tail
        start = tail.rfind(b"\n", 0, len(tail) - 1)  # the newline before the last line
        if start >= 0:
            return tail[start + 1 :]
    return tail


def _first_incomplete(f: Any) -> tuple[int | None, int]:
    """(byte offset of the first incomplete record or None, number of complete records before it)."""
    offset = records = 0
    for line in f:
        if not _is_record(line):
            return offset, records
        offset += len(line)
        records += 1
    return None, records


def _backup_path(path: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    backup, n = path.with_name(f"{path.name}.bak-{stamp}"), 1
    while backup.exists():  # two repairs in one second
        backup, n = path.with_name(f"{path.name}.bak-{stamp}-{n}"), n + 1
    return backup


# --------------------------------------------------------------------------- trial accounting
#: the longest wait (seconds) for a lower-numbered running trial to post the candidate it holds
CLAIM_WAIT_S = 120.0
#: seconds between looks at the storage while waiting
_CLAIM_POLL_S = 0.02


def evaluated_nothing(t: FrozenTrial) -> bool:
    """A duplicate or a surplus trial: no prediction, no proxy run, no row in the results."""
    return DUPLICATE_ATTR in t.user_attrs or SURPLUS_ATTR in t.user_attrs


def counts_toward_n_trials(t: FrozenTrial) -> bool:
    """A finished trial that counts toward ``n_trials``: COMPLETE, PRUNED or FAIL, except trials that
    evaluated nothing and trials interrupted by Ctrl-C or a killed worker."""
    if t.state not in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL) or evaluated_nothing(t):
        return False
    return not is_interrupted(t)


def is_interrupted(t: FrozenTrial) -> bool:
    """A FAIL trial interrupted by Ctrl-C, a killed worker or a lost heartbeat (its reason says so)."""
    return t.state == TrialState.FAIL and str(t.user_attrs.get(FAIL_REASON_ATTR, "")).startswith(INTERRUPTED)


def retry_interrupted(study: optuna.Study, trials: Sequence[FrozenTrial] | None = None) -> list[int]:
    """Queue the shape of each interrupted trial once more; return the numbers of the trials retried.

    An interrupted trial (:func:`is_interrupted`) evaluated nothing that counts, so its
    shape is queued (``enqueue_trial``, user attribute :data:`RETRY_OF_ATTR` = its number)
    for the next trial of this or any worker. Once only: not when a trial already says it
    retries it, when it never got its parameters, when it evaluated nothing anyway
    (duplicate, surplus), or when a finished or running trial holds its shape by now.
    ``trials``: only these (the heartbeat's callback); default all of the study's.
    """
    all_trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs.get(RETRY_OF_ATTR) for t in all_trials}
    held = {
        t.user_attrs.get("candidate_key")
        for t in all_trials
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING) and not evaluated_nothing(t)
    }
    queued = [t.system_attrs.get("fixed_params") for t in all_trials if t.state == TrialState.WAITING]
    done = []
    for t in all_trials if trials is None else trials:
        if not is_interrupted(t) or t.number in retried or not t.params or evaluated_nothing(t):
            continue
        if t.user_attrs.get("candidate_key") in held - {None} or t.params in queued:
            continue
        study.enqueue_trial(dict(t.params), user_attrs={RETRY_OF_ATTR: t.number})
        queued.append(dict(t.params))
        done.append(t.number)
    return done


def held_count(study: optuna.Study, *, before: int | None = None) -> int:
    """Trials that count toward ``n_trials``, finished or in flight.

    In flight: RUNNING trials of live workers that have posted their shape and are not
    duplicates; with ``before``, only those numbered below it (the order parallel
    workers agree on: see :func:`duplicate_of`).
    """
    held = 0
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.RUNNING:
            held += ("candidate_key" in t.user_attrs and not evaluated_nothing(t) and (before is None or t.number < before)
                     and not worker_is_gone(t))
        else:
            held += counts_toward_n_trials(t)
    return held


def duplicate_of(study: optuna.Study, key: str, number: int, *, wait_s: float = 0.0) -> int | None:
    """The trial that holds candidate ``key`` ahead of trial ``number``, else None.

    A finished trial (COMPLETE or PRUNED) with the key holds it; failed trials do not
    (their candidate may be tried again) and neither do duplicates. Among trials RUNNING
    with the key, on this worker or another, the lowest-numbered holds it (the storage
    hands out each number once); a trial started from the queue (``enqueue_trial``: its
    number is given when queued, long before it starts) also yields to running trials
    that started before it.

    Parallel workers: each trial posts its key (user attribute ``candidate_key``) before
    calling this, and with ``wait_s`` > 0 it first waits until every lower-numbered
    running trial has posted one (they are sampling), at most ``wait_s`` seconds;
    trials of dead workers on this host are not waited for. So of two workers that
    sample the same shape at the same moment, exactly one evaluates it: the
    higher-numbered one sees the lower one's key. (Rare exception: a queued trial and
    a trial that started before it may both yield, leaving that shape to a later proposal;
    neither evaluates it twice.)
    """
    deadline = time.monotonic() + wait_s
    while True:
        trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING))
        if wait_s <= 0 or time.monotonic() >= deadline or not any(
            t.state == TrialState.RUNNING and t.number < number and "candidate_key" not in t.user_attrs
            and not worker_is_gone(t)
            for t in trials
        ):
            break
        time.sleep(_CLAIM_POLL_S)
    me = next((t for t in trials if t.number == number), None)
    queued = me is not None and "fixed_params" in me.system_attrs
    for t in trials:
        if t.number == number or t.user_attrs.get("candidate_key") != key or evaluated_nothing(t):
            continue
        if t.state != TrialState.RUNNING or t.number < number:
            return t.number
        if queued and t.datetime_start is not None and me.datetime_start is not None and t.datetime_start <= me.datetime_start:
            return t.number
    return None


# --------------------------------------------------------------------------- sampler, opening, resuming
def make_sampler(cfg: SearchConfig, *, resumed_trials: int = 0) -> optuna.samplers.BaseSampler:
    """The sampler named by ``cfg.sampler.name`` (:data:`search.config.SAMPLERS`), seeded ``seed + resumed_trials``.

    The job passes the number of the first trial the worker runs
    (:class:`search.workers.WorkerSeededSampler`): a resumed study then gets another seed
    than its first run (the same seed again would replay its draws and propose the same
    shapes a second time), and so does every worker started together on one study.
    """
    s = cfg.sampler
    spec = SAMPLERS.get(s.name)
    if spec is None:
        raise ConfigError([f"unknown sampler {s.name!r}; known: {', '.join(SAMPLERS)}"])
    seed = (s.seed if s.seed is not None else cfg.seed) + resumed_trials
    options = {k: getattr(s, k) for k in spec.options if getattr(s, k) is not None}
    with warnings.catch_warnings():  # NSGAIIISampler and GPSampler are experimental in optuna 5.0; asked for by name
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return getattr(optuna.samplers, spec.optuna_class)(seed=seed, **options)


def open_study(cfg: SearchConfig, storage: Any) -> optuna.Study:
    """Create the study or load it; refuse to resume one with other objectives."""
    names = list(cfg.objectives.names)
    directions = [OBJECTIVES[n].direction for n in names]
    study = optuna.create_study(
        storage=storage,
        study_name=cfg.study_name,
        directions=directions,
        # seed + the number of this worker's first trial (search/workers.py)
        sampler=WorkerSeededSampler(lambda first_trial: make_sampler(cfg, resumed_trials=first_trial)),
        load_if_exists=True,
    )
    ensure_study_uid(study)
    stored = study.user_attrs.get("objectives")
    settings = study_settings(cfg)
    if stored is None:
        study.set_user_attr("objectives", names)
        study.set_user_attr("space", cfg.space.name)
        study.set_user_attr("hardware", cfg.hardware.gpu)
        study.set_user_attr(SETTINGS_ATTR, settings)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(names)
    elif list(stored) != names:
        raise ConfigError(
            [
                f"study_name={cfg.study_name!r} already exists in this storage with objectives {list(stored)}, "
                f"not {names}; use the same objectives to resume it or another study_name for a new study"
            ]
        )
    else:
        old = study.user_attrs.get(SETTINGS_ATTR)
        if old is None:  # a study from before settings were recorded: record them now
            study.set_user_attr(SETTINGS_ATTR, settings)
        else:
            # a setting added to the project after the study was created ran at its default, which keeps the
            # earlier behaviour: compare against that, and record the settings in full once they agree
            default = _default_settings()
            old = {**{k: default[k] for k in settings if k not in old and k in default}, **old}
            changed = [k for k in sorted(set(old) | set(settings)) if old.get(k) != settings.get(k)]
            if not changed and set(old) != set(study.user_attrs[SETTINGS_ATTR]):
                study.set_user_attr(SETTINGS_ATTR, settings)
            if changed:
                shown = "; ".join(f"{k}: {old.get(k)!r} -> {settings.get(k)!r}" for k in changed[:6])
                more = f" (and {len(changed) - 6} more)" if len(changed) > 6 else ""
                raise ConfigError(
                    [
                        f"study_name={cfg.study_name!r} already exists in this storage with other settings: "
                        f"{shown}{more}. Its trials would not be comparable with new ones; give this run its own "
                        f"study (e.g. study_name={cfg.study_name}-2) or use the original settings to resume it"
                    ]
                )
    return study


@functools.lru_cache(maxsize=1)
def _default_settings() -> dict[str, Any]:
    """:func:`search.config.study_settings` of the default configuration."""
    return study_settings(SearchConfig())


def finished_count(study: optuna.Study) -> int:
    """Finished trials that count toward ``n_trials`` (interrupted ones, duplicates and surplus ones do not)."""
    return sum(1 for t in study.get_trials(deepcopy=False) if counts_toward_n_trials(t))


#: consecutive duplicate proposals after which a sampled study stops (a backstop: a duplicate is normally
#: followed by a random unseen shape, and the study stops at once when none is left)
MAX_CONSECUTIVE_DUPLICATES = 100


def fail_orphaned_trials(study: optuna.Study, storage: Any) -> list[int]:
    """Mark RUNNING trials of dead workers as FAIL ("interrupted"); return their numbers.

    Database storages: trials whose heartbeat stopped (Optuna's ``fail_stale_trials``, the
    reason recorded by :mod:`search.storage`, the shape queued again by its callback).

    A killed process (SIGKILL, power loss) leaves its trial RUNNING forever in a journal
    file. Each trial records its worker's host and pid; a trial of this host whose pid is
    gone is failed so it neither blocks nor counts. Trials of live workers (parallel runs
    on the same storage) and of other hosts are left alone (database storages have
    Optuna's heartbeat for those). ``storage`` is the study's (:func:`make_storage`).
    """
    failed = []
    with warnings.catch_warnings():  # experimental in optuna 5.0
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}
        optuna.storages.fail_stale_trials(study)  # database storages: trials without a heartbeat (search/storage.py)
        failed += [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
                   if t.number not in before and is_interrupted(t)]
    gone = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if worker_is_gone(t)]
    if gone:  # through the storage's public interface (a Study has no public way to end another process's trial)
        study_id = storage.get_study_id_from_name(study.study_name)
        for t in gone:
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
            try:
                storage.set_trial_user_attr(trial_id, FAIL_REASON_ATTR,
                                            f"{INTERRUPTED}: worker pid {t.user_attrs['worker']['pid']} is gone")
                storage.set_trial_state_values(trial_id, TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:  # another worker reaped it first
                continue
            failed.append(t.number)
    return failed


@dataclass
class Resume:
    """Where a study stands when a worker starts (:func:`resume`)."""

    orphans: list[int]  # trials of killed workers just marked FAIL (interrupted)
    done: int  # trials counted toward n_trials
    remaining: int  # trials this worker should still run (0 for an exact enumeration)
    retries: list[int]  # interrupted trials whose shapes were just queued again


def resume(study: optuna.Study, storage: Any, n_trials: int, *, exact: bool) -> Resume:
    """Reap killed workers' trials, count the finished ones and queue the interrupted shapes once more.

    Call under the run directory's lock (:func:`search.workers.run_dir_lock`), so that
    workers started together queue each retry once.
    """
    orphans = fail_orphaned_trials(study, storage)
    done = finished_count(study)
    remaining = 0 if exact else max(0, n_trials - done)
    retries = retry_interrupted(study) if remaining else []
    return Resume(orphans, done, remaining, retries)


def drain_queue(study: optuna.Study, n_trials: int) -> int:
    """End the trials still queued once the study holds ``n_trials``; return how many.

    A worker queues a random unseen shape after a duplicate proposal (and an interrupted
    trial's shape); when the study reaches ``n_trials`` meanwhile, on this worker or another,
    nobody needs them. Each is taken from the queue (``study.ask``) and told PRUNED as
    surplus (:data:`SURPLUS_ATTR`: evaluated nothing, counted nowhere), so a finished study
    holds no WAITING trial for a later run or the dashboard to stumble on.
    """
    drained = 0
    while study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        held = held_count(study)
        if held < n_trials:
            break
        trial = study.ask()  # the oldest queued trial (or, if another worker took it meanwhile, a new one)
        trial.set_user_attr(SURPLUS_ATTR, held)
        study.tell(trial, state=TrialState.PRUNED)
        drained += 1
    return drained

