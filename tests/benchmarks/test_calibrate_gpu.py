"""benchmarks/calibrate_gpu.py on CPU: the fit recovers known GPU numbers from synthetic measurements,
the override file round-trips through load_gpu and CO_DESIGN_HARDWARE_PATH, --from-json runs end to
end, and without a CUDA device the script refuses with exit status 2."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

import calibrate_gpu as cg  # benchmarks/ is on pytest's pythonpath (pyproject.toml)

from co_design.hardware import GPU, HARDWARE_PATH_ENV, get_gpu, load_gpu
from co_design.perf.comm import collective_time_s

# the "true" GPU behind the synthetic measurements: every fitted field moved away from the catalog's
TRUTH = dict(gemm_efficiency=0.6, memory_efficiency=0.7, kernel_overhead_s=5e-6, attention_efficiency=0.5,
             collective_efficiency=0.7, collective_latency_s=15e-6)
META = {"name": "NVIDIA H100 80GB HBM3", "torch": "2.9.0", "cuda": "12.8", "capability": "9.0", "date": "2026-01-02"}


def _noise(i: int) -> float:
    """Deterministic relative noise in [-1%, +1%]."""
    return 0.01 * math.sin(3.7 * i + 1.0)


def synthetic(gpu: GPU, truth: GPU | dict[str, GPU], sweep: "cg.Sweep", gpus: int = 8) -> list["cg.Measurement"]:
    """The sweep's cases timed by the model on ``truth`` (per GEMM precision if a dict), plus +-1% noise."""
    out = []
    for i, case in enumerate(cg.plan(gpu, sweep, gpus=gpus)):
        if case.status != "ok":
            out.append(case)
            continue
        true_gpu = truth[case.params.get("precision", "bf16")] if isinstance(truth, dict) else truth
        out.append(dataclasses.replace(case, time_s=cg.predict_s(true_gpu, case) * (1 + _noise(i))))
    return out


@pytest.mark.parametrize("name", ["h100", "b200"])
def test_fit_recovers_the_true_numbers(name: str) -> None:
    gpu = get_gpu(name)
    truth = gpu.replace(**TRUTH)
    ms = synthetic(gpu, truth, cg.FULL)
    result = cg.fit(gpu, ms)
    assert set(result.values) == set(cg.FITTED_FIELDS)
    # +-1% noise per case, medians over several cases: within 0.8% (ignoring the overhead in the HBM
    # cases, for one, biases memory_efficiency by 1.3%)
    for key in ("gemm_efficiency", "memory_efficiency", "attention_efficiency", "collective_efficiency"):
        assert result.values[key] == pytest.approx(TRUTH[key], rel=0.008), key
    assert result.values["kernel_overhead_s"] == pytest.approx(5e-6, abs=0.1e-6)
    assert result.values["collective_latency_s"] == pytest.approx(15e-6, rel=0.03)
    # every precision the GPU has was measured and recovers the same efficiency
    assert set(result.gemm_by_precision) == set(gpu.peak_flops_per_s)
    for p, eff in result.gemm_by_precision.items():
        assert eff == pytest.approx(0.6, rel=0.015), p
    # predictions improve in every class: the catalog numbers are 14-40% off, the fitted ones ~ the noise
    before, after = cg.errors_by_group(gpu, ms), cg.errors_by_group(result.apply(gpu), ms)
    assert set(before) == set(after) and "all_reduce" in before and "attention decode" in before
    for group in before:
        assert after[group] < 0.02 < before[group], (group, before[group], after[group])


def test_quick_sweep_fits_too_and_crosses_tile_boundaries() -> None:
    gpu = get_gpu("h100")
    ms = synthetic(gpu, gpu.replace(**TRUTH), cg.QUICK)
    result = cg.fit(gpu, ms)
    assert result.values["gemm_efficiency"] == pytest.approx(0.6, rel=0.02)
    assert result.values["memory_efficiency"] == pytest.approx(0.7, rel=0.02)
    assert result.values["kernel_overhead_s"] == pytest.approx(5e-6, abs=0.2e-6)
    for sweep in (cg.QUICK, cg.FULL):
        assert {128, 129} <= set(sweep.gemm_m) and {4096, 4096 + 128} <= set(sweep.gemm_n)


def test_gemm_efficiency_differs_per_precision() -> None:
    """bf16 at 0.7 and fp8 at 0.5 of peak: both medians reported, and the single written value has the least
    median absolute log error over the compute-bound GEMMs among the candidates."""
    gpu = get_gpu("h100")
    base = gpu.replace(**{k: v for k, v in TRUTH.items() if k != "gemm_efficiency"})
    truth = {"bf16": base.replace(gemm_efficiency=0.7), "fp8": base.replace(gemm_efficiency=0.5)}
    ms = synthetic(gpu, truth, cg.FULL)
    result = cg.fit(gpu, ms)
    assert result.gemm_by_precision["bf16"] == pytest.approx(0.7, rel=0.015)
    assert result.gemm_by_precision["fp8"] == pytest.approx(0.5, rel=0.015)
    fitted = result.apply(gpu)
    chosen = [m for m, _ in cg.compute_bound_gemms(fitted, ms)]
    assert {m.params["precision"] for m in chosen} == {"bf16", "fp8"}

    def objective(eff: float) -> float:  # one efficiency for every precision
        return cg._abs_log_error(fitted.replace(gemm_efficiency=eff, gemm_efficiency_by_precision={}), chosen)

    best = objective(result.values["gemm_efficiency"])
    for eff in (0.5, 0.6, 0.7, 0.8, 0.4):
        assert best <= objective(eff) + 1e-3, eff
    # the model then uses each precision's own: both within the noise, where the one value misses one of them
    assert dict(fitted.gemm_efficiency_by_precision) == dict(result.gemm_by_precision)
    after = cg.errors_by_group(fitted, ms)
    single = cg.errors_by_group(fitted.replace(gemm_efficiency_by_precision={}), ms)
    assert max(after["gemm bf16"], after["gemm fp8"]) < 0.02
    assert max(single["gemm bf16"], single["gemm fp8"]) > 0.1, single


def test_kernel_overhead_is_clamped_at_zero() -> None:
    gpu = get_gpu("h100")
    truth = gpu.replace(kernel_overhead_s=0.0)
    # every case runs in half the model's time: measured minus predicted work is negative for the probes
    ms = [dataclasses.replace(m, time_s=0.5 * m.time_s) if m.ok else m for m in synthetic(gpu, truth, cg.QUICK, gpus=1)]
    assert cg.fit(gpu, ms).values["kernel_overhead_s"] == 0.0


def test_override_file_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = get_gpu("h100")
    result = cg.fit(gpu, synthetic(gpu, gpu.replace(**TRUTH), cg.QUICK))
    out = tmp_path / "calibration"
    path = cg.write_override(out / "h100.yaml", gpu, result, META)

    loaded = load_gpu(path)
    for key, value in result.values.items():
        assert getattr(loaded, key) == value != getattr(gpu, key), key
        assert loaded.sources[key].startswith("benchmarks/calibrate_gpu.py on NVIDIA H100 80GB HBM3, torch 2.9.0")
    assert loaded.sms == gpu.sms and loaded.peak_flops_per_s == gpu.peak_flops_per_s  # the rest: the catalog's

    # the catalog re-reads its files whenever the variable's value changes (it keeps no lru_cache)
    monkeypatch.setenv(HARDWARE_PATH_ENV, str(out))
    for name in ("h100", "H100-SXM"):  # aliases still reach the calibrated GPU
        calibrated = get_gpu(name)
        assert {k: getattr(calibrated, k) for k in result.values} == dict(result.values)
    assert get_gpu("h200").gemm_efficiency == pytest.approx(gpu.gemm_efficiency)  # other GPUs untouched
    monkeypatch.delenv(HARDWARE_PATH_ENV)
    assert get_gpu("h100").gemm_efficiency == gpu.gemm_efficiency  # and back to the catalog without it


def test_from_json_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gpu = get_gpu("h100")
    ms = synthetic(gpu, gpu.replace(**TRUTH), cg.QUICK, gpus=1)
    ms.append(cg.Measurement("gemm", {"precision": "fp8", "m": 1, "n": 4096, "k": 4096},
                             status="unsupported: RuntimeError: a refused shape"))
    run = tmp_path / "run.json"
    cg.save_measurements(run, "h100", ms, META)
    out = tmp_path / "out"

    assert cg.main(["--from-json", str(run), "--out", str(out)]) == 0
    assert "median |error|" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["calibration_h100.json", "calibration_h100.md", "h100.yaml"]
    expected = cg.fit(gpu, ms)
    assert "collective_efficiency" not in expected.values  # one GPU: no all-reduce measured, nothing fitted
    loaded = load_gpu(out / "h100.yaml")
    assert {k: getattr(loaded, k) for k in expected.values} == dict(expected.values)

    report = (out / "calibration_h100.md").read_text()
    for heading in ("## gemm bf16", "## gemm fp8", "## hbm copy", "## attention prefill", "## attention decode"):
        assert heading in report
    assert "skipped: one GPU" in report and "a refused shape" in report and "skipped: h100 has no nvfp4" in report
    assert f"| gemm_efficiency | 0.78 | {expected.values['gemm_efficiency']:.4g} |" in report
    # the copied run re-fits to the same file
    again = tmp_path / "again"
    assert cg.main(["--from-json", str(out / "calibration_h100.json"), "--out", str(again)]) == 0
    assert (again / "h100.yaml").read_text() == (out / "h100.yaml").read_text()


def test_from_json_rejects_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"measurements": []}))
    assert cg.main(["--from-json", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert "needs 'gpu'" in capsys.readouterr().err
    bad.write_text(json.dumps({"gpu": "h100", "measurements": [
        {"kind": "gemm", "params": {"precision": "bf16", "n": 4096, "k": 4096}, "time_s": 1e-5, "status": "ok"}]}))
    assert cg.main(["--from-json", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert "lacks ['m']" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_no_cuda_device_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the script would measure")
    assert cg.main(["--hardware", "h100", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device" in err and "run it on the GPU you want to calibrate" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("device, expected", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100"), ("NVIDIA H200", "h200"),
    ("NVIDIA B200", "b200"), ("NVIDIA GB200", "gb200"), ("NVIDIA GH200 480GB", None), ("Tesla V100-SXM2-16GB", None),
])
def test_guess_hardware(device: str, expected: str | None) -> None:
    assert cg.guess_hardware(device) == expected


def test_tiles_print_with_or_without_a_rate() -> None:
    assert cg.format_tiles([(64, 128, 1, 0.5), (256, 256, 2), (128, 256, 1, 1.0)]) == "64x128/1 @0.5, 256x256/2, 128x256/1"


def test_quantized_gemms_do_not_set_the_kernel_overhead() -> None:
    """A runtime's fp8 linear layer carries its activation-quantization kernels: 10 us more on the smallest
    shapes than the GEMM alone. The overhead fit reads bf16 GEMMs, HBM and attention only."""
    gpu = get_gpu("h100")
    ms = synthetic(gpu, gpu.replace(**TRUTH), cg.QUICK, gpus=1)
    slowed = [dataclasses.replace(m, time_s=m.time_s + 10e-6) if m.ok and m.params.get("precision") == "fp8" else m
              for m in ms]
    assert cg.fit(gpu, slowed).values["kernel_overhead_s"] == pytest.approx(5e-6, abs=0.2e-6)


def test_a_runtime_all_reduce_is_predicted_with_the_models_choice_and_not_fitted() -> None:
    """Cases with "algorithm": "auto" (TensorRT-LLM's custom all-reduce) are predicted one-shot or two-shot as
    the serving model picks, reported in their own class, and leave the NCCL fit as it was."""
    gpu = get_gpu("b200")
    truth = gpu.replace(**TRUTH)
    ms = synthetic(gpu, truth, cg.QUICK, gpus=8)
    small = cg.Measurement("all_reduce", {"bytes": 16 * cg.KiB, "gpus": 8, "algorithm": "auto"}, time_s=6e-6)
    assert small.group == "all_reduce auto"
    one_shot = collective_time_s("all_reduce", 16 * cg.KiB, 8, gpu, algorithm="one_shot")
    assert cg.predict_s(gpu, small) == pytest.approx(one_shot)
    assert cg.predict_s(gpu, small) < collective_time_s("all_reduce", 16 * cg.KiB, 8, gpu, algorithm="two_shot")
    without, with_auto = cg.fit(gpu, ms), cg.fit(gpu, [*ms, small, dataclasses.replace(small, time_s=1.0)])
    for key in ("collective_efficiency", "collective_latency_s"):
        assert with_auto.values[key] == without.values[key], key
    assert "all_reduce auto" in cg.errors_by_group(gpu, [*ms, small])


def test_gemm_close_pairs_count_the_shape_changes_the_model_orders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pairs share N and K or share M; banded by the measured ratio; a model tie counts half."""
    gpu = get_gpu("h100")

    def case(m: int, n: int, k: int, t_us: float) -> "cg.Measurement":
        return cg.Measurement("gemm", {"precision": "bf16", "m": m, "n": n, "k": k}, time_s=t_us * 1e-6)

    big = cg.predict_s(gpu, case(4096, 8192, 8192, 1))
    ms = [case(4096, 8192, 8192, big * 1e6), case(8192, 8192, 8192, big * 1e6 * 1.6),  # ordered, 1.6x
          case(4096, 16384, 8192, big * 1e6 * 0.75),  # shares M with both; 1.33x faster than the first: misordered
          case(1, 1024, 1024, 5.0)]  # shares nothing with the others: no pair
    pairs = cg.gemm_close_pairs(gpu, ms)["bf16"]
    assert pairs[(1.5, 2.0)] == (1, 1)  # 8192 vs 4096 rows, measured and predicted slower
    assert pairs[(1.25, 1.5)] == (0, 1)  # 4096 x 16384 measured faster than 4096 x 8192: the model says slower
    assert sum(n for _, n in pairs.values()) == 2  # the 2.13x pair (16384 cols vs 8192 rows) is out of every band

    class Flat:  # a model that predicts every GEMM alike: each pair is a coin toss
        time_s = 1e-5

    monkeypatch.setattr(cg, "gemm", lambda *a, **k: Flat())
    flat = cg.gemm_close_pairs(gpu, ms)["bf16"]
    assert flat[(1.5, 2.0)] == (0.5, 1) and flat[(1.25, 1.5)] == (0.5, 1)
