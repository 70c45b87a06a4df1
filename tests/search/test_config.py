"""Config groups, recipes and validation of the search job (fast: no trial runs)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ValidationError

from search.app import run
from search.config import ConfigError, SearchConfig, study_settings, to_search_config, validate
from search.paths import CONF_DIR, RECIPES_DIR, REPO_ROOT

from search.compose import compose_config as compose_cfg


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def test_default_config_composes_and_validates():
    cfg = validate(to_search_config(compose_cfg()))
    assert isinstance(cfg, SearchConfig)
    assert cfg.hardware.gpu == "b200" and cfg.space.name == "dense_1b" and cfg.sampler.name == "tpe"
    assert cfg.objectives.names == ["loss", "tokens_per_s_per_gpu", "tokens_per_s_per_user"]
    assert cfg.proxy.data.source == "stdlib" and cfg.tracking.backend == "wandb" and cfg.storage is None


@pytest.mark.parametrize(
    "group",
    ["hardware", "deployment", "space", "objectives", "sampler", "tracking", "proxy"],
)
def test_every_group_option_composes_and_validates(group, tmp_path):
    # options that need a value of the user's: given one here, so every option is composed and validated
    tokens = tmp_path / "train.bin"
    tokens.write_bytes(bytes(range(256)) * 8)
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text("base: b200\nname: my-b200\n")
    extra = {
        "space": {"moe": ["deployment=gb200_nvl72_dep"]},
        "deployment": {"gb200_nvl72_dep": ["space=moe"]},
        "hardware": {"custom": [f"hardware.file={gpu}"]},
        "proxy": {"tokens": [f"proxy.data.path={tokens}"],
                  "datamodule": ["+proxy.data.datamodule._target_=search.data.ArrayDataModule"]},
    }
    options = _options(group)
    assert options
    for option in options:
        cfg = compose_cfg(f"{group}={option}", *extra.get(group, {}).get(option, []))
        validate(to_search_config(cfg))


def test_required_values_of_custom_groups_are_demanded():
    with pytest.raises(ConfigError, match="hardware.file is required"):
        validate(to_search_config(compose_cfg("hardware=custom")))


@pytest.mark.parametrize("recipe", sorted(p.stem for p in (RECIPES_DIR / "experiment").glob("*.yaml")))
def test_recipes_compose_and_validate(recipe):
    cfg = validate(to_search_config(compose_cfg(f"experiment={recipe}")))
    assert cfg.recipe == recipe
    assert cfg.study_name != "co-design"  # each recipe is its own study (and run dir)


def test_recipes_cover_the_issue():
    names = {p.stem for p in (RECIPES_DIR / "experiment").glob("*.yaml")}
    assert {"dense_1b_b200_fp8_vs_nvfp4", "moe_gb200_nvl72_ep", "long_context_helix"} <= names
    dense = to_search_config(compose_cfg("experiment=dense_1b_b200_fp8_vs_nvfp4"))
    assert sorted(dense.space.precisions) == ["fp8", "nvfp4"] and dense.hardware.gpu == "b200"
    moe = to_search_config(compose_cfg("experiment=moe_gb200_nvl72_ep"))
    assert moe.hardware.gpu == "gb200" and max(moe.deployment.ep) > 1 and True in moe.deployment.attention_dp
    helix = to_search_config(compose_cfg("experiment=long_context_helix"))
    assert helix.deployment.isl >= 128 * 1024 and max(helix.deployment.helix) > 1


def test_unknown_sampler_names_the_key_and_the_known_ones():
    cfg = to_search_config(compose_cfg("sampler.name=nsga4"))
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    msg = str(e.value)
    assert "unknown sampler 'nsga4'" in msg and "tpe, nsga2, nsga3, gp, random" in msg


def test_every_problem_is_listed_with_its_key_and_fix():
    cfg = to_search_config(
        compose_cfg(
            "hardware.gpu=b2OO",
            "space.hidden=[100,512]",
            "proxy.budget.tokens=1000",
            "objectives.names=[loss]",
            "proxy.reduction.width=1.5",
            "deployment.ep=[2]",
            "deployment.fp8_scaling=row",
            "deployment.arrivals=bursty",
            "deployment.runtime_file=no-such-runtime.json",
        )
    )
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    problems = e.value.problems
    text = "\n".join(problems)
    assert "unknown hardware.gpu 'b2OO'; known: " in text and "b200" in text
    assert "space.hidden=[100, 512]: 100 is not a multiple of space.alignment=256" in text
    assert "proxy.budget: set exactly one of tokens or steps" in text
    assert "choose 2 or 3 objectives" in text
    assert "proxy.reduction.width=1.5: must be in (0, 1]" in text
    assert "deployment.ep=[2] needs an MoE space" in text
    assert "unknown deployment.fp8_scaling 'row'; known: tensor, block" in text
    assert "unknown deployment.arrivals 'bursty'; known: steady, burst, poisson" in text
    assert ("deployment.runtime_file: cannot read runtime file 'no-such-runtime.json': No such file or directory; "
            "give a runtime JSON (co-design anchor --out FILE) or null") in text
    assert len(problems) >= 9


def test_wrong_types_fail_at_compose_time():
    with pytest.raises((ConfigCompositionException, ValidationError)):
        compose_cfg("n_trials=many")
    with pytest.raises(ConfigCompositionException):
        compose_cfg("space.hiden=[128,256]")  # a misspelled key is not accepted silently
    with pytest.raises(ConfigError, match="unknown key 'space.hiden'; did you mean 'space.hidden'"):
        to_search_config(compose_cfg("+space.hiden=[128,256]"))


def test_invalid_config_runs_nothing(tmp_path):
    cfg = compose_cfg("sampler.name=nsga4", "tracking=off")
    with pytest.raises(ConfigError):
        run(cfg, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # no storage, no trial


def test_unsupported_precision_for_the_gpu_is_refused_before_trials(tmp_path):
    cfg = compose_cfg("hardware=h100", "space.precisions=[fp8,nvfp4]", "tracking=off", "deployment.weights=fp8",
                      "deployment.activations=fp8")
    with pytest.raises(ConfigError, match="nvfp4"):
        run(cfg, run_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "study.journal").exists()


def test_cli_reports_config_errors_with_exit_status_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "search", "sampler.name=nsga4", "tracking=off", f"hydra.run.dir={tmp_path}/run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "unknown sampler 'nsga4'; known: tpe, nsga2, nsga3, gp, random" in proc.stderr


def test_wandb_mode_follows_the_api_key(monkeypatch, tmp_path):
    from search.tracking import NullTracker, make_tracker, resolve_wandb_mode

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert resolve_wandb_mode("auto") == "offline"
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password abc\n")
    (tmp_path / "netrc").chmod(0o600)
    assert resolve_wandb_mode("auto") == "online"
    (tmp_path / "netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_wandb_mode("auto") == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")  # an explicit environment choice wins over auto
    assert resolve_wandb_mode("auto") == "offline"
    assert resolve_wandb_mode("disabled") == "disabled"
    assert isinstance(make_tracker(to_search_config(compose_cfg("tracking=off")), str(tmp_path)), NullTracker)


def test_bad_override_value_is_a_config_error(tmp_path):
    cfg = compose_cfg("+hardware.overrides.memory_efficiency=1.5", "tracking=off")
    with pytest.raises(ConfigError, match="memory_efficiency"):
        run(cfg, run_dir=tmp_path / "run")
    with pytest.raises(ConfigError, match="unknown GPU field"):
        validate(to_search_config(compose_cfg("+hardware.overrides.hbm_speed=1")))


def test_experts_on_a_dense_space_make_it_moe_with_the_moe_fields_defaults():
    # space.shared_experts defaults to [0]: one value fixes a range, so turning a dense space into an MoE space
    # needs no other key (before: "space.shared_experts=[0]: give an inclusive range", a key the user never set)
    from search.space import enumerate_candidates

    cfg = validate(to_search_config(compose_cfg("space.experts=[4,8]")))
    archs = [cand.arch for _, _, cand in enumerate_candidates(cfg.space, cfg.deployment)]
    assert {a.experts for a in archs} == {4, 8} and {a.shared_experts for a in archs} == {0}
    assert {a.experts_per_token for a in archs} == {1, 2}


@pytest.mark.parametrize("override, measure, expected", [
    ("space.hidden=[256]", lambda a: a.hidden, {256}),
    ("space.layers=[4]", lambda a: a.layers, {4}),
    ("space.ffn_multiplier=[3.0]", lambda a: a.ffn / a.hidden, {3.0}),  # 3x every hidden size
])
def test_one_value_fixes_a_range(override, measure, expected):
    from search.space import enumerate_candidates

    cfg = validate(to_search_config(compose_cfg(override)))
    assert {measure(cand.arch) for _, _, cand in enumerate_candidates(cfg.space, cfg.deployment)} == expected


def test_three_values_are_not_a_range():
    with pytest.raises(ConfigError, match=r"space\.layers=\[2, 4, 8\]: give an inclusive range \[low, high\], or one "
                                          r"value \[v\] to fix it"):
        validate(to_search_config(compose_cfg("space.layers=[2,4,8]")))


def test_activations_follow_the_weights_unless_set():
    # `hardware=h100 deployment.weights=fp8` was refused for the NVFP4 activations it never asked for, and on
    # Blackwell it scored FP8 weights under NVFP4 activations without a word
    h100 = to_search_config(compose_cfg("hardware=h100", "deployment.weights=fp8", "tracking=off"))
    validate(h100)
    assert (h100.deployment.weights, h100.deployment.activations) == ("fp8", "fp8")
    assert study_settings(h100)["deployment.activations"] == "fp8"
    mixed = to_search_config(compose_cfg("deployment.weights=nvfp4", "deployment.activations=fp8", "tracking=off"))
    assert mixed.deployment.activations == "fp8"
    # the default records what studies created before it recorded, so they resume
    assert study_settings(to_search_config(compose_cfg()))["deployment.activations"] == "nvfp4"


def test_an_unknown_weight_format_is_one_problem():
    # activations follow the weights when unset: "unknown deployment.activations 'int4'" beside the weights' own
    # problem named a key the user never set
    with pytest.raises(ConfigError) as e:
        validate(to_search_config(compose_cfg("deployment.weights=int4", "tracking=off")))
    assert e.value.problems == ["unknown deployment.weights 'int4'; known: nvfp4, fp8, bf16"]
    with pytest.raises(ConfigError) as e:  # set, activations are judged on their own
        validate(to_search_config(compose_cfg("deployment.weights=fp8", "deployment.activations=int8", "tracking=off")))
    assert e.value.problems == ["unknown deployment.activations 'int8'; known: nvfp4, fp8, bf16"]
