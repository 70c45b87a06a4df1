"""What parallel workers of one study share, and how they take turns.

Several ``python -m search`` processes may run the same study at once (one storage;
on one machine usually one run directory too). Four things make them cooperate:

- **Sampler seeds** (:class:`WorkerSeededSampler`). A worker's sampler is seeded with
  ``seed + the number of the first trial it runs``. The storage hands out each trial
  number once, so workers started together get different seeds and propose different
  shapes; a worker alone gets the same seeds every time: ``seed`` on a new study, and
  ``seed + trials already in the study`` when it resumes one (the same value as the
  earlier ``seed + resumed_trials`` rule, so a resumed run does not replay the first
  run's draws).
- **Shapes in flight** (:func:`search.objective.duplicate_of`): a trial posts its shape
  before it is evaluated; a shape another worker holds, finished or running, is a
  duplicate and is not evaluated again.
- **The run directory** (:func:`run_dir_lock`): results files and plots are written
  whole (:mod:`search.files`) and, at the end of a run, under a file lock, so the files
  left behind are those of the worker that read the study last.
- **One W&B summary run per study** (:func:`summary_turn`): the worker that finishes
  last (no trial of a live worker still running) writes it, once per state of the
  study (a marker file in the run directory records the state it summarised); its run
  id is derived from the study's id (:func:`summary_run_id`) and it is opened with
  ``resume="allow"``, so workers on other machines, or a later run that adds trials,
  update that one run instead of adding another.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import optuna
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from search.files import write_atomic

__all__ = [
    "WorkerSeededSampler",
    "STUDY_UID_ATTR",
    "ensure_study_uid",
    "summary_run_id",
    "run_dir_lock",
    "summary_turn",
    "record_summary",
    "worker_is_gone",
]

STUDY_UID_ATTR = "study_uid"  # study user attribute: a random id, the same for every worker of the study
SUMMARY_MARK = ".wandb_summary.json"  # in the run dir: the W&B summary run last written and the state it shows
_LOCK_NAME = ".results.lock"


class WorkerSeededSampler(BaseSampler):
    """A sampler built at this worker's first trial, seeded from that trial's number.

    ``build(first_trial_number)`` returns the Optuna sampler (seeded ``seed +
    first_trial_number``: :func:`search.app.make_sampler`); every sampler call is handed
    to it. The trial number is Optuna's: unique among all workers of the storage, and
    the same in every run of a worker alone, hence distinct seeds for concurrent workers
    and reproducible ones for a single worker (see the module docstring).
    """

    def __init__(self, build: Callable[[int], BaseSampler]) -> None:
        self._build = build
        self._inner: BaseSampler | None = None
        self.first_trial: int | None = None

    @property
    def inner(self) -> BaseSampler:
        """The Optuna sampler (built with offset 0 if asked for before any trial)."""
        if self._inner is None:
            self._inner = self._build(0)
        return self._inner

    def __str__(self) -> str:  # builds nothing: the seed is fixed at the first trial, not when printed
        if self._inner is None:
            return "WorkerSeededSampler (built at this worker's first trial)"
        return f"{self._inner} (seeded with seed + {self.first_trial})"

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if self._inner is None:  # Optuna calls this first for every trial, before any sampling
            self.first_trial = trial.number
            self._inner = self._build(trial.number)
        self._inner.before_trial(study, trial)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, Any]:
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, Any]) -> dict[str, Any]:
        return self.inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: Any) -> Any:
        return self.inner.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()


def worker_is_gone(t: FrozenTrial) -> bool:
    """Whether the worker running ``t`` is a process of this host that no longer exists.

    Each trial records its worker's host and pid (``worker`` user attribute). A trial of
    another host, of a live process, or without the record is not known to be gone.
    """
    w = t.user_attrs.get("worker") or {}
    if w.get("host") != socket.gethostname() or not isinstance(w.get("pid"), int) or w["pid"] == os.getpid():
        return False
    try:
        os.kill(w["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def ensure_study_uid(study: optuna.Study) -> None:
    """Give the study a random id (user attribute ``study_uid``) unless it has one."""
    if STUDY_UID_ATTR not in study.user_attrs:
        study.set_user_attr(STUDY_UID_ATTR, uuid.uuid4().hex[:16])


def summary_run_id(study: optuna.Study) -> str:
    """The W&B id of the study's summary run: ``summary-<study uid>``.

    Read from the storage when asked, so workers that created the study at the same
    moment (each setting a uid, the last write winning) agree on it by the end.
    """
    uid = study.user_attrs.get(STUDY_UID_ATTR)
    if uid is None:  # a study opened by an older version, not through search.app.open_study
        ensure_study_uid(study)
        uid = study.user_attrs[STUDY_UID_ATTR]
    return f"summary-{uid}"


@contextmanager
def run_dir_lock(run_dir: str | Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold the run directory's lock (``.results.lock``); yield whether it is held.

    ``wait=False`` yields False at once when another worker holds it (a per-trial
    rewrite then skips its turn: that worker is writing the same study's files).
    """
    from filelock import FileLock, Timeout

    lock = FileLock(str(Path(run_dir) / _LOCK_NAME))
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def _state(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False))


def summary_turn(study: optuna.Study, run_dir: str | Path) -> tuple[bool, str]:
    """Whether this worker writes the study's W&B summary now, and if not, why (hold :func:`run_dir_lock`).

    Not while a trial of a live worker is running (that worker finishes later and
    writes it), nor when the summary of the study's present state is already written
    (another worker finished at the same moment).
    """
    running = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if not worker_is_gone(t)]
    if running:
        shown = ", ".join(map(str, running[:5])) + (" ..." if len(running) > 5 else "")
        return False, f"trial(s) {shown} still running on other workers; the last worker to finish writes it"
    mark = _read_mark(run_dir)
    if mark and mark.get("trials") == _state(study) and mark.get("run_id") == summary_run_id(study):
        return False, (f"already written for the study as it stands ({mark['trials']} stored trials, duplicates "
                       f"included) by worker pid {mark.get('pid')}: {mark.get('dir')}")
    return True, ""


def record_summary(study: optuna.Study, run_dir: str | Path, wandb_dir: str | None) -> None:
    """Record in the run directory that the summary of the study's present state is written."""
    mark = {"run_id": summary_run_id(study), "trials": _state(study), "pid": os.getpid(), "dir": wandb_dir}
    write_atomic(Path(run_dir) / SUMMARY_MARK, json.dumps(mark, indent=2))


def _read_mark(run_dir: str | Path) -> dict[str, Any] | None:
    try:
        mark = json.loads((Path(run_dir) / SUMMARY_MARK).read_text())
    except (OSError, ValueError):
        return None
    return mark if isinstance(mark, dict) else None
