"""benchmarks/fit_decode_attention.py: the decode attention kernel law is recovered from calls it generated, and
the catalog's entries are what the fit gives on the committed published timings."""

from __future__ import annotations

import json
import random

import pytest

import fit_decode_attention as fda  # benchmarks/ is on pytest's pythonpath (pyproject.toml)

from co_design.hardware import get_gpu

HBM, SMS = 4e12, 132


def _calls(fraction, cta_s, t0, ramp_s=0.0, ramp_bytes=0.0, kv="fp8", noise=0.0, seed=0):
    rng = random.Random(seed)
    out = []
    for b in (1, 8, 64, 512, 2048):
        for heads, kv_heads in ((32, 8), (8, 1), (64, 4)):
            for kv_len in (16, 128, 1024, 16384):
                t = fda.predict_s((b, heads, kv_heads, kv_len), kv, HBM, SMS, fraction, cta_s, t0, ramp_s, ramp_bytes)
                out.append((b, heads, kv_heads, kv_len, t * (1 + rng.uniform(-noise, noise))))
    return out


@pytest.mark.parametrize("fraction, cta_s, t0, ramp_s, ramp_bytes",
                         [(0.8, 4e-6, 6e-6, 12e-6, 0.8e6), (0.95, 1.2e-6, 10e-6, 4e-6, 2e6),
                          (0.6, 0.5e-6, 1e-6, 20e-6, 0.2e6)])
def test_the_fit_recovers_the_law_it_is_given(fraction, cta_s, t0, ramp_s, ramp_bytes):
    # two formats, each with its own fraction, t0 and ramp, one CTA cost
    law = {"fp8": (fraction, t0, ramp_s, ramp_bytes),
           "bf16": (fraction * 0.9, t0 + 2e-6, ramp_s * 1.5, ramp_bytes * 1.2)}

    def calls(noise=0.0, seed=0):
        return {kv: _calls(f, cta_s, t, r, b, kv=kv, noise=noise, seed=seed) for kv, (f, t, r, b) in law.items()}

    r = fda.fit(calls(), HBM, SMS)
    for kv, (f, t, ramp, b) in law.items():
        assert r[kv]["fraction"] == pytest.approx(f, rel=1e-6), kv
        assert r[kv]["cta_s"] == pytest.approx(cta_s, abs=1e-11) and r[kv]["t0_s"] == pytest.approx(t, abs=1e-11)
        assert r[kv]["ramp_s"] == pytest.approx(ramp, rel=1e-6) and r[kv]["ramp_bytes"] == pytest.approx(b, rel=1e-6)
        assert r[kv]["median_error"] < 1e-6
    noisy = fda.fit(calls(noise=0.05, seed=1), HBM, SMS)
    for kv, (f, _, ramp, _) in law.items():
        assert noisy[kv]["fraction"] == pytest.approx(f, rel=0.05) and abs(noisy[kv]["cta_s"] - cta_s) < 0.3e-6
        if ramp >= 10e-6:  # a ramp of a few us beside a t0 of 10 us is not told apart from it under 5 % noise
            assert noisy[kv]["ramp_s"] == pytest.approx(ramp, rel=0.25), kv
    # without a ramp of 10 us or more the law cannot follow long and short streams at once
    if ramp_s >= 10e-6:
        assert fda.fit(calls(), HBM, SMS, ramp=False)["fp8"]["p90_error"] > 0.05


def test_the_law_is_the_serving_models_own_on_paper():
    # 64 sequences x 8 KV heads = 512 CTAs: 4 waves of 132 SMs; bytes: the cached K and V (1024 tokens x 8 heads x
    # 2 x 128 x 1 byte), the new token's K and V read in bf16 and cached in fp8, q in and o out (32 heads, bf16)
    per_seq = 2 * 128 * 8 * (1024 * 1 + 2 + 1) + 2 * 128 * 32 * 2
    assert fda.call_bytes(64, 32, 8, 1024, "fp8") == 64 * per_seq
    t = fda.predict_s((64, 32, 8, 1024), "fp8", HBM, SMS, 0.8, 2e-6, 5e-6)
    assert t == pytest.approx(5e-6 + 64 * per_seq / (0.8 * HBM) + 4 * 2e-6)
    # the ramp: in full once the 132 SMs stream ramp_bytes each (here 64 x 2.1 MB / 132 = 1.03 MB), a share below
    assert fda.predict_s((64, 32, 8, 1024), "fp8", HBM, SMS, 0.8, 2e-6, 5e-6, 10e-6, 0.5e6) == pytest.approx(t + 10e-6)
    assert fda.predict_s((64, 32, 8, 1024), "fp8", HBM, SMS, 0.8, 2e-6, 5e-6, 10e-6, 4e6) == pytest.approx(
        t + 10e-6 * 64 * per_seq / (SMS * 4e6))


def test_the_catalog_carries_the_fit_of_the_committed_timings():
    fits = fda.fit_gpu("h200")
    gpu = get_gpu("h200")
    for kv, r in fits.items():
        # within one step of the catalog's rounding (0.001, 0.01 us): a fit that lands by a hair on the other side
        # of a rounding boundary under another BLAS or scipy still matches; a stale entry does not
        # (0.001, 0.01 us, 0.1 us, 0.01 MB)
        frac, cta_s, ramp_s, ramp_bytes = gpu.decode_attention[kv]
        assert frac == pytest.approx(r["fraction"], abs=1e-3) and cta_s == pytest.approx(r["cta_s"], abs=1e-8), kv
        assert ramp_s == pytest.approx(r["ramp_s"], abs=1e-7) and ramp_bytes == pytest.approx(r["ramp_bytes"], abs=1e4)
        # the ramp halves the error of the law without it on H200's calls
        assert r["median_error"] < 0.1 and r["bare_median_error"] > 1.5 * r["median_error"] and r["calls"] == 2512, kv
    # one CTA cost for both formats
    assert gpu.decode_attention["bf16"][1] == gpu.decode_attention["fp8"][1]
    doc = json.loads((fda.DATA / "decode_attention_h200.json").read_text())
    assert doc["source"]["repository"].endswith("ai-dynamo/aiconfigurator") and doc["gpu"] == "h200"
    text = fda.report({"h200": fits})
    assert text.count("| h200 |") == 2 and "[0.95, 0.45 us, 21.2 us, 0.83 MB]" in text


BF16 = 1e15


def _mla_calls(law, io_fraction, cta_s, noise=0.0, seed=0):
    """Calls of every format of ``law`` (format -> (compute, fraction, t0)) over DeepSeek-V3's MLA: memory-bound at
    few heads, compute-bound at many over long caches, CTA-bound over short ones."""
    rng = random.Random(seed)
    out = {}
    for kv, (compute, fraction, t0) in law.items():
        out[kv] = []
        for b in (1, 16, 256, 1024):
            for heads in (1, 16, 64, 128):
                for kv_len in (128, 2048, 32768):
                    t = fda.predict_mla_s((b, heads, kv_len), kv, BF16, HBM, SMS, compute, fraction, io_fraction, cta_s,
                                          t0)
                    out[kv].append((b, heads, kv_len, t * (1 + rng.uniform(-noise, noise))))
    return out


def test_the_mla_fit_recovers_the_law_it_is_given():
    law = {"bf16": (0.6, 0.9, 12e-6), "fp8": (0.7, 0.6, 10e-6)}
    fit = fda.fit_mla(_mla_calls(law, 0.35, 1.5e-6), BF16, HBM, SMS, {"bf16": 1.0, "fp8": 2.0})
    for kv, (compute, fraction, t0) in law.items():
        r = fit[kv]
        assert r["compute_fraction"] == pytest.approx(compute, rel=1e-5) and r["fraction"] == pytest.approx(
            fraction, rel=1e-5), kv
        assert r["io_fraction"] == pytest.approx(0.35, rel=1e-5) and r["cta_s"] == pytest.approx(1.5e-6, rel=1e-4)
        assert r["t0_s"] == pytest.approx(t0, rel=1e-4) and r["median_error"] < 1e-6
        assert 0 < r["compute_bound"] < 1, kv  # both regimes are in the calls
    noisy = fda.fit_mla(_mla_calls(law, 0.35, 1.5e-6, noise=0.05, seed=3), BF16, HBM, SMS, {"bf16": 1.0, "fp8": 2.0})
    assert noisy["fp8"]["fraction"] == pytest.approx(0.6, rel=0.05)
    assert noisy["bf16"]["compute_fraction"] == pytest.approx(0.6, rel=0.05)


def test_the_mla_fit_never_makes_the_narrower_cache_the_slower():
    # an FP8 kernel measured slower per byte than half the bf16 one (its cache fraction under half bf16's, its
    # compute fraction below bf16's): the fit holds FP8 to the bf16 law over its fewer bytes
    law = {"bf16": (0.6, 0.9, 12e-6), "fp8": (0.5, 0.4, 12e-6)}
    fit = fda.fit_mla(_mla_calls(law, 0.35, 1.5e-6), BF16, HBM, SMS, {"bf16": 1.0, "fp8": 2.0})
    assert fit["fp8"]["compute_fraction"] >= fit["bf16"]["compute_fraction"]
    assert fit["fp8"]["fraction"] >= fit["bf16"]["fraction"] / 2
    assert fit["fp8"]["median_error"] > 0.01  # and so misses the calls it was given


def test_the_catalog_carries_the_mla_fit_of_the_committed_timings():
    fits = fda.fit_gpu_mla("h200")
    gpu = get_gpu("h200")
    for kv, r in fits.items():
        # within one step of the catalog's rounding, as for the grouped-query law
        expect = (r["compute_fraction"], r["fraction"], r["io_fraction"], r["cta_s"])
        assert gpu.decode_mla[kv] == pytest.approx(expect, abs=1.01e-3), kv
        assert abs(gpu.decode_mla[kv][3] - r["cta_s"]) < 1e-8
        # the law against what the serving model charged an MLA model before (the grouped-query law)
        assert r["median_error"] < 0.07 and r["median_error"] < r["before_median_error"] and r["calls"] == 920, kv
    doc = json.loads((fda.DATA / "decode_mla_h200.json").read_text())
    assert doc["format"] == fda.MLA_FORMAT and doc["source"]["table"].endswith("generation_mla_perf.parquet")
    text = fda.mla_report({"h200": fits})
    assert text.count("| h200 |") == 2 and "[0.671, 0.62, 0.304, 1.58 us]" in text
