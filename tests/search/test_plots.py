"""search.plots on a small in-memory study whose front is known by construction.

Objective values come from the performance model itself (as in a real trial), the
loss is set by hand so that the front is {0, 1, 2, 4}: #3 repeats #0's shape with a
worse loss, #7 is slower than #0 with a worse loss, #5 would dominate everything but
violates a constraint, #6 was pruned. #4 serves its throughput point on ``TP1 x2`` and
its interactivity point on ``TP2``, so it has two serving curves.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from co_design import perf
from co_design.arch import Architecture
from co_design.hardware import get_gpu
from search.plots import (
    PARETO_LABEL,
    front_members,
    pairwise_figure,
    rebuild_deployment,
    serving_curve_data,
    serving_curves,
    serving_curves_figure,
    write_plots,
)
from search.results import reference_point, trial_rows
from search.space import shape_label

GPU = get_gpu("b200")
NAMES = ["loss", "tokens_per_s_per_gpu", "tokens_per_s_per_user"]
BASE = dict(hidden=1024, layers=16, heads=16, kv_heads=4, head_dim=64, ffn=4096, vocab=32000)
ONE = perf.Deployment(gpus=1)
FRONT = {0, 1, 2, 4}


def _jsonable(d: dict) -> dict:
    return json.loads(json.dumps(d))  # what the storage hands back


def _prediction(p: perf.Prediction) -> dict:
    return {k: v for k, v in p.to_dict(ops=False).items() if isinstance(v, (int, float, str))}


def _trial(layers: int, loss: float, *, dep=ONE, interactive=None, constraints=None, record_interactive=True):
    arch = Architecture(**{**BASE, "layers": layers})
    thr = perf.max_throughput(arch, GPU, dep)
    inter = perf.predict(arch, GPU, (interactive or dep).replace(concurrency=1))
    values = [loss, thr.output_tokens_per_s_per_gpu, inter.output_tokens_per_s_per_user]
    attrs = {
        "arch": arch.to_dict(),
        "shape": shape_label(arch),
        "precision": dep.weights,
        "deployment": _jsonable(dep.to_dict()),
        "deployment_label": dep.label,
        "prediction": _prediction(thr),
        "perf_objectives": dict(zip(NAMES[1:], values[1:])),
    }
    if record_interactive:
        attrs["interactive_prediction"] = _prediction(inter)
    if interactive is not None:
        attrs["interactive_deployment"] = _jsonable(interactive.to_dict())
    return create_trial(values=values, user_attrs=attrs, constraints=constraints or {"memory": -0.5})


@pytest.fixture(scope="module")
def study() -> optuna.Study:
    s = optuna.create_study(directions=["minimize", "maximize", "maximize"])
    s.add_trials([
        _trial(16, 3.0),  # 0
        _trial(8, 3.4),  # 1: fastest
        _trial(32, 2.7),  # 2: best loss, slowest
        _trial(16, 3.2),  # 3: #0's shape, worse loss: dominated
        _trial(16, 2.9, dep=perf.Deployment(gpus=2), interactive=perf.Deployment(gpus=2, tp=2)),  # 4
        _trial(8, 2.0, constraints={"memory": 0.2}),  # 5: would dominate all, infeasible
        create_trial(state=TrialState.PRUNED, user_attrs={"infeasible": "does not fit"}, constraints={"memory": 0.3}),
        _trial(24, 3.5),  # 7: slower and worse than #0: dominated
    ])
    return s


@pytest.fixture(scope="module")
def rows(study):
    return trial_rows(study, NAMES)


def _trials_of(trace) -> set[int]:
    return {int(c[0]) for c in trace.customdata}


def test_the_study_front_is_the_one_built(study):
    assert {t.number for t in study.best_trials} == FRONT


def test_pairwise_marks_exactly_the_front_in_every_panel(rows):
    fig = pairwise_figure(rows, NAMES)
    front = [t for t in fig.data if t.name == PARETO_LABEL]
    grey = [t for t in fig.data if t.name != PARETO_LABEL]
    assert len(front) == 3 and len(grey) == 3  # 3 objectives -> 3 pairs, no 3-D plot
    for trace in front:
        assert _trials_of(trace) == FRONT
        assert sorted(trace.text) == sorted(f"#{n}" for n in FRONT)
    for trace in grey:
        assert _trials_of(trace) == {3, 7}  # infeasible #5 and pruned #6 are not drawn
    assert sum(bool(t.showlegend) for t in front) == 1


def test_pairwise_axes_name_the_unit_and_the_better_direction(rows):
    fig = pairwise_figure(rows, NAMES)
    # first panel: loss (y) against tok/s/GPU (x)
    assert fig.layout.xaxis.title.text == "output tok/s/GPU, higher is better"
    assert fig.layout.yaxis.title.text == "proxy val loss (nats/token), lower is better"
    assert "best: bottom right" in fig.layout.annotations[0].text
    # third panel: tok/s/GPU (y) against tok/s/user (x), the serving chart's orientation
    assert fig.layout.xaxis3.title.text.startswith("output tok/s/user")
    assert fig.layout.yaxis3.title.text.startswith("output tok/s/GPU")


def test_pairwise_log_scale_only_where_values_span_more_than_20x():
    rows = [
        {"trial": i, "state": "COMPLETE", "feasible": True, "pareto": i == 0, "shape": "s", "loss": 2 + i / 10, "ttft_ms": t}
        for i, t in enumerate([1.0, 5.0, 100.0])
    ]
    fig = pairwise_figure(rows, ["loss", "ttft_ms"])
    assert len(fig.data) == 2  # two objectives: one panel
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "linear"
    assert _trials_of(next(t for t in fig.data if t.name == PARETO_LABEL)) == {0}


def test_rebuild_deployment_round_trips_and_ignores_unknown_keys():
    dep = perf.Deployment(gpus=4, tp=2, weights="fp8", runtime=perf.Runtime(max_batch=64))
    data = _jsonable(dep.to_dict())
    assert rebuild_deployment(data) == dep
    assert rebuild_deployment({**data, "from_a_newer_version": 1}) == dep
    assert rebuild_deployment({"gpus": 2, "tp": 2}) == perf.Deployment(gpus=2, tp=2)


def test_serving_curves_are_fronts_through_the_operating_points(study):
    members, total = serving_curve_data(study, GPU, objectives=NAMES)
    assert total == len(FRONT) and {m.trial for m in members} == FRONT
    for m in members:
        t = study.trials[m.trial]
        for c in m.curves:
            assert len(c.tokens_per_s_per_user) > 5
            # a throughput-vs-interactivity front: faster per user costs throughput per GPU
            assert all(a < b for a, b in zip(c.tokens_per_s_per_user, c.tokens_per_s_per_user[1:]))
            assert all(a >= b for a, b in zip(c.tokens_per_s_per_gpu, c.tokens_per_s_per_gpu[1:]))
            assert c.tokens_per_s_per_gpu[0] > 10 * c.tokens_per_s_per_gpu[-1]
        main = m.curves[0]
        assert main.role == "throughput" and main.layout == t.user_attrs["deployment_label"]
        # the throughput objective is the top of its layout's curve; the interactivity one at its right end
        assert m.throughput_point[1] == t.values[1]
        assert m.throughput_point[1] == pytest.approx(max(main.tokens_per_s_per_gpu), rel=1e-6)
        assert m.interactive_point[0] == t.values[2]
        inter = m.curves[-1]  # the interactivity point lies on its layout's curve (batch 1: its right end)
        assert m.interactive_point == pytest.approx((inter.tokens_per_s_per_user[-1], inter.tokens_per_s_per_gpu[-1]))
    by_trial = {m.trial: m for m in members}
    assert [c.role for c in by_trial[0].curves] == ["throughput"]
    two = by_trial[4]
    assert [(c.role, c.layout) for c in two.curves] == [("throughput", "TP1 x2"), ("interactive", "TP2")]
    # the interactivity point lies on the TP2 curve (batch 1), far below the TP1 x2 curve at that speed
    tp2 = perf.predict(Architecture(**BASE), GPU, perf.Deployment(gpus=2, tp=2, concurrency=1))
    assert two.interactive_point == pytest.approx((tp2.output_tokens_per_s_per_user, tp2.output_tokens_per_s_per_gpu))


def test_without_a_recorded_interactive_prediction_the_point_is_placed_on_its_layout_curve():
    legacy = _trial(16, 2.9, dep=perf.Deployment(gpus=2), interactive=perf.Deployment(gpus=2, tp=2),
                    record_interactive=False)
    (m,), total = serving_curve_data([legacy], GPU, objectives=NAMES)
    tp2 = perf.predict(Architecture(**BASE), GPU, perf.Deployment(gpus=2, tp=2, concurrency=1))
    assert total == 1 and m.interactive_point == pytest.approx(
        (tp2.output_tokens_per_s_per_user, tp2.output_tokens_per_s_per_gpu))


def test_serving_figure_draws_the_curves_it_was_given(study):
    members, _ = serving_curve_data(study, GPU, objectives=NAMES)
    fig = serving_curves_figure(members)
    lines = {t.name: t for t in fig.data if t.mode == "lines"}
    for m in members:
        line = lines[m.label]
        assert m.label.startswith(f"#{m.trial} h1024 L")
        assert tuple(line.x) == m.curves[0].tokens_per_s_per_user
        assert tuple(line.y) == m.curves[0].tokens_per_s_per_gpu
    dashed = [t for t in lines.values() if t.line.dash == "dash"]
    assert [t.name for t in dashed] == [f"{next(m.label for m in members if m.trial == 4)} (TP2, interactive layout)"]


def test_front_members_are_capped_evenly_with_both_ends(study):
    assert [t.number for t in front_members(study, max_members=2)] == [1, 2]  # fastest and slowest
    assert [t.number for t in front_members(study, max_members=12)] == [1, 0, 4, 2]
    with pytest.raises(ValueError, match="max_members"):
        front_members(study, max_members=0)


def test_a_member_without_its_architecture_is_skipped_with_a_warning(study, tmp_path):
    bare = create_trial(values=[1.0, 2.0, 3.0], user_attrs={"shape": "?"})
    with pytest.warns(UserWarning, match="not drawn: no .arch."):
        assert serving_curves([bare], GPU, tmp_path) == {}
    assert not list(tmp_path.iterdir())


def test_write_plots_writes_the_recognised_plots_and_no_3d_front(study, rows, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no member skipped, no library warning left unhandled
        html = write_plots(study, NAMES, tmp_path, reference_point(study), rows, GPU)
    plots = tmp_path / "plots"
    assert set(html) == {"pairwise", "serving_curves", "hypervolume_history"}
    for name in html:
        assert (plots / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "cdn.plot.ly" in html[name]
        assert "plotly.min.js" in (plots / f"{name}.html").read_text()  # offline copy beside it
    assert os.path.samefile(plots / "plotly.min.js", _cached_bundle())  # a link to the shared copy
    assert not list(plots.glob("pareto_front*"))
    assert PARETO_LABEL in (plots / "pairwise.html").read_text()
    data = json.loads((plots / "serving_curves.json").read_text())
    assert data["gpu"] == GPU.name and {m["trial"] for m in data["members"]} == FRONT


def test_wandb_summary_logs_the_pngs_and_a_native_serving_chart(study, rows, tmp_path, monkeypatch):
    from types import SimpleNamespace as NS

    from search.tracking import WandbTracker

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    figures = write_plots(study, NAMES, tmp_path, reference_point(study), rows, GPU)
    cfg = NS(tracking=NS(mode="offline", project="test-plots", entity=None, tags=[]), study_name="plots", n_trials=8)
    media = Path(WandbTracker(cfg, str(tmp_path)).summary(rows, NAMES, figures)) / "files" / "media"
    for name in ("pairwise", "serving_curves", "hypervolume_history"):
        assert len(list((media / "images" / "plots").glob(f"{name}_image_*.png"))) == 1
        assert len(list((media / "html" / "plots").glob(f"{name}_*.html"))) == 1
    (table,) = (media / "table").glob("serving_curves_table_*.table.json")
    data = json.loads(table.read_text())["data"]  # rows of [x, line, y]
    members, _ = serving_curve_data(study, GPU, objectives=NAMES)
    expected = {(x, m.label if c.role == "throughput" else f"{m.label} ({c.layout}, interactive)", y)
                for m in members for c in m.curves for x, y in zip(c.tokens_per_s_per_user, c.tokens_per_s_per_gpu)}
    assert {tuple(r) for r in data} == expected


# --------------------------------------------------------------------------- the plotly bundle, stored once
def _cached_bundle() -> Path:
    import plotly

    from search.cache import cache_dir

    return cache_dir() / "assets" / f"plotly-{plotly.__version__}.min.js"


def test_studies_hard_link_one_plotly_bundle_and_a_right_one_is_left_alone(tmp_path):
    import plotly.graph_objects as go
    from plotly.offline import get_plotlyjs

    from search.plots import _write_html

    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    pages = [tmp_path / run / "plots" / "p.html" for run in ("a", "b")]
    for page in pages:
        page.parent.mkdir(parents=True)
        _write_html(fig, page)
    a, b = (page.parent / "plotly.min.js" for page in pages)
    shared = _cached_bundle()
    assert shared.read_text(encoding="utf-8") == get_plotlyjs()
    assert a.stat().st_ino == b.stat().st_ino == shared.stat().st_ino  # hard links, not copies
    assert not a.is_symlink() and shared.stat().st_nlink >= 3
    assert 'src="plotly.min.js"' in pages[0].read_text()  # loaded from beside the page: a copied run dir opens offline
    mtime = a.lstat().st_mtime_ns
    _write_html(fig, pages[0])  # redrawn: the bundle is left as it is
    assert a.lstat().st_mtime_ns == mtime and a.stat().st_ino == shared.stat().st_ino

    a.unlink()
    a.write_text("/* plotly of another version */")  # a stale bundle is replaced by the link
    _write_html(fig, pages[0])
    assert os.path.samefile(a, shared)
