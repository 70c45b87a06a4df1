"""The GPU catalog: built-in data with sources, lookups, user files and overrides."""

import math

import pytest

from co_design.hardware import GPU, HARDWARE_PATH_ENV, get_gpu, list_gpus, load_gpu

BUILTIN = ["h100", "h200", "b200", "gb200", "b300", "gb300"]
NUMBERS = ["sms", "hbm_bytes", "hbm_usable_bytes", "hbm_bytes_per_s", "l2_bytes", "nvlink_bytes_per_s",
           "nvlink_domain", "scaleout_bytes_per_s", "gemm_efficiency", "attention_efficiency", "memory_efficiency",
           "kernel_overhead_s", "collective_latency_s", "collective_efficiency", "gemm_tiles"]


def test_builtin_six_in_order():
    assert list_gpus()[:6] == BUILTIN


@pytest.mark.parametrize("name", BUILTIN)
def test_every_number_has_a_source(name):
    g = get_gpu(name)
    for key in NUMBERS:
        assert g.sources.get(key), f"{name}.{key} has no source"
    for prec in g.peak_flops_per_s:
        assert g.sources.get(f"peak_flops_per_s.{prec}"), f"{name} peak {prec} has no source"
    assert g.hbm_usable_bytes <= g.hbm_bytes  # both in bytes: nominal "80 GB" HBM is 80 GiB


def test_hbm_capacity_in_binary_bytes_and_usable_checked():
    # datasheet HBM "GB" are GiB: H100 80 GiB, B200 192 GiB (8 x 24 GiB stacks)
    assert get_gpu("h100").hbm_bytes == 80 * 2**30
    assert get_gpu("b200").hbm_bytes == 192 * 2**30
    with pytest.raises(ValueError, match="hbm_usable_bytes"):
        get_gpu("h100").replace(hbm_usable_bytes=90 * 2**30)


def test_reference_numbers():
    # REFERENCE.md section 2 (dense peaks; sparse would be 2x)
    assert get_gpu("h100").peak_flops_per_s["bf16"] == 989e12
    assert "nvfp4" not in get_gpu("h200").peak_flops_per_s  # Hopper has no FP4 tensor cores
    b200 = get_gpu("b200")
    assert (b200.sms, b200.peak_flops_per_s["nvfp4"], b200.hbm_bytes_per_s) == (148, 9000e12, 8e12)
    assert get_gpu("gb200").nvlink_domain == 72 and b200.nvlink_domain == 8
    assert get_gpu("gb300").peak_flops_per_s["nvfp4"] == 15000e12
    assert get_gpu("b300").sms == 160
    assert math.isclose(get_gpu("h200").nvlink_bytes_per_s, 450e9)


def test_lookup_is_case_insensitive_with_aliases_and_passthrough():
    assert get_gpu("B200") is get_gpu("b200")
    assert get_gpu("GB200-NVL72").name == "gb200"
    g = get_gpu("h100")
    assert get_gpu(g) is g


def test_unknown_gpu_lists_known():
    with pytest.raises(ValueError) as e:
        get_gpu("b2OO")
    msg = str(e.value)
    assert "b2OO" in msg and all(n in msg for n in BUILTIN)


def test_user_file_with_base_overrides_one_number(tmp_path):
    f = tmp_path / "fast_b200.yaml"
    f.write_text("name: fast-b200\nbase: b200\nhbm_bytes_per_s: {value: 10.0e12, source: 'what-if'}\n")
    g = load_gpu(f)
    assert isinstance(g, GPU)
    assert g.name == "fast-b200" and g.hbm_bytes_per_s == 10e12 and g.sources["hbm_bytes_per_s"] == "what-if"
    assert g.sms == 148 and g.peak_flops_per_s == get_gpu("b200").peak_flops_per_s


def test_user_file_missing_fields_names_them(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("name: x\nsms: 10\n")
    with pytest.raises(ValueError, match="missing"):
        load_gpu(f)


def test_env_dir_adds_and_overrides(tmp_path, monkeypatch):
    (tmp_path / "my.yaml").write_text(
        "name: my-gpu\nbase: h100\nsms: {value: 100, source: 'lab'}\n")
    (tmp_path / "h100.yaml").write_text("name: h100\nhbm_bytes_per_s: 3.0e12\n")  # same name: override
    monkeypatch.setenv(HARDWARE_PATH_ENV, str(tmp_path))
    assert "my-gpu" in list_gpus()
    assert get_gpu("my-gpu").sms == 100
    assert get_gpu("h100").hbm_bytes_per_s == 3.0e12
    assert get_gpu("h100").sms == 132  # the rest of h100 kept
    monkeypatch.delenv(HARDWARE_PATH_ENV)
    assert get_gpu("h100").hbm_bytes_per_s == 3.35e12
    assert "my-gpu" not in list_gpus()


def test_bad_numbers_rejected(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("name: bad\nbase: b200\nmemory_efficiency: 1.5\n")
    with pytest.raises(ValueError, match="memory_efficiency"):
        load_gpu(f)
    f.write_text("name: bad\nbase: nosuch\n")
    with pytest.raises(ValueError, match="nosuch"):
        load_gpu(f)


def test_load_gpu_same_name_overrides(tmp_path):
    f = tmp_path / "b200.yaml"
    f.write_text("name: b200\nmemory_efficiency: {value: 0.7, source: 'my measurement'}\n")
    g = load_gpu(f)
    assert g.memory_efficiency == 0.7 and g.sms == 148 and g.sources["memory_efficiency"] == "my measurement"


@pytest.mark.parametrize("change", [dict(kernel_overhead_s=-1e-6), dict(collective_latency_s=-1e-6),
                                    dict(l2_bytes=-1.0), dict(gemm_tiles=())])
def test_negative_overheads_and_empty_tiles_rejected(change):
    with pytest.raises(ValueError, match=next(iter(change))):
        get_gpu("b200").replace(**change)


@pytest.mark.parametrize("name", list_gpus())
def test_to_dict_is_plain_json_with_every_field(name):
    import dataclasses
    import json

    gpu = get_gpu(name)
    d = json.loads(json.dumps(gpu.to_dict()))
    assert set(d) == {f.name for f in dataclasses.fields(gpu)}
    assert d["peak_flops_per_s"] == dict(gpu.peak_flops_per_s)
    assert d["hbm_bytes_per_s"] == gpu.hbm_bytes_per_s and d["gemm_tiles"] == [list(t) for t in gpu.gemm_tiles]


def test_gemm_efficiency_per_precision_from_a_file(tmp_path):
    """A file may give some precisions their own GEMM efficiency; the others keep gemm_efficiency; the roofline's
    compute time of a large GEMM scales as 1 / that efficiency."""
    from co_design.perf.roofline import gemm

    f = tmp_path / "b200.yaml"
    f.write_text("name: b200\ngemm_efficiency_by_precision:\n  fp8: {value: 0.41, source: 'measured'}\n  nvfp4: 0.3\n")
    g = load_gpu(f)
    base = get_gpu("b200")
    assert dict(g.gemm_efficiency_by_precision) == {"fp8": 0.41, "nvfp4": 0.3}
    assert g.sources["gemm_efficiency_by_precision.fp8"] == "measured"
    assert g.gemm_efficiency_at("fp8") == 0.41 and g.gemm_efficiency_at("bf16") == base.gemm_efficiency == g.gemm_efficiency
    for prec, eff in (("bf16", base.gemm_efficiency), ("fp8", 0.41), ("nvfp4", 0.3)):
        a = gemm(base, 8192, 8192, 8192, weights=prec, activations=prec).compute_s
        b = gemm(g, 8192, 8192, 8192, weights=prec, activations=prec).compute_s
        assert b / a == pytest.approx(base.gemm_efficiency / eff, rel=1e-12), prec


def test_prefill_attention_law_from_a_file_and_its_checks(tmp_path, monkeypatch):
    """Every built-in GPU carries a bf16 and an fp8 prompt attention law with sources; a file may replace one
    precision's entry or drop it (that precision falls back to the flat attention_efficiency); bad entries name
    the field."""
    for name in ("h100", "h200", "b200", "b300", "gb200", "gb300"):
        g = get_gpu(name)
        assert set(g.prefill_attention) == {"bf16", "fp8"}, name
        assert all(0 < f <= 1 and o >= 0 for f, o in g.prefill_attention.values()), name
        assert "fit_prefill_attention.py" in g.sources["prefill_attention.fp8"], name
    (tmp_path / "mine.yaml").write_text("name: mine\nbase: h100\nprefill_attention:\n"
                                        "  fp8: {value: [0.5, 2], source: 'measured'}\n  bf16: null\n")
    monkeypatch.setenv(HARDWARE_PATH_ENV, str(tmp_path))
    g = get_gpu("mine")
    assert dict(g.prefill_attention) == {"fp8": (0.5, 2.0)} and g.sources["prefill_attention.fp8"] == "measured"
    for text, match in (("prefill_attention: {fp8: [1.5, 2]}\n", r"needs a fraction in \(0, 1\]"),
                        ("prefill_attention: {fp8: [0.5, -1]}\n", "overhead >= 0"),
                        ("prefill_attention: {nvfp4: [0.5, 1]}\n", "has no nvfp4 rate"),
                        ("prefill_attention: {fp8: 0.5}\n", r"must map precision -> \[fraction, overhead\]"),
                        ("prefill_attention: 0.5\n", "prefill_attention must map precision")):
        f = tmp_path / "h100.yaml"
        f.write_text("name: h100\n" + text)
        with pytest.raises(ValueError, match=match):
            load_gpu(f)


def test_prefill_mla_law_from_a_file_and_its_checks(tmp_path, monkeypatch):
    """Every built-in GPU carries a bf16 and an fp8 MLA prompt law with sources; a file may drop one (an MLA model
    then takes prefill_attention's entry); bad entries name the field."""
    for name in ("h100", "h200", "b200", "b300", "gb200", "gb300"):
        g = get_gpu(name)
        assert set(g.prefill_mla) == {"bf16", "fp8"}, name
        assert all(0 < f <= 1 and o >= 0 for f, o in g.prefill_mla.values()), name
        assert "prefill_mla_" in g.sources["prefill_mla.bf16"], name
    (tmp_path / "mine.yaml").write_text("name: mine\nbase: h100\nprefill_mla:\n  bf16: null\n")
    monkeypatch.setenv(HARDWARE_PATH_ENV, str(tmp_path))
    assert set(get_gpu("mine").prefill_mla) == {"fp8"}
    for text, match in (("prefill_mla: {fp8: [1.5, 2]}\n", r"prefill_mla.fp8 needs a fraction in \(0, 1\]"),
                        ("prefill_mla: {nvfp4: [0.5, 1]}\n", "prefill_mla.nvfp4 is given but peak_flops_per_s has no"),
                        ("prefill_mla: {fp8: 0.5}\n", r"prefill_mla must map precision -> \[fraction, overhead\]")):
        f = tmp_path / "h100.yaml"
        f.write_text("name: h100\n" + text)
        with pytest.raises(ValueError, match=match):
            load_gpu(f)


def test_decode_attention_law_from_a_file_and_its_checks(tmp_path, monkeypatch):
    """Every built-in GPU carries a bf16 and an fp8 KV-cache decode attention law with sources; a file may replace
    one format's entry or drop it (that format streams at memory_efficiency, no per-CTA cost); bad entries name the
    field; an entry of two numbers is a law without a ramp."""
    for name in ("h100", "h200", "b200", "b300", "gb200", "gb300"):
        g = get_gpu(name)
        assert set(g.decode_attention) == {"bf16", "fp8"}, name
        assert all(0 < f <= 1 and 0 < c < 1e-5 and 0 < r < 1e-4 and 1e4 < b < 1e8
                   for f, c, r, b in g.decode_attention.values()), name
        assert "fit_decode_attention.py" in g.sources["decode_attention.bf16"], name
    (tmp_path / "mine.yaml").write_text("name: mine\nbase: h100\ndecode_attention:\n"
                                        "  fp8: {value: [0.8, 2.0e-6], source: 'measured'}\n  bf16: null\n"
                                        "  nvfp4: [0.9, 1.0e-6, 5.0e-6, 1.0e6]\n")
    monkeypatch.setenv(HARDWARE_PATH_ENV, str(tmp_path))
    g = get_gpu("mine")
    assert dict(g.decode_attention) == {"fp8": (0.8, 2e-6, 0.0, 0.0), "nvfp4": (0.9, 1e-6, 5e-6, 1e6)}
    assert g.sources["decode_attention.fp8"] == "measured"
    assert dict(g.prefill_attention) == dict(get_gpu("h100").prefill_attention)  # untouched
    for text, match in (("decode_attention: {fp8: [1.5, 1.0e-6]}\n", r"fraction of the HBM bandwidth in \(0, 1\]"),
                        ("decode_attention: {fp8: [0.8, -1.0e-6]}\n", "seconds per wave of CTAs >= 0"),
                        ("decode_attention: {fp6: [0.8, 1.0e-6]}\n", "decode_attention.fp6 is not a KV-cache format"),
                        ("decode_attention: {fp8: 0.8}\n", r"must map KV-cache format -> \[fraction, cta_s\] or "),
                        ("decode_attention: {fp8: [0.8, 1.0e-6, 5.0e-6]}\n",
                         r"\[fraction, cta_s, ramp_s, ramp_bytes\]"),
                        ("decode_attention: {fp8: [0.8, 1.0e-6, 5.0e-6, 0]}\n", "both > 0 or both 0"),
                        ("decode_attention: {fp8: [0.8, 1.0e-6, -5.0e-6, 1.0e6]}\n", "ramp as seconds >= 0"),
                        ("decode_attention: 0.8\n", "decode_attention must map precision")):
        f = tmp_path / "h100.yaml"
        f.write_text("name: h100\n" + text)
        with pytest.raises(ValueError, match=match):
            load_gpu(f)



def test_decode_mla_law_from_a_file_and_its_checks(tmp_path, monkeypatch):
    """Every built-in GPU carries a bf16 and an fp8 latent-cache MLA decode law with sources, under which the FP8
    cache is never the slower (its compute fraction at least bf16's, its cache fraction at least half bf16's: half
    the bytes); a file may replace or drop an entry; bad entries name the field, and the compute fraction may pass 1
    only up to the GPU's fastest dense peak (the fit holds each format to its own)."""
    for name in ("h100", "h200", "b200", "b300", "gb200", "gb300"):
        g = get_gpu(name)
        assert set(g.decode_mla) == {"bf16", "fp8"}, name
        (c16, f16, io16, cta16), (c8, f8, io8, cta8) = g.decode_mla["bf16"], g.decode_mla["fp8"]
        assert 0 < c16 <= c8 <= 2 and 0 < f16 / 2 <= f8 <= 1 and io16 == io8 and cta16 == cta8 < 1e-5, name
        assert "fit_decode_attention.py" in g.sources["decode_mla.fp8"], name
        assert g.decode_mla_law("nvfp4") == g.decode_mla["fp8"], name
    (tmp_path / "mine.yaml").write_text("name: mine\nbase: h100\ndecode_mla:\n"
                                        "  fp8: {value: [0.7, 0.8, 0.4, 1.0e-6], source: 'measured'}\n  bf16: null\n")
    monkeypatch.setenv(HARDWARE_PATH_ENV, str(tmp_path))
    g = get_gpu("mine")
    assert dict(g.decode_mla) == {"fp8": (0.7, 0.8, 0.4, 1e-6)} and g.sources["decode_mla.fp8"] == "measured"
    assert g.decode_mla_law("bf16") is None and g.decode_mla_law("nvfp4") == (0.7, 0.8, 0.4, 1e-6)
    assert dict(g.decode_attention) == dict(get_gpu("h100").decode_attention)  # untouched
    for text, match in (("decode_mla: {fp8: [2.5, 0.8, 0.4, 1.0e-6]}\n", r"fraction of the bf16 peak in \(0, 2\.001"),
                        ("decode_mla: {fp8: [0.7, 1.2, 0.4, 1.0e-6]}\n", r"two fractions of the HBM bandwidth"),
                        ("decode_mla: {fp8: [0.7, 0.8, 0.0, 1.0e-6]}\n", r"two fractions of the HBM bandwidth"),
                        ("decode_mla: {fp8: [0.7, 0.8, 0.4, -1.0e-6]}\n", "seconds per wave of CTAs >= 0"),
                        ("decode_mla: {fp6: [0.7, 0.8, 0.4, 1.0e-6]}\n", "decode_mla.fp6 is not a KV-cache format"),
                        ("decode_mla: {fp8: [0.7, 0.8, 1.0e-6]}\n",
                         r"must map KV-cache format -> \[compute_fraction, fraction, io_fraction, cta_s\]")):
        f = tmp_path / "h100.yaml"
        f.write_text("name: h100\n" + text)
        with pytest.raises(ValueError, match=match):
            load_gpu(f)


def test_a_gpu_based_on_another_can_drop_a_precisions_efficiency(tmp_path, monkeypatch):
    (tmp_path / "slow.yaml").write_text("name: slow\nbase: b200\ngemm_efficiency_by_precision: {fp8: 0.4, nvfp4: 0.3}\n")
    (tmp_path / "slower.yaml").write_text("name: slower\nbase: slow\ngemm_efficiency_by_precision: {fp8: null}\n")
    monkeypatch.setenv(HARDWARE_PATH_ENV, str(tmp_path))
    g = get_gpu("slower")
    assert dict(g.gemm_efficiency_by_precision) == {"nvfp4": 0.3}
    assert g.gemm_efficiency_at("fp8") == get_gpu("b200").gemm_efficiency


@pytest.mark.parametrize("text, match", [
    ("gemm_efficiency_by_precision: {fp8: 1.5}\n", r"gemm_efficiency_by_precision.fp8 must be in \(0, 1\]"),
    ("gemm_efficiency_by_precision: {nvfp4: 0.5}\n", "has no nvfp4 rate"),  # H100 has no FP4 tensor cores
    ("gemm_efficiency_by_precision: 0.5\n", "must map precision"),
])
def test_gemm_efficiency_per_precision_rejects_bad_entries(tmp_path, text, match):
    f = tmp_path / "h100.yaml"
    f.write_text("name: h100\n" + text)
    with pytest.raises(ValueError, match=match):
        load_gpu(f)
    with pytest.raises(ValueError, match="must map precision -> number"):
        get_gpu("h100").replace(gemm_efficiency_by_precision={"fp8": "fast"})
