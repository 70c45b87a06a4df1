"""The search job: validate, open (or resume) the study, run the remaining trials, report.

:func:`run` is the whole job for a composed config; ``python -m search`` (Hydra) calls
it with Hydra's run directory. Tests call it in-process with ``hydra.compose``.

Resume: the study lives in its storage (default: ``<run dir>/study.journal``, and the
run dir is ``outputs/<study_name>``), so the same command opens the same study.
``n_trials`` is the number of finished trials (COMPLETE + PRUNED + FAIL, trials
interrupted by Ctrl-C or a killed process excepted) the study should hold; a second
run only runs the remainder. Every finished trial is in the storage the moment it
ends, so a crash or Ctrl-C loses only the trial in flight.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.config import OBJECTIVES, ConfigError, SearchConfig, to_search_config, validate
from search.objective import FAIL_REASON_ATTR, Objective
from search.results import parallel_coordinates_html, print_pareto_table, write_plots, write_results
from search.tracking import make_tracker

__all__ = ["run", "RunResult", "make_storage", "make_sampler", "open_study", "finished_count", "main_entry"]

log = logging.getLogger("search")
INTERRUPTED = "interrupted"


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


# --------------------------------------------------------------------------- study plumbing
def make_storage(url: str | None, run_dir: Path) -> tuple[Any, str]:
    """An Optuna storage and its display URL.

    None -> journal file ``<run_dir>/study.journal``; ``journal:///path`` or a path ending
    in ``.journal``/``.log`` -> that journal file; anything else is a database URL
    (``sqlite:///x.db``, ``postgresql+psycopg://user@host/db``, ``mysql+pymysql://...``)
    opened with ``RDBStorage`` and a heartbeat, so trials of a killed worker are failed.
    """
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend

    path: str | None = None
    if url is None:
        path = str(run_dir / "study.journal")
    elif url.startswith("journal://"):
        path = url[len("journal://") :]
    elif url.endswith((".journal", ".log")) and "://" not in url:
        path = url
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(path)), f"journal://{os.path.abspath(path)}"
    with warnings.catch_warnings():  # heartbeat_interval is marked experimental in optuna 5.0
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = RDBStorage(url, engine_kwargs={"pool_pre_ping": True}, heartbeat_interval=60, grace_period=180)
    return storage, url


def make_sampler(cfg: SearchConfig, *, resumed_trials: int = 0) -> optuna.samplers.BaseSampler:
    """The sampler named by ``cfg.sampler.name`` (validated), seeded.

    A resumed study gets ``seed + resumed_trials``: the same seed again would replay the
    first run's random draws and propose the same shapes a second time.
    """
    s = cfg.sampler
    seed = (s.seed if s.seed is not None else cfg.seed) + resumed_trials
    if s.name == "tpe":
        kw = {} if s.n_startup_trials is None else {"n_startup_trials": s.n_startup_trials}
        return optuna.samplers.TPESampler(seed=seed, **kw)
    if s.name == "nsga2":
        kw = {} if s.population_size is None else {"population_size": s.population_size}
        return optuna.samplers.NSGAIISampler(seed=seed, **kw)
    if s.name == "nsga3":
        kw = {} if s.population_size is None else {"population_size": s.population_size}
        with warnings.catch_warnings():  # experimental in optuna 5.0; asked for by name
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.NSGAIIISampler(seed=seed, **kw)
    if s.name == "gp":
        kw = {} if s.n_startup_trials is None else {"n_startup_trials": s.n_startup_trials}
        return optuna.samplers.GPSampler(seed=seed, **kw)
    if s.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ConfigError([f"unknown sampler {s.name!r}; known: tpe, nsga2, nsga3, gp, random"])


def open_study(cfg: SearchConfig, storage: Any) -> optuna.Study:
    """Create the study or load it; refuse to resume one with other objectives."""
    names = list(cfg.objectives.names)
    directions = [OBJECTIVES[n][0] for n in names]
    study = optuna.create_study(
        storage=storage,
        study_name=cfg.study_name,
        directions=directions,
        sampler=make_sampler(cfg),
        load_if_exists=True,
    )
    existing = len(study.get_trials(deepcopy=False))
    if existing:
        study.sampler = make_sampler(cfg, resumed_trials=existing)
    stored = study.user_attrs.get("objectives")
    if stored is None:
        study.set_user_attr("objectives", names)
        study.set_user_attr("space", cfg.space.name)
        study.set_user_attr("hardware", cfg.hardware.gpu)
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
    return study


def _is_interrupted(t: FrozenTrial) -> bool:
    return t.state == TrialState.FAIL and str(t.user_attrs.get(FAIL_REASON_ATTR, "")).startswith(INTERRUPTED)


def finished_count(study: optuna.Study) -> int:
    """Finished trials that count toward ``n_trials`` (interrupted ones do not)."""
    return sum(
        1
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
        if not _is_interrupted(t)
    )


def fail_orphaned_trials(study: optuna.Study) -> list[int]:
    """Mark RUNNING trials of dead workers on this host as FAIL ("interrupted").

    A killed process (SIGKILL, power loss) leaves its trial RUNNING forever in a journal
    file. Each trial records its worker's host and pid; a trial of this host whose pid is
    gone is failed so it neither blocks nor counts. Trials of live workers (parallel runs
    on the same storage) and of other hosts are left alone (database storages have
    Optuna's heartbeat for those).
    """
    host = socket.gethostname()
    failed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        w = t.user_attrs.get("worker") or {}
        if w.get("host") != host or not isinstance(w.get("pid"), int) or w["pid"] == os.getpid():
            continue
        try:
            os.kill(w["pid"], 0)
            continue  # alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # alive, another user's
        study._storage.set_trial_user_attr(t._trial_id, FAIL_REASON_ATTR, f"{INTERRUPTED}: worker pid {w['pid']} is gone")
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        failed.append(t.number)
    return failed


def _resolve_gpu(cfg: SearchConfig) -> Any:
    from co_design.hardware import get_gpu, load_gpu

    gpu = load_gpu(cfg.hardware.file) if cfg.hardware.file else get_gpu(cfg.hardware.gpu)
    if cfg.hardware.overrides:
        changes = dict(cfg.hardware.overrides)
        if "peak_flops_per_s" in changes:  # merge per precision
            changes["peak_flops_per_s"] = {**dict(gpu.peak_flops_per_s), **dict(changes["peak_flops_per_s"])}
        gpu = gpu.replace(**changes)
    return gpu


def _check_precisions(cfg: SearchConfig, gpu: Any) -> None:
    """Every precision the study may serve in must exist on the GPU (before any trial runs)."""
    wanted = {cfg.deployment.weights, cfg.deployment.activations, *cfg.space.precisions}
    missing = sorted(p for p in wanted if p not in gpu.peak_flops_per_s)
    if missing:
        raise ConfigError(
            [
                f"hardware.gpu={gpu.name!r} has no tensor-core path for {missing} (it has "
                f"{sorted(gpu.peak_flops_per_s)}); change deployment.weights/activations or space.precisions"
            ]
        )


# --------------------------------------------------------------------------- the job
def run(
    cfg: Any,
    *,
    run_dir: str | Path | None = None,
    train_fn: Callable[..., Any] | None = None,
    datamodule_factory: Callable[[], Any] | None = None,
) -> RunResult:
    """Run the search job for ``cfg`` (a composed DictConfig or :class:`SearchConfig`).

    Raises :class:`ConfigError` before any trial runs when the configuration is invalid.
    """
    t_start = time.perf_counter()
    cfg = validate(to_search_config(cfg))
    run_dir = Path(run_dir or cfg.output_dir or Path("outputs") / cfg.study_name).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        gpu = _resolve_gpu(cfg)
    except (ValueError, TypeError) as exc:  # a bad GPU file or override value
        raise ConfigError([f"hardware: {exc}; fix hardware.file or hardware.overrides"]) from None
    _check_precisions(cfg, gpu)
    storage, storage_url = make_storage(cfg.storage, run_dir)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # this job prints its own line per trial
    study = open_study(cfg, storage)
    orphans = fail_orphaned_trials(study)
    names = list(cfg.objectives.names)
    say = _say
    done = finished_count(study)
    remaining = max(0, cfg.n_trials - done)
    if orphans:
        say(f"marked trial(s) {orphans} of a killed run as FAIL (interrupted); they do not count")
    if done:
        say(f"resuming study {cfg.study_name!r}: {done} finished trial(s) of n_trials={cfg.n_trials}; running {remaining} more")
    else:
        say(f"new study {cfg.study_name!r}: {cfg.n_trials} trial(s), objectives {names}, sampler {cfg.sampler.name}")
    say(f"run dir {run_dir}  storage {storage_url}")

    tracker = make_tracker(cfg, str(run_dir))
    objective = Objective(
        cfg, gpu=gpu, run_dir=str(run_dir), tracker=tracker, datamodule_factory=datamodule_factory, train_fn=train_fn
    )
    if objective.needs_proxy and remaining:
        objective.datamodule()  # build (or find cached) the corpus before the first trial starts

    state = {"ran": 0}

    def after_trial(study: optuna.Study, trial: FrozenTrial) -> None:
        state["ran"] += 1
        row = None
        try:  # reporting problems are logged; they must not end the study
            summary = write_results(study, names, run_dir, storage=storage_url, n_trials=cfg.n_trials)
            row = next((r for r in summary["rows"] if r["trial"] == trial.number), None)
            tracker.finish_trial(trial, row)
            if cfg.plots:
                _plots(study, names, run_dir, summary)
        except Exception as exc:
            log.warning("results of trial %d not fully written: %s: %s", trial.number, type(exc).__name__, exc)
        say(_trial_line(trial, row, names))
        if finished_count(study) >= cfg.n_trials:  # parallel workers on one storage: stop at the target
            study.stop()

    interrupted = False
    if remaining:
        try:
            study.optimize(
                objective,
                n_trials=remaining,
                catch=(Exception,),
                callbacks=[after_trial],
                gc_after_trial=True,
                show_progress_bar=not cfg.quiet,
            )
        except KeyboardInterrupt:
            interrupted = True
            say("interrupted: finished trials are saved; run the same command to resume")
        finally:
            tracker.close()

    summary = write_results(study, names, run_dir, storage=storage_url, n_trials=cfg.n_trials)
    figures: dict[str, str] = {}
    if cfg.plots:
        figures = _plots(study, names, run_dir, summary)
    par = parallel_coordinates_html(summary["rows"], names)
    if par:
        figures["parallel_coordinates"] = par
    wandb_dir = None
    if summary["rows"] and not interrupted:
        try:
            wandb_dir = tracker.summary(summary["rows"], names, figures)
        except Exception as exc:  # the files and the storage hold everything; W&B is a view
            log.warning("W&B summary run not written: %s: %s", type(exc).__name__, exc)
    counts = summary["trials"]
    title = (
        f"Pareto front of {cfg.study_name!r}: {summary['pareto_size']} of {sum(counts.values())} trials "
        f"({counts['COMPLETE']} complete, {counts['PRUNED']} pruned "
        f"[{summary['infeasible_before_training']} infeasible before training], {counts['FAIL']} failed) "
        f"on {gpu.name}"
    )
    print_pareto_table(summary, title=title)  # printed even when quiet: it is the job's answer
    print(f"results: {run_dir}/pareto.csv, pareto.json, trials.csv, summary.json, plots/")
    if wandb_dir:
        print(f"W&B summary run: {wandb_dir} (mode {tracker.mode})")
    dashboard = storage_url.removeprefix("journal://") if storage_url.startswith("journal://") else storage_url
    print(f"dashboard: optuna-dashboard {dashboard}")
    if interrupted:
        raise KeyboardInterrupt
    return RunResult(
        study=study,
        run_dir=run_dir,
        ran=state["ran"],
        finished=finished_count(study),
        summary=summary,
        wandb_summary_dir=wandb_dir,
        seconds=time.perf_counter() - t_start,
    )


def _plots(study: optuna.Study, names: list[str], run_dir: Path, summary: dict[str, Any]) -> dict[str, str]:
    try:
        return write_plots(study, names, run_dir, summary["hypervolume_reference_point"])
    except Exception as exc:  # a plotting problem must not end the study
        log.warning("plots not written: %s: %s", type(exc).__name__, exc)
        return {}


def _say(msg: str) -> None:
    """One line of progress, printed above Optuna's progress bar (or plainly without one)."""
    try:
        from tqdm import tqdm

        tqdm.write(msg, file=sys.stdout)
    except ImportError:  # pragma: no cover
        print(msg, flush=True)


def _trial_line(trial: FrozenTrial, row: dict[str, Any] | None, names: list[str]) -> str:
    row = row or {}
    parts = [f"trial {trial.number:>3} {trial.state.name:<8}", str(row.get("shape") or "")]
    if trial.state == TrialState.COMPLETE and trial.values:
        parts.append("  ".join(f"{n}={v:,.4g}" for n, v in zip(names, trial.values)))
    if row.get("reason"):
        parts.append(f"({row['reason']})")
    if row.get("proxy_seconds"):
        parts.append(f"[proxy {row['proxy_seconds']:.1f} s]")
    return "  ".join(p for p in parts if p)


def main_entry(cfg: Any) -> int:
    """Hydra entry: run in Hydra's run dir; configuration errors -> message and exit status 2."""
    from hydra.core.hydra_config import HydraConfig

    try:
        run_dir = HydraConfig.get().runtime.output_dir
    except ValueError:
        run_dir = None
    try:
        run(cfg, run_dir=run_dir)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
