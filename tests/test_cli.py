"""`co-design predict`: report, --json keys, defaults and exit code 2 on bad input."""

import json
import subprocess
import sys

import pytest

from co_design.cli import main

CONFIG = """hidden: 2048
layers: 4
heads: 16
kv_heads: 4
ffn: 8192
vocab: 32000
name: tiny
"""


@pytest.fixture()
def config(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(CONFIG)
    return str(p)


def test_json_keys(config, capsys):
    assert main(["predict", config, "--hardware", "h200", "--weights", "fp8", "--activations", "fp8",
                 "--concurrency", "8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user", "ttft_ms", "tpot_ms", "batch",
                "memory_per_gpu_gb", "fits", "ops"):
        assert key in d, key
    assert d["batch"] == 8 and d["fits"] is True and d["gpu"] == "h200"
    assert {"name", "time_ms", "bound", "flops", "bytes"} <= set(d["ops"][0])


def test_report_defaults_to_max_throughput(config, capsys):
    assert main(["predict", config]) == 0
    out = capsys.readouterr().out
    assert "output tokens/s per GPU" in out and "Memory per GPU" in out and "bound" in out


def test_hf_config_json(tmp_path, capsys):
    hf = {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
          "num_key_value_heads": 8, "intermediate_size": 4096, "vocab_size": 32000}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(hf))
    assert main(["predict", str(p), "--json", "--no-advice", "--max-throughput"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True


@pytest.mark.parametrize("args, word", [
    (["--hardware", "b2OO"], "b200"),
    (["--tp", "3"], "tp=3"),
    (["--ep", "2", "--tp", "2"], "ep=2"),
])
def test_bad_input_exit_2(config, capsys, args, word):
    assert main(["predict", config, *args]) == 2
    err = capsys.readouterr().err
    assert word in err and "Traceback" not in err


def test_missing_config_exit_2(tmp_path, capsys):
    assert main(["predict", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_console_script_runs(config):
    r = subprocess.run([sys.executable, "-m", "co_design.cli", "predict", config, "--hardware", "nosuch"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "known:" in r.stderr and "Traceback" not in r.stderr


def test_pareto_front_is_a_front_under_the_slo(config, capsys):
    assert main(["predict", config, "--gpus", "4", "--pareto", "--min-tokens-per-s-per-user", "100", "--json"]) == 0
    front = json.loads(capsys.readouterr().out)["pareto"]
    assert len(front) >= 3
    users = [p["output_tokens_per_s_per_user"] for p in front]
    gpus = [p["output_tokens_per_s_per_gpu"] for p in front]
    assert min(users) >= 100
    # sorted by interactivity; along a front, more tokens/s per user costs tokens/s per GPU
    assert users == sorted(users) and gpus == sorted(gpus, reverse=True)
    assert all(p["fits"] for p in front) and {p["deployment"]["gpus"] for p in front} == {4}
    assert main(["predict", config, "--gpus", "4", "--pareto"]) == 0
    assert "Pareto front of tiny on b200 x4" in capsys.readouterr().out


def test_slo_bounds_the_max_throughput_point(config, capsys):
    assert main(["predict", config, "--json", "--no-advice"]) == 0
    free = json.loads(capsys.readouterr().out)
    assert main(["predict", config, "--json", "--no-advice", "--max-tpot-ms", str(free["tpot_ms"] / 2)]) == 0
    bound = json.loads(capsys.readouterr().out)
    assert bound["tpot_ms"] <= free["tpot_ms"] / 2 and bound["batch"] < free["batch"]


def test_slo_with_fixed_concurrency_is_refused(config, capsys):
    assert main(["predict", config, "--concurrency", "4", "--max-ttft-ms", "100"]) == 2
    assert "--max-throughput or --pareto" in capsys.readouterr().err


def test_model_that_does_not_fit_is_reported_not_crashed(tmp_path, capsys):
    big = tmp_path / "big.yaml"
    big.write_text("hidden: 16384\nlayers: 126\nheads: 128\nkv_heads: 8\nffn: 53248\nvocab: 128256\n")
    assert main(["predict", str(big), "--hardware", "h100", "--weights", "bf16", "--no-advice"]) == 0
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "weights alone 811.7 GB" in out  # 405.85e9 params x 2 bytes
    assert main(["predict", str(big), "--hardware", "h100", "--weights", "bf16", "--json", "--no-advice"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] is False and d["memory_gb"]["weights"] == pytest.approx(811.7, rel=1e-3)
