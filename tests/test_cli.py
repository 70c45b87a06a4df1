"""`co-design predict`: report, --json keys, defaults, exit codes (2 bad input, 3 SLO out of reach, 1 closed pipe)."""

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

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
    assert main(["predict", str(big), "--hardware", "h100", "--weights", "bf16", "--activations", "bf16",
                 "--no-advice"]) == 0
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "weights alone 811.7 GB" in out  # 405.85e9 params x 2 bytes
    assert main(["predict", str(big), "--hardware", "h100", "--weights", "bf16", "--activations", "bf16",
                 "--json", "--no-advice"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] is False and d["memory_gb"]["weights"] == pytest.approx(811.7, rel=1e-3)


def test_pareto_text_concurrency_is_the_deployments(config, capsys):
    assert main(["predict", config, "--gpus", "4", "--pareto"]) == 0
    rows = [re.split(r"\s{2,}", line.strip()) for line in capsys.readouterr().out.splitlines()[4:]]
    assert len(rows) >= 3
    for label, conc, per_gpu, per_user, *_ in rows:
        # requests in flight, whole deployment = tokens/s of the 4 GPUs / tokens/s of one user
        expected = float(per_gpu.replace(",", "")) * 4 / float(per_user.replace(",", ""))
        assert int(conc.replace(",", "")) == pytest.approx(expected, rel=2e-3), (label, conc)
    assert main(["predict", config, "--gpus", "4", "--pareto", "--json"]) == 0
    assert [int(r[1].replace(",", "")) for r in rows] == [p["batch"] for p in json.loads(capsys.readouterr().out)["pareto"]]


def test_dense_model_with_attention_dp_is_not_labelled_dep(config, capsys):
    assert main(["predict", config, "--tp", "4", "--attention-dp", "--no-advice"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "co-design predict: tiny on b200 x4 (TP4 ADP)"
    assert main(["predict", config, "--gpus", "4", "--pareto", "--json"]) == 0
    labels = [p["deployment_label"] for p in json.loads(capsys.readouterr().out)["pareto"]]
    assert labels and not [x for x in labels if "EP" in x]


# a TPOT of 0.01 ms is out of reach: every iteration pays Runtime.iteration_overhead_s = 0.5 ms of host time
SLO_MISS = ("co-design predict: SLO cannot be met: no operating point of tiny on b200 x{gpus} reaches --max-tpot-ms "
            "0.01; relax it or serve on more or faster GPUs (--gpus, --tp, --hardware, --weights)")


def test_unreachable_slo_exits_3_and_says_so_first(config, capsys):
    # 1 tok/s per user is easy: only --max-tpot-ms is named
    assert main(["predict", config, "--no-advice", "--min-tokens-per-s-per-user", "1", "--max-tpot-ms", "0.01"]) == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == SLO_MISS.format(gpus=1) + "; the nearest point follows"
    assert lines[1] == "co-design predict: tiny on b200 x1 (TP1)"
    assert main(["predict", config, "--no-advice", "--max-tpot-ms", "0.01", "--json"]) == 3
    out, err = capsys.readouterr()
    assert err.splitlines() == [SLO_MISS.format(gpus=1) + "; the nearest point follows"]
    assert json.loads(out)["batch"] == 1  # the nearest point: the fastest per user


def test_unreachable_slo_on_the_pareto_front_exits_3(config, capsys):
    assert main(["predict", config, "--gpus", "2", "--pareto", "--max-tpot-ms", "0.01"]) == 3
    assert capsys.readouterr().out.splitlines() == [SLO_MISS.format(gpus=2)]
    assert main(["predict", config, "--gpus", "2", "--pareto", "--max-tpot-ms", "0.01", "--json"]) == 3
    out, err = capsys.readouterr()
    assert err.splitlines() == [SLO_MISS.format(gpus=2)] and json.loads(out)["pareto"] == []


def test_unknown_hf_model_family_is_refused_by_name(tmp_path, capsys):
    hf = {"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24, "num_attention_heads": 12,
          "intermediate_size": 1536, "vocab_size": 50280}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(hf))
    assert main(["predict", str(p), "--no-advice"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (
        f"co-design predict: error: cannot read model CONFIG {str(p)!r}: HF config model_type='mamba' is not a "
        "supported model family (supported: deepseek_v2, deepseek_v3, gpt_oss, llama, llama4, mixtral, qwen2, "
        "qwen2_moe, qwen3, qwen3_moe); describe the model as a project YAML of Architecture fields instead\n")


def test_closed_pipe_exits_quietly(config):
    # the reader closes its end before the first byte comes: every write hits EPIPE (as `| head -0` would)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run([sys.executable, "-m", "co_design.cli", "predict", config, "--no-advice"],
                           stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (r.returncode, r.stderr) == (1, "")


@pytest.mark.skipif(not hasattr(__import__("fcntl"), "F_SETPIPE_SZ"), reason="needs Linux pipe sizing")
def test_closed_pipe_after_the_first_line(config):
    # a reader that takes the first line and leaves (`| head -1`) while the writer still has output queued:
    # a 4 kB pipe and a ~13 kB report (--json with the op table), so at most 8 kB are gone when it closes
    import fcntl

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen([sys.executable, "-m", "co_design.cli", "predict", config, "--no-advice", "--json"],
                            stdout=write_end, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    first = b""
    while b"\n" not in first:
        first += os.read(read_end, 64)
    os.close(read_end)
    assert first.startswith(b"{\n")
    assert proc.wait(timeout=120) == 1 and proc.stderr.read() == ""
    proc.stderr.close()


# the catalog's datasheet numbers (co_design/hardware/data/*.yaml): HBM GiB, usable GiB, HBM TB/s, dense BF16 / FP8 /
# NVFP4 TFLOPS, NVLink GB/s per direction, GPUs per NVLink domain
B200 = ["b200", "192", "180.0", "8.00", "2,250", "4,500", "9,000", "900", "8"]
H100 = ["h100", "80", "79.6", "3.35", "989", "1,979", "-", "450", "8"]  # usable: nvidia-smi's 81559 MiB


def test_list_hardware_shows_specs(capsys, monkeypatch):
    monkeypatch.delenv("CO_DESIGN_HARDWARE_PATH", raising=False)
    assert main(["--list-hardware"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.split(r"\s{2,}", lines[2].strip()) == ["gpu", "HBM GiB", "usable GiB", "HBM TB/s", "BF16 TFLOPS",
                                                    "FP8 TFLOPS", "NVFP4 TFLOPS", "NVLink GB/s", "NVLink GPUs",
                                                    "description"]
    rows = {line.split()[0]: line.split()[:9] for line in lines[4:]}
    assert list(rows) == ["h100", "h200", "b200", "gb200", "b300", "gb300"]
    assert rows["b200"] == B200 and rows["h100"] == H100


def test_list_hardware_json(capsys, monkeypatch):
    monkeypatch.delenv("CO_DESIGN_HARDWARE_PATH", raising=False)
    assert main(["predict", "--list-hardware", "--json"]) == 0
    gpus = {g["name"]: g for g in json.loads(capsys.readouterr().out)["gpus"]}
    assert list(gpus) == ["h100", "h200", "b200", "gb200", "b300", "gb300"]
    b200 = dict(gpus["b200"])
    assert b200.pop("description").startswith("NVIDIA B200")
    assert b200 == {"name": "b200", "hbm_bytes": 192 * 2**30, "hbm_usable_bytes": 180 * 2**30,
                    "hbm_bytes_per_s": 8.0e12, "nvlink_bytes_per_s": 900e9, "nvlink_domain": 8,
                    "peak_flops_per_s": {"bf16": 2250e12, "fp8": 4500e12, "nvfp4": 9000e12},
                    "precisions": {k: ["bf16", "fp8", "nvfp4"] for k in ("weights", "activations", "kv_cache")}}
    assert gpus["h100"]["peak_flops_per_s"] == {"bf16": 989e12, "fp8": 1979e12}  # Hopper: no FP4 tensor cores
    assert gpus["h100"]["precisions"] == {k: ["bf16", "fp8"] for k in ("weights", "activations", "kv_cache")}


def test_version(capsys):
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"co-design {pyproject['project']['version']}\n"



HF_TINY = {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
           "intermediate_size": 4096, "vocab_size": 32000}

# (what is wrong, file name, file text, extra flags, fragment of the one-line error); each exits 2 before any work
BAD_CLI = [
    ("10**12 layers (hung)", "config.json", json.dumps({**HF_TINY, "num_hidden_layers": 10**12}), [],
     "num_hidden_layers"),
    ("bool as a string", "tiny.yaml", CONFIG + 'gated_ffn: "false"\n', [], "gated_ffn must be true or false"),
    ("HF bool as a string", "config.json", json.dumps({**HF_TINY, "tie_word_embeddings": "false"}), [],
     "tie_word_embeddings must be true or false"),
    ("rope_theta a word", "config.json", json.dumps({**HF_TINY, "rope_theta": "big"}), [], "rope_theta"),
    ("mla a number", "tiny.yaml", CONFIG + "mla: 5\n", [], "mla must be a mapping"),
    ("float size", "config.json", json.dumps({**HF_TINY, "hidden_size": 4096.5}), [], "hidden_size"),
    ("kv heads not dividing heads", "config.json", json.dumps({**HF_TINY, "num_key_value_heads": 3}), [],
     "num_key_value_heads"),
    ("malformed YAML", "tiny.yaml", "hidden: [1\n", [], "tiny.yaml': not valid YAML"),
    ("malformed JSON", "config.json", '{"hidden_size": 1024,', [], "config.json': not valid JSON"),
    ("empty file", "tiny.yaml", "", [], "the file is empty"),
    ("JSON list", "config.json", "[1, 2]", [], "expected a mapping of architecture fields"),
    ("10**9 GPUs on the Pareto sweep (hung)", "tiny.yaml", CONFIG, ["--gpus", "1000000000", "--pareto"], "--gpus"),
    ("10**12 tp ranks on the Pareto sweep (hung)", "tiny.yaml", CONFIG, ["--tp", str(10**12), "--pareto"], "--tp"),
]


@pytest.mark.timeout(20)
@pytest.mark.parametrize("what, filename, text, flags, fragment", BAD_CLI, ids=[c[0] for c in BAD_CLI])
def test_bad_model_or_flags_exit_2_with_one_line(tmp_path, capsys, what, filename, text, flags, fragment):
    p = tmp_path / filename
    p.write_text(text)
    assert main(["predict", str(p), "--no-advice", *flags]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("co-design predict: error: ")
    assert fragment in err
    assert err.count(str(p)) <= 1  # the file is named once


# ---------------------------------------------------------------- advise and export (issue #13)
def test_advise_json(config, capsys, tmp_path):
    plot = tmp_path / "advise.html"
    assert main(["advise", config, "--hardware", "b200", "--tp", "2", "--json", "--plot", str(plot)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["model"] == "tiny" and d["deployment_label"] == "TP2" and d["plot"] == str(plot) and plot.is_file()
    assert d["budget_pct"] == 0.1 and d["neighbours_scored"] >= len(d["dominating"])
    # the tiny model: hidden 2048, ffn 8192 / 2 = 4096, vocab 32000 / 2 = 16000 = 125 * 128 -> 256 misses
    assert [(m["dimension"], m["per_gpu_value"]) for m in d["misalignments"]] == [("vocab", 16000)]
    for n in d["dominating"]:
        assert n["output_tokens_per_s_per_gpu"] > d["prediction"]["output_tokens_per_s_per_gpu"]
        assert n["output_tokens_per_s_per_user"] > d["prediction"]["output_tokens_per_s_per_user"]


def test_advise_report_and_errors(config, capsys):
    assert main(["advise", config, "--hardware", "b200"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("co-design advise: tiny on b200 x1 (TP1)") and "Neighbours within ±10% of the parameters" in out
    assert main(["advise", config, "--budget-pct", "0"]) == 2
    assert "co-design advise: error: --budget-pct" in capsys.readouterr().err
    assert main(["advise", "missing.json"]) == 2
    assert "co-design advise: error: cannot read model CONFIG 'missing.json'" in capsys.readouterr().err


def test_export_then_predict_round_trip(config, capsys, tmp_path):
    out = tmp_path / "exp"
    assert main(["export", config, "--hardware", "b200", "--tp", "2", "--out", str(out), "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    assert set(written["files"]) == {"config", "arch", "modelopt", "llmcompressor", "plan", "serving", "predicted"}
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"
    for shape in (config, str(out / "config.json")):  # the same prediction from the original and the export
        assert main(["predict", shape, "--hardware", "b200", "--tp", "2", "--json", "--no-advice"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["output_tokens_per_s_per_gpu"] == written["predicted"]["output_tokens_per_s_per_gpu"]
        assert d["batch"] == written["predicted"]["concurrency"]


def test_export_errors(config, capsys, tmp_path):
    assert main(["export", "--out", str(tmp_path)]) == 2
    assert "give either CONFIG or --study-dir" in capsys.readouterr().err
    assert main(["export", "--study-dir", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "--study-dir needs --trial" in capsys.readouterr().err
    bad = tmp_path / "window.yaml"
    bad.write_text(CONFIG + "sliding_window: 4096\n")
    assert main(["export", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "co-design export: error: sliding_window=4096" in capsys.readouterr().err


def test_arrivals_name_the_ttft_they_give(config, capsys):
    ttft = {}
    for arrivals in ("steady", "burst", "poisson"):
        assert main(["predict", config, "--concurrency", "32", "--isl", "2048", "--no-advice",
                     "--arrivals", arrivals]) == 0
        out = capsys.readouterr().out
        lines = [ln for ln in out.splitlines() if ln.startswith("TTFT")]
        assert [ln.split(")")[0] for ln in lines] == [f"TTFT ({arrivals} arrivals, mean", f"TTFT ({arrivals} arrivals, p99"]
        ttft[arrivals] = [float(ln.split()[-2].replace(",", "")) for ln in lines]
        tpot = [float(ln.split()[-2].replace(",", "")) for ln in out.splitlines() if ln.startswith("TPOT")]
        assert [ln.split(")")[0] for ln in out.splitlines() if ln.startswith("TPOT")] == [
            "TPOT (mean", f"TPOT ({arrivals} arrivals, p99 over requests"]
        # only random arrivals spread the requests' TPOTs (each decodes beside the prompts admitted meanwhile; here
        # 1 % busy with prompts, within the printed 0.01 ms: test_serving checks the spread itself)
        assert tpot[1] >= tpot[0] if arrivals == "poisson" else tpot[1] == tpot[0]
    assert ttft["burst"][0] > 1.25 * ttft["steady"][0]  # 32 prompts of 2048 tokens wait for one another (54 vs 36 ms)
    assert ttft["burst"][1] > ttft["burst"][0]  # the wave's later prompts wait longest
    assert ttft["steady"][1] == ttft["steady"][0]  # every steady request waits alike
    assert ttft["poisson"][0] >= ttft["steady"][0] and ttft["poisson"][1] > ttft["steady"][1]  # prompts queue at random
    assert main(["predict", config, "--arrivals", "bursty"]) == 2
    assert "--arrivals: invalid choice: 'bursty' (choose from" in capsys.readouterr().err


def test_p99_ttft_bound_picks_a_batch_whose_prompt_queue_meets_it(config, capsys):
    base = ["predict", config, "--json", "--no-advice", "--isl", "4096", "--osl", "128", "--arrivals", "poisson"]
    assert main(base) == 0
    free = json.loads(capsys.readouterr().out)
    assert main([*base, "--max-ttft-p99-ms", str(free["ttft_p99_ms"] / 2)]) == 0
    bound = json.loads(capsys.readouterr().out)
    assert bound["ttft_p99_ms"] <= free["ttft_p99_ms"] / 2 and bound["batch"] < free["batch"]
    assert main([*base, "--max-tpot-p99-ms", str(free["tpot_p99_ms"] * 0.9)]) == 0
    bound = json.loads(capsys.readouterr().out)
    assert bound["tpot_p99_ms"] <= free["tpot_p99_ms"] * 0.9 and bound["batch"] < free["batch"]
def test_fp8_scaling_block_adds_quantization_kernels_and_needs_fp8_activations(config, capsys, tmp_path):
    fp8 = ["--hardware", "h100", "--weights", "fp8", "--activations", "fp8", "--concurrency", "1", "--json",
           "--no-advice"]
    tpot = {}
    for scaling in ("tensor", "block"):
        assert main(["predict", config, *fp8, "--fp8-scaling", scaling]) == 0
        d = json.loads(capsys.readouterr().out)
        tpot[scaling] = d["tpot_ms"]
        assert any(o["name"].endswith("_act_quant") for o in d["ops"]) == (scaling == "block")
    assert tpot["block"] > tpot["tensor"]
    for cmd in ("predict", "advise"):
        assert main([cmd, config, "--fp8-scaling", "block"]) == 2  # activations default to nvfp4
        err = capsys.readouterr().err
        assert f"co-design {cmd}: error: --fp8-scaling block" in err and "--activations fp8" in err
    # export writes per-tensor / per-token FP8 recipes: a block-scaled deployment is refused, not mislabelled
    assert main(["export", config, "--weights", "fp8", "--activations", "fp8", "--fp8-scaling", "block",
                 "--out", str(tmp_path / "o")]) == 2
    assert "export with --fp8-scaling tensor" in capsys.readouterr().err


def test_anchor_writes_a_runtime_that_predict_and_advise_read(config, capsys, tmp_path):
    fp8 = ["--hardware", "h200", "--weights", "fp8", "--activations", "fp8", "--concurrency", "1"]
    assert main(["predict", config, *fp8, "--json", "--no-advice"]) == 0
    before = json.loads(capsys.readouterr().out)["tpot_ms"]
    rt = tmp_path / "runtime.json"
    assert main(["anchor", config, *fp8, "--tpot-ms", f"{0.8 * before}", "--out", str(rt)]) == 0
    out = capsys.readouterr().out
    assert f"{1:>11}  {0.8 * before:>16.3f}  {before:>16.3f}  {0.8 * before:>15.3f}" in out  # met exactly
    assert f"--runtime {rt}" in out and f"deployment.runtime_file={rt}" in out
    record = json.loads(rt.read_text())
    (point,) = record["anchor"]["measurements"]
    assert point["measured_tpot_ms"] == pytest.approx(0.8 * before) and record["anchor"]["scale"] < 1
    assert point["predicted_tpot_ms_after"] == pytest.approx(0.8 * before, rel=1e-6)
    assert main(["predict", config, *fp8, "--json", "--no-advice", "--runtime", str(rt)]) == 0
    assert json.loads(capsys.readouterr().out)["tpot_ms"] == pytest.approx(0.8 * before, rel=1e-6)
    assert main(["predict", config, *fp8, "--no-advice", "--runtime", str(rt)]) == 0
    assert "  runtime: kernel_gap_s " in capsys.readouterr().out  # the report says it is not the fitted runtime
    assert main(["predict", config, *fp8, "--no-advice"]) == 0
    assert "runtime:" not in capsys.readouterr().out
    assert main(["advise", config, *fp8, "--json", "--runtime", str(rt)]) == 0
    assert json.loads(capsys.readouterr().out)
    # --json: the record itself
    assert main(["anchor", config, *fp8, "--tpot-ms", f"{1.2 * before}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["anchor"]["scale"] > 1


def test_anchor_fits_a_concurrency_sweep_as_the_library_does(config, capsys):
    from co_design.arch import Architecture
    from co_design.perf import Deployment, Runtime, TPOTMeasurement, anchor_runtime, predict

    fp8 = ["--hardware", "h200", "--weights", "fp8", "--activations", "fp8"]
    arch = Architecture.load(config)
    dep = Deployment(weights="fp8", activations="fp8", concurrency=1)
    # TPOTs of a runtime 0.6x as slow at 1 request and 0.9x at 16: no one factor meets both
    tpot = {c: predict(arch, "h200", dep.replace(concurrency=c)).tpot_s * f * 1e3 for c, f in ((1, 0.6), (16, 0.9))}
    assert main(["anchor", config, *fp8, "--concurrency", "1", "16", "--tpot-ms", *map(str, tpot.values()),
                 "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    _, scale = anchor_runtime([TPOTMeasurement(arch, "h200", dep.replace(concurrency=c), ms / 1e3)
                               for c, ms in tpot.items()], Runtime())
    assert record["anchor"]["scale"] == pytest.approx(scale, rel=1e-9)
    assert [p["concurrency"] for p in record["anchor"]["measurements"]] == [1, 16]
    # least squares of the log error: between the two, each point missed in opposite directions
    low, high = record["anchor"]["measurements"]
    assert low["predicted_tpot_ms_after"] > low["measured_tpot_ms"]
    assert high["predicted_tpot_ms_after"] < high["measured_tpot_ms"]


@pytest.mark.parametrize("flags, fragment", [
    (["--concurrency", "1", "--tpot-ms", "0"], "--tpot-ms must be > 0"),
    (["--concurrency", "1", "4", "--tpot-ms", "5"], "--concurrency has 2 values and --tpot-ms 1"),
    (["--tpot-ms", "5"], "--concurrency is required"),
    (["--concurrency", "1", "--tpot-ms", "1e-4"], "with no runtime overheads at all"),
    (["--concurrency", "1", "--tpot-ms", "5", "--runtime", "missing.json"], "cannot read runtime file 'missing.json'"),
])
def test_anchor_errors_exit_2_with_one_line(config, capsys, flags, fragment):
    assert main(["anchor", config, "--hardware", "b200", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("co-design anchor: error: ") and fragment in err and err.count("\n") == 1


def test_the_shipped_tensorrt_llm_hopper_runtime_file_slows_tp_split_block_fp8_experts_only(capsys, tmp_path):
    """recipes/runtimes/tensorrt_llm_hopper.json (TensorRT-LLM's idle expert tiles under block-scaled FP8): a
    TP8 MoE at one request decodes slower with it and the report names the field; per-tensor FP8 is unchanged."""
    rt = Path(__file__).resolve().parents[1] / "recipes" / "runtimes" / "tensorrt_llm_hopper.json"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({
        "model_type": "deepseek_v3", "hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 16,
        "num_key_value_heads": 16, "intermediate_size": 4096, "moe_intermediate_size": 512, "n_routed_experts": 128,
        "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 1, "vocab_size": 32000,
        "q_lora_rank": 512, "kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64}))

    def tpot(*extra):
        args = ["predict", str(cfg), "--hardware", "h200", "--tp", "8", "--weights", "fp8", "--activations", "fp8",
                "--concurrency", "1", "--json", "--no-advice", *extra]
        assert main(args) == 0
        return json.loads(capsys.readouterr().out)["tpot_ms"]

    block = ("--fp8-scaling", "block")
    assert tpot(*block, "--runtime", str(rt)) > tpot(*block)
    assert tpot("--runtime", str(rt)) == tpot()
    assert main(["predict", str(cfg), "--hardware", "h200", "--tp", "8", "--weights", "fp8", "--activations", "fp8",
                 *block, "--concurrency", "1", "--no-advice", "--runtime", str(rt)]) == 0
    assert "idle_expert_tile_s" in capsys.readouterr().out


def test_activations_follow_the_weights_format_unless_given(config, capsys):
    # `--weights fp8` on an H100 was refused for the default NVFP4 activations it never asked for
    assert main(["predict", config, "--hardware", "h100", "--weights", "fp8", "--concurrency", "8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["deployment"]["weights"], d["deployment"]["activations"]) == ("fp8", "fp8")
    assert main(["predict", config, "--weights", "nvfp4", "--activations", "fp8", "--concurrency", "8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["deployment"]["weights"], d["deployment"]["activations"]) == ("nvfp4", "fp8")
