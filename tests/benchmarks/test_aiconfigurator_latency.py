"""benchmarks/aiconfigurator_latency.py: a row maps to the AIC quant mode and parallel list it states, a model
AIC lacks gets a reason, the batch-1 point is AIC's first at bs 1, and the within-15 % count is hand-checked.
AIC itself is not needed (its calls are not made here)."""

from __future__ import annotations

import json

import pytest

import aiconfigurator_latency as al  # benchmarks/ is on pytest's pythonpath (pyproject.toml)


def _row(model: str = "DeepSeek-R1", weights: str = "FP8", tp: int = 8, ep: int | None = 1,
         attention_dp: bool | None = False, moe: bool = True, **precision: str) -> dict:
    return {"id": "r", "model": model, "hardware": "B200", "num_gpus": tp, "isl": 1024, "osl": 512,
            "framework": "SGLang v0.5.12", "concurrency": 1, "metrics": {"tpot_ms": 8.0},
            "arch": {"family": "moe" if moe else "dense"},
            "precision": {"weights": weights, "kv_cache": "not stated", **precision},
            "parallelism": {"tp": tp, "pp": 1, "ep": ep, "attention_dp": attention_dp}}


@pytest.mark.parametrize("weights, precision, mode", [
    ("FP4", {}, "nvfp4"),
    ("FP8", {"fp8_scaling": "block"}, "fp8_block"),
    ("FP8", {}, "fp8"),
    ("BF16", {}, "bfloat16"),
])
def test_weights_map_to_the_aic_gemm_and_moe_quant_mode(weights, precision, mode) -> None:
    spec = al.row_spec(_row(weights=weights, **precision))["spec"]
    assert spec["quant"] == mode
    assert spec["kv_cache"] == "fp8"  # "not stated" -> FP8 KV, as the max-throughput baseline reads it
    assert al.row_spec(_row(weights=weights, kv_cache="BF16", **precision))["spec"]["kv_cache"] == "bfloat16"


@pytest.mark.parametrize("kw, parallel", [
    ({"tp": 8, "ep": 1}, [8, 1, 1, 8, 1]),  # attention TP 8, MoE TP 8
    ({"tp": 8, "ep": 4}, [8, 1, 1, 2, 4]),  # MoE TP 2 x EP 4 = 8 GPUs
    ({"tp": 4, "ep": 4}, [4, 1, 1, 1, 4]),
    ({"tp": 8, "ep": 8, "attention_dp": True}, [1, 1, 8, 1, 8]),  # attention DP 8
    ({"tp": 2, "ep": None, "moe": False}, [2, 1, 1, 1, 1]),  # dense
])
def test_the_row_mapping_becomes_aics_parallel_list(kw, parallel) -> None:
    spec = al.row_spec(_row(**kw))["spec"]
    assert spec["parallel"] == parallel
    tp, pp, dp, moe_tp, moe_ep = parallel
    assert spec["gpus"] == tp * pp * dp
    if kw.get("moe", True):
        assert moe_tp * moe_ep == tp * dp  # AIC's identity


def test_an_unstated_ep_is_one_and_says_so() -> None:
    plan = al.row_spec(_row(ep=None, attention_dp=None))
    assert plan["spec"]["parallel"] == [8, 1, 1, 8, 1]
    assert any("EP not stated" in a for a in plan["assumptions"])
    assert any("attention DP not stated" in a for a in plan["assumptions"])


def test_what_aic_cannot_model_gets_a_reason() -> None:
    assert "GLM-4" in al.row_spec(_row(model="GLM-4.6"))["reason"]
    assert "no AIC model config" in al.row_spec(_row(model="Made-Up-7B"))["reason"]
    assert "has no AIC system" in al.row_spec({**_row(), "hardware": "MI300X"})["reason"]
    assert "does not divide" in al.row_spec(_row(tp=8, ep=3))["reason"]
    assert "uses 8 GPUs, the row 16" in al.row_spec({**_row(), "num_gpus": 16})["reason"]


def test_the_b300_and_the_0528_checkpoint_are_known_to_aic() -> None:
    spec = al.row_spec({**_row(model="DeepSeek-R1-0528"), "hardware": "B300"})["spec"]
    assert (spec["system"], spec["aic_model"]) == ("b300_sxm", "deepseek-ai/DeepSeek-R1")


def test_the_c1_point_is_aics_first_at_batch_one() -> None:
    pts = [{"bs": 1, "global_bs": 1, "ctx_tokens": 512, "tokens/s/gpu": 10.0, "tpot": 7.0, "ttft": 90.0},
           {"bs": 1, "global_bs": 1, "ctx_tokens": 1024, "tokens/s/gpu": 12.0, "tpot": 6.5, "ttft": 60.0},
           {"bs": 2, "global_bs": 2, "ctx_tokens": 1024, "tokens/s/gpu": 20.0, "tpot": 6.8, "ttft": 61.0}]
    best, note = al.pick_c1_point(pts)
    assert (best["ctx_tokens"], best["tpot"]) == (1024, 6.5)
    assert "2 ctx_tokens values at batch 1" in note
    best, note = al.pick_c1_point(pts[1:])
    assert best["tpot"] == 6.5 and note == ""
    assert al.pick_c1_point(pts[2:]) == (None, "AIC has no feasible point at batch 1")
    best, note = al.pick_c1_point([{**pts[0], "global_bs": 8}])
    assert "global batch 8" in note


def test_error_stats_on_a_hand_worked_example() -> None:
    s = al.error_stats([0.10, -0.20, 0.15, 0.05])
    # |e| <= 0.15: 0.10, 0.15, 0.05 -> 3; sorted signed -0.20, 0.05, 0.10, 0.15 -> median 0.075;
    # sorted |e| 0.05, 0.10, 0.15, 0.20 -> median 0.125
    assert (s["n"], s["within"]) == (4, 3)
    assert s["median_signed"] == pytest.approx(0.075)
    assert s["median_abs"] == pytest.approx(0.125)
    assert al.error_stats([])["n"] == 0


def _result(rid: str, set_name: str, runtime: str, error: float | None, db_error: float | None) -> dict:
    return {"id": rid, "set": set_name, "runtime": runtime, "error": error, "ttft_error": None,
            "runtime_db": {"error": db_error}}


def test_summary_counts_per_set_and_runtime() -> None:
    results = [_result("a", "dev", "SGLang", 0.10, 0.30), _result("b", "dev", "SGLang", -0.40, -0.05),
               _result("c", "dev", "vLLM", None, None), _result("d", "test", "TensorRT-LLM", 0.02, 0.02)]
    s = al.summarize(results)
    assert (s["sets"]["dev"]["rows"], s["sets"]["dev"]["tpot"]["n"], s["sets"]["dev"]["tpot"]["within"]) == (3, 2, 1)
    assert s["sets"]["dev"]["tpot_runtime_db"]["within"] == 1  # -0.05 only
    assert s["sets"]["test"]["tpot"]["within"] == 1
    assert s["runtimes"]["SGLang"]["all"]["tpot"]["median_signed"] == pytest.approx(-0.15)
    assert s["runtimes"]["SGLang"]["test"]["rows"] == 0
    lines = al.summary_lines(results, {"dev": results[:3], "test": results[3:]})
    assert lines[0].startswith("dev: AIC TPOT at concurrency 1: 1 of 2 within 15 % (of 3 rows, 1 not modelled)")
    assert lines[1].startswith("test: AIC TPOT at concurrency 1: 1 of 1 within 15 %")


def test_every_published_c1_row_maps_to_an_aic_spec_or_a_reason() -> None:
    rows = al.load_rows(set())
    assert {s for s, _ in rows} == {"dev", "test"}
    for _, row in rows:
        plan = al.row_spec(row)
        assert ("spec" in plan) != ("reason" in plan), row["id"]
        al.runtime_of(row)  # every row names a known runtime
        if "spec" in plan and row["precision"].get("fp8_scaling") == "block":
            assert plan["spec"]["quant"] == "fp8_block", row["id"]
        json.dumps(plan)  # the cache key is the spec's JSON
    assert al.load_rows({"lat-tx004"})[0][1]["id"] == "lat-tx004"
