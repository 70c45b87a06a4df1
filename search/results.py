"""Results of a study: one row per trial, the Pareto front, files, plots and the printed table.

Files in the run directory (rewritten after every trial and at the end):

- ``pareto.csv`` / ``pareto.json``: the Pareto-optimal trials (feasible, COMPLETE,
  non-dominated; ``study.best_trials``), one row each.
- ``trials.csv``: every finished trial with its state and reason, and its full-size
  architecture and its throughput point's deployment as JSON (``arch``, ``deployment_config``;
  ``pareto.json`` rows carry them too).
- ``loss_curves.json``: each trained proxy's validation loss against training tokens
  (``{trial: {"shape", "state", "tokens_loss": [[tokens, nats/token], ...]}}``).
- ``summary.json``: study name, storage, objectives and directions, counts, the
  hypervolume reference point and value.
- ``plots/``: drawn by :mod:`search.plots` (pairwise scatters, serving curves,
  hypervolume history).

Every shape appears once: a duplicate proposal, a surplus trial of a parallel worker and an
interrupted trial (its shape is retried) have no row; summary.json counts them.
Each file is replaced whole (:mod:`search.files`), so parallel workers rewriting them
never leave one half-written or holding another's content.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.config import OBJECTIVES, SearchConfig, enumerates, steps_of
from search.files import atomic_path, write_atomic
from search.exact import ENUMERATION_ATTR
from search.objective import INFEASIBLE_ATTR, INTERACTIVE_ATTR, LOSS_CURVE_ATTR, PERF_ATTR
from search.scoring import definitions
from search.space import human_count
from search.study import DUPLICATE_ATTR, FAIL_REASON_ATTR, SURPLUS_ATTR, evaluated_nothing, is_interrupted

__all__ = [
    "trial_rows",
    "trial_row",
    "pareto_rows",
    "reference_point",
    "hypervolume",
    "write_results",
    "format_pareto_table",
    "print_pareto_table",
    "PARETO_COLUMNS",
    "loss_definition",
    "summary_extra",
]

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
PARETO_COLUMNS = [
    "trial",
    "shape",
    "precision",
    "params_total",
    "params_active",
    "loss",
    "tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
    "ttft_ms",
    "tpot_ms",
    "deployment",
    "batch",
    "limited_by",
    "tokens_per_s_per_user_at_throughput",
    "ttft_p99_ms_at_throughput",
    "tpot_p99_ms_at_throughput",
    "interactive_deployment",
    "interactive_batch",
    "max_batch",
    "max_num_tokens",
    "memory_per_gpu_gb",
    "bound",
    "proxy_shape",
    "proxy_params",
    "proxy_steps",
    "proxy_seconds",
]


def _reason(t: FrozenTrial) -> str | None:
    a = t.user_attrs
    for key in (FAIL_REASON_ATTR, INFEASIBLE_ATTR):
        if key in a:
            return str(a[key])
    if t.state == TrialState.PRUNED and "pruned_at_step" in a:
        return f"stopped early at step {a['pruned_at_step']} (dominated)"
    if t.state == TrialState.FAIL:
        return str(t.system_attrs.get("fail_reason", "failed"))
    if "proxy_loss_reused_from" in a:
        return f"proxy loss reused from trial {a['proxy_loss_reused_from']} (identical proxy run)"
    return None


def trial_rows(study: optuna.Study, objectives: Sequence[str]) -> list[dict[str, Any]]:
    """One flat row per finished trial (numbers in SI-ish display units named in the keys).

    Duplicates (a shape the study already held, see :func:`search.study.duplicate_of`),
    surplus trials of parallel workers and interrupted trials (Ctrl-C, a killed worker, a
    lost heartbeat: their shapes are retried) are left out: every shape appears once.
    """
    try:
        front = {t.number for t in study.best_trials}
    except Exception:  # no complete trial yet
        front = set()
    return [
        trial_row(t, objectives, pareto=t.number in front)
        for t in study.get_trials(deepcopy=False, states=FINISHED)
        if not evaluated_nothing(t) and not is_interrupted(t)
    ]


def trial_row(t: FrozenTrial, objectives: Sequence[str], *, pareto: bool) -> dict[str, Any]:
    """The flat row of one finished trial (see :func:`trial_rows`)."""
    a = t.user_attrs
    pred = a.get(PERF_ATTR) or {}  # the throughput point
    inter = a.get(INTERACTIVE_ATTR) or {}  # the interactive point
    runtime = (a.get("deployment") or {}).get("runtime") or {}
    row: dict[str, Any] = {
        "trial": t.number,
        "state": t.state.name,
        "pareto": pareto,
        "shape": a.get("shape"),
        "precision": a.get("precision"),
        "params_total": a.get("params_total"),
        "params_active": a.get("params_active"),
        "loss": a.get("proxy_loss"),
        "tokens_per_s_per_gpu": pred.get("output_tokens_per_s_per_gpu"),
        "tokens_per_s_per_user": inter.get("output_tokens_per_s_per_user"),
        "ttft_ms": inter.get("ttft_ms"),
        "tpot_ms": inter.get("tpot_ms"),
        "deployment": a.get("deployment_label"),
        "batch": pred.get("batch"),
        "limited_by": "; ".join(a.get("limited_by") or []) or None,
        "tokens_per_s_per_user_at_throughput": pred.get("output_tokens_per_s_per_user"),
        # what a p99 SLO (deployment.slo.max_ttft_p99_s / max_tpot_p99_s) bounds; NaN (empty) where not computed
        "ttft_p99_ms_at_throughput": pred.get("ttft_p99_ms"),
        "tpot_p99_ms_at_throughput": pred.get("tpot_p99_ms"),
        "interactive_deployment": a.get("interactive_deployment_label"),
        "interactive_batch": inter.get("batch"),
        "max_batch": runtime.get("max_batch"),
        "max_num_tokens": runtime.get("max_num_tokens"),
        "memory_per_gpu_gb": pred.get("memory_per_gpu_gb"),
        "bound": pred.get("bound"),
        "proxy_shape": a.get("proxy_shape"),
        "proxy_params": a.get("proxy_params"),
        "proxy_steps": a.get("proxy_steps"),  # the budget of the loss (the highest rung reached)
        "proxy_seconds": a.get("proxy_seconds"),
        "feasible": all(v <= 0 for v in t.constraints.values()),
        "reason": _reason(t),
        "arch": a.get("arch"),  # the full-size Architecture's fields (co-design export --study-dir reads them)
        "deployment_config": a.get("deployment"),  # the throughput point's co_design.perf.Deployment fields
    }
    if t.state == TrialState.COMPLETE and t.values is not None:
        for name, v in zip(objectives, t.values):
            row[name] = v
    for k, v in t.params.items():
        row[f"param_{k}"] = v
    return row


def pareto_rows(rows: list[dict[str, Any]], objectives: Sequence[str]) -> list[dict[str, Any]]:
    """The Pareto rows, sorted by the first performance objective (best first)."""
    front = [r for r in rows if r["pareto"]]
    perf = next((n for n in objectives if n != "loss"), objectives[0])
    sign = -1 if OBJECTIVES[perf].direction == "maximize" else 1
    return sorted(front, key=lambda r: sign * (r.get(perf) or 0.0))


def reference_point(study: optuna.Study) -> list[float] | None:
    """A hypervolume reference point just beyond the worst observed feasible value of each objective.

    Minimised objectives: worst + 10% of the observed range; maximised: worst - 10%
    (not below 0 for these non-negative metrics). None before any feasible COMPLETE trial.
    """
    trials = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if all(v <= 0 for v in t.constraints.values())
    ]
    if not trials:
        return None
    ref = []
    for i, d in enumerate(study.directions):
        vals = [t.values[i] for t in trials]
        lo, hi = min(vals), max(vals)
        span = (hi - lo) or (abs(hi) or 1.0)
        if d == optuna.study.StudyDirection.MINIMIZE:
            ref.append(hi + 0.1 * span)
        else:
            ref.append(max(0.0, lo - 0.1 * span) if lo >= 0 else lo - 0.1 * span)
    return ref


def hypervolume(points: Sequence[Sequence[float]], ref: Sequence[float], directions: Sequence[str]) -> float:
    """Exact hypervolume dominated by ``points`` up to ``ref`` (any mix of min/max directions).

    Maximised objectives are negated into a minimisation problem; points not strictly
    better than ``ref`` in every objective add nothing. Recursive slicing along the last
    objective: exact, fine for the tens of points of a front.
    """
    signs = [1.0 if d == "minimize" else -1.0 for d in directions]
    r = [s * x for s, x in zip(signs, ref)]
    pts = [[s * x for s, x in zip(signs, p)] for p in points]
    pts = [p for p in pts if all(x < rx for x, rx in zip(p, r))]

    def hv(ps: list[list[float]], rr: list[float]) -> float:
        if not ps:
            return 0.0
        if len(rr) == 1:
            return rr[0] - min(p[0] for p in ps)
        ps = sorted(ps, key=lambda p: p[-1])
        total = 0.0
        for i, p in enumerate(ps):
            upper = ps[i + 1][-1] if i + 1 < len(ps) else rr[-1]
            if upper > p[-1]:
                total += (upper - p[-1]) * hv([q[:-1] for q in ps[: i + 1]], rr[:-1])
        return total

    return hv(pts, r)


def _write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:  # a mapping (the arch) as JSON text
            w.writerow({c: json.dumps(r[c]) if isinstance(r.get(c), dict) else r.get(c) for c in columns})


def _write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str, allow_nan=False))


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_results(
    study: optuna.Study,
    objectives: Sequence[str],
    run_dir: str | Path,
    *,
    storage: str,
    n_trials: int,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write pareto.csv/json, trials.csv and summary.json; return the summary dict (with rows).

    ``extra`` adds keys to summary.json (e.g. what the operating points mean).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = [{k: _finite(v) for k, v in r.items()} for r in trial_rows(study, objectives)]
    front = pareto_rows(rows, objectives)
    params = sorted({k for r in rows for k in r if k.startswith("param_")})
    cols = ["trial"] + [c for c in PARETO_COLUMNS if c != "trial"] + params
    _write_csv(run_dir / "pareto.csv", front, cols)
    _write_json(run_dir / "pareto.json", front)
    all_cols = (["trial", "state", "pareto", "feasible"] + [c for c in PARETO_COLUMNS if c != "trial"] + ["reason"]
                + params + ["arch", "deployment_config"])
    _write_csv(run_dir / "trials.csv", rows, all_cols)
    curves = {
        str(t.number): {"shape": t.user_attrs.get("shape"), "state": t.state.name, "tokens_loss": t.user_attrs[LOSS_CURVE_ATTR]}
        for t in study.get_trials(deepcopy=False, states=FINISHED)
        if LOSS_CURVE_ATTR in t.user_attrs and not evaluated_nothing(t)
    }
    if curves:
        _write_json(run_dir / "loss_curves.json", curves)
    ref = reference_point(study)
    directions = [OBJECTIVES[n].direction for n in objectives]
    hv = None
    if ref is not None:
        hv = hypervolume([[r[n] for n in objectives] for r in front], ref, directions)
    counts = {s.name: 0 for s in FINISHED}
    for r in rows:
        counts[r["state"]] += 1
    summary = {
        "study_name": study.study_name,
        "storage": storage,
        "objectives": list(objectives),
        "directions": directions,
        "n_trials_target": n_trials,
        "trials": counts,
        "infeasible_before_training": sum(1 for r in rows if not r["feasible"]),
        "pareto_size": len(front),
        "distinct_pareto_shapes": len({r["shape"] for r in front}),
        "duplicates_skipped": sum(1 for t in study.get_trials(deepcopy=False) if DUPLICATE_ATTR in t.user_attrs),
        "surplus_skipped": sum(1 for t in study.get_trials(deepcopy=False) if SURPLUS_ATTR in t.user_attrs),
        "interrupted": sum(1 for t in study.get_trials(deepcopy=False) if is_interrupted(t)),
        "hypervolume_reference_point": ref,
        "hypervolume": hv,
        **(extra or {}),
    }
    _write_json(run_dir / "summary.json", summary)
    return {**summary, "rows": rows, "pareto": front}


def parallel_coordinates_html(rows: list[dict[str, Any]], objectives: Sequence[str]) -> str | None:
    """A plotly parallel-coordinates figure of the COMPLETE trials (shape parameters and objectives)."""
    import plotly.graph_objects as go

    complete = [r for r in rows if r["state"] == "COMPLETE"]
    if not complete:
        return None
    dims = []
    keys = sorted({k for r in complete for k in r if k.startswith("param_")}) + ["params_total", *objectives]
    for k in keys:
        vals = [r.get(k) for r in complete]
        if any(v is None for v in vals):
            continue
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            dims.append(dict(label=k.removeprefix("param_"), values=vals))
        else:
            cats = sorted({str(v) for v in vals})
            dims.append(dict(label=k.removeprefix("param_"), values=[cats.index(str(v)) for v in vals],
                             tickvals=list(range(len(cats))), ticktext=cats))
    color = [1 if r["pareto"] else 0 for r in complete]
    fig = go.Figure(go.Parcoords(line=dict(color=color, colorscale=[[0, "lightgray"], [1, "crimson"]]), dimensions=dims))
    fig.update_layout(title="trials (red: Pareto front)")
    return fig.to_html(include_plotlyjs="cdn", full_html=True)


def _fmt(v: Any, kind: str) -> str:
    if v is None:
        return "-"
    if kind == "count":
        return human_count(float(v))
    if kind == "rate":
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"
    if kind == "ms":
        return f"{v:.2f}" if v < 100 else f"{v:,.0f}"
    if kind == "loss":
        return f"{v:.4f}"
    return str(v)


_TABLE = [
    ("#", "trial", "str"),
    ("shape", "shape", "str"),
    ("prec", "precision", "str"),
    ("params", "params_total", "count"),
    ("active", "params_active", "count"),
    ("loss", "loss", "loss"),
    ("tok/s/GPU", "tokens_per_s_per_gpu", "rate"),
    ("tok/s/user", "tokens_per_s_per_user", "rate"),
    ("TTFT ms", "ttft_ms", "ms"),
    ("TPOT ms", "tpot_ms", "ms"),
    ("deployment", "deployment", "str"),
    ("batch", "batch", "str"),
    ("limited by", "limited_by", "str"),
]


def format_pareto_table(front: list[dict[str, Any]]) -> list[list[str]]:
    """Header + rows of the printed Pareto table as strings."""
    out = [[h for h, _, _ in _TABLE]]
    for r in front:
        out.append([_fmt(r.get(k), kind) for _, k, kind in _TABLE])
    return out


def print_pareto_table(summary: dict[str, Any], *, title: str) -> None:
    """Print ``title`` and the Pareto front as a rich table (plain text when the output is not a terminal).

    The title is a plain line, not the table's centred caption, so a log file gets no
    space padding around it.
    """
    from rich.console import Console
    from rich.table import Table

    print(title, flush=True)
    if not summary["pareto"]:
        print("  (no feasible COMPLETE trial yet: nothing on the front; see trials.csv for the reasons)")
        return
    cells = format_pareto_table(summary["pareto"])
    keep = [i for i in range(len(cells[0])) if any(row[i] != "-" for row in cells[1:])]  # e.g. no loss in perf-only
    table = Table(show_lines=False)
    for i in keep:
        h = cells[0][i]
        table.add_column(h, justify="left" if h in ("shape", "deployment", "prec", "limited by") else "right")
    for row in cells[1:]:
        table.add_row(*(row[i] for i in keep))
    console = Console(width=max(160, Console().width))
    console.print(table)
    for line in summary.get("definitions") or []:
        print(f"  {line}")


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


def summary_extra(cfg: SearchConfig, study: optuna.Study) -> dict[str, Any]:
    """summary.json's account of what the numbers mean: the operating points and the runtime's limits."""
    d = cfg.deployment
    return {
        "definitions": ([loss_definition(cfg)] if "loss" in cfg.objectives.names else []) + definitions(d),
        "interactive_concurrency": d.interactive_concurrency,
        "runtime": {"max_batch": d.max_batch, "max_num_tokens": d.max_num_tokens},
        "hardware": cfg.hardware.file or cfg.hardware.gpu,  # what co-design export --study-dir serves on
        "strategy": "enumerate" if enumerates(cfg) else "sample",
        "enumeration": study.user_attrs.get(ENUMERATION_ATTR),
    }
