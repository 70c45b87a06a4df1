"""One precision table for everyone: co-design predict, the Python API, the callback and the search refuse
NVFP4 on Hopper (no FP4 tensor cores) with the same one-line message, and run it on Blackwell."""

import json
import re

import pytest

from co_design.arch import Architecture
from co_design.cli import main
from co_design.perf import Deployment, max_throughput, pareto, predict

ARCH = Architecture(hidden=2048, layers=4, heads=16, kv_heads=4, ffn=8192, vocab=32000, name="tiny")
# what every refusal says about the GPU and what it supports (the setting's name differs by entry point)
CORE = "is not supported by h100 (native weights formats: bf16, fp8); use one of those, or a GPU with nvfp4 weights"


@pytest.fixture()
def config(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text("hidden: 2048\nlayers: 4\nheads: 16\nkv_heads: 4\nffn: 8192\nvocab: 32000\nname: tiny\n")
    return str(p)


def test_cli_refuses_nvfp4_on_h100_in_one_line(config, capsys):
    for extra in ([], ["--concurrency", "8"], ["--pareto"]):  # nvfp4 is the default --weights
        assert main(["predict", config, "--hardware", "h100", *extra]) == 2
        out = capsys.readouterr()
        assert out.out == ""
        assert out.err == f"co-design predict: error: --weights='nvfp4' {CORE}: b200, gb200, b300, gb300\n"
    assert main(["predict", config, "--hardware", "h200", "--weights", "fp8", "--activations", "fp8",
                 "--kv-cache", "nvfp4"]) == 2
    assert capsys.readouterr().err.startswith(
        "co-design predict: error: --kv-cache='nvfp4' is not supported by h200 (native KV-cache formats: bf16, fp8)")


def test_cli_runs_nvfp4_on_b200_and_fp8_on_h100(config, capsys):
    assert main(["predict", config, "--hardware", "b200", "--weights", "nvfp4", "--activations", "nvfp4",
                 "--kv-cache", "nvfp4", "--concurrency", "8", "--json", "--no-advice"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] and {o["precision"] for o in d["ops"] if o["name"] == "qkv_proj"} == {"nvfp4"}
    assert main(["predict", config, "--hardware", "h100", "--weights", "fp8", "--activations", "fp8",
                 "--concurrency", "8", "--json", "--no-advice"]) == 0
    assert {o["precision"] for o in json.loads(capsys.readouterr().out)["ops"] if o["name"] == "qkv_proj"} == {"fp8"}


def test_python_api_refuses_nvfp4_on_h100():
    dep = Deployment(weights="nvfp4", activations="fp8", concurrency=8)
    for call in (lambda: predict(ARCH, "h100", dep), lambda: max_throughput(ARCH, "h100", dep),
                 lambda: pareto(ARCH, "h100", dep), lambda: pareto(ARCH, "h100", dep, deployments=[dep])):
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value) == f"Deployment.weights='nvfp4' {CORE}: b200, gb200, b300, gb300"
    with pytest.raises(ValueError, match=r"^Deployment.activations='nvfp4' is not supported by h200"):
        predict(ARCH, "h200", Deployment(weights="fp8", activations="nvfp4", concurrency=8))
    p = predict(ARCH, "b200", Deployment(weights="nvfp4", activations="nvfp4", kv_cache="nvfp4", concurrency=8))
    assert p.fits and p.output_tokens_per_s_per_gpu > 0
    assert {o.precision for o in p.ops if o.name in ("qkv_proj", "gate_up_proj", "down_proj")} == {"nvfp4"}


def test_callback_refuses_nvfp4_on_h100():
    from co_design.callback import CoDesignCallback

    with pytest.raises(ValueError, match="^" + re.escape(f"deployment.weights='nvfp4' {CORE}: b200, gb200")):
        CoDesignCallback("h100", deployment=Deployment(weights="nvfp4", activations="fp8"))
    with pytest.raises(ValueError, match=r"^deployment.kv_cache='nvfp4' is not supported by h100"):
        CoDesignCallback("h100", deployment=Deployment(weights="fp8", activations="fp8", kv_cache="nvfp4"))
    assert CoDesignCallback("b200", deployment=Deployment(kv_cache="nvfp4")).deployment.weights == "nvfp4"


def test_search_refuses_nvfp4_on_h100_before_any_trial():
    from search.checks import check_precisions as _check_precisions, resolve_gpu as _resolve_gpu
    from search.compose import compose_config
    from search.config import ConfigError, to_search_config, validate

    cfg = validate(to_search_config(compose_config("hardware=h100", "tracking=off", "space.precisions=[fp8,nvfp4]",
                                                   "deployment.activations=fp8")))
    with pytest.raises(ConfigError) as e:
        _check_precisions(cfg, _resolve_gpu(cfg))
    assert e.value.problems == [f"deployment.weights='nvfp4' {CORE}: b200, gb200, b300, gb300",
                                f"space.precisions[1]='nvfp4' {CORE}: b200, gb200, b300, gb300"]
    ok = validate(to_search_config(compose_config("hardware=b200", "tracking=off", "space.precisions=[fp8,nvfp4]",
                                                  "deployment.kv_cache=nvfp4")))
    assert _check_precisions(ok, _resolve_gpu(ok)) is None
