"""What the job prints: progress lines, one line per trial, the closing report, and errors in one line.

Everything here reaches the console already redacted where it can hold a secret
(:func:`search.redact.redact`); tracebacks go to ``<run dir>/errors.log``, not the console.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from search.redact import redact

__all__ = ["say", "trial_line", "FailedTrialLog", "job_failure", "print_outcome"]


def say(msg: str) -> None:
    """One line of progress, printed above Optuna's progress bar (or plainly without one), and flushed:
    in a log file (``> log``, a batch system) stdout is block-buffered, and an unflushed line would
    show only when a few kilobytes had piled up or the job ended."""
    try:
        from tqdm import tqdm

        tqdm.write(msg, file=sys.stdout)
    except ImportError:  # pragma: no cover
        print(msg)
    sys.stdout.flush()


def trial_line(trial: FrozenTrial, row: dict[str, Any] | None, names: list[str]) -> str:
    row = row or {}
    parts = [f"trial {trial.number:>3} {trial.state.name:<8}", str(row.get("shape") or "")]
    if trial.state == TrialState.COMPLETE and trial.values:
        parts.append("  ".join(f"{n}={v:,.0f}" if abs(v) >= 1000 else f"{n}={v:.4g}" for n, v in zip(names, trial.values)))
    if row.get("reason"):
        parts.append(f"({row['reason']})")
    if row.get("proxy_seconds"):
        parts.append(f"[proxy {row.get('proxy_shape') or ''}: {row['proxy_seconds']:.1f} s]")
    return "  ".join(p for p in parts if p)


class FailedTrialLog(logging.Filter):
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


def print_outcome(
    summary: dict[str, Any],
    *,
    title: str,
    run_dir: Path,
    storage_url: str,
    errors_log: Path | None,
    wandb_dir: str | None,
    wandb_mode: str,
    wandb_note: str,
) -> None:
    """The job's answer: the Pareto table (printed even when quiet) and where everything is."""
    from search.results import print_pareto_table

    print_pareto_table(summary, title=title)
    print(f"results: {run_dir}/pareto.csv, pareto.json, trials.csv, summary.json, plots/")
    if errors_log is not None:
        print(f"tracebacks of failed trials: {errors_log}")
    if wandb_dir:
        print(f"W&B summary run: {wandb_dir} (mode {wandb_mode})")
    elif wandb_note:
        print(f"W&B summary run not written by this worker: {wandb_note}")
    dashboard = storage_url.removeprefix("journal://") if storage_url.startswith("journal://") else storage_url
    print(f"dashboard: optuna-dashboard {dashboard}")


def job_failure(exc: Exception, path: Path) -> str:
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
