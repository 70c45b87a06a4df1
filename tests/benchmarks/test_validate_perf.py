"""The validation's fit objective and latency targets (benchmarks/validate_perf.py)."""

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
