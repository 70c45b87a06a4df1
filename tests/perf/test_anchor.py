"""anchor_runtime: the runtime's overheads scaled to measured TPOTs; Runtime files."""

import dataclasses
import json

import pytest

from co_design.arch import Architecture
from co_design.perf import Deployment, Runtime, TPOTMeasurement, anchor_runtime, predict
from co_design.perf.anchor import ANCHORED_FIELDS, MAX_SCALE, scaled_runtime

SMALL = Architecture(hidden=2048, layers=4, heads=16, kv_heads=4, ffn=8192, vocab=32000, name="small")
MOE = Architecture(hidden=2048, layers=8, heads=16, kv_heads=4, ffn=768, vocab=32000, experts=64,
                   experts_per_token=4, expert_ffn=768, name="moe")
D1 = Deployment(weights="fp8", activations="fp8", isl=1000, osl=1000, concurrency=1)
MOE_TP4 = Deployment(tp=4, weights="fp8", activations="fp8", isl=1000, osl=1000, concurrency=1)


def tpot(arch, gpu, dep, runtime=None):
    return predict(arch, gpu, dep if runtime is None else dep.replace(runtime=runtime)).tpot_s


def test_one_measurement_is_met_and_only_the_overheads_move():
    base = tpot(SMALL, "h200", D1)
    for factor in (0.6, 1.5):
        rt, scale = anchor_runtime([TPOTMeasurement(SMALL, "h200", D1, factor * base)])
        assert tpot(SMALL, "h200", D1, rt) == pytest.approx(factor * base, rel=1e-9)
        assert (scale < 1) == (factor < 1)
        default = Runtime()
        for f in dataclasses.fields(Runtime):
            want = getattr(default, f.name) * scale if f.name in ANCHORED_FIELDS else getattr(default, f.name)
            assert getattr(rt, f.name) == pytest.approx(want), f.name


def test_the_anchor_carries_to_another_model_and_gpu_count():
    # a runtime measured 20 % slower than predicted on one model predicts a multi-GPU MoE slower too, but by
    # less than 20 %: the GPU's rates are not scaled
    rt, scale = anchor_runtime([TPOTMeasurement(SMALL, "b200", D1, 1.2 * tpot(SMALL, "b200", D1))])
    before, after = tpot(MOE, "b200", MOE_TP4), tpot(MOE, "b200", MOE_TP4, rt)
    assert scale > 1 and before < after < 1.2 * before * (1 + 1e-9)


def test_several_measurements_meet_a_consistent_runtime_and_split_an_inconsistent_one():
    slow = scaled_runtime(Runtime(), 2.0)
    ms = [TPOTMeasurement(SMALL, "h200", D1, tpot(SMALL, "h200", D1, slow)),
          TPOTMeasurement(MOE, "h200", MOE_TP4, tpot(MOE, "h200", MOE_TP4, slow))]
    rt, scale = anchor_runtime(ms)
    assert scale == pytest.approx(2.0, rel=1e-4)
    # one row 10 % above the default model, the other 10 % below: the factor lands between the two single anchors
    a = TPOTMeasurement(SMALL, "h200", D1, 1.1 * tpot(SMALL, "h200", D1))
    b = TPOTMeasurement(MOE, "h200", MOE_TP4, 0.9 * tpot(MOE, "h200", MOE_TP4))
    sa, sb, sab = anchor_runtime([a])[1], anchor_runtime([b])[1], anchor_runtime([a, b])[1]
    assert sb < sab < sa


def test_anchors_a_given_runtime_not_the_measurements_own():
    given = Runtime(max_batch=64, kernel_gap_s=4e-6)
    m = TPOTMeasurement(SMALL, "h200", D1, tpot(SMALL, "h200", D1))
    rt, _ = anchor_runtime([m], given)
    assert rt.max_batch == 64
    assert tpot(SMALL, "h200", D1, rt) == pytest.approx(m.tpot_s, rel=1e-9)


def test_unreachable_and_bad_measurements_are_refused_with_the_reason():
    floor = tpot(SMALL, "h200", D1, scaled_runtime(Runtime(), 0.0))
    with pytest.raises(ValueError, match="below the model's .* ms with no runtime overheads"):
        anchor_runtime([TPOTMeasurement(SMALL, "h200", D1, 0.9 * floor)])
    ceiling = tpot(SMALL, "h200", D1, scaled_runtime(Runtime(), MAX_SCALE))
    with pytest.raises(ValueError, match="above the model's .* check the deployment"):
        anchor_runtime([TPOTMeasurement(SMALL, "h200", D1, 1.1 * ceiling)])
    with pytest.raises(ValueError, match=r"measurements\[0\]\.deployment\.concurrency is None"):
        anchor_runtime([TPOTMeasurement(SMALL, "h200", D1.replace(concurrency=None), 1e-3)])
    for bad in (0.0, -1e-3, float("nan"), "5"):
        with pytest.raises(ValueError, match=r"measurements\[0\]\.tpot_s must be a positive number of seconds"):
            anchor_runtime([TPOTMeasurement(SMALL, "h200", D1, bad)])
    with pytest.raises(ValueError, match="measurements is empty"):
        anchor_runtime([])
    with pytest.raises(ValueError, match="scale must be >= 0"):
        scaled_runtime(Runtime(), -1.0)


def test_runtime_files_round_trip_and_name_bad_fields(tmp_path):
    rt = scaled_runtime(Runtime(max_batch=256), 0.5)
    plain, wrapped = tmp_path / "plain.json", tmp_path / "wrapped.json"
    plain.write_text(json.dumps(rt.to_dict()))
    wrapped.write_text(json.dumps({"runtime": rt.to_dict(), "anchor": {"measured_tpot_ms": 7.0}}))
    assert Runtime.load(plain) == rt and Runtime.load(wrapped) == rt
    assert Runtime.from_dict({"kernel_gap_s": 1e-6}) == Runtime(kernel_gap_s=1e-6)
    cases = [({"kernel_gap": 1e-6}, r"unknown Runtime field\(s\) 'kernel_gap'; known: max_batch"),
             ({"kernel_gap_s": -1.0}, "Runtime.kernel_gap_s must be >= 0"),
             ({"kernel_gap_s": "fast"}, "Runtime.kernel_gap_s must be a number, got 'fast'"),
             ([1, 2], "a runtime is a mapping of Runtime fields, got list")]
    for data, msg in cases:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=f"runtime file '{bad}': {msg}"):
            Runtime.load(bad)
    (tmp_path / "broken.json").write_text("{kernel_gap_s: 1")
    with pytest.raises(ValueError, match="is not JSON"):
        Runtime.load(tmp_path / "broken.json")
    with pytest.raises(ValueError, match="cannot read runtime file"):
        Runtime.load(tmp_path / "missing.json")
