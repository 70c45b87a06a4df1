"""The search job: validate, open (or resume) the study, run the remaining trials, report.

:func:`run` is the whole job for a composed config; ``python -m search`` (Hydra) calls
it with Hydra's run directory. Tests call it in-process with ``hydra.compose``.

Resume: the study lives in its storage (default: ``<run dir>/study.journal``, and the
run dir is ``outputs/<study_name>``), so the same command opens the same study.
``n_trials`` is the number of finished trials (COMPLETE + PRUNED + FAIL, trials
interrupted by Ctrl-C, a killed process or a lost heartbeat excepted) the study should hold; a
second run only runs the remainder, starting with the shapes of interrupted trials (queued once each,
user attribute ``retry_of``). Every finished trial is in the storage the moment it
ends, so a crash or Ctrl-C loses only the trial in flight (a journal record a crash cut short
is removed at the next start: :mod:`search.storage`).

Parallel workers: start the same command several times (on one machine, sharing the
run dir's journal; or on many, with a database ``storage=``). Each worker seeds its
sampler with ``seed + the number of its first trial``, no shape is evaluated twice
(finished or in flight on another worker), the study ends with ``n_trials`` counted
trials, results files are replaced whole, and the worker that finishes last writes the
one W&B summary run (:mod:`search.workers`).
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.config import (
    OBJECTIVES,
    ConfigError,
    SearchConfig,
    enumerates,
    show_progress_bars,
    steps_of,
    study_settings,
    to_search_config,
    validate,
)
from search.exact import ENUMERATION_ATTR, enumerate_into
from search.objective import (
    DUPLICATE_ATTR,
    EXHAUSTED_ATTR,
    FAIL_REASON_ATTR,
    INTERRUPTED,
    SURPLUS_ATTR,
    Objective,
    counts_toward_n_trials,
    held_count,
    is_interrupted,
    retry_interrupted,
    worker_is_gone,
)
from search.plots import write_plots
from search.redact import hydra_files, redact, redact_files
from search.results import parallel_coordinates_html, print_pareto_table, trial_row, write_results
from search.scoring import definitions
from search.space import grid_size, parallelism_coverage
from search.storage import make_storage
from search.tracking import make_tracker
from search.workers import (
    WorkerSeededSampler,
    ensure_study_uid,
    record_summary,
    run_dir_lock,
    summary_run_id,
    summary_turn,
)

__all__ = ["run", "RunResult", "make_sampler", "open_study", "finished_count", "main_entry"]

log = logging.getLogger("search")
SETTINGS_ATTR = "settings"  # study user attribute: config.study_settings of the run that created it


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
def make_sampler(cfg: SearchConfig, *, resumed_trials: int = 0) -> optuna.samplers.BaseSampler:
    """The sampler named by ``cfg.sampler.name`` (validated), seeded ``seed + resumed_trials``.

    The job passes the number of the first trial the worker runs
    (:class:`search.workers.WorkerSeededSampler`): a resumed study then gets another seed
    than its first run (the same seed again would replay its draws and propose the same
    shapes a second time), and so does every worker started together on one study.
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
            changed = [k for k in sorted(set(old) | set(settings)) if old.get(k) != settings.get(k)]
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


def finished_count(study: optuna.Study) -> int:
    """Finished trials that count toward ``n_trials`` (interrupted ones, duplicates and surplus ones do not)."""
    return sum(1 for t in study.get_trials(deepcopy=False) if counts_toward_n_trials(t))


#: consecutive duplicate proposals after which a sampled study stops (a backstop: a duplicate is normally
#: followed by a random unseen shape, and the study stops at once when none is left)
MAX_CONSECUTIVE_DUPLICATES = 100


def fail_orphaned_trials(study: optuna.Study) -> list[int]:
    """Mark RUNNING trials of dead workers as FAIL ("interrupted"); return their numbers.

    Database storages: trials whose heartbeat stopped (Optuna's ``fail_stale_trials``, the
    reason recorded by :mod:`search.storage`, the shape queued again by its callback).

    A killed process (SIGKILL, power loss) leaves its trial RUNNING forever in a journal
    file. Each trial records its worker's host and pid; a trial of this host whose pid is
    gone is failed so it neither blocks nor counts. Trials of live workers (parallel runs
    on the same storage) and of other hosts are left alone (database storages have
    Optuna's heartbeat for those).
    """
    failed = []
    with warnings.catch_warnings():  # experimental in optuna 5.0
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}
        optuna.storages.fail_stale_trials(study)  # database storages: trials without a heartbeat (search/storage.py)
        failed += [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
                   if t.number not in before and is_interrupted(t)]
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not worker_is_gone(t):
            continue
        pid = t.user_attrs["worker"]["pid"]
        study._storage.set_trial_user_attr(t._trial_id, FAIL_REASON_ATTR, f"{INTERRUPTED}: worker pid {pid} is gone")
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


def _check_proxy_device(cfg: SearchConfig) -> None:
    """A proxy asking for a GPU (``proxy=gpu`` sets ``proxy.accelerator: gpu``) needs one, before any trial runs."""
    if "loss" not in cfg.objectives.names or cfg.proxy.accelerator not in ("gpu", "cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(
            [
                f"proxy.accelerator={cfg.proxy.accelerator} but this machine has no CUDA device (the proxy trains "
                f"{steps_of(cfg.proxy):,} steps of {cfg.proxy.data.batch_size} x {cfg.proxy.data.seq_len} tokens per "
                "trial); on this machine run objectives=perf_only (the performance objectives, no training), or "
                "proxy.accelerator=cpu to train this proxy on the CPU anyway (hours per trial for GPU-sized "
                "proxies; proxy=tiny/small shrink a candidate by fixed factors, too little for full-size spaces)"
            ]
        )


#: bytes per trained parameter: fp32 weights, gradients and AdamW's two moments (a lower bound: no activations)
TRAIN_STATE_BYTES_PER_PARAM = 16


def _check_proxy_memory(cfg: SearchConfig, vocab: int, say: Callable[[str], None]) -> None:
    """Say how large the proxies are; refuse a space whose smallest proxy cannot be trained here.

    The bound is the training state alone (:data:`TRAIN_STATE_BYTES_PER_PARAM`) against
    the device's memory (GPU memory, or the machine's RAM for a CPU proxy): a proxy over
    it fails out of memory in every trial, so the study stops before the first.
    """
    import torch

    from search.proxy import reduce_architecture, trainer_settings
    from search.space import human_count, space_corners

    small, large = (
        reduce_architecture(c.arch, cfg.proxy.reduction, vocab).param_counts().total
        for c in space_corners(cfg.space, cfg.deployment)
    )
    if trainer_settings(cfg.proxy.accelerator, cfg.proxy.precision)["accelerator"] == "cpu":
        where, capacity = "RAM", os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    else:
        where, capacity = "GPU memory", torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    r = cfg.proxy.reduction
    say(
        f"proxies: {human_count(small)} to {human_count(large)} parameters (proxy.reduction width={r.width} "
        f"depth={r.depth} experts={r.experts} of full-size candidates of {human_count(_full_params(cfg, 0))} "
        f"to {human_count(_full_params(cfg, 1))})"
    )
    need_small_gb, need_large_gb = (n * TRAIN_STATE_BYTES_PER_PARAM / 1e9 for n in (small, large))
    if need_small_gb > capacity / 1e9:
        raise ConfigError(
            [
                f"the smallest proxy of space={cfg.space.name!r} has {human_count(small)} parameters: training it "
                f"needs at least {need_small_gb:,.0f} GB and this machine has {capacity / 1e9:,.0f} GB of {where}; "
                "shrink it with proxy.reduction.width/depth/experts (e.g. proxy=gpu on a GPU), use a smaller space, "
                "or objectives=perf_only to skip training"
            ]
        )
    if need_large_gb > capacity / 1e9:
        say(
            f"note: proxies above ~{capacity / TRAIN_STATE_BYTES_PER_PARAM:,.3g} parameters cannot be trained in "
            f"{capacity / 1e9:,.0f} GB of {where} (the largest has {human_count(large)}); such trials will FAIL "
            "out of memory; shrink the proxies with proxy.reduction.* to avoid it"
        )


def _check_proxy_collisions(cfg: SearchConfig, vocab: int, say: Callable[[str], None]) -> None:
    """Say whether every distinct candidate trains its own proxy; warn, naming examples, when not."""
    from search.proxy import proxy_collisions

    found = proxy_collisions(cfg.space, cfg.deployment, cfg.proxy.reduction, vocab)
    if found is None:
        say(f"proxies: space={cfg.space.name!r} is too large to check that distinct candidates get distinct proxies")
        return
    n, proxies, examples = found
    if proxies == n:
        say(f"proxies: each of the {n} distinct candidates of space={cfg.space.name!r} trains its own proxy")
        return
    say(
        f"warning: proxy.reduction maps the {n} distinct candidates of space={cfg.space.name!r} onto {proxies} proxies "
        f"(e.g. {examples[0]}): candidates sharing a proxy get the same loss, so the performance objectives alone "
        "decide between them; use the proxy its recipes pair with it (dense_1b: proxy=cpu; dense_tiny, moe_tiny: "
        "proxy=tiny; dense, moe: proxy=gpu) or set proxy.reduction (keep_layout=true, a depth whose steps stay apart)"
    )


def _check_precision_search(cfg: SearchConfig, say: Callable[[str], None]) -> None:
    """Say plainly that a one-seed proxy does not resolve the quantization penalty between precisions."""
    if len(set(cfg.space.precisions)) > 1:
        say(
            f"warning: space.precisions={list(cfg.space.precisions)} with the loss objective: one proxy run does not "
            "resolve the quantization penalty between precisions above its seed noise (benchmarks/results/"
            "proxy_fidelity.md: NVFP4 minus BF16 was +0.012 nats on average against a seed standard deviation of "
            "0.020, resolved for 5 of 17 candidates), so the loss axis of a precision comparison is mostly noise; "
            "the performance objectives are exact"
        )


def _full_params(cfg: SearchConfig, corner: int) -> int:
    from search.space import space_corners

    return space_corners(cfg.space, cfg.deployment)[corner].arch.param_counts().total


def _check_precisions(cfg: SearchConfig, gpu: Any) -> None:
    """Every precision the study may serve in must run natively on the GPU (before any trial runs).

    One check for the whole project: :func:`co_design.hardware.check_precision`, the GPU's precision
    table that ``co-design predict`` and the callback use too. A searched precision serves both
    weights and activations (search/scoring.py), so it is checked as both.
    """
    from co_design.hardware import check_precision

    d = cfg.deployment
    wanted = [(f, f"deployment.{f}", getattr(d, f)) for f in ("weights", "activations", "kv_cache")]
    wanted += [(f, f"space.precisions[{i}]", p) for i, p in enumerate(cfg.space.precisions)
               for f in ("weights", "activations")]
    problems: list[str] = []
    for field_name, key, precision in wanted:
        try:
            check_precision(gpu, field_name, precision, label=key)
        except ValueError as exc:
            if not any(p.startswith(f"{key}=") for p in problems):  # one line per key
                problems.append(str(exc))
    if problems:
        raise ConfigError(problems)


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
    try:
        gpu = _resolve_gpu(cfg)
    except (ValueError, TypeError) as exc:  # a bad GPU file or override value
        raise ConfigError([f"hardware: {exc}; fix hardware.file or hardware.overrides"]) from None
    _check_precisions(cfg, gpu)
    _check_proxy_device(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    storage, storage_url = make_storage(cfg.storage, run_dir, say=_say)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # this job prints its own line per trial
    study = open_study(cfg, storage)
    exact = enumerates(cfg)
    with run_dir_lock(run_dir):  # workers started together on the run dir's journal queue each retry once
        orphans = fail_orphaned_trials(study)
        done = finished_count(study)
        remaining = 0 if exact else max(0, cfg.n_trials - done)
        retries = retry_interrupted(study) if remaining else []
    names = list(cfg.objectives.names)
    say = _say
    served, layouts, why = parallelism_coverage(cfg.space, cfg.deployment)
    if served < layouts:
        say(
            f"note: {layouts - served} of the {layouts} head layouts of space={cfg.space.name!r} have no working "
            f"parallelism choice (e.g. {why[0] if why else '?'}); such candidates end PRUNED before training"
        )
    if orphans:
        say(f"marked trial(s) {orphans} of a killed run as FAIL (interrupted); they do not count")
    if retries:
        say(f"queued the shape(s) of interrupted trial(s) {retries} to be evaluated again")
    if exact:
        say(
            f"{'resuming' if done else 'new'} study {cfg.study_name!r}: objectives {names} need no training, so every "
            f"distinct shape of space={cfg.space.name!r} is scored and the front is exact (n_trials and the sampler "
            "are not used; strategy=sample samples instead)"
        )
    elif done:
        say(f"resuming study {cfg.study_name!r}: {done} finished trial(s) of n_trials={cfg.n_trials}; running {remaining} more")
    else:
        say(f"new study {cfg.study_name!r}: {cfg.n_trials} trial(s), objectives {names}, sampler {cfg.sampler.name}")
    if not exact and remaining:
        most = grid_size(cfg.space, cfg.deployment)
        if cfg.n_trials > most:
            say(f"note: space={cfg.space.name!r} has at most {most} distinct shapes, fewer than n_trials={cfg.n_trials}; "
                "the study stops when the sampler finds no new one")
    say(f"run dir {run_dir}  storage {storage_url}")

    tracker = make_tracker(cfg, str(run_dir))
    objective = Objective(
        cfg, gpu=gpu, run_dir=str(run_dir), tracker=tracker, datamodule_factory=datamodule_factory, train_fn=train_fn
    )
    if objective.needs_proxy and remaining:
        dm = objective.datamodule()  # build (or find cached) the corpus before the first trial starts
        _check_proxy_memory(cfg, int(dm.vocab_size), say)
        _check_proxy_collisions(cfg, int(dm.vocab_size), say)
        _check_precision_search(cfg, say)

    state = {"ran": 0, "reported_at": 0.0, "report_s": 0.0, "in_a_row": 0, "exhausted": False}

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
        row = trial_row(trial, names, pareto=False)
        try:  # reporting problems are logged; they must not end the study
            # Rewrite the files and plots after a trial unless that would take more than ~10% of the
            # run: each rewrite reads every trial, so for millisecond (performance-only) trials it
            # would dominate; they are then rewritten once the trials since the last rewrite took
            # 9x its cost, and always at the end.
            # Parallel workers: one rewrites at a time; the others skip their turn (the files show the same study).
            if time.perf_counter() - state["reported_at"] >= 9 * state["report_s"]:
                with run_dir_lock(run_dir, wait=False) as mine:
                    if mine:
                        t0 = time.perf_counter()
                        summary = write_results(study, names, run_dir, storage=storage_url, n_trials=cfg.n_trials,
                                                extra=_summary_extra(cfg, study))
                        row = next((r for r in summary["rows"] if r["trial"] == trial.number), row)
                        if cfg.plots:
                            _plots(study, names, run_dir, summary, gpu)
                        state["reported_at"] = time.perf_counter()
                        state["report_s"] = state["reported_at"] - t0
            tracker.finish_trial(trial, row)
        except Exception as exc:
            log.warning("results of trial %d not fully written: %s: %s", trial.number, type(exc).__name__, exc)
        say(_trial_line(trial, row, names))
        if finished_count(study) >= cfg.n_trials:  # parallel workers on one storage: stop at the target
            study.stop()

    interrupted = False
    failures = _FailedTrialLog(run_dir / "errors.log")
    optuna_logger = logging.getLogger("optuna.study._optimize")
    if exact:
        say(f"enumerating {grid_size(cfg.space, cfg.deployment):,} suggestion combinations of space={cfg.space.name!r} "
            "(shapes outside space.params are skipped before scoring; Ctrl-C keeps what is scored)")
        try:
            t0 = time.perf_counter()
            result = enumerate_into(study, cfg, gpu, names)
            state["ran"] = result.scored
            say(
                f"scored {result.scored} shape(s) in {time.perf_counter() - t0:.1f} s ({result.feasible} feasible); "
                f"the space has {result.candidates} distinct shapes: {result.outside_band} outside space.params, "
                f"{result.already_scored} scored before"
            )
        except KeyboardInterrupt:
            interrupted = True
            say("interrupted: the shapes scored so far are saved; run the same command to finish")
        finally:
            tracker.close()
    elif remaining:
        optuna_logger.addFilter(failures)
        try:
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
        except KeyboardInterrupt:
            interrupted = True
            say("interrupted: finished trials are saved; run the same command to resume")
        finally:
            optuna_logger.removeFilter(failures)
            tracker.close()

    # Under the run dir's lock, the study read inside it: of parallel workers, the one that writes last read
    # the study last, and only the worker that finishes last writes the W&B summary (search/workers.py).
    wandb_dir, wandb_note = None, ""
    with run_dir_lock(run_dir):
        summary = write_results(study, names, run_dir, storage=storage_url, n_trials=cfg.n_trials,
                                extra=_summary_extra(cfg, study))
        figures: dict[str, str] = {}
        if cfg.plots:
            figures = _plots(study, names, run_dir, summary, gpu)
        par = parallel_coordinates_html(summary["rows"], names)
        if par:
            figures["parallel_coordinates"] = par
        if summary["rows"] and not interrupted and tracker.mode != "off":
            fail_orphaned_trials(study)  # a killed worker's trial must not keep the summary waiting
            turn, wandb_note = summary_turn(study, run_dir)
            if turn:
                try:
                    wandb_dir = tracker.summary(summary["rows"], names, figures, run_id=summary_run_id(study))
                    record_summary(study, run_dir, wandb_dir)
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
    if failures.written:
        print(f"tracebacks of failed trials: {failures.path}")
    if wandb_dir:
        print(f"W&B summary run: {wandb_dir} (mode {tracker.mode})")
    elif wandb_note:
        print(f"W&B summary run not written by this worker: {wandb_note}")
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


class _FailedTrialLog(logging.Filter):
    """Move Optuna's per-failure traceback from the console to ``<run dir>/errors.log``.

    Optuna logs every failed trial with its full traceback; the job already prints the
    trial's one-line reason, so the console keeps that line and the file keeps the
    traceback for whoever debugs it.
    """

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.written = False

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if not msg.startswith("Trial ") or " failed with " not in msg:
            return True
        if " failed with parameters" in msg:
            with open(self.path, "a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {logging.Formatter().format(record)}\n\n")
            self.written = True
        return False


def loss_definition(cfg: SearchConfig) -> str:
    """What the loss objective is, in words: which model, how many tokens, which parametrization."""
    p = cfg.proxy
    steps = steps_of(p)
    tokens = steps * p.data.batch_size * p.data.seq_len
    r = p.reduction
    size = ("the full-size candidate" if r.width == 1 and r.depth == 1 and r.experts == 1 else
            f"its proxy (widths x{r.width:g}, layers x{r.depth:g}, experts x{r.experts:g})")
    budget = f"after {tokens:,} training tokens ({steps} steps)"
    h = p.halving
    if h.rungs > 1:
        first = tokens // h.eta ** (h.rungs - 1)
        budget = (f"after the most training tokens it reached under successive halving ({first:,} tokens for every "
                  f"candidate, up to {tokens:,} for the best 1/{h.eta ** (h.rungs - 1)}; proxy_steps in the results)")
    param = (f"muP (base width {p.mup.base_hidden}, lr {p.lr:g})" if p.mup is not None
             else f"standard parametrization (lr {p.lr:g})")
    return (f"loss: validation loss (nats/token) of {size} {budget}, {param}, "
            f"QAT in the serving precision: a ranking of shapes at the proxy's scale, not a loss the "
            f"full-size model will reach (benchmarks/results/proxy_fidelity.md measures how well it ranks)")


def _summary_extra(cfg: SearchConfig, study: optuna.Study) -> dict[str, Any]:
    """summary.json's account of what the numbers mean: the operating points and the runtime's limits."""
    d = cfg.deployment
    return {
        "definitions": ([loss_definition(cfg)] if "loss" in cfg.objectives.names else []) + definitions(d),
        "interactive_concurrency": d.interactive_concurrency,
        "runtime": {"max_batch": d.max_batch, "max_num_tokens": d.max_num_tokens},
        "strategy": "enumerate" if enumerates(cfg) else "sample",
        "enumeration": study.user_attrs.get(ENUMERATION_ATTR),
    }


def _plots(study: optuna.Study, names: list[str], run_dir: Path, summary: dict[str, Any], gpu: Any) -> dict[str, str]:
    try:
        return write_plots(study, names, run_dir, summary["hypervolume_reference_point"], summary["rows"], gpu)
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
        parts.append("  ".join(f"{n}={v:,.0f}" if abs(v) >= 1000 else f"{n}={v:.4g}" for n, v in zip(names, trial.values)))
    if row.get("reason"):
        parts.append(f"({row['reason']})")
    if row.get("proxy_seconds"):
        parts.append(f"[proxy {row.get('proxy_shape') or ''}: {row['proxy_seconds']:.1f} s]")
    return "  ".join(p for p in parts if p)


def main_entry(cfg: Any) -> int:
    """Hydra entry: run in Hydra's run dir; exit status 2 for configuration errors, 1 for any other.

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
    run_dir = hydra_cfg.runtime.output_dir if hydra_cfg is not None else None
    if hydra_cfg is not None:
        redact_files(hydra_files(hydra_cfg))
    try:
        run(cfg, run_dir=run_dir)
    except ConfigError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        print(f"error: {_job_failure(exc, Path(run_dir or '.') / 'errors.log')}", file=sys.stderr)
        return 1
    return 0


def _job_failure(exc: Exception, path: Path) -> str:
    """The one-line report of an unexpected error; its traceback goes to ``path`` (both redacted)."""
    import traceback

    text = redact(" ".join(str(exc).split())[:300])
    trace = redact("".join(traceback.format_exception(exc)))
    try:
        with open(path, "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} the job failed:\n{trace}\n")
    except OSError:
        return f"{type(exc).__name__}: {text}\n{trace}"
    return f"{type(exc).__name__}: {text} (traceback in {path})"
