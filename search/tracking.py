"""Weights & Biases tracking: one run per evaluated trial, one summary run per study.

- Trial runs (``group=study_name``, ``job_type="trial"``): the trial's parameters,
  full and proxy architectures, deployment and prediction as config; the proxy's
  loss curve and the callback's ``co_design/*`` metrics through Lightning's
  ``WandbLogger``; the final state, objective values and reasons in the summary.
  Trials found infeasible before training get no run (they are rows of the summary
  table with their reason).
- Summary run (``job_type="summary"``, id ``summary-<study uid>``, written by the worker
  that finishes last: :mod:`search.workers`): a ``wandb.Table`` of every trial with a
  ``pareto`` flag, scatter charts (loss vs tok/s/GPU; tok/s/GPU vs tok/s/user),
  and parallel coordinates as an interactive plotly figure (``wandb.Html``; W&B has
  no parallel-coordinates chart API, only the UI panel, which the table also feeds).

Mode: ``tracking.mode=auto`` is ``online`` when an API key is present
(``WANDB_API_KEY`` or an ``api.wandb.ai`` entry in ``~/.netrc``) and ``offline``
otherwise (``wandb sync <run dir>/wandb/offline-run-*`` uploads later); an explicit
``WANDB_MODE`` in the environment wins over ``auto``. ``tracking=off`` disables W&B.

Secrets: run configs and the command line W&B records as metadata (``args``) pass
through :func:`search.redact.redact` (a storage URL's password).
"""

from __future__ import annotations

import json
import logging
import netrc
import os
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from search.objective import INFEASIBLE_ATTR, PERF_ATTR
from search.redact import redact, redacted_argv
from search.results import PARETO_COLUMNS

__all__ = ["NullTracker", "WandbTracker", "make_tracker", "resolve_wandb_mode", "has_wandb_api_key", "wandb_host"]


def wandb_host() -> str:
    """The W&B server's host name: ``$WANDB_BASE_URL``'s, else ``api.wandb.ai``."""
    return os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("://")[-1].split("/")[0]


def has_wandb_api_key() -> bool:
    """Whether W&B can log in without asking: ``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE``, or the
    server's entry in ``~/.netrc`` (``$NETRC``), where ``wandb login`` writes it. No network."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        auth = netrc.netrc(path)
    except (OSError, netrc.NetrcParseError):
        return False
    return auth.authenticators(wandb_host()) is not None


def resolve_wandb_mode(mode: str) -> str:
    """``auto`` -> ``$WANDB_MODE`` if set, else ``online`` with an API key, else ``offline``."""
    if mode != "auto":
        return mode
    env = os.environ.get("WANDB_MODE")
    if env in ("online", "offline", "disabled", "dryrun", "run"):
        return {"dryrun": "offline", "run": "online"}.get(env, env)
    return "online" if has_wandb_api_key() else "offline"


class NullTracker:
    """``tracking=off``: records nothing."""

    mode = "off"

    def trial_logger(self, trial: Any) -> None:
        return None

    def finish_trial(self, trial: FrozenTrial, row: dict[str, Any] | None) -> None:
        pass

    def summary(self, rows: list[dict[str, Any]], objectives: list[str], figures: dict[str, Any], *,
                run_id: str | None = None) -> str | None:
        return None

    def close(self) -> None:
        pass


class WandbTracker:
    """W&B runs for a study (see the module docstring)."""

    def __init__(self, cfg: Any, run_dir: str) -> None:
        import wandb

        self.wandb = wandb
        self.cfg = cfg
        self.mode = resolve_wandb_mode(cfg.tracking.mode)
        self.dir = str(run_dir)
        self.study_name = cfg.study_name
        self._runs: dict[int, Any] = {}
        logging.getLogger("wandb").setLevel(logging.WARNING)

    def _init(self, *, name: str, job_type: str, config: dict[str, Any], run_id: str | None = None) -> Any:
        """A new W&B run (or, with ``run_id``, that run resumed if it exists); its config and the
        command line W&B records in its metadata are redacted."""
        t = self.cfg.tracking
        resume = {"id": run_id, "resume": "allow"} if run_id else {}
        with redacted_argv():
            return self.wandb.init(
                **resume,
                project=t.project,
                entity=t.entity,
                group=self.study_name,
                job_type=job_type,
                name=name,
                config=redact(config),
                tags=list(t.tags) or None,
                dir=self.dir,
                mode=self.mode,
                reinit="create_new",
                settings=self.wandb.Settings(console="off", silent=True),
            )

    def _trial_config(self, trial: Any) -> dict[str, Any]:
        attrs = dict(trial.user_attrs)
        return {
            "study_name": self.study_name,
            "trial": trial.number,
            "params": dict(trial.params),
            "arch": attrs.get("arch"),
            "proxy_arch": attrs.get("proxy_arch"),
            "deployment": attrs.get("deployment"),
            "precision": attrs.get("precision"),
            "hardware": self.cfg.hardware.gpu,
            "objectives": list(self.cfg.objectives.names),
        }

    def trial_logger(self, trial: Any) -> Any:
        """A Lightning ``WandbLogger`` on this trial's run (created at its first proxy run; the rungs
        of successive halving log into the same run, one after the other)."""
        from lightning.pytorch.loggers import WandbLogger

        run = self._runs.get(trial.number)
        if run is None:
            run = self._init(name=f"{self.study_name}-trial-{trial.number}", job_type="trial",
                             config=self._trial_config(trial))
            self._runs[trial.number] = run
        return WandbLogger(experiment=run)

    def finish_trial(self, trial: FrozenTrial, row: dict[str, Any] | None) -> None:
        """Close the trial's run with its outcome (creating it when no proxy ran)."""
        run = self._runs.pop(trial.number, None)
        if run is None:
            if trial.state == TrialState.PRUNED and INFEASIBLE_ATTR in trial.user_attrs:
                return  # rejected before training: only a summary-table row
            run = self._init(name=f"{self.study_name}-trial-{trial.number}", job_type="trial", config=self._trial_config(trial))
        summary: dict[str, Any] = {"state": trial.state.name}
        if row:
            summary.update({k: v for k, v in row.items() if isinstance(v, (int, float, str, bool)) and v is not None})
        pred = trial.user_attrs.get(PERF_ATTR)
        if isinstance(pred, dict):
            summary.update({f"prediction/{k}": v for k, v in pred.items() if isinstance(v, (int, float, str, bool))})
        for k, v in summary.items():
            run.summary[k] = v
        run.finish(exit_code=0 if trial.state != TrialState.FAIL else 1)

    def summary(self, rows: list[dict[str, Any]], objectives: list[str], figures: dict[str, Any], *,
                run_id: str | None = None) -> str | None:
        """Log the all-trials table, charts and figures to a ``job_type="summary"`` run; return its dir.

        ``run_id``: the study's summary run id (:func:`search.workers.summary_run_id`), so every
        worker and every later run of the study logs into one W&B run (``resume="allow"``).

        Each figure is logged as ``wandb.Html`` (``plots/<name>``) and, when
        :func:`search.plots.write_plots` wrote its PNG, as ``wandb.Image``
        (``plots/<name>_image``); the serving curves also as a native line chart
        (``serving_curves``, from ``plots/serving_curves.json``).
        """
        import json

        wandb = self.wandb
        run = self._init(
            name=f"{self.study_name}-summary",
            job_type="summary",
            config={"study_name": self.study_name, "objectives": objectives, "n_trials": self.cfg.n_trials},
            run_id=run_id,
        )
        columns = sorted({k for r in rows for k in r}, key=lambda k: _COLUMN_ORDER.get(k, 100))
        data = [[_cell(r.get(c)) for c in columns] for r in rows]
        table = wandb.Table(columns=columns, data=data)
        pareto_rows = [r for r in rows if r.get("pareto")]
        pareto_table = wandb.Table(columns=columns, data=[[_cell(r.get(c)) for c in columns] for r in pareto_rows])
        log: dict[str, Any] = {"trials": table, "pareto_front": pareto_table}
        complete = [r for r in rows if r.get("state") == "COMPLETE"]
        chart_cols = [c for c in ("loss", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_ms", "tpot_ms") if c in columns]
        def scatter_table(x: str, y: str) -> Any:
            data = [[r.get(x), r.get(y), bool(r.get("pareto")), r.get("trial")] for r in complete]
            return wandb.Table(columns=[x, y, "pareto", "trial"], data=data)

        if "loss" in chart_cols and "tokens_per_s_per_gpu" in chart_cols:
            log["loss_vs_tokens_per_s_per_gpu"] = wandb.plot.scatter(
                scatter_table("tokens_per_s_per_gpu", "loss"), "tokens_per_s_per_gpu", "loss",
                title="proxy loss vs output tok/s/GPU",
            )
        if "tokens_per_s_per_gpu" in chart_cols and "tokens_per_s_per_user" in chart_cols:
            log["tokens_per_s_per_gpu_vs_user"] = wandb.plot.scatter(
                scatter_table("tokens_per_s_per_user", "tokens_per_s_per_gpu"), "tokens_per_s_per_user",
                "tokens_per_s_per_gpu", title="output tok/s/GPU vs tok/s/user",
            )

        def serving_curves_chart(path: Path) -> Any:
            try:
                members = json.loads(path.read_text())["members"]
            except (OSError, ValueError, KeyError):
                return None
            xs, ys, keys = [], [], []
            for m in members:
                for c in m["curves"]:
                    xs.append(c["tokens_per_s_per_user"])
                    ys.append(c["tokens_per_s_per_gpu"])
                    keys.append(m["label"] if c["role"] == "throughput" else f"{m['label']} ({c['layout']}, interactive)")
            if not keys:
                return None
            return wandb.plot.line_series(xs=xs, ys=ys, keys=keys, xname="output tok/s/user",
                                          title="output tok/s/GPU vs tok/s/user (serving curves)")

        plots_dir = Path(self.dir) / "plots"
        for key, html in figures.items():
            log[f"plots/{key}"] = wandb.Html(html, inject=False)
            png = plots_dir / f"{key}.png"  # written beside the HTML by search.plots.write_plots
            if png.is_file():
                log[f"plots/{key}_image"] = wandb.Image(str(png), caption=key.replace("_", " "))
        if "serving_curves" in figures:
            chart = serving_curves_chart(plots_dir / "serving_curves.json")
            if chart is not None:
                log["serving_curves"] = chart
        run.log(log)
        run.summary["trials_total"] = len(rows)
        run.summary["trials_complete"] = len(complete)
        run.summary["pareto_size"] = len(pareto_rows)
        run_dir = getattr(run, "dir", None)
        run.finish()
        return str(Path(run_dir).parent) if run_dir else None

    def close(self) -> None:
        for run in list(self._runs.values()):
            run.finish(exit_code=1)
        self._runs.clear()


# Table columns lead with the trial's identity and state, then the Pareto table's columns.
_COLUMN_ORDER = {k: i for i, k in enumerate(["trial", "state", "pareto", *PARETO_COLUMNS[1:]])}


def _cell(v: Any) -> Any:
    if v is None or isinstance(v, (int, float, str, bool)):
        return v
    return json.dumps(v) if isinstance(v, (dict, list)) else str(v)


def make_tracker(cfg: Any, run_dir: str) -> Any:
    """The tracker for ``cfg.tracking`` (W&B, or nothing for ``tracking=off``/mode disabled)."""
    if cfg.tracking.backend == "off":
        return NullTracker()
    tracker = WandbTracker(cfg, run_dir)
    if tracker.mode == "disabled":
        return NullTracker()
    return tracker
