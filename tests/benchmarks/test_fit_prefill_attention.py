"""benchmarks/fit_prefill_attention.py: the prompt attention kernel law is recovered from calls it generated, and
the catalog's entries are what the fit gives on the committed published timings."""

from __future__ import annotations

import json
import random

import pytest

import fit_prefill_attention as fpa  # benchmarks/ is on pytest's pythonpath (pyproject.toml)

from co_design.hardware import get_gpu


def _calls(fraction, overhead, t0, peak, noise=0.0, seed=0):
    rng = random.Random(seed)
    return [(b, isl, h, fpa.predict_s(b, isl, h, peak, fraction, overhead, t0) * (1 + rng.uniform(-noise, noise)))
            for b in (1, 4, 16) for isl in (256, 1024, 4096, 16384) for h in (8, 32, 64)]


@pytest.mark.parametrize("fraction, overhead, t0", [(0.4, 5.5, 20e-6), (0.7, 0.0, 0.0), (0.55, 12.0, 40e-6)])
def test_the_fit_recovers_the_law_it_is_given(fraction, overhead, t0):
    peak = 1e15
    r = fpa.fit(_calls(fraction, overhead, t0, peak), peak)
    assert (r["overhead"], r["t0_s"]) == (overhead, pytest.approx(t0))
    assert r["fraction"] == pytest.approx(fraction, rel=1e-9) and r["median_error"] < 1e-9
    noisy = fpa.fit(_calls(fraction, overhead, t0, peak, noise=0.05, seed=1), peak)
    assert noisy["fraction"] == pytest.approx(fraction, rel=0.05) and abs(noisy["overhead"] - overhead) <= 1.0
    # without the per-query-tile term the law cannot follow short prompts
    if overhead:
        assert fpa.fit(_calls(fraction, overhead, t0, peak), peak, overheads=(0.0,))["median_error"] > 0.05


def test_the_law_is_the_serving_models_own_on_paper():
    # 1024 tokens: 1024 * 1025 / 2 / 128^2 = 32.03 tiles of pairs, 8 query tiles each paying 1/2 (the masked half
    # of its diagonal tile) + 5.5; 2 sequences x 3 heads x 4 x 128 FLOPs per pair
    flops = 2 * 3 * 4 * 128 * 1024 * 1025 / 2
    assert fpa.loop_s(2, 1024, 3, 1e15, 5.5) == pytest.approx(flops / 1e15 * (32.03125 + 8 * 6.0) / 32.03125)
    assert fpa.predict_s(2, 1024, 3, 1e15, 0.5, 5.5, 20e-6) == pytest.approx(20e-6 + 2 * fpa.loop_s(2, 1024, 3, 1e15, 5.5))


def test_the_catalog_carries_the_fit_of_the_committed_timings(tmp_path):
    fits = fpa.fit_gpu("h200")
    gpu = get_gpu("h200")
    for prec, r in fits.items():
        assert gpu.prefill_attention[prec] == (round(r["fraction"], 3), r["overhead"]), prec
        assert r["median_error"] < 0.06 and r["median_error"] < r["flat_median_error"] / 4, prec
    doc = json.loads((fpa.DATA / "prefill_attention_h200.json").read_text())
    assert doc["source"]["repository"].endswith("ai-dynamo/aiconfigurator") and doc["gpu"] == "h200"
    text = fpa.report({"h200": fits})
    assert text.count("| h200 |") == 2 and "[0.56, 3.5]" in text


def test_mla_io_is_the_serving_models_rope_and_latent_write_on_paper():
    # per token: 16 heads x 192 query dims read and written in bf16, the 576-wide latent read in bf16 and cached
    per_token_bf16 = 16 * 192 * 4 + 576 * 4
    assert fpa.mla_io_s(2, 1000, 16, "bf16", 1e12) == pytest.approx(2 * 1000 * per_token_bf16 / 1e12)
    assert fpa.mla_io_s(2, 1000, 16, "fp8", 1e12) == pytest.approx(2 * 1000 * (per_token_bf16 - 576) / 1e12)
    assert fpa.MLA_QK_V == 320


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_the_mla_fit_recovers_a_planted_law_and_scores_the_grouped_query_entry(kv):
    gpu = get_gpu("h200")
    fraction, overhead, t0 = 0.45, 3.0, 20e-6
    calls = [(b, isl, h, t0 + fpa.loop_s(b, isl, h, gpu.peak(kv), overhead, fpa.MLA_QK_V) / fraction
              + fpa.mla_io_s(b, isl, h, kv, gpu.hbm_bytes_per_s))
             for b in (1, 8) for isl in (256, 2048, 16384) for h in (16, 64, 128)]
    r = fpa.fit_mla(calls, kv, "h200")
    assert (r["overhead"], r["t0_s"]) == (overhead, pytest.approx(t0)) and r["fraction"] == pytest.approx(fraction)
    assert r["median_error"] < 1e-9
    # the grouped-query law's FLOPs miss MLA's 192 + 128 head dims: the same constants are off by their ratio
    wrong = fpa.fit(calls, gpu.peak(kv), (overhead,), 2 * fpa.HEAD_DIM, fraction)
    assert wrong["median_signed"] < -0.05


def test_the_mla_report_holds_both_caches_of_each_gpu_with_held_out_errors():
    fits = fpa.mla_gpu("h200")
    assert set(fits) == {"bf16", "fp8"}
    for kv, r in fits.items():
        assert r["calls"] > 300 and r["median_error"] < 0.08 and r["held_half"] < 0.08 and r["held_heads"] < 0.08, kv
        assert r["before"]["entry"] == list(get_gpu("h200").prefill_attention[kv])
        assert get_gpu("h200").prefill_mla[kv] == (round(r["fraction"], 3), r["overhead"]), kv  # the catalog's
    text = fpa.report_mla({"h200": fits})
    assert text.count("| h200 |") == 2 and "`GPU.prefill_mla`" in text
