"""The search job's plots: pairwise objective scatters and the serving curves of the front.

Files in ``<run dir>/plots/`` (each chart as a PNG from matplotlib and an interactive
plotly HTML with ``plotly.min.js`` beside it, so it opens offline; that file is a hard
link to one copy in the shared cache, :mod:`search.cache`):

- ``pairwise.{png,html}``: one 2-D scatter per pair of objectives (2 objectives: one
  panel, 3: three). Feasible COMPLETE trials in grey, the Pareto-optimal ones (the
  study's ``best_trials`` over *all* objectives, so a point can look dominated in one
  projection) in red, labelled with their trial number. Each axis says which way is
  better; an axis whose values span more than 20x is logarithmic. A 3-D scatter is not
  drawn: it cannot be read from a still image.
- ``serving_curves.{png,html}`` (+ ``serving_curves.json``, the numbers behind it): for
  each Pareto-optimal trial, the throughput-vs-interactivity curve of its serving
  layout over concurrency (x: output tok/s/user, y: output tok/s/GPU), the chart of
  NVIDIA's co-design material. The performance model recomputes the curve
  (:func:`co_design.perf.pareto` on the trial's own layout, a few ms each). A member
  whose interactivity point uses a different layout (user attribute
  ``interactive_deployment``) gets that layout's curve too, dashed. Markers show the
  member's operating points: ``o`` where its throughput objective was measured, ``*``
  where its interactivity objective was.
- ``hypervolume_history.{png,html}``: Optuna's hypervolume after each trial.

Plotting is a view: :func:`write_plots` returns ``{name: html}`` for W&B (plotly loaded
from the CDN there) and warns, rather than fails, when a member cannot be redrawn.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.config import OBJECTIVES
from search.files import atomic_path, write_atomic
from search.objective import INTERACTIVE_ATTR, PERF_ATTR

__all__ = [
    "PARETO_LABEL",
    "ServingCurve",
    "MemberCurves",
    "pairwise_figure",
    "pairwise_scatter",
    "front_members",
    "rebuild_deployment",
    "serving_curve_data",
    "serving_curves_figure",
    "serving_curves",
    "write_plots",
]

PARETO_LABEL = "Pareto-optimal"
_FEASIBLE_LABEL = "feasible trials"
_PARETO_COLOR = "#d62728"
_GREY = "#a0a0a0"
# tab10 plus two: one colour per front member (at most ``max_members``, 12 by default)
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
            "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"]
_LOG_SPAN = 20.0  # an axis whose values span more than this ratio is logarithmic
_DPI = 110


# ----------------------------------------------------------------------------- helpers
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only; never a window
    import matplotlib.pyplot as plt

    return plt


def _log_axis(values: Iterable[float]) -> bool:
    vals = [v for v in values if v is not None]
    return bool(vals) and min(vals) > 0 and max(vals) / min(vals) > _LOG_SPAN


def _axis_title(name: str) -> str:
    direction, label = OBJECTIVES[name].direction, OBJECTIVES[name].label
    return f"{label}, {'higher' if direction == 'maximize' else 'lower'} is better"


def _best_corner(x: str, y: str) -> str:
    vertical = "top" if OBJECTIVES[y].direction == "maximize" else "bottom"
    horizontal = "right" if OBJECTIVES[x].direction == "maximize" else "left"
    return f"best: {vertical} {horizontal}"


def _short(name: str) -> str:
    return OBJECTIVES[name].label.split(" (")[0]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _write_html(fig: Any, path: Path) -> str:
    """Write ``fig`` for offline viewing; return its HTML for W&B (plotly from the CDN).

    The page loads ``plotly.min.js`` from its own directory (:func:`_link_plotly_bundle`),
    so a copied run directory still opens offline; the page is written whole
    (:func:`search.files.write_atomic`): parallel workers redraw the same plots.
    """
    _link_plotly_bundle(path.parent / "plotly.min.js")
    write_atomic(path, fig.to_html(include_plotlyjs="directory", full_html=True))
    return fig.to_html(include_plotlyjs="cdn", full_html=True)


def _link_plotly_bundle(dst: Path) -> str:
    """Make ``dst`` plotly's 4.8 MB bundle, stored once per machine; return how (:func:`search.cache.link_file`).

    The bundle is written once into the shared cache (``<cache>/assets/plotly-<version>.min.js``,
    :func:`search.cache.shared_file`, checked against the installed plotly's bytes) and
    ``dst`` is a hard link to it (a symbolic link across file systems, a copy where
    neither works), so a study costs no extra disk. A ``dst`` that already holds it is left alone.
    """
    import plotly
    from plotly.offline import get_plotlyjs

    from search.cache import link_file, shared_file

    bundle = shared_file(f"plotly-{plotly.__version__}.min.js", get_plotlyjs().encode("utf-8"))
    return link_file(bundle, dst)


def _savefig(fig: Any, path: Path) -> None:
    """``fig.savefig`` to ``path``, written whole (a temporary file ending in the same suffix, then renamed)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=_DPI, bbox_inches="tight")


def _grid(n: int) -> tuple[int, int]:
    cols = min(3, n)
    return math.ceil(n / cols), cols


# ----------------------------------------------------------------------------- pairwise scatter
def _pairs(objectives: Sequence[str]) -> list[tuple[str, str]]:
    """(x, y) per pair: the later objective on x, so loss is plotted against speed and
    tok/s/GPU against tok/s/user (the serving chart's orientation)."""
    return [(b, a) for a, b in itertools.combinations(objectives, 2)]


def _scatter_rows(rows: Sequence[Mapping[str, Any]], objectives: Sequence[str]) -> list[Mapping[str, Any]]:
    """Feasible COMPLETE rows with a finite value for every objective."""
    return [
        r for r in rows
        if r.get("state") == "COMPLETE" and r.get("feasible", True) and all(_number(r.get(n)) for n in objectives)
    ]


def pairwise_figure(rows: Sequence[Mapping[str, Any]], objectives: Sequence[str]) -> Any:
    """The plotly figure of :func:`pairwise_scatter` (None with fewer than 2 objectives or no row).

    Per panel two traces: ``"feasible trials"`` (grey) and ``"Pareto-optimal"``; each
    point's ``customdata`` is ``[trial, shape]``.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    pairs = _pairs(objectives)
    points = _scatter_rows(rows, objectives)
    if not pairs or not points:
        return None
    nrows, ncols = _grid(len(pairs))
    fig = make_subplots(
        rows=nrows, cols=ncols, horizontal_spacing=0.12, vertical_spacing=0.2,
        subplot_titles=[f"{_short(y)} vs {_short(x)} ({_best_corner(x, y)})" for x, y in pairs],
    )
    for i, (x, y) in enumerate(pairs):
        row, col = divmod(i, ncols)
        for label, members, style in (
            (_FEASIBLE_LABEL, [r for r in points if not r.get("pareto")], dict(color=_GREY, size=7, opacity=0.7)),
            (PARETO_LABEL, [r for r in points if r.get("pareto")], dict(color=_PARETO_COLOR, size=10,
                                                                         line=dict(color="black", width=1))),
        ):
            pareto = label == PARETO_LABEL
            fig.add_trace(
                go.Scatter(
                    x=[r[x] for r in members],
                    y=[r[y] for r in members],
                    mode="markers+text" if pareto else "markers",
                    text=[f"#{r['trial']}" for r in members] if pareto else None,
                    textposition="top center",
                    marker=style,
                    name=label,
                    legendgroup=label,
                    showlegend=i == 0,
                    customdata=[[r["trial"], r.get("shape") or ""] for r in members],
                    hovertemplate=(f"trial #%{{customdata[0]}}<br>%{{customdata[1]}}<br>{_short(x)}: %{{x:.4g}}"
                                   f"<br>{_short(y)}: %{{y:.4g}}<extra>{label}</extra>"),
                ),
                row=row + 1, col=col + 1,
            )
        fig.update_xaxes(title_text=_axis_title(x), type="log" if _log_axis(r[x] for r in points) else "linear",
                         row=row + 1, col=col + 1)
        fig.update_yaxes(title_text=_axis_title(y), type="log" if _log_axis(r[y] for r in points) else "linear",
                         row=row + 1, col=col + 1)
    n_front = sum(1 for r in points if r.get("pareto"))
    fig.update_layout(
        title=f"objectives pairwise: {n_front} Pareto-optimal of {len(points)} feasible complete trials",
        height=430 * nrows, width=max(560, 520 * ncols), template="plotly_white",
    )
    return fig


def _pairwise_png(points: Sequence[Mapping[str, Any]], pairs: Sequence[tuple[str, str]], path: Path) -> None:
    plt = _pyplot()
    nrows, ncols = _grid(len(pairs))
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.4 * ncols, 4.4 * nrows), squeeze=False)
    try:
        for ax in axes.flat[len(pairs):]:
            ax.set_visible(False)
        rest = [r for r in points if not r.get("pareto")]
        front = [r for r in points if r.get("pareto")]
        for ax, (x, y) in zip(axes.flat, pairs):
            ax.scatter([r[x] for r in rest], [r[y] for r in rest], s=18, c=_GREY, alpha=0.7, label=_FEASIBLE_LABEL)
            ax.scatter([r[x] for r in front], [r[y] for r in front], s=42, c=_PARETO_COLOR, edgecolors="black",
                       linewidths=0.6, zorder=3, label=PARETO_LABEL)
            for r in front:
                ax.annotate(f"#{r['trial']}", (r[x], r[y]), textcoords="offset points", xytext=(4, 4), fontsize=7)
            if _log_axis(r[x] for r in points):
                ax.set_xscale("log")
            if _log_axis(r[y] for r in points):
                ax.set_yscale("log")
            ax.set_xlabel(_axis_title(x), fontsize=9)
            ax.set_ylabel(_axis_title(y), fontsize=9)
            ax.set_title(f"{_short(y)} vs {_short(x)} ({_best_corner(x, y)})", fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
        axes.flat[0].legend(fontsize=8, loc="best")
        fig.suptitle(f"objectives pairwise: {len(front)} Pareto-optimal of {len(points)} feasible complete trials")
        fig.tight_layout()
        _savefig(fig, path)
    finally:
        plt.close(fig)


def pairwise_scatter(rows: Sequence[Mapping[str, Any]], objectives: Sequence[str], out_dir: str | Path) -> dict[str, str]:
    """Write ``pairwise.png`` and ``pairwise.html`` into ``out_dir``; return ``{"pairwise": html}``.

    ``rows``: :func:`search.results.trial_rows` (keys ``trial``, ``state``, ``pareto``,
    ``feasible``, ``shape`` and one per objective). Nothing is written (``{}``) with
    fewer than two objectives or no feasible COMPLETE trial.
    """
    fig = pairwise_figure(rows, objectives)
    if fig is None:
        return {}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _pairwise_png(_scatter_rows(rows, objectives), _pairs(objectives), out / "pairwise.png")
    return {"pairwise": _write_html(fig, out / "pairwise.html")}


# ----------------------------------------------------------------------------- serving curves
@dataclass(frozen=True)
class ServingCurve:
    """One layout's throughput-vs-interactivity front over concurrency, sorted by tok/s/user.

    ``role``: ``"throughput"`` (the layout the trial's throughput was measured on) or
    ``"interactive"`` (a different layout used for its interactivity point).
    """

    layout: str
    role: str
    tokens_per_s_per_user: tuple[float, ...]
    tokens_per_s_per_gpu: tuple[float, ...]
    concurrency: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"layout": self.layout, "role": self.role, "tokens_per_s_per_user": list(self.tokens_per_s_per_user),
                "tokens_per_s_per_gpu": list(self.tokens_per_s_per_gpu), "concurrency": list(self.concurrency)}


@dataclass(frozen=True)
class MemberCurves:
    """A Pareto-optimal trial's serving curves and its operating points as (tok/s/user, tok/s/GPU)."""

    trial: int
    shape: str
    curves: tuple[ServingCurve, ...]
    throughput_point: tuple[float, float] | None
    interactive_point: tuple[float, float] | None

    @property
    def label(self) -> str:
        return f"#{self.trial} {self.shape}"

    def to_dict(self) -> dict[str, Any]:
        return {"trial": self.trial, "shape": self.shape, "label": self.label,
                "curves": [c.to_dict() for c in self.curves],
                "throughput_point": list(self.throughput_point) if self.throughput_point else None,
                "interactive_point": list(self.interactive_point) if self.interactive_point else None}


def rebuild_deployment(data: Mapping[str, Any]) -> Any:
    """A :class:`co_design.perf.Deployment` from its ``to_dict()`` form (JSON round-tripped).

    Keys the current dataclasses do not know (a trial recorded by another version) are
    dropped; a missing ``runtime`` means the default runtime.
    """
    import dataclasses

    from co_design.perf import Deployment, Runtime

    runtime_keys = {f.name for f in dataclasses.fields(Runtime)}
    keys = {f.name for f in dataclasses.fields(Deployment)} - {"runtime"}
    raw_rt = data.get("runtime")
    runtime = raw_rt if isinstance(raw_rt, Runtime) else Runtime(
        **{k: v for k, v in (raw_rt or {}).items() if k in runtime_keys})
    return Deployment(**{k: v for k, v in data.items() if k in keys}, runtime=runtime)


def _feasible(t: FrozenTrial) -> bool:
    return all(v <= 0 for v in (t.constraints or {}).values())


def _throughput_of(t: FrozenTrial) -> float:
    pred = t.user_attrs.get(PERF_ATTR) or {}
    v = pred.get("output_tokens_per_s_per_gpu")
    return float(v) if _number(v) else 0.0


def front_members(study_or_trials: optuna.Study | Iterable[FrozenTrial], *, max_members: int = 12) -> list[FrozenTrial]:
    """The feasible Pareto-optimal trials that can be redrawn, at most ``max_members``.

    A study gives its ``best_trials``; a list of trials is taken as the front. Sorted by
    throughput (highest first); when there are more than ``max_members`` the kept ones
    are spread evenly along that order, both ends included.
    """
    if max_members < 1:
        raise ValueError(f"max_members must be >= 1, got {max_members}")
    if isinstance(study_or_trials, optuna.Study):
        try:
            trials = study_or_trials.best_trials
        except Exception:  # no complete trial yet
            trials = []
    else:
        trials = list(study_or_trials)
    members = [t for t in trials if t.state == TrialState.COMPLETE and _feasible(t)]
    members.sort(key=lambda t: (-_throughput_of(t), t.number))
    if len(members) <= max_members:
        return members
    if max_members == 1:
        return members[:1]
    step = (len(members) - 1) / (max_members - 1)
    return [members[round(i * step)] for i in range(max_members)]


def _objective_values(t: FrozenTrial, objectives: Sequence[str] | None) -> dict[str, float]:
    """The trial's objective values by name: its ``values`` when ``objectives`` names them,
    else the ``perf_objectives`` user attribute the objective records."""
    out = {k: float(v) for k, v in (t.user_attrs.get("perf_objectives") or {}).items() if _number(v)}
    if objectives and t.values is not None:
        out.update({n: float(v) for n, v in zip(objectives, t.values) if _number(v)})
    return out


def _interpolate(curve: ServingCurve, x: float) -> float:
    """tok/s/GPU on ``curve`` at ``x`` tok/s/user (linear between points, clamped at the ends)."""
    xs, ys = curve.tokens_per_s_per_user, curve.tokens_per_s_per_gpu
    if x <= xs[0]:
        return ys[0]
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    return ys[-1]


def _point(pred: Any, *, x: float | None = None, y: float | None = None) -> tuple[float, float] | None:
    """(tok/s/user, tok/s/GPU) of a recorded prediction dict; ``x`` / ``y`` (the objective
    values, when known) take precedence over the prediction's own numbers."""
    pred = pred if isinstance(pred, Mapping) else {}
    x = x if x is not None else pred.get("output_tokens_per_s_per_user")
    y = y if y is not None else pred.get("output_tokens_per_s_per_gpu")
    return (float(x), float(y)) if _number(x) and _number(y) else None


def _curve(arch: Any, gpu: Any, dep: Any, role: str) -> ServingCurve | None:
    from co_design import perf

    front = perf.pareto(arch, gpu, dep, deployments=[dep])
    if not front:
        return None
    return ServingCurve(
        layout=dep.label,
        role=role,
        tokens_per_s_per_user=tuple(p.output_tokens_per_s_per_user for p in front),
        tokens_per_s_per_gpu=tuple(p.output_tokens_per_s_per_gpu for p in front),
        concurrency=tuple(p.batch for p in front),
    )


def _member(t: FrozenTrial, gpu: Any, objectives: Sequence[str] | None) -> MemberCurves:
    from co_design.arch import Architecture

    a = t.user_attrs
    if "arch" not in a or "deployment" not in a:
        raise ValueError("no 'arch' / 'deployment' user attribute")
    arch = Architecture.from_dict(a["arch"])
    dep = rebuild_deployment(a["deployment"])
    inter = rebuild_deployment(a["interactive_deployment"]) if a.get("interactive_deployment") else dep
    main = _curve(arch, gpu, dep, "throughput")
    other = _curve(arch, gpu, inter, "interactive") if inter != dep else main
    curves = [c for c in (main, other if other is not main else None) if c is not None]
    if not curves:
        raise ValueError(f"no concurrency fits on {dep.label}")
    values = _objective_values(t, objectives)
    # throughput point: where the throughput objective was measured (the recorded prediction)
    tp_point = _point(a.get(PERF_ATTR), y=values.get("tokens_per_s_per_gpu"))
    # interactivity point: the recorded interactive prediction; for trials recorded without
    # one, the tok/s/user objective (or 1 / TPOT) placed on the interactive layout's curve
    ia_point = _point(a.get(INTERACTIVE_ATTR), x=values.get("tokens_per_s_per_user"))
    x = values.get("tokens_per_s_per_user") or (1e3 / values["tpot_ms"] if values.get("tpot_ms") else None)
    if ia_point is None and x is not None and other is not None:
        ia_point = (float(x), _interpolate(other, float(x)))
    return MemberCurves(trial=t.number, shape=str(a.get("shape") or ""), curves=tuple(curves),
                        throughput_point=tp_point, interactive_point=ia_point)


def serving_curve_data(
    study_or_trials: optuna.Study | Iterable[FrozenTrial],
    gpu: Any,
    *,
    objectives: Sequence[str] | None = None,
    max_members: int = 12,
) -> tuple[list[MemberCurves], int]:
    """The serving curves of the front (see :func:`front_members`) and the front's size.

    ``objectives`` names the trials' ``values`` (else the ``perf_objectives`` user
    attribute is read). A member that cannot be redrawn (missing or unreadable ``arch`` /
    ``deployment``, a layout the model rejects) is skipped with a warning.
    """
    front = front_members(study_or_trials, max_members=10**9)
    total, members = len(front), front_members(front, max_members=max_members)
    out: list[MemberCurves] = []
    for t in members:
        try:
            out.append(_member(t, gpu, objectives))
        except (ValueError, TypeError, KeyError) as exc:  # ArchitectureError is a ValueError
            warnings.warn(f"serving curve of trial #{t.number} not drawn: {exc}", stacklevel=2)
    return out, total


def _title(members: Sequence[MemberCurves], total: int, gpu: Any) -> str:
    shown = f"{len(members)} of {total}" if total > len(members) else f"{len(members)}"
    return f"serving curves of {shown} Pareto-optimal trials on {getattr(gpu, 'name', gpu)} (model, over concurrency)"


_MARKERS = {"throughput": ("o", "circle", "throughput point"), "interactive": ("*", "star", "interactivity point")}


def serving_curves_figure(members: Sequence[MemberCurves], *, title: str = "serving curves") -> Any:
    """The plotly figure of :func:`serving_curves`: one line per curve named ``"#<trial> <shape>"``
    (``... (interactive layout)`` for the dashed one), then the operating-point markers."""
    import plotly.graph_objects as go

    fig = go.Figure()
    xs_all, ys_all = [], []
    for i, m in enumerate(members):
        color = _PALETTE[i % len(_PALETTE)]
        for c in m.curves:
            xs_all += c.tokens_per_s_per_user
            ys_all += c.tokens_per_s_per_gpu
            fig.add_trace(go.Scatter(
                x=list(c.tokens_per_s_per_user), y=list(c.tokens_per_s_per_gpu), mode="lines",
                name=m.label if c.role == "throughput" else f"{m.label} ({c.layout}, interactive layout)",
                legendgroup=m.label, line=dict(color=color, dash="solid" if c.role == "throughput" else "dash"),
                customdata=[[n, c.layout] for n in c.concurrency],
                hovertemplate=(f"{m.label}<br>%{{customdata[1]}}, concurrency %{{customdata[0]}}"
                               "<br>%{x:.4g} tok/s/user<br>%{y:.4g} tok/s/GPU<extra></extra>"),
            ))
        for role, point in (("throughput", m.throughput_point), ("interactive", m.interactive_point)):
            if point is None:
                continue
            _, symbol, what = _MARKERS[role]
            fig.add_trace(go.Scatter(
                x=[point[0]], y=[point[1]], mode="markers", name=f"{m.label} {what}", legendgroup=m.label,
                showlegend=False, marker=dict(symbol=symbol, size=13 if role == "interactive" else 10, color=color,
                                              line=dict(color="black", width=1)),
                hovertemplate=f"{m.label} {what}<br>%{{x:.4g}} tok/s/user<br>%{{y:.4g}} tok/s/GPU<extra></extra>",
            ))
    fig.update_xaxes(title_text=_axis_title("tokens_per_s_per_user"), type="log" if _log_axis(xs_all) else "linear")
    fig.update_yaxes(title_text=_axis_title("tokens_per_s_per_gpu"), type="log" if _log_axis(ys_all) else "linear")
    fig.update_layout(title=f"{title}<br><sup>o: throughput point, ★: interactivity point; "
                            "dashed: the interactivity point's layout</sup>",
                      template="plotly_white", height=560, width=960)
    return fig


def _serving_png(members: Sequence[MemberCurves], title: str, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9.5, 6.0))
    try:
        xs_all, ys_all = [], []
        for i, m in enumerate(members):
            color = _PALETTE[i % len(_PALETTE)]
            for c in m.curves:
                xs_all += c.tokens_per_s_per_user
                ys_all += c.tokens_per_s_per_gpu
                ax.plot(c.tokens_per_s_per_user, c.tokens_per_s_per_gpu, color=color,
                        linestyle="-" if c.role == "throughput" else "--",
                        label=m.label if c.role == "throughput" else f"{m.label} ({c.layout}, interactive)")
            for role, point in (("throughput", m.throughput_point), ("interactive", m.interactive_point)):
                if point is not None:
                    marker = _MARKERS[role][0]
                    ax.plot(*point, marker=marker, markersize=12 if marker == "*" else 8, color=color,
                            markeredgecolor="black", linestyle="none", zorder=3)
        ax.plot([], [], "o", color="white", markeredgecolor="black", label="throughput point")
        ax.plot([], [], "*", color="white", markeredgecolor="black", markersize=12, label="interactivity point")
        if _log_axis(xs_all):
            ax.set_xscale("log")
        if _log_axis(ys_all):
            ax.set_yscale("log")
        ax.set_xlabel(_axis_title("tokens_per_s_per_user"))
        ax.set_ylabel(_axis_title("tokens_per_s_per_gpu"))
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        _savefig(fig, path)
    finally:
        plt.close(fig)


def serving_curves(
    study_or_trials: optuna.Study | Iterable[FrozenTrial],
    gpu: Any,
    out_dir: str | Path,
    max_members: int = 12,
    *,
    objectives: Sequence[str] | None = None,
) -> dict[str, str]:
    """Write ``serving_curves.{png,html,json}`` into ``out_dir``; return ``{"serving_curves": html}``.

    ``study_or_trials``: a study (its feasible ``best_trials``) or the front's trials;
    ``gpu``: a :class:`co_design.hardware.GPU` or catalog name. Nothing is written
    (``{}``) when no member can be drawn.
    """
    from co_design.hardware import get_gpu

    gpu = get_gpu(gpu)
    members, total = serving_curve_data(study_or_trials, gpu, objectives=objectives, max_members=max_members)
    if not members:
        return {}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = _title(members, total, gpu)
    _serving_png(members, title, out / "serving_curves.png")
    write_atomic(out / "serving_curves.json",
                 json.dumps({"gpu": gpu.name, "front_size": total, "members": [m.to_dict() for m in members]}, indent=1))
    return {"serving_curves": _write_html(serving_curves_figure(members, title=title), out / "serving_curves.html")}


# ----------------------------------------------------------------------------- all of them
def _hypervolume_history(study: optuna.Study, ref: Sequence[float], out: Path) -> dict[str, str]:
    plt = _pyplot()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        fig = optuna.visualization.plot_hypervolume_history(study, reference_point=list(ref))
        html = _write_html(fig, out / "hypervolume_history.html")
        ax = optuna.visualization.matplotlib.plot_hypervolume_history(study, reference_point=list(ref))
    try:
        _savefig(ax.figure, out / "hypervolume_history.png")
    finally:
        plt.close(ax.figure)
    return {"hypervolume_history": html}


def write_plots(
    study: optuna.Study,
    objectives: Sequence[str],
    run_dir: str | Path,
    ref: Sequence[float] | None,
    rows: Sequence[Mapping[str, Any]],
    gpu: Any,
) -> dict[str, str]:
    """Write every plot into ``<run_dir>/plots/`` (see the module docstring); return ``{name: html}``.

    ``rows``: :func:`search.results.trial_rows`; ``ref``: the hypervolume reference
    point (no hypervolume history without one); ``gpu``: the study's GPU. The serving
    curves need a performance objective (a loss-only study has none to draw).
    """
    out = Path(run_dir) / "plots"
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return {}
    out.mkdir(parents=True, exist_ok=True)
    html: dict[str, str] = {}
    html.update(pairwise_scatter(rows, objectives, out))
    if any(n != "loss" for n in objectives):
        html.update(serving_curves(study, gpu, out, objectives=objectives))
    if ref is not None and len(study.directions) > 1:
        html.update(_hypervolume_history(study, ref, out))
    return html
