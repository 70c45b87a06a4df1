"""The validation's fit objective and latency targets (benchmarks/validate_perf.py)."""

import json
import math

import pytest

import validate_perf as vp


def _row(metrics, concurrency=1):
    return {"id": "x", "concurrency": concurrency, "metrics": metrics}


def test_latency_target_prefers_tpot_then_itl_then_per_user_rate_then_end_to_end():
    assert vp.latency_target(_row({"itl_ms": 18.5, "tpot_ms": 17.0})) == ("tpot_ms", 17.0)
    assert vp.latency_target(_row({"itl_ms": 18.5, "e2e_latency_ms": 900})) == ("tpot_ms", 18.5)
    assert vp.latency_target(_row({"output_tokens_per_s_per_user": 50.0})) == ("tpot_ms", 20.0)
    assert vp.latency_target(_row({"e2e_latency_ms": 833.0})) == ("e2e_ms", 833.0)
    assert vp.latency_target(_row({"output_tokens_per_s_total": 100.0})) is None


def test_fit_error_weighs_latency_rows_as_much_as_all_throughput_rows():
    thr = [{"predicted": 2.0, "measured": 1.0}] * 200  # |ln 2| each
    lat = [{"predicted": 1.0, "measured": 1.0, "latency_predicted": 30.0, "latency_measured": 10.0}]  # |ln 3|
    assert vp.fit_error(thr + lat) == pytest.approx((math.log(2) + math.log(3)) / 2)
    assert vp.fit_error(thr) == pytest.approx(math.log(2))
    # a latency row the model cannot serve counts as a 10x miss
    assert vp.fit_error([{**lat[0], "latency_predicted": None}]) == pytest.approx(math.log(10))


def test_latency_folds_refit_without_each_latency_only_model_and_predict_it(tmp_path, monkeypatch):
    import json

    dev = [r for r in json.loads(vp.DATA.read_text()) if r["model"] == "Llama-3.1-8B"][:2]
    low = [r for r in json.loads(vp.LOW_DATA.read_text()) if r.get("fit")
           and r["model"] in ("Qwen3-8B", "GLM-4.6", "Llama-3.1-8B")][:9]
    only_low = {r["model"] for r in low} - {r["model"] for r in dev}
    assert only_low == {"Qwen3-8B", "GLM-4.6"}
    seen = {}

    def fake_fit(predictor, rows, rounds=8, log="", pair_moves=False):  # records what each fold was fitted on
        seen[log] = {r["model"] for r in rows}
        return {**vp.NEUTRAL, "kernel_gap_s": 5e-6}

    monkeypatch.setattr(vp, "fit", fake_fit)
    rows = vp.latency_folds(vp.Predictor(1), dev, low, tmp_path)
    assert seen == {f"without {m}": {r["model"] for r in dev + low} - {m} for m in only_low}
    assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in low if r["model"] in only_low)
    for r in rows:  # the held-out prediction is the fold's, not the shipped defaults'
        assert r["held_out"]["latency_predicted"] > 0
        assert r["held_out"]["latency_predicted"] != r["in_sample"]["latency_predicted"]
    text = (tmp_path / "latency_folds.md").read_text()
    assert all(f"| {r['id']} |" in text for r in rows) and "held out" in text
    n1 = sum(r["concurrency"] == 1 for r in rows)
    assert n1 and "TPOT at concurrency 1: in sample " in text and f" of {n1} within 15 %; held out " in text


def test_concurrency_1_tpot_errors_keep_only_served_tpot_rows_at_concurrency_1():
    tpot = {"latency_metric": "tpot_ms", "latency_measured": 10.0, "latency_predicted": 8.0}
    items = [(1, tpot), (16, tpot), (1, {**tpot, "latency_metric": "e2e_ms"}),
             (1, {**tpot, "latency_predicted": None}), (1, None), (None, tpot)]
    assert vp.concurrency_1_tpot_errors(items) == [pytest.approx(-0.2)]
    assert vp.latency_error(tpot) == pytest.approx(-0.2) and vp.latency_error(None) is None


def test_within_target_counts_both_signs_and_the_boundary():
    assert vp.within_target([0.15, -0.15, 0.151, -0.2, 0.0]) == "3 of 5 within 15 %"
    assert vp.within_target([]) == "0 of 0 within 15 %"


def test_inert_params_cannot_move_any_published_row():
    """The memo keys a row on its non-inert parameters only: every inert one, moved far, leaves the row's
    prediction unchanged, on every published row (and moving the same values on the other rows does move
    some, so the values are not themselves inert)."""
    import json

    from co_design.perf import Runtime

    base = {k: getattr(Runtime(), k) for k in vp.CALIBRATED}
    moved = {"nvfp4_compute_efficiency": 0.3, "grouped_gemm_efficiency": 0.5, "expert_tile_overhead_s": 12e-6,
             "collective_efficiency": 0.3, "collective_overhead_s": 60e-6}
    assert set(moved) == set().union(*(vp.inert_params(r) for r in json.loads(vp.DATA.read_text())))
    rows = [r for f in (vp.DATA, vp.LOW_DATA, vp.TEST_DATA) for r in json.loads(f.read_text())
            if vp.is_mlperf(r) or (r.get("isl") and r.get("osl"))]
    changed = {k: 0 for k in moved}
    for r in rows:
        ref = vp.predict_row(r, Runtime(**base))
        inert = vp.inert_params(r)
        assert vp.predict_row(r, Runtime(**{**base, **{k: moved[k] for k in inert}})) == ref, (r["id"], inert)
        live = [k for k in moved if k not in inert]
        if live and vp.predict_row(r, Runtime(**{**base, **{k: moved[k] for k in live}})) != ref:
            changed.update({k: changed[k] + 1 for k in live})
    assert all(changed.values()), changed


def test_block_scaled_fp8_rows_run_block_scaled_deployments():
    """Rows marked ``precision.fp8_scaling: block`` are FP8 rows of block-scaled checkpoints (deepseek-ai,
    MiniMaxAI, Qwen FP8 releases, or DeepSeek-R1 measured from its own FP8 weights) and predict with that
    scaling; every other row with the default per-tensor one."""
    import json

    from co_design.perf import Runtime

    rows = [r for f in (vp.DATA, vp.LOW_DATA, vp.TEST_DATA) for r in json.loads(f.read_text())]
    block = [r for r in rows if r["precision"].get("fp8_scaling") == "block"]
    assert len(block) == 75 and {r["model"] for r in block} == {
        "DeepSeek-R1", "DeepSeek-R1-0528", "MiniMax-M2.5", "Qwen3-8B"}
    for r in block:
        assert vp.precision_of(r)[:2] == ("fp8", "fp8"), r["id"]
        assert (r.get("checkpoint") or "").startswith(("deepseek-ai/", "MiniMaxAI/", "Qwen/")) or (
            r["model"].startswith("DeepSeek") and "nvidia/" not in (r.get("checkpoint") or "")), r["id"]
    for r in (block[0], next(r for r in rows if vp.precision_of(r)[0] == "fp8" and r not in block)):
        deps, _ = vp.deployments_of(r, vp.arch_of(r), Runtime())
        assert deps and {d.fp8_scaling for d in deps} == {r["precision"].get("fp8_scaling", "tensor")}


def test_predictor_memo_repredicts_only_the_rows_a_parameter_can_move():
    import json

    from co_design.perf import Runtime

    rows = [r for r in json.loads(vp.DATA.read_text()) if not vp.is_mlperf(r)][:40]
    base = {k: getattr(Runtime(), k) for k in vp.CALIBRATED}
    p = vp.Predictor(1)
    first = p(rows, base)
    n = len(p.cache)
    again = p(rows, {**base, "nvfp4_compute_efficiency": 0.3})
    fp4 = [r for r in rows if "nvfp4_compute_efficiency" not in vp.inert_params(r)]
    assert 0 < len(fp4) < len(rows)
    assert len(p.cache) == n + len(fp4)  # only the FP4 rows were predicted again
    assert [a for a, r in zip(again, rows) if r not in fp4] == [a for a, r in zip(first, rows) if r not in fp4]


def test_grid_search_pair_moves_leave_a_diagonal_valley_coordinate_descent_cannot():
    """err falls along the diagonal x = y but rises when either coordinate moves alone, so coordinate descent
    stops where it starts; moving both by one step at once walks down to the minimum at (4, 4)."""
    grids = {"x": [0, 1, 2, 3, 4], "y": [0, 1, 2, 3, 4], "z": [0, 1]}

    def err(p):
        return 10 * abs(p["x"] - p["y"]) - p["x"] + p["z"]

    start = [{"x": 0, "y": 0, "z": 1}]
    assert vp.grid_search(err, grids, start) == {"x": 0, "y": 0, "z": 0}
    assert vp.grid_search(err, grids, start, pair_moves=True) == {"x": 4, "y": 4, "z": 0}
    # the best of several starts wins; ties go to the first start
    assert vp.grid_search(err, grids, [{"x": 0, "y": 0, "z": 0}, {"x": 2, "y": 2, "z": 0}]) == {"x": 2, "y": 2, "z": 0}
    assert vp.grid_search(lambda p: 0.0, grids, [{"x": 1, "y": 1, "z": 0}, {"x": 3, "y": 3, "z": 0}]) == \
        {"x": 1, "y": 1, "z": 0}


def _thr(id_, family, measured, gpu="H200", isl=128, osl=128):
    return {"id": id_, "hardware": gpu, "isl": isl, "osl": osl, "arch": {"family": family},
            "metrics": {"output_tokens_per_s_per_gpu": measured}}


def test_close_pairs_split_by_the_families_they_compare():
    rows = [_thr("d1", "dense", 100.0), _thr("d2", "dense", 110.0), _thr("m1", "moe", 120.0),
            _thr("m2", "moe", 130.0), _thr("far", "dense", 1000.0), _thr("b200", "moe", 105.0, gpu="B200")]
    # d1 < d2 ordered right; m1 vs m2 ordered wrong; every dense-MoE pair ordered right
    predicted = {"d1": 1.0, "d2": 2.0, "m1": 4.0, "m2": 3.0, "far": 9.0, "b200": 1.0}
    by_kind = vp.concordance_by_kind(rows, predicted, vp.same_setting)
    assert vp.pair_kind(rows[0], rows[2]) == vp.pair_kind(rows[2], rows[0]) == "dense-MoE"
    assert by_kind["dense-dense"]["1.0-1.25x"] == {"pairs": 1, "concordant": 1}
    assert by_kind["MoE-MoE"]["1.0-1.25x"] == {"pairs": 1, "concordant": 0}
    assert by_kind["dense-MoE"]["1.0-1.25x"] == {"pairs": 3, "concordant": 3}  # d1-m2 is 1.3x
    assert by_kind["dense-MoE"]["1.25-1.5x"] == {"pairs": 1, "concordant": 1}
    wrong = [(band, f["id"], sl["id"]) for band, f, sl, ok in vp.close_pairs(rows, predicted, vp.same_setting)
             if not ok]
    assert wrong == [("1.0-1.25x", "m2", "m1")]  # faster as measured first
    whole = vp.concordance(rows, predicted, vp.same_setting)  # the kinds partition the pairs
    for band, v in whole.items():
        assert v["pairs"] == sum(k[band]["pairs"] for k in by_kind.values())
        assert v["concordant"] == sum(k[band]["concordant"] for k in by_kind.values())
    assert vp.concordance_text(vp.concordance([rows[0], rows[4]], predicted, vp.same_setting)).endswith(
        "no pair within 2x")


def _lat(id_, weights, conc, tpot, per_gpu, framework="SGLang", gpu="B300", model="M", tp=8, ep=1):
    return {"id": id_, "model": model, "hardware": gpu, "isl": 922, "osl": 922, "concurrency": conc,
            "framework": framework, "precision": {"weights": weights, "kv_cache": "FP8"},
            "parallelism": {"tp": tp, "ep": ep, "attention_dp": False},
            "arch": {"family": "moe"}, "metrics": {"tpot_ms": tpot, "output_tokens_per_s_per_gpu": per_gpu}}


def _res(tpot_meas, tpot_pred, mapping):
    return {"latency_metric": "tpot_ms", "latency_measured": tpot_meas, "tpot_ms": tpot_pred, "mapping": mapping}


def test_tpot_pairs_differ_in_one_choice_at_one_model_runtime_and_load():
    rows = [_lat("f8", "FP8", 1, 7.0, 17.0), _lat("f4", "FP4", 1, 5.6, 22.0, ep=8),
            _lat("f4c2", "FP4", 2, 6.3, 39.0, ep=8),  # other concurrency: no pair
            _lat("f4trt", "FP4", 1, 5.0, 25.0, framework="TensorRT-LLM"),  # other runtime: no pair
            _lat("f8b", "FP8", 1, 7.2, 16.0, gpu="B200"),  # other GPU: a GPU pair with f8 only (f4 runs EP8)
            _lat("f8tp4", "FP8", 1, 8.0, 25.0, tp=4)]  # other mapping: a mapping pair with f8
    res = {"f8": _res(7.0, 10.0, "TP8"), "f4": _res(5.6, 8.0, "TP8 EP8"), "f4c2": _res(6.3, 9.0, "TP8 EP8"),
           "f4trt": _res(5.0, 8.0, "TP8"), "f8b": _res(7.2, 10.0, "TP8"), "f8tp4": _res(8.0, 9.0, "TP4")}
    weights = vp.tpot_pairs(rows, res, "weights")
    assert [(p["a"], p["b"], p["mappings"]) for p in weights] == [("f8", "f4", ("TP8", "TP8 EP8")),
                                                                  ("f8tp4", "f4", ("TP4", "TP8 EP8"))]
    assert weights[0]["meas_ratio"] == 7.0 / 5.6 and weights[0]["pred_ratio"] == 10.0 / 8.0
    assert [(p["a"], p["b"]) for p in vp.tpot_pairs(rows, res, "mapping")] == [("f8", "f8tp4")]
    gpu = vp.tpot_pairs(rows, res, "gpu")
    assert [(p["a"], p["b"], p["gpus"]) for p in gpu] == [("f8", "f8b", ("B300", "B200"))]
    ok, err = vp.ratio_pair_summary(vp.tpot_pairs(rows, res, "mapping"))  # 7/8 measured, 10/9 predicted
    assert ok == 0 and err == abs((10.0 / 9.0) / (7.0 / 8.0) - 1)
    with pytest.raises(ValueError, match="choice"):
        vp.tpot_pairs(rows, res, "runtime")
    # a row compared on end-to-end latency (no TPOT published) pairs with nothing
    res["f8tp4"] = {**res["f8tp4"], "latency_metric": "e2e_ms"}
    assert vp.tpot_pairs(rows, res, "mapping") == []
    # the deployment-choice concordance (without the TP4 row) compares rows at one load only, any runtime:
    # f4 vs f4trt (1.14x), f8 vs f4 (1.29x) and f8 vs f4trt (1.47x)
    rows = rows[:5]
    c = vp.concordance(rows, {"f8": 20.0, "f4": 18.0, "f4c2": 1.0, "f4trt": 30.0, "f8b": 1.0}, vp.same_load)
    assert c["1.0-1.25x"] == {"pairs": 1, "concordant": 1}
    assert c["1.25-1.5x"] == {"pairs": 2, "concordant": 1}  # f4 predicted slower than f8: discordant


def test_a_fit_pins_what_no_training_row_can_move():
    """The Hopper rows run no FP4 GEMM and the dense rows no expert GEMM: a fit on either cannot measure those
    rates, so they stay at their idealized values instead of whichever search start won."""
    import json

    rows = [r for r in json.loads(vp.DATA.read_text()) if not vp.is_mlperf(r)]
    hopper = [r for r in rows if r["hardware"] in ("H100", "H200")]
    dense = [r for r in rows if r["arch"]["family"] == "dense"]
    assert vp.unconstrained(hopper) == ["nvfp4_compute_efficiency"]
    assert vp.unconstrained(dense) == ["grouped_gemm_efficiency", "expert_tile_overhead_s"]
    assert vp.unconstrained(rows) == []

    calls = []

    class Flat:  # a predictor whose error ignores the pinned parameter: without the pin any grid value would do
        def __call__(self, rs, params):
            calls.append(params)
            return [{"predicted": params["compute_efficiency"], "measured": 0.8} for _ in rs]

    fitted = vp.fit(Flat(), hopper, rounds=2)
    assert fitted["nvfp4_compute_efficiency"] == vp.NEUTRAL["nvfp4_compute_efficiency"]
    assert {c["nvfp4_compute_efficiency"] for c in calls} == {vp.NEUTRAL["nvfp4_compute_efficiency"]}
    assert fitted["compute_efficiency"] == 0.8


def test_the_fit_on_all_rows_keeps_the_shipped_point_unless_it_finds_lower_error():
    """Two valleys: host time per iteration against per-kernel gap. A descent from the idealized start ends in
    the shallower one; started also from the shipped constants, the fit keeps the deeper one."""
    import json

    rows = [r for r in json.loads(vp.DATA.read_text()) if not vp.is_mlperf(r)]  # nothing pinned

    class TwoValleys:
        def __call__(self, rs, p):
            host, gap = p["iteration_overhead_s"], p["kernel_gap_s"]
            # the deeper valley at 0.5 ms and 2 us, reached only by moving both; the shallower one at 0 and 4 us
            err = min(0.01 + abs(host - 0.5e-3) * 1e3 + abs(gap - 2e-6) * 1e5,
                      0.05 + abs(host) * 100 + abs(gap - 4e-6) * 1e4)
            return [{"predicted": math.exp(err), "measured": 1.0} for _ in rs]

    shipped = {k: getattr(vp.Runtime(), k) for k in vp.CALIBRATED} | {"iteration_overhead_s": 0.5e-3,
                                                                       "kernel_gap_s": 2e-6}
    alone = vp.fit(TwoValleys(), rows, rounds=3)
    assert (alone["iteration_overhead_s"], alone["kernel_gap_s"]) == (0.0, 4e-6)
    both = vp.fit(TwoValleys(), rows, rounds=3, also_from=shipped)
    assert (both["iteration_overhead_s"], both["kernel_gap_s"]) == (0.5e-3, 2e-6)


def test_the_ttft_fit_takes_concurrency_1_rows_and_the_best_grid_point_of_both_quantities():
    """Only rows measured at concurrency 1 (no queue) with a published TTFT are fitted; every point of the two-
    quantity grid is tried, so a valley that needs both quantities to move is found; the other parameters pass
    through unchanged."""
    def row(i, c, ttft=100.0, spec=False):
        return {"id": f"r{i}", "concurrency": c, "isl": 1000, "osl": 100, "speculative_decoding": spec,
                "metrics": {"ttft_ms": ttft} if ttft else {}}

    rows = [row(0, 1), row(1, 1), row(2, 4), row(3, 1, ttft=None), row(4, 1, spec=True)]
    assert [r["id"] for r in vp.ttft_rows(rows)] == ["r0", "r1"]
    seen = []

    class Stub:
        def __call__(self, rs, p):
            seen.append(p)
            launch, away = p["eager_launch_s"], p["first_token_overhead_s"]
            # exact only at (40 us, 20 ms); along either axis alone from the grid's corner the error only grows
            miss = min(abs(launch - 40e-6) * 1e4 + abs(away - 20e-3) * 10, 0.05 + launch * 10 + away)
            return [{"id": r["id"], "ttft_ms": 100.0 * math.exp(miss)} for r in rs]

    fitted = vp.fit_ttft(Stub(), vp.ttft_rows(rows), {"kernel_gap_s": 7e-6})
    assert fitted == {"eager_launch_s": 40e-6, "first_token_overhead_s": 20e-3}
    assert all(p["kernel_gap_s"] == 7e-6 for p in seen)
    assert vp.ttft_errors(Stub(), vp.ttft_rows(rows), {"eager_launch_s": 40e-6, "first_token_overhead_s": 20e-3}) \
        == {"r0": 0.0, "r1": 0.0}


def test_runtime_spread_groups_one_setting_across_runtimes_and_bounds_one_prediction():
    def row(id_, tpot, framework, **kw):
        return {**_lat(id_, "FP8", 1, tpot, 1.0, framework=framework, **kw), "num_gpus": 8}

    rows = [row("old", 9.0, "SGLang 0.5.6"), row("new", 7.0, "SGLang 0.5.12"), row("trt", 6.0, "TensorRT-LLM"),
            {**row("ep", 5.0, "TensorRT-LLM"), "parallelism": {"tp": 8}},  # unstated ep: the default, EP1
            row("c2", 8.0, "SGLang 0.5.6") | {"concurrency": 2},  # not concurrency 1: out
            row("b200", 8.0, "SGLang 0.5.6", gpu="B200"),  # another GPU, one runtime: no group
            row("tp4", 8.0, "SGLang 0.5.6", tp=4)]  # another mapping, one runtime: no group
    groups = vp.runtime_spread(rows, {"old": 8.0})
    assert len(groups) == 1
    g = groups[0]
    assert [r["id"] for r in g["rows"]] == ["old", "new", "trt", "ep"]
    assert g["ratio"] == 9.0 / 5.0 and g["setting"] == "M on B300 x8, fp8 weights, TP8 EP1"
    assert [r["predicted_ms"] for r in g["rows"]] == [8.0, None, None, None]
    # one prediction within 15 % of each row needs max / min <= 1.15 / 0.85 = 1.353: {5, 6}, {6, 7} or {7, 9}
    assert g["reachable"] == 2
    assert vp.best_window([5.0, 6.0, 7.0, 9.0]) == 2 and vp.best_window([6.0, 7.0, 8.0]) == 3
    t = vp.TPOT_TARGET
    assert vp.best_window([1.0, (1 + t) / (1 - t)]) == 2 and vp.best_window([1.0, 1.36]) == 1
    assert vp.best_window([]) == 0


def test_runtime_version_reads_the_name_and_version_and_refuses_to_guess():
    def v(framework):
        return vp.runtime_version({"framework": framework})

    assert v("SGLang v0.5.12 (lmsysorg/sglang:v0.5.12-cu130)") == "SGLang 0.5.12"
    assert v("SGLang 0.5.6.post1 (`python -m sglang.launch_server ...`)") == "SGLang 0.5.6"
    assert v("TensorRT-LLM v0.21.0rc2 (built from source), trtllm-serve") == "TensorRT-LLM 0.21.0rc2"
    assert v("vLLM v0.11.0 ('vllm serve Qwen/Qwen3-8B')") == "vLLM 0.11.0"
    assert v("TensorRT-LLM (PyTorch backend, main branch; version not stated on page)") is None
    assert v("some server 1.2") is None


def test_anchored_errors_recover_a_runtime_from_another_setting():
    # two published settings of one runtime version, their TPOTs replaced by what the model predicts under a
    # runtime with half the fitted overheads: anchoring on either must give back the other exactly
    from co_design.perf import Runtime, predict
    from co_design.perf.anchor import scaled_runtime

    rows = {r["id"]: r for r in json.loads(vp.TEST_DATA.read_text())}
    half = scaled_runtime(Runtime(), 0.5)
    synth = []
    for id_ in ("lat-ix001", "lat-ix008", "lat-ix009"):  # B200 TP8, B200 TP4, B200 TP8 at 8k input (ix001's setting)
        r = json.loads(json.dumps(rows[id_]))
        m = vp.row_measurement(r, Runtime())
        r["metrics"] = {"tpot_ms": predict(m.arch, m.gpu, m.deployment.replace(runtime=half)).tpot_s * 1e3}
        synth.append(r)
    unversioned = json.loads(json.dumps(rows["lat-015"]))
    items = {i["id"]: i for i in vp.anchored_errors(synth + [unversioned], Runtime())}
    for id_ in ("lat-ix001", "lat-ix009"):  # one setting: they never anchor each other, only ix008 does
        assert items[id_]["others"]["n"] == 1 and [s["anchor"] for s in items[id_]["single"]] == ["lat-ix008"]
        assert items[id_]["others"]["scale"] == pytest.approx(0.5, rel=1e-6)
        assert items[id_]["others"]["ms"] == pytest.approx(items[id_]["measured_ms"], rel=1e-6)
    assert items["lat-ix008"]["others"]["n"] == 2
    assert items["lat-015"]["others"] is None and items["lat-015"]["single"] == []
    s = vp.anchored_summary(list(items.values()))
    assert s["anchored_on_others"] == {"n": 3, "within": 3, "mdape": pytest.approx(0.0, abs=1e-4),
                                       "signed": pytest.approx(0.0, abs=1e-4)}
    assert s["zero_shot_all"]["n"] == 4 and s["single_anchor_pairs"]["n"] == 4
    # above concurrency 1: ix001's setting at 4 requests in flight, anchored on the concurrency-1 row of another
    # setting (ix008), comes back exactly; an unversioned row is left out
    loaded = json.loads(json.dumps(synth[0]))
    loaded.update(id="c4", concurrency=4)
    m = vp.row_measurement(loaded, Runtime())
    loaded["metrics"] = {"tpot_ms": predict(m.arch, m.gpu, m.deployment.replace(runtime=half)).tpot_s * 1e3}
    out = vp.anchored_above_c1(synth + [loaded, unversioned | {"concurrency": 4}], Runtime())
    assert [i["id"] for i in out] == ["c4"] and out[0]["scale"] == pytest.approx(0.5, rel=1e-6)
    assert out[0]["anchored_ms"] == pytest.approx(out[0]["measured_ms"], rel=1e-6)
    assert out[0]["zero_shot_ms"] > 1.05 * out[0]["measured_ms"]


def test_sweep_anchored_anchors_on_a_settings_concurrency_sweep_and_predicts_the_other_settings():
    # ix001's setting measured at 1 and 4 requests in flight, ix008's at 1, every TPOT what the model predicts
    # under half the fitted overheads: the sweep and its concurrency-1 row both give back that runtime exactly
    from co_design.perf import Runtime, predict
    from co_design.perf.anchor import scaled_runtime

    rows = {r["id"]: r for r in json.loads(vp.TEST_DATA.read_text())}
    half = scaled_runtime(Runtime(), 0.5)
    synth = []
    for id_, conc in (("lat-ix001", 1), ("lat-ix001", 4), ("lat-ix008", 1)):
        r = json.loads(json.dumps(rows[id_]))
        r.update(id=f"{id_}@{conc}", concurrency=conc)
        m = vp.row_measurement(r, Runtime())
        r["metrics"] = {"tpot_ms": predict(m.arch, m.gpu, m.deployment.replace(runtime=half)).tpot_s * 1e3}
        synth.append(r)
    unversioned = json.loads(json.dumps(rows["lat-015"]))
    items = vp.sweep_anchored(synth + [unversioned], Runtime())
    # only ix001's setting has a sweep; its one target is ix008's row (ix008 has no sweep, lat-015 no version)
    assert [(i["id"], i["n_c1"], i["n_sweep"]) for i in items] == [("lat-ix008@1", 1, 2)]
    i = items[0]
    assert i["anchor"] == "DeepSeek-R1-0528 B200 x8 TP8 (SGLang 0.5.12)"
    for how in ("c1", "sweep"):
        assert i[f"{how}_scale"] == pytest.approx(0.5, rel=1e-6)
        assert i[f"{how}_ms"] == pytest.approx(i["measured_ms"], rel=1e-6)


def test_runtime_kernels_apply_tensorrt_llm_hopper_kernels_to_its_rows_only(tmp_path):
    """A TensorRT-LLM row on Hopper predicts with the TensorRT-LLM Hopper runtime file; an SGLang row on Hopper,
    and a TensorRT-LLM row on Blackwell, with the runtime-blind defaults. The report's rows that move are
    exactly the TensorRT-LLM Hopper block-FP8 MoE rows."""
    from co_design.perf import Runtime

    base = Runtime()
    hopper_trt = {"framework": "TensorRT-LLM v0.21.0rc2", "hardware": "H200"}
    assert vp.kernel_runtime(hopper_trt, base).idle_expert_tile_s == Runtime.load(
        vp.RUNTIME_KERNEL_FILES["TensorRT-LLM", "Hopper"]).idle_expert_tile_s > 0
    assert vp.kernel_runtime({**hopper_trt, "framework": "SGLang v0.5.12"}, base) == base
    assert vp.kernel_runtime({**hopper_trt, "hardware": "B200"}, base) == base
    low, test = (json.loads(f.read_text()) for f in (vp.LOW_DATA, vp.TEST_DATA))
    summary = vp.runtime_kernels_report(low, test, tmp_path)
    by_id = {r["id"]: r for r in low + test}
    assert summary["moved"] and all(
        vp.runtime_family(by_id[i]) == "TensorRT-LLM" and by_id[i]["hardware"] in ("H100", "H200")
        and by_id[i]["precision"].get("fp8_scaling") == "block" and by_id[i]["arch"]["family"] != "dense"
        for i in summary["moved"])
    assert (tmp_path / "runtime_kernels.md").read_text().startswith("# Runtime kernel properties")


def test_benchmark_rounds_read_the_printed_prompt_count_over_the_concurrency():
    low = {r["id"]: r for r in json.loads(vp.LOW_DATA.read_text())}
    test = {r["id"]: r for r in json.loads(vp.TEST_DATA.read_text())}
    assert vp.benchmark_rounds(test["lat-ix039"]) == 10  # InferenceX: 640 prompts after 128 warm-up, conc. 64
    assert vp.benchmark_rounds(low["lc-035"]) == 5  # --num-prompts 80 --max-concurrency 16
    assert vp.benchmark_rounds(low["lc-005"]) == 150 / 8  # "150 requests at concurrency 8"
    assert vp.benchmark_rounds(test["lat-002"]) is None  # AIPerf at fixed concurrency: the count is not printed


def test_ttft_load_puts_the_benchmarked_closed_loop_between_steady_and_burst(tmp_path):
    test = [r for r in json.loads(vp.TEST_DATA.read_text()) if r["id"] in ("lat-ix038", "lat-ix039", "lat-002")]
    report = vp.ttft_load_report([], test, tmp_path)
    rows = {i["id"]: i for i in report["rows"]}
    assert set(rows) == {"lat-ix038", "lat-ix039", "lat-002"}
    for i in rows.values():
        assert i["burst_ms"] > i["steady_ms"]
    for rid in ("lat-ix038", "lat-ix039"):  # ten rounds: the first a burst, nine steady
        i = rows[rid]
        assert i["benchmark_ms"] == pytest.approx(i["burst_ms"] / 10 + 0.9 * i["steady_ms"])
    assert "benchmark_ms" not in rows["lat-002"]
    assert report["summary"]["test"]["with a prompt count"]["as benchmarked"]["rows"] == 2
    assert report["summary"]["test"]["all"]["steady"]["rows"] == 3
    text = (tmp_path / "ttft_load.md").read_text()
    assert "| lat-002 | test |" in text and json.loads((tmp_path / "ttft_load.json").read_text())["rows"]


def test_a_finite_offline_run_is_waves_of_what_the_gpus_hold():
    from co_design.arch import Architecture
    from co_design.hardware import get_gpu
    from co_design.perf import Deployment, max_throughput, predict

    arch = Architecture(hidden=2048, layers=4, heads=16, kv_heads=4, ffn=8192, vocab=32000)
    gpu = get_gpu("h100")
    dep = Deployment(gpus=2, tp=2, weights="fp8", activations="fp8", isl=1000, osl=1000)
    p = max_throughput(arch, gpu, dep)
    b = p.batch
    tpot = lambda c: predict(arch, gpu, dep.replace(concurrency=c)).tpot_s  # noqa: E731
    # whole waves of b: the steady-state rate
    assert vp.finite_run(arch, gpu, p, 7 * b) == (pytest.approx(p.output_tokens_per_s_per_gpu), b)
    # fewer requests than the GPUs hold: one wave of all of them, slower per GPU than steady state
    rate, wave = vp.finite_run(arch, gpu, p, b // 3)
    assert wave == b // 3 and rate == pytest.approx(b // 3 / tpot(b // 3) / 2)
    assert rate < p.output_tokens_per_s_per_gpu
    # one request past a whole wave decodes OSL tokens alone: b + 1 requests in the time of two waves
    rate, _ = vp.finite_run(arch, gpu, p, b + 1)
    assert rate == pytest.approx((b + 1) / (tpot(b) + tpot(1)) / 2)
    assert rate < p.output_tokens_per_s_per_gpu


def test_offline_rows_with_a_request_count_are_predicted_as_that_run():
    rows = {r["id"]: r for r in json.loads(vp.DATA.read_text())}
    row = rows["serve-215"]  # Qwen3-235B-A22B on 8 B200, 1000/2000, 1500 requests: fewer than the GPUs hold
    assert row["num_requests"] == 1500
    rt = vp.Runtime()
    out = vp.predict_row(row, rt)
    assert out["requests"] == 1500 and out["batch"] == 1500 < out["steady_batch"]
    assert out["predicted"] < out["steady"]
    steady = vp.predict_row({k: v for k, v in row.items() if k != "num_requests"}, rt)
    # the steady-state prediction maximizes over mappings too, so it is at least the chosen mapping's
    assert "requests" not in steady and steady["predicted"] >= out["steady"] > out["predicted"]


def test_multi_gpu_moe_perf_overview_rows_run_attention_dp_as_their_page_configures():
    # the page's MoE llm_options set enable_attention_dp: true; its EP size is not stated, so both stay open
    rows = [r for r in json.loads(vp.DATA.read_text())
            if r["arch"]["family"] == "moe" and not vp.is_mlperf(r)]
    multi = [r for r in rows if r["num_gpus"] > 1]
    assert len(multi) == 70 and all(r["parallelism"]["attention_dp"] is True for r in multi)
    assert all((r.get("parallelism") or {}).get("attention_dp") is None for r in rows if r["num_gpus"] == 1)
    for r in multi:
        deps, _ = vp.deployments_of(r, vp.arch_of(r), vp.Runtime())
        assert deps and all(d.attention_dp for d in deps)
        assert {d.ep for d in deps} == {1, r["num_gpus"]}
    maverick_h100 = next(r for r in multi if r["id"] == "serve-252")
    assert vp.predict_row(maverick_h100, vp.Runtime())["mapping"].endswith(("ADP", "DEP"))


def test_aiconfigurator_is_compared_on_the_mappings_the_row_allows():
    swept = {"aic_output_tokens_per_s_per_gpu": 30.0, "aic_config": {"mappings": {
        "attn_tp8_moe_tp8": {"output_tokens_per_s_per_gpu": 30.0}, "attn_dp8_moe_ep8": {"output_tokens_per_s_per_gpu": 20.0},
        "attn_dp8_moe_tp8": {"output_tokens_per_s_per_gpu": 25.0}, "attn_tp8_moe_ep8": {"output_tokens_per_s_per_gpu": None}}}}
    assert vp.aic_rate(swept, {"parallelism": {"tp": 8, "attention_dp": True}}) == 25.0
    assert vp.aic_rate(swept, {"parallelism": {"tp": 8}}) == 30.0
    assert vp.aic_rate(swept, None) == 30.0


def test_mlperf_server_rows_queue_at_random_under_their_p99_ttft_limit():
    rows = {r["id"]: r for r in json.loads(vp.DATA.read_text()) if vp.is_mlperf(r)}
    limited = {k: r for k, r in rows.items() if r.get("latency_constraints_ms")}
    assert {r["scenario"] for r in limited.values()} == {"Server", "Interactive"}
    for r in limited.values():
        deps, slo = vp.deployments_of(r, vp.arch_of(r), vp.Runtime())
        lim = r["latency_constraints_ms"]
        assert slo == vp.SLO(max_ttft_p99_s=lim["ttft_p99"] / 1e3, max_tpot_p99_s=lim["tpot_p99"] / 1e3)
        assert {d.arrivals for d in deps} == {"poisson"}
    offline = next(r for r in rows.values() if r["scenario"] == "Offline")
    deps, slo = vp.deployments_of(offline, vp.arch_of(offline), vp.Runtime())
    assert slo is None and {d.arrivals for d in deps} == {"steady"}
    # Llama-3.1-405B on 8 B200, Server: the prompt queue's p99 caps the batch below the Offline row's
    server, off = vp.predict_row(rows["serve-339"], vp.Runtime()), vp.predict_row(rows["serve-338"], vp.Runtime())
    assert server["predicted"] < 0.9 * off["predicted"] and server["batch"] < off["batch"]


def test_mlperf_latency_is_predicted_at_the_first_batch_that_reaches_the_published_load(tmp_path):
    rows = json.loads(vp.DATA.read_text())
    items = vp.mlperf_latency_report(rows, tmp_path)
    assert {i["id"] for i in items} == {"serve-339", "serve-343", "serve-347"}
    assert (tmp_path / "mlperf_latency.md").exists() and json.loads((tmp_path / "mlperf_latency.json").read_text())
    by_id = {r["id"]: r for r in rows}
    reached = [i for i in items if i["predicted"]]
    assert len(reached) >= 6
    for it in reached:
        row, p = by_id[it["id"]], it["predicted"]
        arch = vp.arch_of(row)
        dep = next(d for d in vp.deployments_of(row, arch, vp.Runtime())[0] if d.label == it["mapping"])
        assert dep.arrivals == "poisson" and dep.replicas == 1
        load = row["metrics"]["tokens_per_s_per_gpu_derived"]
        assert p["tokens_per_s_per_gpu"] >= load
        # no smaller batch reaches the load (throughput is not monotonic in the batch: all are tried)
        assert all(vp.predict(arch, row["hardware"].lower(), dep.replace(concurrency=b)).output_tokens_per_s_per_gpu
                   < load for b in range(1, p["batch"]))
        assert p["ttft_p99_ms"] > p["ttft_mean_ms"] > p["steady_ttft_ms"]  # the prompt queue, and its tail
        assert p["tpot_p99_ms"] > p["tpot_mean_ms"]  # requests decode beside different numbers of prompts


def test_near_optimal_keeps_the_single_steps_within_the_tolerance():
    grids = {"a": [0.1, 0.2, 0.3], "b": [1.0, 2.0]}
    errs = {(0.2, 1.0): 1.000, (0.1, 1.0): 1.005, (0.3, 1.0): 1.02, (0.2, 2.0): 1.0099, (0.1, 2.0): 0.5}

    def err(p):
        return errs[p["a"], p["b"]]

    fits = vp.near_optimal(err, {"a": 0.2, "b": 1.0}, grids, tol=0.01)
    assert [label for label, _, _ in fits] == ["fit", "a 0.2 -> 0.1", "b 1 -> 2"]  # 1.02 is out; no diagonal move
    assert fits[0][1] == {"a": 0.2, "b": 1.0} and fits[1][2] == 1.005
    # a pinned parameter (a one-value grid) has no neighbour
    assert [label for label, _, _ in vp.near_optimal(err, {"a": 0.2, "b": 1.0}, {"a": [0.2], "b": [1.0]})] == ["fit"]


def test_spread_draws_pool_one_fit_per_fold_starting_at_the_folds_fits():
    folds = {"m1": [{"r1": 1.0}, {"r1": 2.0}], "m2": [{"r2": 10.0}, {"r2": 20.0}, {"r2": 30.0}]}
    picks = list(vp.spread_draws(folds, 200, seed=1))
    assert picks[0] == {"r1": 1.0, "r2": 10.0} and len(picks) == 201
    assert {(p["r1"], p["r2"]) for p in picks[1:]} == {(a, b) for a in (1.0, 2.0) for b in (10.0, 20.0, 30.0)}
    assert picks == list(vp.spread_draws(folds, 200, seed=1))  # seeded


def test_fold_spread_refuses_without_the_folds_fits(tmp_path, capsys):
    assert vp.main(["--fold-spread", "--out", str(tmp_path), "--jobs", "1"]) == 2
    assert "run validate_perf.py --out" in capsys.readouterr().err


def test_near_optimal_pairs_add_the_two_parameter_steps():
    grids = {"a": [0.1, 0.2, 0.3], "b": [1.0, 2.0]}

    def err(p):  # a diagonal valley: each single step costs, a + b together gain
        return {(0.2, 1.0): 1.0, (0.3, 2.0): 0.9}.get((p["a"], p["b"]), 1.5)

    assert [label for label, _, _ in vp.near_optimal(err, {"a": 0.2, "b": 1.0}, grids)] == ["fit"]
    fits = vp.near_optimal(err, {"a": 0.2, "b": 1.0}, grids, pairs=True)
    assert [(label, e) for label, _, e in fits] == [("fit", 1.0), ("a 0.2 -> 0.3, b 1 -> 2", 0.9)]
