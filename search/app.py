"""The search job: check the config, open (or resume) the study, run the remaining trials, report.

:func:`run` is the whole job for a composed config; ``python -m search`` (Hydra) calls
it through :func:`main_entry` with Hydra's run directory. Tests call it in-process with
``hydra.compose``. The steps live in their own modules: configuration and its
validation (:mod:`search.config`), checks against the GPU, the machine and the space
(:mod:`search.checks`), the study's storage, sampler, resume and trial accounting
(:mod:`search.study`), one trial (:mod:`search.objective`), exact enumeration
(:mod:`search.exact`), results files (:mod:`search.results`), what parallel workers
share (:mod:`search.workers`) and what is printed (:mod:`search.console`).

Resume: the study lives in its storage (default: ``<run dir>/study.journal``, and the run
dir is ``outputs/<study_name>``), so the same command opens the same study and runs only
the remainder of ``n_trials``, starting with the shapes of interrupted trials. Every
finished trial is in the storage the moment it ends, so a crash or Ctrl-C loses only
the trial in flight.

Parallel workers: start the same command several times (on one machine, sharing the
run dir's journal; or on many, with a database ``storage=``). Each worker seeds its
sampler distinctly, no shape is evaluated twice, the study ends with ``n_trials``
counted trials, results files are replaced whole, and the worker that finishes last
writes the one W&B summary run.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.trial import FrozenTrial

from search import checks
from search.config import ConfigError, enumerates, show_progress_bars, to_search_config, validate
from search.console import FailedTrialLog, job_failure, print_outcome, say, trial_line
from search.exact import EnumerationProgress, enumerate_into
from search.objective import EXHAUSTED_ATTR, Objective
from search.plots import write_plots
from search.redact import hydra_files, redact, redact_files
from search.results import parallel_coordinates_html, summary_extra, trial_row, write_results
from search.signals import EXIT_STATUS, Terminated, sigterm_interrupts
from search.space import grid_size, parallelism_coverage
from search.study import (
    DUPLICATE_ATTR,
    MAX_CONSECUTIVE_DUPLICATES,
    SURPLUS_ATTR,
    drain_queue,
    fail_orphaned_trials,
    finished_count,
    held_count,
    make_storage,
    open_study,
    resume,
)
from search.tracking import make_tracker
from search.workers import record_summary, run_dir_lock, summary_run_id, summary_turn

__all__ = ["run", "RunResult", "main_entry"]

log = logging.getLogger("search")


@dataclass
class RunResult:
    """What one invocation did and left behind."""

    study: optuna.Study
    run_dir: Path
    ran: int  # trials run by this invocation
    finished: int  # finished trials counted toward n_trials after it
    summary: dict[str, Any]
    wandb_summary_dir: str | None
    seconds: float


def run(
    cfg: Any,
    *,
    run_dir: str | Path | None = None,
    train_fn: Callable[..., Any] | None = None,
    datamodule_factory: Callable[[], Any] | None = None,
) -> RunResult:
    """Run the search job for ``cfg`` (a composed DictConfig or :class:`search.config.SearchConfig`).

    Raises :class:`search.config.ConfigError` before any trial runs when the configuration
    cannot work. Ctrl-C raises ``KeyboardInterrupt`` and SIGTERM :class:`search.signals.Terminated`
    (one of its subclasses), after the results files are written when trials had started.
    """
    with sigterm_interrupts():
        return _run(cfg, run_dir=run_dir, train_fn=train_fn, datamodule_factory=datamodule_factory)


def _run(
    cfg: Any,
    *,
    run_dir: str | Path | None,
    train_fn: Callable[..., Any] | None,
    datamodule_factory: Callable[[], Any] | None,
) -> RunResult:
    t_start = time.perf_counter()
    cfg = validate(to_search_config(cfg))
    run_dir = Path(run_dir or cfg.output_dir or Path("outputs") / cfg.study_name).resolve()
    gpu = checks.before_any_trial(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    storage, storage_url = make_storage(cfg.storage, run_dir, n_trials=cfg.n_trials, say=say)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # this job prints its own line per trial
    study = open_study(cfg, storage)
    exact = enumerates(cfg)
    with run_dir_lock(run_dir):  # workers started together on the run dir's journal queue each retry once
        plan = resume(study, storage, cfg.n_trials, exact=exact)
    _announce(cfg, plan, exact, run_dir, storage_url)

    tracker = make_tracker(cfg, str(run_dir))
    objective = Objective(
        cfg, gpu=gpu, run_dir=str(run_dir), tracker=tracker, datamodule_factory=datamodule_factory, train_fn=train_fn
    )
    if objective.needs_proxy and plan.remaining:
        dm = objective.datamodule()  # build (or find cached) the data before the first trial; bad data stops here
        checks.before_training(cfg, int(dm.vocab_size), say)

    names = list(cfg.objectives.names)
    state = {"ran": 0, "reported_at": 0.0, "report_s": 0.0, "in_a_row": 0, "exhausted": False}

    def report(study: optuna.Study, trial: FrozenTrial) -> None:
        """After each trial: rewrite the results when it costs under ~10 % of the run, log, print its line."""
        row = trial_row(trial, names, pareto=False)
        try:  # reporting problems are logged; they must not end the study
            # Each rewrite reads every trial, so for millisecond (performance-only) trials it would dominate:
            # rewrite once the trials since the last one took 9x its cost (and always at the end).
            # Parallel workers: one rewrites at a time; the others skip their turn (the files show the same study).
            if time.perf_counter() - state["reported_at"] >= 9 * state["report_s"]:
                with run_dir_lock(run_dir, wait=False) as mine:
                    if mine:
                        t0 = time.perf_counter()
                        summary = write_results(study, names, run_dir, storage=storage_url, n_trials=cfg.n_trials,
                                                extra=summary_extra(cfg, study))
                        row = next((r for r in summary["rows"] if r["trial"] == trial.number), row)
                        if cfg.plots:
                            _plots(study, names, run_dir, summary, gpu)
                        state["reported_at"] = time.perf_counter()
                        state["report_s"] = state["reported_at"] - t0
            tracker.finish_trial(trial, row)
        except Exception as exc:
            log.warning("results of trial %d not fully written: %s: %s", trial.number, type(exc).__name__, exc)
        say(trial_line(trial, row, names))

    def after_trial(study: optuna.Study, trial: FrozenTrial) -> None:
        if SURPLUS_ATTR in trial.user_attrs:  # n_trials finished or in flight on other workers: nothing was evaluated
            study.stop()
            return
        if DUPLICATE_ATTR in trial.user_attrs:  # nothing was evaluated: no line, no rewrite, no count
            state["in_a_row"] += 1
            if trial.user_attrs.get(EXHAUSTED_ATTR) or state["in_a_row"] >= MAX_CONSECUTIVE_DUPLICATES:
                state["exhausted"] = True
                say(f"the sampler proposed a shape the study already holds and no unseen one is left: "
                    f"space={cfg.space.name!r} looks exhausted; stopping with {finished_count(study)} distinct trials")
                study.stop()
            return
        state["in_a_row"] = 0
        state["ran"] += 1
        report(study, trial)
        if finished_count(study) >= cfg.n_trials:  # parallel workers on one storage: stop at the target
            study.stop()

    interrupted: KeyboardInterrupt | None = None  # Ctrl-C, or SIGTERM (search.signals.Terminated)
    failures = FailedTrialLog(run_dir / "errors.log")
    try:
        if exact:
            state["ran"] = _enumerate(study, cfg, gpu, names, run_dir)
        elif plan.remaining:
            optuna_logger = logging.getLogger("optuna.study._optimize")
            optuna_logger.addFilter(failures)
            try:
                remaining = plan.remaining
                # Duplicates do not count toward n_trials: top up until the study holds n_trials, the sampler
                # finds no new shape, or a worker on the same storage stopped it at the target.
                while remaining and not state["exhausted"]:
                    study.optimize(
                        objective,
                        n_trials=remaining,
                        catch=(Exception,),
                        callbacks=[after_trial],
                        gc_after_trial=objective.needs_proxy,  # frees a proxy's (GPU) memory; ~80 ms, wasted on perf-only trials
                        show_progress_bar=show_progress_bars(cfg),
                    )
                    # parallel workers: trials in flight on other workers count too (they finish and are counted)
                    remaining = max(0, cfg.n_trials - held_count(study))
                drain_queue(study, cfg.n_trials)  # shapes queued after duplicates that nobody needs now
            finally:
                optuna_logger.removeFilter(failures)
    except KeyboardInterrupt as exc:
        interrupted = exc
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        say(f"{how}: the shapes scored so far are saved; run the same command to finish" if exact
            else f"{how}: finished trials are saved; run the same command to resume")
    finally:
        tracker.close()

    summary, wandb_dir, wandb_note = _finish(study, cfg, gpu, names, run_dir, storage, storage_url, tracker,
                                             interrupted is not None)
    counts = summary["trials"]
    print_outcome(
        summary,
        title=(
            f"Pareto front of {cfg.study_name!r}: {summary['pareto_size']} of {sum(counts.values())} trials "
            f"({counts['COMPLETE']} complete, {counts['PRUNED']} pruned "
            f"[{summary['infeasible_before_training']} infeasible before training], {counts['FAIL']} failed) "
            f"on {gpu.name}"
        ),
        run_dir=run_dir,
        storage_url=storage_url,
        errors_log=failures.path if failures.written else None,
        wandb_dir=wandb_dir,
        wandb_mode=tracker.mode,
        wandb_note=wandb_note,
    )
    if interrupted is not None:
        raise interrupted
    return RunResult(
        study=study,
        run_dir=run_dir,
        ran=state["ran"],
        finished=finished_count(study),
        summary=summary,
        wandb_summary_dir=wandb_dir,
        seconds=time.perf_counter() - t_start,
    )


def _announce(cfg: Any, plan: Any, exact: bool, run_dir: Path, storage_url: str) -> None:
    """The lines that say what this invocation is about to do."""
    names = list(cfg.objectives.names)
    served, layouts, why = parallelism_coverage(cfg.space, cfg.deployment)
    if served < layouts:
        say(
            f"note: {layouts - served} of the {layouts} head layouts of space={cfg.space.name!r} have no working "
            f"parallelism choice (e.g. {why[0] if why else '?'}); such candidates end PRUNED before training"
        )
    if plan.orphans:
        say(f"marked trial(s) {plan.orphans} of a killed run as FAIL (interrupted); they do not count")
    if plan.retries:
        say(f"queued the shape(s) of interrupted trial(s) {plan.retries} to be evaluated again")
    if exact:
        say(
            f"{'resuming' if plan.done else 'new'} study {cfg.study_name!r}: objectives {names} need no training, so "
            f"every distinct shape of space={cfg.space.name!r} is scored and the front is exact (n_trials and the "
            "sampler are not used; strategy=sample samples instead)"
        )
    elif plan.done:
        say(f"resuming study {cfg.study_name!r}: {plan.done} finished trial(s) of n_trials={cfg.n_trials}; "
            f"running {plan.remaining} more")
    else:
        say(f"new study {cfg.study_name!r}: {cfg.n_trials} trial(s), objectives {names}, sampler {cfg.sampler.name}")
    if not exact and plan.remaining:
        most = grid_size(cfg.space, cfg.deployment)
        if cfg.n_trials > most:
            say(f"note: space={cfg.space.name!r} has at most {most} distinct shapes, fewer than n_trials={cfg.n_trials}; "
                "the study stops when the sampler finds no new one")
    say(f"run dir {run_dir}  storage {storage_url}")


#: seconds between two progress lines of an enumeration
PROGRESS_EVERY_S = 30.0


def _minutes(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _enumerate(study: optuna.Study, cfg: Any, gpu: Any, names: list[str], run_dir: Path) -> int:
    """Score every shape not yet in the study; return how many this worker scored.

    Under the run dir's lock: a second worker on the same run dir waits, then finds every
    shape scored and scores none (an enumeration walks the grid once, in one process: workers
    gain nothing). A large space takes half an hour or more (``space=moe`` on ``gb200_nvl72_dep``),
    so a progress line with an estimate of the time left comes every :data:`PROGRESS_EVERY_S` seconds.
    """
    say(f"enumerating {grid_size(cfg.space, cfg.deployment):,} suggestion combinations of space={cfg.space.name!r} "
        "(shapes outside space.params are skipped before scoring; Ctrl-C keeps what is scored)")
    last = time.perf_counter()

    def progress(p: EnumerationProgress) -> None:  # a line every PROGRESS_EVERY_S
        nonlocal last
        if time.perf_counter() - last >= PROGRESS_EVERY_S:
            last = time.perf_counter()
            say(f"enumeration: {p.scored:,} shape(s) scored ({p.feasible:,} feasible) in {_minutes(p.seconds)}, "
                f"{p.walked / p.combinations:.0%} of the combinations walked; about {_minutes(p.seconds_left)} left")

    with run_dir_lock(run_dir):
        t0 = time.perf_counter()
        result = enumerate_into(study, cfg, gpu, names, on_batch=progress)
    say(
        f"scored {result.scored} shape(s) in {time.perf_counter() - t0:.1f} s ({result.feasible} feasible); "
        f"the space has {result.candidates} distinct shapes: {result.outside_band} outside space.params, "
        f"{result.already_scored} scored before"
    )
    return result.scored


def _finish(
    study: optuna.Study, cfg: Any, gpu: Any, names: list[str], run_dir: Path, storage: Any, storage_url: str,
    tracker: Any, interrupted: bool,
) -> tuple[dict[str, Any], str | None, str]:
    """Write the results files, plots and (from one worker) the W&B summary; return (summary, W&B dir, note).

    Under the run dir's lock, the study read inside it: of parallel workers, the one that
    writes last read the study last, and only the worker that finishes last writes the
    W&B summary (:mod:`search.workers`).
    """
    wandb_dir, wandb_note = None, ""
    with run_dir_lock(run_dir):
        summary = write_results(study, names, run_dir, storage=storage_url, n_trials=cfg.n_trials,
                                extra=summary_extra(cfg, study))
        figures: dict[str, str] = {}
        if cfg.plots:
            figures = _plots(study, names, run_dir, summary, gpu)
        par = parallel_coordinates_html(summary["rows"], names)
        if par:
            figures["parallel_coordinates"] = par
        if summary["rows"] and not interrupted and tracker.mode != "off":
            fail_orphaned_trials(study, storage)  # a killed worker's trial must not keep the summary waiting
            turn, wandb_note = summary_turn(study, run_dir)
            if turn:
                try:
                    wandb_dir = tracker.summary(summary["rows"], names, figures, run_id=summary_run_id(study))
                    record_summary(study, run_dir, wandb_dir)
                except Exception as exc:  # the files and the storage hold everything; W&B is a view
                    log.warning("W&B summary run not written: %s: %s", type(exc).__name__, exc)
    return summary, wandb_dir, wandb_note


def _plots(study: optuna.Study, names: list[str], run_dir: Path, summary: dict[str, Any], gpu: Any) -> dict[str, str]:
    try:
        return write_plots(study, names, run_dir, summary["hypervolume_reference_point"], summary["rows"], gpu)
    except Exception as exc:  # a plotting problem must not end the study
        log.warning("plots not written: %s: %s", type(exc).__name__, exc)
        return {}


def main_entry(cfg: Any) -> int:
    """Hydra entry: run in ``output_dir`` if set, else Hydra's run dir; exit status 2 for configuration errors,
    1 for any other.

    Secrets stay out of what Hydra wrote and printed: its ``.hydra/*.yaml`` are rewritten
    redacted before anything else, and an error is reported here (redacted, one line;
    the traceback in ``<run dir>/errors.log``) instead of by Hydra, whose report starts
    with every command-line override, a storage password included.
    """
    from hydra.core.hydra_config import HydraConfig

    try:
        hydra_cfg = HydraConfig.get()
    except ValueError:
        hydra_cfg = None
    # output_dir=..., when given, is the run dir; else Hydra's (hydra.run.dir, outputs/<study_name>)
    run_dir = cfg.get("output_dir") or (hydra_cfg.runtime.output_dir if hydra_cfg is not None else None)
    if hydra_cfg is not None:
        redact_files(hydra_files(hydra_cfg))
    try:
        run(cfg, run_dir=run_dir)
    except ConfigError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C 130, SIGTERM 143
        return EXIT_STATUS.get(type(exc), 130)
    except Exception as exc:
        print(f"error: {job_failure(exc, Path(run_dir or '.') / 'errors.log')}", file=sys.stderr)
        return 1
    return 0
