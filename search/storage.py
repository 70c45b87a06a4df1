"""The study's storage: a journal file (the default) or a database, opened once per run.

A crash must not cost the finished trials. Optuna's ``JournalFileBackend`` appends one
JSON record per line and its reader skips a last line without its newline
(optuna/storages/journal/_file.py, ``read_logs``). A process killed mid-write leaves
exactly that: a partial record. The next run's first append is glued onto it, the
glued line is no longer JSON, and from the line after it every read raises
``JSONDecodeError``: the study and all its finished trials can no longer be opened.
So before a journal is opened, :func:`repair_journal` cuts the journal back to its
complete records (keeping a byte-for-byte backup beside it) and says so in one line.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.storages import RDBStorage

from search.config import ConfigError
from search.redact import redact

__all__ = ["make_storage", "repair_journal"]

log = logging.getLogger("search")

#: bytes read per step when looking for the journal's last line from its end
_TAIL_CHUNK = 1 << 16


def make_storage(url: str | None, run_dir: Path, *, say: Callable[[str], None] = log.warning) -> tuple[Any, str]:
    """An Optuna storage and its display URL (password hidden).

    None -> journal file ``<run_dir>/study.journal``; ``journal:///path`` or a path ending
    in ``.journal``/``.log`` -> that journal file, repaired first if a crash cut its last
    record (:func:`repair_journal`; ``say`` gets the one line saying what was cut); anything
    else is a database URL (``sqlite:///x.db``, ``postgresql+psycopg://user@host/db``,
    ``mysql+pymysql://...``) opened with ``RDBStorage`` and a heartbeat, so trials of a
    killed worker are failed (reason "interrupted: ...", not counted toward ``n_trials``) and
    their shapes queued again (:class:`_HeartbeatStorage`). Journal files have no heartbeat in
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
        with warnings.catch_warnings():  # heartbeat_interval is marked experimental in optuna 5.0
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            storage = _HeartbeatStorage(
                url,
                engine_kwargs={"pool_pre_ping": True},
                heartbeat_interval=HEARTBEAT_INTERVAL_S,
                grace_period=GRACE_PERIOD_S,
                heartbeat_stale_trial_callback=_retry_stale_trial,
            )
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
        from search.objective import FAIL_REASON_ATTR, INTERRUPTED

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


def _retry_stale_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Heartbeat callback: queue the shape of the trial a dead worker left once more."""
    from search.objective import retry_interrupted

    try:
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
