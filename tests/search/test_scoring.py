"""The two operating points of a candidate and what limits them (fast, no training)."""

from __future__ import annotations

import pytest

from co_design import perf
from co_design.arch import Architecture
from search.compose import compose_config as compose_cfg
from search.config import DeploymentConfig, SLOConfig, to_search_config
from search.scoring import definitions, interactive_point, objective_value, score_candidate, throughput_point
from search.space import enumerate_candidates

ARCH = Architecture(hidden=2048, layers=16, heads=16, kv_heads=8, head_dim=128, ffn=8192, vocab=32000)


def _dep(**kw) -> DeploymentConfig:
    kw.setdefault("slo", SLOConfig())
    return DeploymentConfig(**kw)


def test_interactive_point_is_the_fastest_layout_at_the_stated_concurrency():
    dep = _dep(gpus=8, tp=[1, 2, 4, 8])
    ip = interactive_point(ARCH, "b200", dep)
    by_tp = {tp: perf.predict(ARCH, "b200", perf.Deployment(gpus=8, tp=tp, concurrency=1)) for tp in (1, 2, 4, 8)}
    best = max(by_tp.values(), key=lambda p: p.output_tokens_per_s_per_user)
    assert ip.feasible and ip.prediction.batch == 1
    assert ip.prediction.output_tokens_per_s_per_user == pytest.approx(best.output_tokens_per_s_per_user)
    assert ip.deployment.tp == max(by_tp, key=lambda tp: by_tp[tp].output_tokens_per_s_per_user)
    # a higher stated concurrency is slower per user
    busier = interactive_point(ARCH, "b200", _dep(gpus=8, tp=[1, 2, 4, 8], interactive_concurrency=64))
    assert busier.prediction.output_tokens_per_s_per_user < ip.prediction.output_tokens_per_s_per_user


def test_objectives_come_from_their_own_operating_points():
    dep = _dep(slo=SLOConfig(min_tokens_per_s_per_user=50.0))
    s = score_candidate(ARCH, "b200", dep)
    tp, ip = s.throughput.prediction, s.interactive.prediction
    assert objective_value("tokens_per_s_per_gpu", s, None) == tp.output_tokens_per_s_per_gpu
    assert objective_value("tokens_per_s_per_user", s, None) == ip.output_tokens_per_s_per_user
    assert objective_value("tpot_ms", s, None) == pytest.approx(ip.tpot_s * 1e3)
    assert objective_value("ttft_ms", s, None) == pytest.approx(ip.ttft_s * 1e3)
    assert objective_value("loss", s, 2.5) == 2.5
    assert tp.batch > 100 * ip.batch  # two different loads, not one point read twice
    assert tp.output_tokens_per_s_per_user >= 50.0  # the throughput point meets the SLO


def test_interactivity_is_not_throughput_divided_by_a_constant():
    # Over the default space, the two objectives must carry different information: their ratio
    # (tok/s/user / tok/s/GPU) varies across candidates, and their rank orders disagree on many pairs.
    cfg = to_search_config(compose_cfg())
    pairs = []
    for i, (_, _, cand) in enumerate(enumerate_candidates(cfg.space, cfg.deployment)):
        if i % 25:
            continue
        s = score_candidate(cand.arch, "b200", cfg.deployment)
        if s.feasible:
            pairs.append((objective_value("tokens_per_s_per_gpu", s, None), objective_value("tokens_per_s_per_user", s, None)))
    assert len(pairs) >= 20
    ratios = [u / g for g, u in pairs]
    assert max(ratios) / min(ratios) > 1.5
    discordant = sum(1 for a in pairs for b in pairs if a[0] > b[0] and a[1] < b[1])
    assert discordant >= 0.1 * len(pairs) * (len(pairs) - 1) / 2  # a trade-off, not one ranking


@pytest.mark.parametrize(
    "kw, limit",
    [
        (dict(), "max_batch=2048 (runtime)"),  # a 1B model on a B200 would batch beyond the runtime's cap
        (dict(max_batch=64), "max_batch=64 (runtime)"),
        (dict(isl=32768), "KV cache (HBM)"),  # long prompts: the cache holds ~150 requests
        (dict(max_num_tokens=2048), "max_num_tokens=2048 (runtime)"),
        (dict(slo=SLOConfig(min_tokens_per_s_per_user=50.0)), "SLO"),
        (dict(concurrency=64), "concurrency=64 (fixed)"),
    ],
)
def test_what_limits_the_throughput_point_is_named(kw, limit):
    s = score_candidate(ARCH, "b200", _dep(**kw))
    assert s.limits == [limit]


def test_a_larger_runtime_cap_lifts_a_capped_candidate():
    capped = throughput_point(ARCH, "b200", _dep(max_batch=64)).prediction
    free = throughput_point(ARCH, "b200", _dep(max_batch=4096)).prediction
    assert capped.batch == 64 and free.batch > 64
    assert free.output_tokens_per_s_per_gpu > capped.output_tokens_per_s_per_gpu


def test_definitions_name_the_slo_the_concurrency_and_the_runtime_limits():
    text = "\n".join(definitions(_dep(slo=SLOConfig(min_tokens_per_s_per_user=50.0), interactive_concurrency=4)))
    assert ">= 50 tok/s/user" in text and "4 request(s) in flight" in text
    assert "max_batch=2048" in text and "max_num_tokens=8192" in text
    assert "runtime overheads: the performance model's fitted defaults" in text
    assert "runtime overheads: from rt.json" in "\n".join(definitions(_dep(runtime_file="rt.json")))


def test_block_fp8_scaling_reaches_the_model_only_with_fp8_activations():
    from search.scoring import perf_deployment

    dep = _dep(weights="fp8", activations="fp8", fp8_scaling="block")
    combo = dict(tp=1, ep=1, pp=1, attention_dp=False, helix=1)
    assert perf_deployment(dep, combo, None, 1).fp8_scaling == "block"
    # a searched precision other than fp8 drops the FP8-only setting instead of failing the combination
    assert perf_deployment(dep, combo, "nvfp4", 1).fp8_scaling == "tensor"
    block = perf.predict(ARCH, "h100", perf_deployment(dep, combo, None, 1))
    tensor = perf.predict(ARCH, "h100", perf_deployment(_dep(weights="fp8", activations="fp8"), combo, None, 1))
    assert block.tpot_s > tensor.tpot_s


def test_burst_arrivals_reach_the_model_and_the_definitions():
    from search.scoring import perf_deployment

    combo = dict(tp=1, ep=1, pp=1, attention_dp=False, helix=1)
    steady, burst = (perf.predict(ARCH, "b200", perf_deployment(_dep(arrivals=a), combo, None, 64))
                     for a in ("steady", "burst"))
    assert burst.deployment.arrivals == "burst" and burst.ttft_s > steady.ttft_s and burst.tpot_s == steady.tpot_s
    assert "TTFT with steady arrivals: requests spread in time" in "\n".join(definitions(_dep()))
    assert "TTFT with burst arrivals: the requests in flight arrive together" in "\n".join(
        definitions(_dep(arrivals="burst")))


def test_a_p99_ttft_bound_with_poisson_arrivals_caps_the_throughput_point():
    free = throughput_point(ARCH, "b200", _dep(arrivals="poisson", isl=8192, osl=128))
    bound = _dep(arrivals="poisson", isl=8192, osl=128,
                 slo=SLOConfig(max_ttft_p99_s=free.prediction.ttft_p99_s / 2))
    capped = throughput_point(ARCH, "b200", bound)
    assert capped.feasible and capped.prediction.ttft_p99_s <= free.prediction.ttft_p99_s / 2
    assert capped.prediction.output_tokens_per_s_per_gpu < free.prediction.output_tokens_per_s_per_gpu
    text = "\n".join(definitions(bound))
    assert f"p99 TTFT <= {free.prediction.ttft_p99_s / 2 * 1e3:g} ms (poisson arrivals)" in text
    assert "TTFT with poisson arrivals: requests arrive at random" in text


def test_a_p99_tpot_bound_with_poisson_arrivals_caps_the_throughput_point():
    free = throughput_point(ARCH, "b200", _dep(arrivals="poisson", isl=2048, osl=256))
    assert free.prediction.tpot_p99_s > free.prediction.tpot_s
    bound = _dep(arrivals="poisson", isl=2048, osl=256, slo=SLOConfig(max_tpot_p99_s=free.prediction.tpot_p99_s * 0.8))
    capped = throughput_point(ARCH, "b200", bound)
    assert capped.feasible and capped.prediction.tpot_p99_s <= free.prediction.tpot_p99_s * 0.8
    assert capped.prediction.output_tokens_per_s_per_gpu < free.prediction.output_tokens_per_s_per_gpu
    assert f"p99 TPOT <= {free.prediction.tpot_p99_s * 0.8 * 1e3:g} ms (poisson arrivals)" in "\n".join(
        definitions(bound))
def test_a_runtime_file_reaches_both_operating_points_and_the_study_settings(tmp_path):
    import json

    from co_design.perf.anchor import scaled_runtime
    from search.config import study_settings

    slow = tmp_path / "runtime.json"
    slow.write_text(json.dumps({"runtime": scaled_runtime(perf.Runtime(), 3.0).to_dict()}))
    default, anchored = _dep(gpus=8, tp=[1, 8]), _dep(gpus=8, tp=[1, 8], runtime_file=str(slow), max_batch=512)
    ip0, ip1 = interactive_point(ARCH, "b200", default), interactive_point(ARCH, "b200", anchored)
    assert ip1.prediction.tpot_s > ip0.prediction.tpot_s
    assert ip1.deployment.runtime.iteration_overhead_s == pytest.approx(3 * perf.Runtime().iteration_overhead_s)
    tp = throughput_point(ARCH, "b200", anchored)
    assert tp.deployment.runtime.kernel_gap_s == pytest.approx(3 * perf.Runtime().kernel_gap_s)
    assert tp.deployment.runtime.max_batch == 512  # the deployment's runtime limits still apply
    cfg = to_search_config(compose_cfg(f"deployment.runtime_file={slow}"))
    settings = study_settings(cfg)
    assert settings["perf_runtime.iteration_overhead_s"] == pytest.approx(3 * perf.Runtime().iteration_overhead_s)
    assert settings["perf_runtime.iteration_overhead_s"] != study_settings(to_search_config(compose_cfg()))[
        "perf_runtime.iteration_overhead_s"]
    # the file's contents are the setting, not its path: a copy elsewhere resumes the same study
    copy = tmp_path / "elsewhere.json"
    copy.write_text(slow.read_text())
    assert study_settings(to_search_config(compose_cfg(f"deployment.runtime_file={copy}"))) == settings
