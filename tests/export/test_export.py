"""`co_design.export.export` and the serving options: the files, the round trip through config.json, a trial of a
search run directory."""

import json

import optuna
import pytest
import yaml

from co_design import Architecture
from co_design.export import export, serving_options, trial_architecture, trial_standing
from co_design.perf import Deployment, max_throughput, predict

ARCH = Architecture(hidden=2048, layers=16, heads=16, kv_heads=4, ffn=8192, vocab=32000, name="dense2b")
MOE = Architecture(hidden=2048, layers=8, heads=16, kv_heads=4, head_dim=128, ffn=6144, expert_ffn=768, experts=64,
                   experts_per_token=8, vocab=32000, name="moe")


def test_export_writes_the_files_and_round_trips(tmp_path):
    dep = Deployment(tp=2)
    files = export(ARCH, tmp_path, gpu="b200", deployment=dep)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in files.values()) == [
        "arch.yaml", "config.json", "quantization/llmcompressor_recipe.yaml", "quantization/modelopt_quant_cfg.yaml",
        "quantization/plan.json", "serving/extra_llm_api_options.yaml", "serving/predicted.json"]
    # both shape files load back as the same Architecture, and predict the same
    for name in ("config.json", "arch.yaml"):
        back = Architecture.load(tmp_path / name)
        assert back == ARCH
        assert max_throughput(back, "b200", dep).output_tokens_per_s_per_gpu == \
            max_throughput(ARCH, "b200", dep).output_tokens_per_s_per_gpu
    best = max_throughput(ARCH, "b200", dep)
    figures = json.loads((tmp_path / "serving/predicted.json").read_text())
    assert figures["concurrency"] == best.batch
    assert figures["output_tokens_per_s_per_gpu"] == best.output_tokens_per_s_per_gpu
    assert figures["tpot_ms"] == best.tpot_s * 1e3 and figures["layout"] == "TP2"
    opts = yaml.safe_load((tmp_path / "serving/extra_llm_api_options.yaml").read_text())
    assert opts["max_batch_size"] == best.batch and opts["kv_cache_config"]["dtype"] == "fp8"
    assert opts["enable_attention_dp"] is False and opts["max_num_tokens"] == 8192
    header = (tmp_path / "serving/extra_llm_api_options.yaml").read_text()
    assert "--tp_size 2 --ep_size 1 --pp_size 1" in header and "https://nvidia.github.io/TensorRT-LLM/" in header


def test_attention_dp_max_batch_is_per_rank():
    # with attention DP each of the tp ranks schedules its own requests: max_batch_size per rank
    dep = Deployment(gpus=16, tp=8, ep=8, attention_dp=True, concurrency=1024)
    p = predict(MOE, "b200", dep)
    opts = serving_options(MOE, p)
    assert p.batch == 1024 and opts["max_batch_size"] == 1024 // 16  # 2 replicas x 8 attention ranks
    assert opts["enable_attention_dp"] is True


def test_bf16_export_skips_the_recipes(tmp_path):
    files = export(ARCH, tmp_path, gpu="h200", deployment=Deployment(weights="bf16", activations="bf16"))
    assert "modelopt" not in files and "config" in files


def test_trial_from_pareto_json(tmp_path):
    (tmp_path / "pareto.json").write_text(json.dumps([{"trial": 3, "arch": ARCH.to_dict()}]))
    assert trial_architecture(tmp_path, 3) == ARCH
    with pytest.raises(ValueError, match="trial 4"):
        trial_architecture(tmp_path, 4)


def test_trial_from_optuna_storage(tmp_path):
    storage = f"sqlite:///{tmp_path}/study.db"
    study = optuna.create_study(study_name="s", storage=storage)
    for arch in (ARCH, MOE):
        t = study.ask()
        t.set_user_attr("arch", arch.to_dict())
        study.tell(t, 1.0)
    (tmp_path / "summary.json").write_text(json.dumps({"study_name": "s", "storage": storage}))
    (tmp_path / "trials.csv").write_text("trial,state\n0,COMPLETE\n1,COMPLETE\n")  # rows without an arch column
    assert trial_architecture(tmp_path, 1) == MOE
    with pytest.raises(ValueError, match="no trial 7"):
        trial_architecture(tmp_path, 7)


def test_export_of_a_trial_off_the_front_says_so(tmp_path, capsys):
    # co-design export --trial N of a pruned, failed or dominated trial exports the shape and says on stderr what
    # it lacks; a front trial exports without a note
    import csv

    from co_design.cli import main

    rows = [("0", "COMPLETE", "True", ""), ("1", "COMPLETE", "False", ""),
            ("2", "PRUNED", "False", "stopped early at step 50 (dominated)"), ("3", "FAIL", "False", "")]
    with open(tmp_path / "trials.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trial", "state", "pareto", "reason", "arch"])
        for r in rows:
            w.writerow([*r, json.dumps(ARCH.to_dict())])
    assert trial_standing(tmp_path, 0) is None
    assert "not on the Pareto front" in trial_standing(tmp_path, 1)
    assert trial_standing(tmp_path, 2).startswith("trial 2 ended PRUNED: stopped early at step 50 (dominated);")
    assert trial_standing(tmp_path, 3).startswith("trial 3 ended FAIL;")
    assert trial_standing(tmp_path, 9) is None  # no row: nothing to say
    for trial, note in ((0, None), (2, "trial 2 ended PRUNED")):
        assert main(["export", "--study-dir", str(tmp_path), "--trial", str(trial), "--hardware", "b200",
                     "--out", str(tmp_path / f"out{trial}"), "--json"]) == 0
        out, err = capsys.readouterr()
        json.loads(out)  # stdout stays JSON
        assert (note in err) if note else "note:" not in err


@pytest.mark.slow
def test_a_search_trial_is_exported_as_the_search_served_it(tmp_path):
    # python -m search, then co-design export --study-dir --trial: the same shape, GPU, parallelism and batch, so
    # the predicted figures are the trial's own (here on an 8-GPU H100 node under an SLO, not the CLI's defaults)
    from search.app import run
    from search.compose import compose_config

    from co_design.cli import main

    res = run(compose_config("hardware=h100", "deployment=node8", "space=dense_tiny", "objectives=perf_only",
                             "space.hidden=[512,512]", "space.layers=[4,4]", "deployment.weights=fp8",
                             "deployment.activations=fp8", "tracking=off", "plots=false", "quiet=true"),
              run_dir=tmp_path / "run")
    row = res.summary["pareto"][0]
    out = tmp_path / "export"
    assert main(["export", "--study-dir", str(tmp_path / "run"), "--trial", str(row["trial"]), "--out", str(out)]) == 0
    predicted = json.loads((out / "serving" / "predicted.json").read_text())
    assert predicted["gpu"] == "h100" and predicted["layout"] == row["deployment"]
    assert predicted["concurrency"] == row["batch"]
    assert predicted["output_tokens_per_s_per_gpu"] == pytest.approx(row["tokens_per_s_per_gpu"], rel=1e-9)
    assert Architecture.load(out / "config.json").to_dict() | {"name": ""} == row["arch"] | {"name": ""}
