"""benchmarks/validate_moe.py: a case is predicted from the serving model's own MoE ops, the TP-vs-EP and
close-pair orderings count what they say, and the script runs on the committed files and on a small one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import validate_moe as vm  # benchmarks/ is on pytest's pythonpath (pyproject.toml)

from co_design.hardware import get_gpu
from co_design.perf.ops import step_ops
from co_design.perf.types import Deployment, Runtime

CASE = {"model": "Qwen3-235B-A22B", "precision": "fp8", "tokens": 256, "hidden": 4096, "expert_ffn": 1536,
        "top_k": 8, "experts": 128, "moe_tp": 2, "moe_ep": 4, "time_s": 1e-4, "gpu": "h200"}


def test_a_case_is_the_moe_ops_of_a_one_layer_model_on_its_split() -> None:
    rt = Runtime(moe_expert_load_cv=0.0)
    ops = step_ops(vm.layer(CASE), get_gpu("h200"), Deployment(tp=8, ep=4, weights="fp8", activations="fp8", runtime=rt),
                   decode=256.0, context=1024.0, prefill_tokens=0.0, prefill_len=1024.0, even_routing=True)
    names = {o.name for o in ops}
    assert set(vm.MOE_OPS) <= names and {"router", "attn_all_reduce"} <= names  # the others exist, but are not summed
    assert vm.predict_s(CASE, "h200", rt) == pytest.approx(sum(o.time_s for o in ops if o.name in vm.MOE_OPS))
    # more tokens never take less time; an EP rank with a quarter of the experts does less than all of them
    assert vm.predict_s({**CASE, "tokens": 4096}, "h200", rt) > vm.predict_s(CASE, "h200", rt)
    assert vm.predict_s({**CASE, "moe_tp": 1, "moe_ep": 1}, "h200", rt) > vm.predict_s(CASE, "h200", rt)


def test_a_block_fp8_case_runs_block_scaled_fp8() -> None:
    rt = Runtime(moe_expert_load_cv=0.0)
    case = {**CASE, "model": "DeepSeek-R1", "precision": "fp8_block", "hidden": 7168, "expert_ffn": 2048,
            "experts": 256, "moe_tp": 8, "moe_ep": 1, "tokens": 1}
    dep = Deployment(tp=8, ep=1, weights="fp8", activations="fp8", fp8_scaling="block", runtime=rt)
    ops = step_ops(vm.layer(case), get_gpu("h200"), dep, decode=1.0, context=1024.0, prefill_tokens=0.0,
                   prefill_len=1024.0, even_routing=True)
    assert vm.predict_s(case, "h200", rt) == pytest.approx(sum(o.time_s for o in ops if o.name in vm.MOE_OPS))
    with pytest.raises(ValueError):  # "fp8_block" is a case's label, not a weight format
        Deployment(tp=8, weights="fp8_block", activations="fp8_block", runtime=rt)


def _row(**kw) -> dict:
    return {**CASE, "predicted_s": 1e-4, **kw}


def test_split_pairs_compare_tp_n_with_ep_n_only() -> None:
    rows = [_row(moe_tp=4, moe_ep=1, time_s=3e-4, predicted_s=2e-4), _row(moe_tp=1, moe_ep=4, time_s=1e-4, predicted_s=4e-4),
            _row(moe_tp=2, moe_ep=2), _row(moe_tp=8, moe_ep=1)]  # 2 x 2 is neither; TP 8 has no EP 8 here
    [pair] = vm.split_pairs(rows)
    assert pair["n"] == 4 and pair["measured"] == pytest.approx(3.0) and pair["predicted"] == pytest.approx(0.5)


def test_close_pairs_band_by_measured_ratio_and_count_ties_half() -> None:
    rows = [_row(model="a", time_s=1.0, predicted_s=1.0), _row(model="b", time_s=1.2, predicted_s=2.0),
            _row(model="c", time_s=1.7, predicted_s=1.0),  # vs a: 1.7x, a tie in the prediction
            _row(model="d", time_s=1.0, predicted_s=5.0, tokens=1)]  # another token count: no pair
    pairs = vm.close_pairs(rows)
    assert pairs[(1.1, 1.25)] == (1.0, 1)  # a < b as measured and predicted
    assert pairs[(1.25, 1.5)] == (0.0, 1)  # b (1.2) < c (1.7) as measured; predicted 2.0 > 1.0
    assert pairs[(1.5, 2.0)] == (0.5, 1)  # a vs c: tie
    assert pairs[(1.0, 1.1)] == (0.0, 0)


def test_committed_files_predict_nearly_every_case(tmp_path: Path) -> None:
    paths = sorted(vm.DATA.glob("moe_*.json"))
    assert {p.stem for p in paths} >= {"moe_h100", "moe_h200", "moe_b200"}
    cases = vm.load(paths[:1])
    assert len(cases) > 500 and all(c["time_s"] > 0 for c in cases)
    rows = vm.predict_all(cases[::10], Runtime(moe_expert_load_cv=0.0))
    assert sum(r["predicted_s"] is not None for r in rows) >= 0.95 * len(rows)


def test_main_writes_the_report_and_refuses_an_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    assert vm.main(["--data", str(data), "--out", str(tmp_path / "out")]) == 2
    assert "no moe_*.json" in capsys.readouterr().err
    cases = [{k: v for k, v in CASE.items() if k != "gpu"}, {**{k: v for k, v in CASE.items() if k != "gpu"},
                                                              "moe_tp": 8, "moe_ep": 1, "time_s": 2e-4}]
    (data / "moe_h200.json").write_text(json.dumps({"format": "co-design published MoE v1", "gpu": "h200",
                                                    "measurements": cases}))
    assert vm.main(["--data", str(data), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "moe_kernels.md").read_text()
    assert "| h200 fp8 | 2 |" in text and "## MoE TP n against EP n" in text
    assert json.loads((tmp_path / "out" / "moe_kernels.json").read_text())["cases"] == 2
    (data / "moe_h200.json").write_text(json.dumps({"format": "something else", "measurements": []}))
    assert vm.main(["--data", str(data), "--out", str(tmp_path / "out")]) == 2
    assert "not a published MoE file" in capsys.readouterr().err


def test_the_grouped_gemm_fit_recovers_factors_that_timed_the_calls() -> None:
    """Calls timed by the model itself at grouped_gemm_efficiency 0.6 and 1 us per expert tile (on the grids)
    fit back to exactly those, at zero error; the catalog defaults do not."""
    truth = Runtime(moe_expert_load_cv=0.0, grouped_gemm_efficiency=0.6, expert_tile_overhead_s=1e-6)
    cases = [c for c in vm.load(sorted(vm.DATA.glob("moe_h200.json"))) if c["tokens"] in (16, 4096, 16384)][::10]
    timed = [{**c, "time_s": vm.predict_s(c, c["gpu"], truth)} for c in cases]
    fitted, err = vm.fit_grouped(timed, Runtime(moe_expert_load_cv=0.0))
    assert (fitted.grouped_gemm_efficiency, fitted.expert_tile_overhead_s) == (0.6, 1e-6)
    assert err == pytest.approx(0.0, abs=1e-12)
    assert vm.log_error(vm.predict_all(timed, Runtime(moe_expert_load_cv=0.0))) > 0.3


def test_the_idle_tile_fit_recovers_the_value_that_timed_the_calls_and_the_shipped_file_holds_the_hopper_fit() -> None:
    """Block-FP8 calls timed by the model at 0.5 us per idle expert tile (on the grid) fit back to exactly it; the
    report fits each GPU family, and the TensorRT-LLM Hopper runtime file carries the Hopper value."""
    truth = Runtime(moe_expert_load_cv=0.0, idle_expert_tile_s=0.5e-6)
    cases = [c for c in vm.load([vm.DATA / "moe_h200.json"]) if c["precision"] == "fp8_block" and c["tokens"] <= 64]
    timed = [{**c, "time_s": vm.predict_s(c, c["gpu"], truth)} for c in cases]
    fitted, err = vm.fit_idle(timed + [{**CASE, "time_s": 1.0}], Runtime(moe_expert_load_cv=0.0))  # per-tensor: ignored
    assert fitted.idle_expert_tile_s == 0.5e-6 and err == pytest.approx(0.0, abs=1e-12)
    text, summary = vm.idle_report(timed, Runtime(moe_expert_load_cv=0.0))
    assert summary["families"]["Hopper (CUTLASS)"]["fitted_s"] == 0.5e-6
    assert "## Idle expert tiles of block-scaled FP8" in text and "Blackwell" not in summary["families"]
    # on the published calls the Hopper fit is what the runtime file ships
    hopper = [c for c in vm.load([vm.DATA / "moe_h100.json", vm.DATA / "moe_h200.json"]) if c["precision"] == "fp8_block"]
    assert Runtime.load(vm.TENSORRT_LLM_RUNTIME).idle_expert_tile_s == vm.fit_idle(hopper, Runtime())[0].idle_expert_tile_s


def test_each_runtimes_block_fp8_split_is_read_from_its_own_file_and_the_runtimes_disagree_in_sign() -> None:
    """The committed SGLang / vLLM block-FP8 MoE layers load with their runtime and kernel; on H200, one token
    through DeepSeek-R1's experts, TensorRT-LLM's kernels take TP8 over twice as long as EP8 and SGLang's and
    vLLM's well under (the reason the product default for idle expert tiles is 0); the model at the default
    calls it about even (TP8 9 % behind: eight experts' output tiles at the fitted 1 us each, against one's) and
    with the TensorRT-LLM Hopper file puts TP8 far behind."""
    others = vm.load_runtime_moe(sorted(vm.DATA.glob("runtime_moe_*.json")))
    assert {(c["runtime"], c["version"]) for c in others} == {("SGLang", "0.5.14"), ("vLLM", "0.24.0")}
    assert all(c["precision"] == "fp8_block" and c["kernel"] and c["time_s"] > 0 for c in others)
    cases = [c for c in vm.load([vm.DATA / "moe_h200.json"]) if c["model"] == "DeepSeek-R1"]
    text, rows = vm.runtime_split_report(cases, [c for c in others if c["gpu"] == "h200"],
                                         {"default": Runtime(), "trt": Runtime.load(vm.TENSORRT_LLM_RUNTIME)})
    one = next(r for r in rows if r["model"] == "DeepSeek-R1" and r["tokens"] == 1)
    assert one["measured"]["TensorRT-LLM 1.3.0rc20"] > 2 and max(one["measured"]["SGLang 0.5.14"],
                                                                  one["measured"]["vLLM 0.24.0"]) < 0.7
    assert 1.0 < one["predicted"]["default"] < 1.15 and one["predicted"]["trt"] > 1.5
    assert "| h200 | DeepSeek-R1 | TP8 vs EP8 | 1 |" in text
    with pytest.raises(ValueError, match="not a published runtime MoE file"):
        vm.load_runtime_moe([vm.DATA / "moe_h200.json"])


def test_what_a_call_reaches_is_its_expert_flops_and_weights_over_its_time() -> None:
    gpu = get_gpu("h200")
    flops, hbm = vm.achieved_fraction(CASE)
    # 256 tokens x top-8 routes over MoE TP2 x EP4: gate, up and down of 4096 x 1536 each, FP8 weights
    assert flops == pytest.approx(6 * 256 * 8 * 4096 * 1536 / 8 / 1e-4 / gpu.peak_flops_per_s["fp8"])
    assert hbm == pytest.approx(3 * 128 * 4096 * 1536 * 1.0 / 8 / 1e-4 / gpu.hbm_bytes_per_s)
    assert vm.achieved_fraction({**CASE, "precision": "fp8_block"}) == (flops, hbm)  # the FP8 rate, FP8 bytes
    # the table keeps the largest token count, experts whole on one GPU, one cell per model and precision, with the
    # model's fraction for the call beside the measured one
    whole = {**CASE, "moe_tp": 1, "moe_ep": 1, "tokens": 4096, "predicted_s": 4e-4}
    bf16 = {**whole, "precision": "bf16", "time_s": 2e-4, "predicted_s": None}
    text, table = vm.reach_table([{**CASE, "predicted_s": 1e-4}, whole, {**whole, "tokens": 1024}, bf16])
    f, h = vm.achieved_fraction(whole)
    assert table == {"h200 Qwen3-235B-A22B": {"fp8": [f, h, pytest.approx(f / 4)], "bf16": [*vm.achieved_fraction(bf16), None]}}
    assert "at 4096 tokens" in text and "| GPU, model | bf16: measured / model | fp8: measured / model |" in text
