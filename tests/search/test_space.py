"""Search space, proxy reduction, operating point and hypervolume (fast, no training)."""

from __future__ import annotations

import itertools
import random
import warnings

import optuna
import pytest

from co_design.arch import Architecture
from search.config import DeploymentConfig, ReductionConfig, SpaceConfig, to_search_config
from search.scoring import throughput_point
from search.proxy import reduce_architecture
from search.results import hypervolume
from search.space import ffn_units, hidden_step, parallel_choices, suggest_candidate

from search.compose import compose_config as compose_cfg

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _candidates(space, deployment, n=60, seed=0):
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=optuna.samplers.RandomSampler(seed=seed))
    out = []
    for _ in range(n):
        t = study.ask()
        out.append(suggest_candidate(t, space, deployment))
        study.tell(t, state=optuna.trial.TrialState.PRUNED)
    return out


@pytest.mark.parametrize("space_name,deployment_name", [
    ("dense_tiny", "default"), ("moe_tiny", "default"), ("dense", "node8"), ("moe", "gb200_nvl72_dep"),
])
def test_candidates_are_aligned_and_valid(space_name, deployment_name):
    cfg = to_search_config(compose_cfg(f"space={space_name}", f"deployment={deployment_name}"))
    space, dep = cfg.space, cfg.deployment
    ffn_unit, expert_unit = ffn_units(space, dep)
    max_tp = max(dep.tp)
    assert ffn_unit == space.alignment * max_tp
    for cand in _candidates(space, dep):
        a = cand.arch
        assert a.hidden % space.alignment == 0 and space.hidden[0] <= a.hidden <= space.hidden[1]
        assert a.heads % space.heads_multiple == 0
        assert a.heads * a.head_dim == a.hidden and a.head_dim in space.head_dim
        assert a.heads % a.kv_heads == 0 and a.kv_heads <= max(space.kv_heads)
        assert a.ffn % ffn_unit == 0 and (a.ffn // max_tp) % space.alignment == 0  # per-GPU shard aligned
        assert space.layers[0] <= a.layers <= space.layers[1]
        if space.experts:
            assert a.experts in space.experts and 1 <= a.experts_per_token <= a.experts
            assert a.expert_ffn % expert_unit == 0 and a.dense_layers < a.layers
            for c in parallel_choices(dep):
                assert (a.expert_ffn // max(1, c["tp"] // c["ep"])) % space.alignment == 0
        else:
            assert not a.is_moe


def test_kv_heads_asked_above_the_heads_become_a_divisor():
    space = SpaceConfig(hidden=[384, 384], layers=[2, 2], head_dim=[64], kv_heads=[4], ffn_multiplier=[2.0, 2.0])
    cand = suggest_candidate(optuna.trial.FixedTrial({"hidden": 384, "layers": 2, "head_dim": 64, "kv_heads": 4}),
                             space, DeploymentConfig())
    assert cand.arch.heads == 6 and cand.arch.kv_heads == 3  # largest divisor of 6 not above 4


def test_precision_is_searched_when_listed():
    space = SpaceConfig(precisions=["fp8", "nvfp4"])
    seen = {c.precision for c in _candidates(space, DeploymentConfig(), n=30)}
    assert seen == {"fp8", "nvfp4"}


def test_reduction_keeps_the_shape_family():
    full = Architecture(hidden=2048, layers=16, heads=16, kv_heads=4, head_dim=128, ffn=8192, vocab=128256)
    r = reduce_architecture(full, ReductionConfig(width=0.25, depth=0.5), vocab=256)
    assert (r.heads, r.kv_heads, r.head_dim, r.hidden, r.layers, r.vocab) == (4, 1, 128, 512, 8, 256)
    assert r.ffn == 2048  # same FFN/hidden ratio
    assert reduce_architecture(full, ReductionConfig(), vocab=256).replace(vocab=128256, name=full.name) == full
    moe = Architecture(hidden=1024, layers=8, heads=8, kv_heads=2, head_dim=128, ffn=4096, vocab=32000,
                       experts=64, experts_per_token=8, shared_experts=1, expert_ffn=512, dense_layers=1)
    rm = reduce_architecture(moe, ReductionConfig(width=0.5, depth=0.25, experts=0.0625), vocab=256)
    assert rm.experts == 9 and rm.experts_per_token == 8  # at least top-k + 1 experts
    assert rm.layers == 2 and rm.dense_layers == 0 and rm.moe_layers == 2 and rm.expert_ffn == 256


def test_rounding_is_half_up():
    a = Architecture(hidden=256, layers=5, heads=4, head_dim=64, ffn=512, vocab=1000)
    assert reduce_architecture(a, ReductionConfig(depth=0.5), vocab=256).layers == 3  # 2.5 -> 3, not 2


def test_throughput_point_picks_the_best_valid_parallelism():
    gpu = "b200"
    arch = Architecture(hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128, ffn=14336, vocab=128256)
    dep = DeploymentConfig(gpus=8, tp=[1, 2, 4, 8, 3])  # tp=3 divides neither the node nor the heads
    op = throughput_point(arch, gpu, dep)
    assert op.feasible and op.violations["parallelism"] == 0 and op.violations["memory"] <= 0
    assert any("tp=3" in r for r in op.reasons)
    from co_design import perf

    best = max(
        perf.max_throughput(arch, gpu, perf.Deployment(gpus=8, tp=tp)).output_tokens_per_s_per_gpu for tp in (1, 2, 4, 8)
    )
    assert op.prediction.output_tokens_per_s_per_gpu == pytest.approx(best)


def test_throughput_point_reports_memory_and_slo_violations():
    big = Architecture(hidden=8192, layers=80, heads=64, kv_heads=8, head_dim=128, ffn=28672, vocab=128256)
    op = throughput_point(big, "h100", DeploymentConfig(weights="bf16", activations="bf16"))
    assert not op.feasible and op.violations["memory"] > 0 and any("does not fit" in r for r in op.reasons)
    small = Architecture(hidden=1024, layers=8, heads=8, head_dim=128, ffn=4096, vocab=32000)
    dep = DeploymentConfig()
    dep.slo.min_tokens_per_s_per_user = 1e9  # unreachable
    op = throughput_point(small, "b200", dep)
    assert not op.feasible and op.violations["slo"] > 0 and any("SLO" in r for r in op.reasons)


def test_hypervolume_matches_optuna():
    from optuna._hypervolume import compute_hypervolume  # private, used only as the test's oracle

    rng = random.Random(0)
    for dims in (2, 3):
        for _ in range(5):
            pts = [[rng.random() for _ in range(dims)] for _ in range(12)]
            ref = [1.1] * dims
            import numpy as np

            expected = compute_hypervolume(np.array(pts), np.array(ref))
            assert hypervolume(pts, ref, ["minimize"] * dims) == pytest.approx(expected)
    # maximised objectives are mirrored: one point (2, 3) against ref (0, 0) -> a 2 x 3 box
    assert hypervolume([[2.0, 3.0]], [0.0, 0.0], ["maximize", "maximize"]) == pytest.approx(6.0)
    assert hypervolume([[1.0, 3.0]], [2.0, 0.0], ["minimize", "maximize"]) == pytest.approx(3.0)


def test_parallel_choices_are_the_cartesian_product():
    dep = DeploymentConfig(tp=[1, 2], ep=[1], pp=[1], attention_dp=[False, True], helix=[1])
    combos = list(parallel_choices(dep))
    assert len(combos) == 4 and {(c["tp"], c["attention_dp"]) for c in combos} == set(itertools.product([1, 2], [False, True]))


def test_early_stopping_compares_only_with_trials_at_least_as_fast():
    from co_design.callback import MedianStoppingRule
    from search.objective import DominatedStoppingRule, _dominating_peers

    study = optuna.create_study(directions=["minimize", "maximize"])
    # (tok/s/GPU, loss curve): two faster-and-better peers, one slower peer with a great loss
    for tps, curve in ((200.0, {10: 2.0}), (150.0, {10: 2.1}), (50.0, {10: 1.0})):
        study.add_trial(optuna.trial.create_trial(
            values=[curve[10], tps], user_attrs={"perf_objectives": {"tokens_per_s_per_gpu": tps},
                                                 "intermediate_values": {str(k): v for k, v in curve.items()}}))
    peers = _dominating_peers(study, {"tokens_per_s_per_gpu": 100.0}, number=99)
    assert sorted(p[10] for p in peers) == [2.0, 2.1]  # the slower trial is not a peer
    rule = DominatedStoppingRule(peers=peers, inner=MedianStoppingRule(min_completed_trials=2))
    assert rule.decide(10, 2.5, [], validations=1, minimize=True).stop  # worse than faster peers: dominated
    assert not rule.decide(10, 1.5, [], validations=1, minimize=True).stop
    # a loss-only median over all trials (1.0, 2.0, 2.1 -> 2.0) would also stop 2.05; this rule does not
    # stop a run that beats the median of the faster trials
    assert not rule.decide(10, 2.04, [], validations=1, minimize=True).stop


def test_hardware_overrides_reach_the_performance_model():
    from search.checks import resolve_gpu as _resolve_gpu

    cfg = to_search_config(compose_cfg("+hardware.overrides.hbm_bytes_per_s=1.0e12",
                                       "+hardware.overrides.peak_flops_per_s.fp8=1.0e15"))
    gpu = _resolve_gpu(cfg)
    assert gpu.hbm_bytes_per_s == 1.0e12 and gpu.peak_flops_per_s["fp8"] == 1.0e15
    assert gpu.peak_flops_per_s["nvfp4"] > 0  # other precisions kept
    arch = Architecture(hidden=2048, layers=16, heads=16, kv_heads=4, head_dim=128, ffn=8192, vocab=128256)
    slow = throughput_point(arch, gpu, DeploymentConfig())
    fast = throughput_point(arch, "b200", DeploymentConfig())
    assert slow.prediction.output_tokens_per_s_per_gpu < fast.prediction.output_tokens_per_s_per_gpu


def test_heads_multiple_sets_the_hidden_step():
    space = SpaceConfig(alignment=256, head_dim=[64, 128], heads_multiple=8, hidden=[2048, 4096])
    assert hidden_step(space) == 1024
    assert {c.arch.hidden for c in _candidates(space, DeploymentConfig(), n=40)} <= {2048, 3072, 4096}
    cfg = to_search_config(compose_cfg("space=moe", "deployment=gb200_nvl72_dep", "space.hidden=[2560,7168]"))
    from search.config import ConfigError, validate

    with pytest.raises(ConfigError, match="2560 is not a multiple of the hidden step 1024"):
        validate(cfg)


@pytest.mark.parametrize("space_name, proxy", [("dense_tiny", "tiny"), ("moe_tiny", "tiny"), ("dense_1b", "cpu"),
                                               ("dense_tiny", "cpu"), ("moe_tiny", "cpu")])
def test_proxies_are_whole_nvfp4_blocks(space_name, proxy):
    cfg = to_search_config(compose_cfg(f"space={space_name}", f"proxy={proxy}"))
    import torch

    from co_design.model import Transformer
    from co_design.quant import QuantConfig, quantize_model

    for cand in _candidates(cfg.space, cfg.deployment, n=40):
        r = reduce_architecture(cand.arch, cfg.proxy.reduction, vocab=256)
        dims = [r.hidden, r.ffn, r.heads * r.head_dim]  # what the proxy's Linear layers read (K)
        if r.is_moe:
            dims += [r.expert_ffn, r.shared_expert_ffn]
        assert all(d % 16 == 0 for d in dims), (cand.arch, r)  # every Linear input splits into 16-element blocks
        # ... so QAT quantizes every Linear but the output head and routers (it warns when it must skip one)
        with torch.device("meta"):
            model = Transformer(r, max_seq_len=8)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            swapped = quantize_model(model, QuantConfig(format="nvfp4"))
        kept = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n not in swapped]
        assert swapped and all(n == "lm_head" or n.endswith(".router") for n in kept), kept  # high precision by design


def test_the_grid_enumerates_every_candidate_a_sampler_can_propose_once():
    from search.space import candidate_key, enumerate_candidates, grid_size, space_grid

    cfg = to_search_config(compose_cfg("space=moe_tiny", "proxy=tiny"))
    grid = space_grid(cfg.space, cfg.deployment)
    assert grid["hidden"] == [128, 256, 384] and grid["experts"] == [4, 8] and grid["ffn_multiplier"] == [2.0, 3.0, 4.0]
    assert grid_size(cfg.space, cfg.deployment) == 6480
    found = list(enumerate_candidates(cfg.space, cfg.deployment))
    keys = [candidate_key(c) for _, _, c in found]
    assert len(keys) == len(set(keys)) < 6480  # distinct: e.g. top-2 of ... kv 4 lowered to a divisor of 2 heads
    sampled = {candidate_key(c) for c in _candidates(cfg.space, cfg.deployment, n=200)}
    assert sampled <= set(keys)  # whatever a sampler proposes is in the enumeration
    # the recorded params and distributions reproduce the candidate through an ordinary Optuna trial
    params, dists, cand = found[123]
    study = optuna.create_study()
    study.enqueue_trial(params)
    again = suggest_candidate(study.ask(dists), cfg.space, cfg.deployment)
    assert candidate_key(again) == candidate_key(cand)


# Every shipped space with the proxy its default or recipes pair it with.
SPACE_PROXIES = [("dense_1b", "cpu", 1072), ("dense_tiny", "tiny", 427), ("moe_tiny", "tiny", 3520), ("dense", "gpu", 6832)]


@pytest.mark.parametrize("space_name, proxy, distinct", SPACE_PROXIES)
def test_every_distinct_candidate_of_a_shipped_space_trains_its_own_proxy(space_name, proxy, distinct):
    from search.proxy import proxy_collisions

    cfg = to_search_config(compose_cfg(f"space={space_name}", f"proxy={proxy}"))
    n, proxies, examples = proxy_collisions(cfg.space, cfg.deployment, cfg.proxy.reduction, vocab=256)
    assert n == proxies == distinct and not examples


def test_distinct_moe_candidates_are_distinct_networks():
    # Without a dense layer the dense FFN width is moot: candidates differing only in it would be
    # one network trained and scored several times (moe_tiny had 5280 "distinct" candidates, 3520 real).
    from search.space import enumerate_candidates

    cfg = to_search_config(compose_cfg("space=moe_tiny", "proxy=tiny"))
    networks = set()
    n = 0
    for _, _, cand in enumerate_candidates(cfg.space, cfg.deployment):
        a = cand.arch
        fields = {k: v for k, v in a.to_dict().items() if k != "name" and (k != "ffn" or a.dense_layers)}
        networks.add(repr(sorted(fields.items())))
        n += 1
    assert n == len(networks) == 3520


def test_the_moe_space_trains_its_own_proxy_per_candidate_sampled():
    # ~340k suggestion combinations: too many to enumerate in a test; 3000 seeded draws instead
    from search.space import candidate_key

    cfg = to_search_config(compose_cfg("space=moe", "proxy=gpu", "deployment=gb200_nvl72_dep"))
    seen: dict[str, str] = {}
    for cand in _candidates(cfg.space, cfg.deployment, n=3000):
        proxy = repr(reduce_architecture(cand.arch, cfg.proxy.reduction, vocab=256).replace(name="p"))
        assert seen.setdefault(proxy, candidate_key(cand)) == candidate_key(cand), cand.arch


def test_a_reduction_that_merges_candidates_is_found():
    from search.proxy import proxy_collisions

    # the CPU proxy of the 0.5-3B space (depth 1/8) on the tiny space: 2-8 layers collapse to 1
    cfg = to_search_config(compose_cfg("space=dense_tiny", "proxy=cpu"))
    n, proxies, examples = proxy_collisions(cfg.space, cfg.deployment, cfg.proxy.reduction, vocab=256)
    assert proxies < n and len(examples) == 3 and " and " in examples[0]


def test_keep_layout_keeps_the_attention_layout_and_scales_every_width_alike():
    a = Architecture(hidden=2048, layers=16, heads=16, kv_heads=4, head_dim=128, ffn=8192, vocab=32000)
    r = reduce_architecture(a, ReductionConfig(width=1 / 16, depth=1 / 8, keep_layout=True, min_hidden=16), vocab=256)
    assert (r.heads, r.kv_heads, r.head_dim, r.hidden, r.ffn, r.layers) == (16, 4, 8, 128, 512, 2)
