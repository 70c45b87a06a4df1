"""Load test of parallel workers on one PostgreSQL study: trials per minute with 1 vs W workers.

Issue 11: trials per minute with 1 vs 3 workers on PostgreSQL on a cheap objective, with the
count of lost and duplicated trials, which must be zero. The objective is the performance model
alone (``objectives=perf_only``, milliseconds a trial, no proxy training), sampled
(``strategy=sample``) so that ``n_trials`` applies, on ``space=dense`` (7,616 suggestion
combinations, far more distinct shapes than the trials asked for). So the figure measures the
job's machinery (sampler, storage round trips, duplicate and surplus checks, results files), not
training: with trials that train for minutes the workers' overhead is negligible.

For each worker count and repeat: a new study (a unique name, deleted afterwards), W
``python -m search`` processes started together with the same ``storage=`` and ``study_name=`` in
one run directory, then the study read back through Optuna's public API and the run directory's
results files checked:

- **duplicated**: a shape (the job's ``candidate_key``) evaluated by more than one trial that
  counts toward ``n_trials``, or a shape on more than one row of ``trials.csv``;
- **lost**: a counted trial of the storage missing from ``trials.csv``, a row of ``trials.csv``
  that is no counted trial of the storage, a trial left RUNNING, or fewer counted trials than
  ``n_trials`` without the job saying the space was exhausted; with ``--kill``, also a trial
  counted when the worker was killed that is no longer counted (or not in ``trials.csv``) at the end;
- **unparseable**: a results file (csv, json, yaml) that does not parse, or a temporary file left.

``--kill``: W workers (the largest of ``--workers``) start, one is SIGKILLed once a third of the
trials are done, and the same command is started again in its place. Its in-flight trial must end
FAIL "interrupted" (not counted, its shape queued again), and nothing finished may be lost.

Exit status 1 if any trial was lost or duplicated, a file did not parse, or a study holds more
counted trials than ``n_trials``.

Usage:
    python benchmarks/load_test.py                       # 1 and 3 workers, 300 trials, writes the report
    python benchmarks/load_test.py --workers 1 3 --n-trials 300 --repeats 2 --kill
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STORAGE = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
#: the cheap study: performance model only, sampled, a space with 7,616 suggestion combinations
LOG_TAIL_LINES = 15  # of the workers' output, kept in a failed run's errors
JOB_ARGS = ("space=dense", "objectives=perf_only", "strategy=sample", "tracking=off", "plots=false", "quiet=true")
# What the job stores on a trial (user attributes; search/objective.py defines them). The audit reads
# them straight from the storage and applies its own counting rule (TrialRecord.counted), so that it
# checks the job's bookkeeping instead of reusing it, and needs none of the job's modules.
DUPLICATE_ATTR = "duplicate_of"  # a shape the study already held: evaluated nothing
SURPLUS_ATTR = "surplus"  # n_trials were finished or in flight when it started: evaluated nothing
EXHAUSTED_ATTR = "space_exhausted"  # no unseen shape was left after this duplicate
FAIL_REASON_ATTR = "fail_reason"
INTERRUPTED = "interrupted"  # a FAIL reason starting with it: Ctrl-C or a killed worker; not counted


# --------------------------------------------------------------------------- the audit (pure)
@dataclass(frozen=True)
class TrialRecord:
    """What the audit needs of one trial of the storage (:func:`record_of` builds it from an Optuna trial)."""

    number: int
    state: str  # COMPLETE, PRUNED, FAIL, RUNNING, WAITING
    key: str | None = None  # the job's candidate_key (the shape), None before it is posted
    skipped: str | None = None  # "duplicate" or "surplus": evaluated nothing, no row, not counted
    interrupted: bool = False  # FAIL of a killed worker or Ctrl-C: not counted, shape queued again
    exhausted: bool = False  # the job found no unseen shape after this duplicate
    start_s: float | None = None  # datetime_start, seconds since the epoch
    complete_s: float | None = None  # datetime_complete

    @property
    def counted(self) -> bool:
        """Counts toward n_trials: finished, evaluated something, not interrupted (the job's rule, README)."""
        return self.state in ("COMPLETE", "PRUNED", "FAIL") and self.skipped is None and not self.interrupted


@dataclass
class Audit:
    """Counts of one study, and what went wrong (every list empty on a clean run)."""

    n_trials: int
    trials: int = 0
    complete: int = 0
    pruned: int = 0
    fail: int = 0
    counted: int = 0
    interrupted: int = 0
    duplicates_skipped: int = 0
    surplus_skipped: int = 0
    exhausted: bool = False
    duplicated: list[str] = field(default_factory=list)  # shapes evaluated by more than one counted trial
    csv_duplicated: list[str] = field(default_factory=list)  # shapes on more than one (non-interrupted) row
    missing_from_csv: list[int] = field(default_factory=list)  # counted trials without a row
    phantom_rows: list[int] = field(default_factory=list)  # rows that are no counted trial of the storage
    running_left: list[int] = field(default_factory=list)
    shortfall: int = 0  # n_trials - counted when the space was not exhausted
    overshoot: int = 0  # counted - n_trials
    lost_after_kill: list[int] = field(default_factory=list)
    unparseable: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return (len(self.missing_from_csv) + len(self.phantom_rows) + len(self.running_left) + self.shortfall
                + len(self.lost_after_kill))

    @property
    def duplicated_count(self) -> int:
        return len(self.duplicated) + len(self.csv_duplicated)

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated_count == 0 and not self.unparseable and self.overshoot == 0


def audit(trials: Sequence[TrialRecord], rows: Sequence[dict[str, str]], n_trials: int, *,
          counted_at_kill: Iterable[int] = ()) -> Audit:
    """Check a study's trials against its ``trials.csv`` rows (``csv.DictReader`` dicts).

    ``counted_at_kill``: numbers of the trials counted when a worker was killed; each must still be
    counted, and have its row, at the end.
    """
    a = Audit(n_trials=n_trials, trials=len(trials))
    states = collections.Counter(t.state for t in trials)
    a.complete, a.pruned, a.fail = states["COMPLETE"], states["PRUNED"], states["FAIL"]
    counted = [t for t in trials if t.counted]
    a.counted = len(counted)
    a.interrupted = sum(t.interrupted for t in trials)
    a.duplicates_skipped = sum(t.skipped == "duplicate" for t in trials)
    a.surplus_skipped = sum(t.skipped == "surplus" for t in trials)
    a.exhausted = any(t.exhausted for t in trials)
    keys = collections.Counter(t.key for t in counted)
    a.duplicated = sorted(str(k) for k, n in keys.items() if n > 1)
    kept = [r for r in rows if not str(r.get("reason") or "").startswith(INTERRUPTED)]
    shapes = collections.Counter(r.get("shape") for r in kept)
    a.csv_duplicated = sorted(str(s) for s, n in shapes.items() if n > 1)
    row_numbers = {int(r["trial"]) for r in kept}
    counted_numbers = {t.number for t in counted}
    a.missing_from_csv = sorted(counted_numbers - row_numbers)
    a.phantom_rows = sorted(row_numbers - counted_numbers)
    a.running_left = sorted(t.number for t in trials if t.state == "RUNNING")
    a.shortfall = 0 if a.exhausted else max(0, n_trials - a.counted)
    a.overshoot = max(0, a.counted - n_trials)
    a.lost_after_kill = sorted(n for n in counted_at_kill if n not in counted_numbers or n not in row_numbers)
    return a


def check_files(run_dir: Path) -> list[str]:
    """Results files that do not parse as their extension says, and temporary files left behind."""
    import yaml

    bad = []
    for path in sorted(run_dir.rglob("*")):
        if not path.is_file() or "wandb" in path.relative_to(run_dir).parts:
            continue
        name = str(path.relative_to(run_dir))
        if ".tmp" in path.name:
            bad.append(f"{name}: temporary file left behind")
            continue
        try:
            if path.suffix == ".csv":
                with open(path, newline="") as f:
                    rows = list(csv.DictReader(f))
                if not rows or list(rows[0])[0] != "trial" or not all(str(r["trial"]).isdigit() for r in rows):
                    bad.append(f"{name}: not a table of trials")
            elif path.suffix == ".json":
                json.loads(path.read_text())
            elif path.suffix == ".yaml":
                yaml.safe_load(path.read_text())
        except Exception as exc:
            bad.append(f"{name}: {type(exc).__name__}: {exc}")
    for need in ("trials.csv", "pareto.csv", "pareto.json", "summary.json"):
        if not (run_dir / need).is_file():
            bad.append(f"{need}: missing")
    return bad


# --------------------------------------------------------------------------- reading a study back
def record_of(t: Any) -> TrialRecord:
    """The :class:`TrialRecord` of an Optuna ``FrozenTrial``, from the user attributes the job stores."""
    a = t.user_attrs
    skipped = "duplicate" if DUPLICATE_ATTR in a else "surplus" if SURPLUS_ATTR in a else None
    interrupted = t.state.name == "FAIL" and str(a.get(FAIL_REASON_ATTR, "")).startswith(INTERRUPTED)
    return TrialRecord(number=t.number, state=t.state.name, key=a.get("candidate_key"), skipped=skipped,
                       interrupted=interrupted, exhausted=bool(a.get(EXHAUSTED_ATTR)),
                       start_s=t.datetime_start.timestamp() if t.datetime_start else None,
                       complete_s=t.datetime_complete.timestamp() if t.datetime_complete else None)


def load_records(storage: str, study_name: str) -> list[TrialRecord]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return [record_of(t) for t in optuna.load_study(study_name=study_name, storage=storage).get_trials(deepcopy=False)]


def read_rows(path: Path) -> list[dict[str, str]]:
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except (OSError, csv.Error):
        return []


def trial_span_s(trials: Sequence[TrialRecord]) -> float:
    """Seconds from the first trial's start to the last trial's end (the run without process start-up)."""
    starts = [t.start_s for t in trials if t.start_s is not None]
    ends = [t.complete_s for t in trials if t.complete_s is not None]
    return max(ends) - min(starts) if starts and ends else float("nan")


# --------------------------------------------------------------------------- running workers
def _command(storage: str, study_name: str, n_trials: int) -> list[str]:
    return [sys.executable, "-m", "search", *JOB_ARGS, f"n_trials={n_trials}", f"study_name={study_name}",
            f"storage={storage}"]


def _start(cmd: Sequence[str], cwd: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    with open(log, "ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)


def _wait_for_counted(storage: str, study_name: str, target: int, timeout_s: float = 600.0) -> None:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        try:
            if sum(t.counted for t in load_records(storage, study_name)) >= target:
                return
        except KeyError:  # the study is not created yet
            pass
        time.sleep(0.1)
    raise TimeoutError(f"study {study_name} did not reach {target} counted trials in {timeout_s:.0f} s")


def run_once(storage: str, workers: int, n_trials: int, *, kill: bool = False, keep: bool = False) -> dict[str, Any]:
    """Start ``workers`` processes on a new study, wait for them, audit the study and its files."""
    import optuna

    study_name = f"load-test-{workers}w-{uuid.uuid4().hex[:10]}"
    work = Path(tempfile.mkdtemp(prefix="load_test_"))
    cmd = _command(storage, study_name, n_trials)
    log = work / "workers.log"
    killed: dict[str, Any] = {}
    counted_at_kill: list[int] = []
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    procs = [_start(cmd, work, log) for _ in range(workers)]
    if kill:
        _wait_for_counted(storage, study_name, max(1, n_trials // 3))
        victim = procs[0]
        victim.send_signal(signal.SIGKILL)
        victim.wait()  # reaped: a zombie would still look alive to the other workers' pid check
        records = load_records(storage, study_name)
        counted_at_kill = [t.number for t in records if t.counted]
        killed = {"pid": victim.pid, "counted_at_kill": len(counted_at_kill),
                  "running_at_kill": [t.number for t in records if t.state == "RUNNING"]}
        procs.append(_start(cmd, work, log))  # the same command again, in its place
    codes = [p.wait() for p in procs]
    wall_s = time.perf_counter() - t0
    load = (load_before, os.getloadavg()[1])  # 1-min average before; 5-min average at the end
    try:
        records = load_records(storage, study_name)
        run_dir = work / "outputs" / study_name
        a = audit(records, read_rows(run_dir / "trials.csv"), n_trials, counted_at_kill=counted_at_kill)
        a.unparseable = check_files(run_dir)
        text = log.read_text(errors="replace")
        expected_codes = codes[1:] if kill else codes  # the killed worker's -9 is the point
        errors = [f"worker exit status {c}" for c in expected_codes if c != 0]
        errors += ["Traceback in the workers' output"] if "Traceback" in text else []
        if errors:  # what the workers said last: the error line a failing worker printed is in it
            errors.append("workers' output ends: " + " | ".join(text.strip().splitlines()[-LOG_TAIL_LINES:]))
        if kill:
            by_number = {t.number: t for t in records}
            killed["ended"] = {n: ("interrupted" if by_number[n].interrupted else by_number[n].state)
                               for n in killed["running_at_kill"]}
            killed["exit_status"] = codes[0]
    finally:
        if not keep:
            try:
                optuna.delete_study(study_name=study_name, storage=storage)
            except KeyError:
                pass
            shutil.rmtree(work, ignore_errors=True)
    span_s = trial_span_s(records)
    return {"workers": workers, "kill": kill, "study_name": study_name, "wall_s": wall_s, "trial_span_s": span_s,
            "load_avg": load, "per_min": a.counted / wall_s * 60, "per_min_trials_only": a.counted / span_s * 60,
            "audit": {**asdict(a), "lost": a.lost, "duplicated_count": a.duplicated_count, "ok": a.ok},
            "killed": killed, "errors": errors, "work_dir": str(work) if keep else None}


# --------------------------------------------------------------------------- report
def _row(r: dict[str, Any], repeat: int) -> str:
    a = r["audit"]
    what = f"{r['workers']} + kill/restart" if r["kill"] else str(r["workers"])
    return (f"| {what} | {repeat} | {a['counted']} | {r['wall_s']:.1f} | {r['per_min']:.0f} | {r['per_min_trials_only']:.0f} "
            f"| {a['complete']}/{a['pruned']}/{a['fail']} | {a['duplicates_skipped']} | {a['surplus_skipped']} "
            f"| {a['interrupted']} | {a['lost']} | {a['duplicated_count']} | {len(a['unparseable'])} "
            f"| {r['load_avg'][0]:.1f} / {r['load_avg'][1]:.1f} |")


def report(results: list[dict[str, Any]], args: argparse.Namespace, command: str) -> tuple[str, bool]:
    ok = all(r["audit"]["ok"] and not r["errors"] for r in results)
    lines = ["# Load test: parallel workers on one PostgreSQL study", "",
             f"Command: `{command}`  ",
             f"Machine: {os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), Python "
             f"{platform.python_version()}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC. Storage: PostgreSQL "
             f"(`{args.storage.split('@')[-1]}`).  ",
             f"Job: `python -m search {' '.join(JOB_ARGS)} n_trials={args.n_trials} study_name=<new> storage=<url>` "
             "started W times together (performance model only: milliseconds a trial, so this measures the "
             "job's machinery, not training).", "",
             "| workers | repeat | counted trials | wall s | trials/min | trials/min, start-up excluded | "
             "COMPLETE/PRUNED/FAIL | duplicate proposals skipped | surplus | interrupted | lost | duplicated | "
             "unparseable files | load avg before / during |",
             "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    seen: collections.Counter = collections.Counter()
    for r in results:
        seen[(r["workers"], r["kill"])] += 1
        lines.append(_row(r, seen[(r["workers"], r["kill"])]))
    plain = [r for r in results if not r["kill"]]
    med = {w: statistics.median(r["per_min"] for r in plain if r["workers"] == w) for w in sorted({r["workers"] for r in plain})}
    med_trials = {w: statistics.median(r["per_min_trials_only"] for r in plain if r["workers"] == w) for w in med}
    if med:
        base = min(med)
        lines += ["", "| workers | median trials/min | speed-up | median trials/min, start-up excluded | speed-up |",
                  "|---:|---:|---:|---:|---:|"]
        lines += [f"| {w} | {med[w]:.0f} | {med[w] / med[base]:.2f}x | {med_trials[w]:.0f} | "
                  f"{med_trials[w] / med_trials[base]:.2f}x |" for w in med]
    lines += ["", "Columns: *counted* = trials that count toward `n_trials` (COMPLETE, PRUNED infeasible, FAIL; "
              "not duplicates, surplus or interrupted); *wall s* from the first process start to the last exit; "
              "*start-up excluded* = counted trials over the span from the first trial's start to the last "
              "trial's end (Optuna's datetime_start/datetime_complete). *lost*: counted trials missing from "
              "`trials.csv`, rows that are no counted trial, trials left RUNNING, fewer than `n_trials` counted "
              "without the space being exhausted, and (kill run) trials counted at the kill that are gone at the "
              "end. *duplicated*: shapes (`candidate_key`) evaluated by two counted trials or on two rows of "
              "`trials.csv`. *load avg*: the machine's 1-minute load average before the run and its 5-minute "
              f"average at the end; above {os.cpu_count()} (the cores) other processes shared the CPUs and the rates "
              "are lower than on an idle machine."]
    for r in results:
        if r["kill"]:
            k = r["killed"]
            lines += ["", f"Kill run: worker pid {k['pid']} SIGKILLed (exit status {k.get('exit_status')}) with "
                      f"{k['counted_at_kill']} trials counted and trial(s) {k['running_at_kill']} running; the same "
                      f"command started again in its place. Those running trials ended: {k.get('ended')}. "
                      f"Counted trials at the kill lost by the end: {len(r['audit']['lost_after_kill'])}."]
    problems = [(r["study_name"], {k: r["audit"][k] for k in ("duplicated", "csv_duplicated", "missing_from_csv",
                 "phantom_rows", "running_left", "shortfall", "overshoot", "lost_after_kill", "unparseable") if r["audit"][k]},
                 r["errors"]) for r in results if not r["audit"]["ok"] or r["errors"]]
    lines += ["", f"**Verdict: {'PASS' if ok else 'FAIL'}** — "
              + ("zero lost, zero duplicated trials, every results file parses, every study holds exactly "
                 "`n_trials` counted trials." if ok else "problems found:")]
    lines += [f"- `{name}`: {json.dumps(p)} {'; '.join(e)}" for name, p, e in problems]
    return "\n".join(lines) + "\n", ok


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--storage", default=DEFAULT_STORAGE, help="Optuna storage URL of a database (default: %(default)s)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 3], help="worker counts to compare (default: 1 3)")
    p.add_argument("--n-trials", type=int, default=300, help="n_trials of each study (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=1, help="studies per worker count (default: %(default)s)")
    p.add_argument("--kill", action="store_true", help="add a run that SIGKILLs one worker mid-run and restarts it")
    p.add_argument("--keep", action="store_true", help="keep the studies and run directories (default: deleted)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "load_test.md",
                   help="markdown report; a .json beside it holds the raw figures (default: %(default)s)")
    args = p.parse_args(argv)
    if any(w < 1 for w in args.workers) or args.n_trials < 1 or args.repeats < 1:
        p.error("--workers, --n-trials and --repeats must be positive")
    if args.storage.startswith(("sqlite", "journal")) or "://" not in args.storage:
        p.error(f"--storage {args.storage!r}: give a database URL (postgresql+psycopg://..., mysql+pymysql://...)")
    command = "python benchmarks/load_test.py " + " ".join(sys.argv[1:] if argv is None else argv)
    results = []
    for repeat in range(args.repeats):
        for w in args.workers:
            r = run_once(args.storage, w, args.n_trials, keep=args.keep)
            results.append(r)
            print(f"workers={w} repeat={repeat + 1}: {r['audit']['counted']} trials in {r['wall_s']:.1f} s "
                  f"({r['per_min']:.0f}/min; {r['per_min_trials_only']:.0f}/min without start-up), "
                  f"lost {r['audit']['lost']}, duplicated {r['audit']['duplicated_count']}, "
                  f"unparseable {len(r['audit']['unparseable'])} {r['errors'] or ''}", flush=True)
    if args.kill:
        r = run_once(args.storage, max(args.workers), args.n_trials, kill=True, keep=args.keep)
        results.append(r)
        print(f"kill run ({max(args.workers)} workers): {r['killed']}, lost {r['audit']['lost']}, "
              f"duplicated {r['audit']['duplicated_count']} {r['errors'] or ''}", flush=True)
    text, ok = report(results, args, command)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
