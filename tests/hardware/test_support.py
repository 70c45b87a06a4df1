"""The per-GPU precision table (formats with real kernels) and the one check everyone calls."""

import pytest

from co_design.hardware import PRECISION_FIELDS, check_precision, get_gpu, list_gpus, load_gpu, supported_precisions

HOPPER = ["h100", "h200"]
BLACKWELL = ["b200", "gb200", "b300", "gb300"]


@pytest.mark.parametrize("name", HOPPER + BLACKWELL)
def test_table_per_gpu_with_sources(name):
    # Hopper: 4th-gen Tensor Cores, FP8 but no FP4 (H100 whitepaper); Blackwell adds NVFP4 (5th-gen Tensor
    # Cores; TensorRT-LLM NVFP4 weights/activations and NVFP4 KV cache)
    g = get_gpu(name)
    expected = ("bf16", "fp8") if name in HOPPER else ("bf16", "fp8", "nvfp4")
    assert dict(g.precisions) == {f: expected for f in PRECISION_FIELDS}
    for f in PRECISION_FIELDS:
        assert supported_precisions(name, f) == expected
        src = g.sources.get(f"precisions.{f}", "")
        assert "NVIDIA" in src or "TensorRT-LLM" in src, f"{name} precisions.{f} has no public source"


def test_check_message_names_gpu_setting_and_what_is_supported():
    with pytest.raises(ValueError) as e:
        check_precision(get_gpu("h100"), "weights", "nvfp4", label="--weights")
    assert str(e.value) == ("--weights='nvfp4' is not supported by h100 (native weights formats: bf16, fp8); "
                            "use one of those, or a GPU with nvfp4 weights: b200, gb200, b300, gb300")
    with pytest.raises(ValueError, match=r"^Deployment.kv_cache='nvfp4' is not supported by h200 "
                                         r"\(native KV-cache formats: bf16, fp8\)"):
        check_precision("h200", "kv_cache", "nvfp4")
    for name in BLACKWELL:
        for f in PRECISION_FIELDS:
            assert check_precision(name, f, "nvfp4") is None
    with pytest.raises(ValueError, match="'int4' is not a known format"):
        check_precision("b200", "weights", "int4")
    with pytest.raises(ValueError, match="unknown precision field 'bias'"):
        check_precision("b200", "bias", "bf16")


def test_user_gpu_files(tmp_path):
    # no table and no base: every format with a tensor-core rate
    f = tmp_path / "lab.yaml"
    f.write_text("name: lab\nsms: 10\npeak_flops_per_s: {bf16: 1.0e14, fp8: 2.0e14}\nhbm_bytes: 1.0e10\n"
                 "hbm_usable_bytes: 1.0e10\nhbm_bytes_per_s: 1.0e12\nl2_bytes: 1.0e7\nnvlink_bytes_per_s: 1.0e11\n"
                 "nvlink_domain: 8\nscaleout_bytes_per_s: 1.0e10\n")
    assert dict(load_gpu(f).precisions) == {fld: ("bf16", "fp8") for fld in PRECISION_FIELDS}
    # a base inherits the table; one class may be overridden (with its source)
    f.write_text("name: b200-fp8kv\nbase: b200\nprecisions:\n  kv_cache: {value: [bf16, fp8], source: 'my runtime'}\n")
    g = load_gpu(f)
    assert g.precisions["kv_cache"] == ("bf16", "fp8") and g.precisions["weights"] == ("bf16", "fp8", "nvfp4")
    assert g.sources["precisions.kv_cache"] == "my runtime"
    # a GEMM format without a tensor-core rate is refused, naming the fix
    f.write_text("name: h100-fp4\nbase: h100\nprecisions:\n  weights: [bf16, fp8, nvfp4]\n")
    with pytest.raises(ValueError, match=r"precisions.weights lists \['nvfp4'\] but peak_flops_per_s has no rate"):
        load_gpu(f)
    with pytest.raises(ValueError, match="precisions needs exactly the keys"):
        get_gpu("b200").replace(precisions={"weights": ["bf16"]})
    assert "h100-fp4" not in list_gpus()
