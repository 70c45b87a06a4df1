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


def test_tile_work_on_paper():
    # 1000 tokens: 8 query tiles, the i-th computing i + 1 KV tiles: 36, per sequence and head
    assert fpa.tile_work(2, 1000, 3) == (2 * 3 * 36, 2 * 3 * 8)


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
