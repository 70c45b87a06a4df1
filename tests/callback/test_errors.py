"""Bad input to CoDesignCallback fails at construction, naming the argument and the fix."""

import optuna
import pytest

from co_design.arch import Architecture, ArchitectureError
from co_design.callback import CoDesignCallback, CoDesignWarning, MedianStoppingRule
from co_design.perf import SLO, Deployment
from co_design.quant import QuantConfig

ARCH = Architecture(hidden=256, layers=2, heads=4, ffn=512, vocab=1024)


def test_unknown_gpu_lists_known_names():
    with pytest.raises(ValueError, match=r"unknown GPU 'b2OO'.*b200"):
        CoDesignCallback("b2OO")


def test_hardware_of_the_wrong_type():
    with pytest.raises(TypeError, match="hardware must be"):
        CoDesignCallback(200)


@pytest.mark.parametrize("quant, fmt", [("nvfp4", "nvfp4"), ("FP8", "fp8"), ("bf16", "bf16"), (True, "nvfp4"),
                                        (QuantConfig(format="fp8", activations=False), "fp8")])
def test_quant_forms(quant, fmt):
    cb = CoDesignCallback("b200", quant=quant)
    assert cb.quant_config.format == fmt
    assert cb.deployment.weights == fmt  # default deployment serves in the training format


@pytest.mark.parametrize("off", [None, False, "off"])
def test_quant_off_forms(off):
    assert CoDesignCallback("b200", quant=off).quant_config is None


def test_bad_quant():
    with pytest.raises(ValueError, match=r"quant='int4' is not a known format.*nvfp4"):
        CoDesignCallback("b200", quant="int4")
    with pytest.raises(TypeError, match="quant must be"):
        CoDesignCallback("b200", quant=4)


def test_bad_deployment_values():
    with pytest.raises(ValueError, match="Deployment.tp must be >= 1"):
        CoDesignCallback("b200", deployment={"tp": 0})
    with pytest.raises(ValueError, match="deployment: .*unexpected keyword.*'tensor_parallel'"):
        CoDesignCallback("b200", deployment={"tensor_parallel": 2})
    with pytest.raises(TypeError, match="deployment must be"):
        CoDesignCallback("b200", deployment="tp2")
    with pytest.raises(ValueError, match=r"deployment.weights='nvfp4' is not supported by h100"):
        CoDesignCallback("h100", deployment=Deployment(weights="nvfp4"))


def test_deployment_that_contradicts_a_given_architecture_fails_now():
    # tp=3 does not divide heads=4: the performance model refuses, at construction (not at fit time), in one
    # line that names the field and the fix (issue 11: it was 569+ characters, mostly the Deployment's repr)
    with pytest.raises(ValueError) as info:
        CoDesignCallback("b200", architecture=ARCH, deployment=Deployment(tp=3, gpus=3))
    msg = str(info.value)
    assert msg == (f"CoDesignCallback: deployment (tp=3) cannot serve {ARCH.name!r} on b200: "
                   f"tp=3 does not divide heads={ARCH.heads}; choose a degree that divides it")
    assert len(msg) < 200 and "\n" not in msg and "Runtime(" not in msg


def test_default_deployment_falls_back_on_gpus_without_the_format():
    with pytest.warns(CoDesignWarning, match="h100 has no nvfp4"):
        cb = CoDesignCallback("h100", quant="nvfp4")
    assert cb.deployment.weights == "fp8"


def test_slo_forms():
    cb = CoDesignCallback("b200", architecture=ARCH, slo={"min_tokens_per_s_per_user": 50.0})
    assert cb.slo == SLO(min_tokens_per_s_per_user=50.0)
    assert cb.prediction.output_tokens_per_s_per_user >= 50.0  # max throughput under the SLO
    assert cb.prediction_metrics()["co_design/meets_slo"] == 1.0
    with pytest.raises(ValueError, match="SLO.max_ttft_s must be > 0"):
        CoDesignCallback("b200", slo={"max_ttft_s": -1})


def test_architecture_forms(tmp_path):
    assert CoDesignCallback("b200", architecture=ARCH.to_dict()).architecture == ARCH
    hf = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 512, "vocab_size": 1024}
    assert CoDesignCallback("b200", architecture=hf).architecture.hidden == 256
    with pytest.raises(ArchitectureError, match="unknown architecture field"):
        CoDesignCallback("b200", architecture={"hiden": 256})
    with pytest.raises(ArchitectureError, match="does not exist"):
        CoDesignCallback("b200", architecture=tmp_path / "missing.yaml")
    with pytest.raises(TypeError, match="architecture must be"):
        CoDesignCallback("b200", architecture=3)


def test_bad_trial_stopping_monitor_mode_interval():
    with pytest.raises(TypeError, match="trial must be an optuna"):
        CoDesignCallback("b200", trial="trial-3")
    with pytest.raises(TypeError, match="stopping must have a decide"):
        CoDesignCallback("b200", stopping="median")
    with pytest.raises(ValueError, match="monitor must be"):
        CoDesignCallback("b200", monitor="")
    with pytest.raises(ValueError, match="mode must be 'min' or 'max'"):
        CoDesignCallback("b200", mode="minimize")
    with pytest.raises(ValueError, match="log_quant_every_n_steps must be an integer >= 0"):
        CoDesignCallback("b200", log_quant_every_n_steps=-5)


def test_fixed_trial_records_but_cannot_stop():
    with pytest.warns(CoDesignWarning, match="stopping rule is off"):
        cb = CoDesignCallback("b200", trial=optuna.trial.FixedTrial({}), stopping=MedianStoppingRule())
    assert cb.stopping is None
