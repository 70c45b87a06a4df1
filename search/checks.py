"""Checks before any trial runs: a configuration that cannot work stops the job here, not in a trial.

:func:`search.config.validate` checks what the configuration says; these check it
against the world: the GPU it names (:func:`resolve_gpu`, :func:`check_precisions`), the
machine the proxies train on (:func:`check_proxy_device`, :func:`check_proxy_memory`),
whether any shape of the space can be served at all (:func:`check_feasible_shapes`) and,
once the data is known, whether distinct candidates train distinct proxies
(:func:`check_proxy_collisions`) and what a precision search can resolve
(:func:`check_precision_search`). Each raises :class:`search.config.ConfigError`, the
error type of config validation (one line per problem, naming the key and the fix), or
says a warning through ``say``.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Callable

from search.config import ConfigError, SearchConfig, steps_of

__all__ = [
    "before_any_trial",
    "before_training",
    "resolve_gpu",
    "check_precisions",
    "check_proxy_device",
    "check_feasible_shapes",
    "check_proxy_memory",
    "check_proxy_collisions",
    "check_precision_search",
    "TRAIN_STATE_BYTES_PER_PARAM",
]


def before_any_trial(cfg: SearchConfig) -> Any:
    """Every check that needs no data; returns the GPU (:class:`co_design.hardware.GPU`) to score on."""
    try:
        gpu = resolve_gpu(cfg)
    except (ValueError, TypeError) as exc:  # a bad GPU file or override value
        raise ConfigError([f"hardware: {exc}; fix hardware.file or hardware.overrides"]) from None
    check_precisions(cfg, gpu)
    check_proxy_device(cfg)
    check_tracking(cfg)
    check_feasible_shapes(cfg, gpu)
    return gpu


def before_training(cfg: SearchConfig, vocab: int, say: Callable[[str], None]) -> None:
    """The checks that need the proxy's vocabulary (``vocab`` tokens): run once the data module is built."""
    check_proxy_memory(cfg, vocab, say)
    check_proxy_collisions(cfg, vocab, say)
    check_precision_search(cfg, say)


def resolve_gpu(cfg: SearchConfig) -> Any:
    from co_design.hardware import get_gpu, load_gpu

    gpu = load_gpu(cfg.hardware.file) if cfg.hardware.file else get_gpu(cfg.hardware.gpu)
    if cfg.hardware.overrides:
        changes = dict(cfg.hardware.overrides)
        if "peak_flops_per_s" in changes:  # merge per precision
            changes["peak_flops_per_s"] = {**dict(gpu.peak_flops_per_s), **dict(changes["peak_flops_per_s"])}
        gpu = gpu.replace(**changes)
    return gpu


def check_tracking(cfg: SearchConfig) -> None:
    """W&B online needs credentials it can find without asking; without them every trial's run and the
    summary run failed at their start, after the study had run."""
    if cfg.tracking.backend != "wandb":
        return
    from search.tracking import has_wandb_api_key, resolve_wandb_mode, wandb_host

    if resolve_wandb_mode(cfg.tracking.mode) == "online" and not has_wandb_api_key():
        how = "WANDB_MODE=online" if cfg.tracking.mode == "auto" else f"tracking.mode={cfg.tracking.mode}"
        raise ConfigError(
            [
                f"{how} logs to W&B online, but no W&B API key is set (WANDB_API_KEY, WANDB_IDENTITY_TOKEN_FILE or "
                f"an entry for {wandb_host()} in ~/.netrc): run `wandb login`, or use tracking.mode=offline (upload "
                "later with `wandb sync`) or tracking=off"
            ]
        )


def check_proxy_device(cfg: SearchConfig) -> None:
    """A proxy asking for a GPU (``proxy=gpu`` sets ``proxy.accelerator: gpu``) needs one, before any trial runs."""
    if "loss" not in cfg.objectives.names or cfg.proxy.accelerator not in ("gpu", "cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(
            [
                f"proxy.accelerator={cfg.proxy.accelerator} but this machine has no CUDA device (the proxy trains "
                f"{steps_of(cfg.proxy):,} steps of {cfg.proxy.data.batch_size} x {cfg.proxy.data.seq_len} tokens per "
                "trial); on this machine run objectives=perf_only (the performance objectives, no training), or "
                "proxy.accelerator=cpu to train this proxy on the CPU anyway (hours per trial for GPU-sized "
                "proxies; proxy=tiny/small shrink a candidate by fixed factors, too little for full-size spaces)"
            ]
        )


#: bytes per trained parameter: fp32 weights, gradients and AdamW's two moments (a lower bound: no activations)
TRAIN_STATE_BYTES_PER_PARAM = 16


def check_proxy_memory(cfg: SearchConfig, vocab: int, say: Callable[[str], None]) -> None:
    """Say how large the proxies are; refuse a space whose smallest proxy cannot be trained here.

    The bound is the training state alone (:data:`TRAIN_STATE_BYTES_PER_PARAM`) against
    the device's memory (GPU memory, or the machine's RAM for a CPU proxy): a proxy over
    it fails out of memory in every trial, so the study stops before the first.
    """
    import torch

    from search.proxy import reduce_architecture, trainer_settings
    from search.space import human_count, space_corners

    small, large = (
        reduce_architecture(c.arch, cfg.proxy.reduction, vocab).param_counts().total
        for c in space_corners(cfg.space, cfg.deployment)
    )
    if trainer_settings(cfg.proxy.accelerator, cfg.proxy.precision)["accelerator"] == "cpu":
        where, capacity = "RAM", os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    else:
        where, capacity = "GPU memory", torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    r = cfg.proxy.reduction
    say(
        f"proxies: {human_count(small)} to {human_count(large)} parameters (proxy.reduction width={r.width} "
        f"depth={r.depth} experts={r.experts} of full-size candidates of {human_count(_full_params(cfg, 0))} "
        f"to {human_count(_full_params(cfg, 1))})"
    )
    need_small_gb, need_large_gb = (n * TRAIN_STATE_BYTES_PER_PARAM / 1e9 for n in (small, large))
    if need_small_gb > capacity / 1e9:
        raise ConfigError(
            [
                f"the smallest proxy of space={cfg.space.name!r} has {human_count(small)} parameters: training it "
                f"needs at least {need_small_gb:,.0f} GB and this machine has {capacity / 1e9:,.0f} GB of {where}; "
                "shrink it with proxy.reduction.width/depth/experts (e.g. proxy=gpu on a GPU), use a smaller space, "
                "or objectives=perf_only to skip training"
            ]
        )
    if need_large_gb > capacity / 1e9:
        say(
            f"note: proxies above ~{capacity / TRAIN_STATE_BYTES_PER_PARAM:,.3g} parameters cannot be trained in "
            f"{capacity / 1e9:,.0f} GB of {where} (the largest has {human_count(large)}); such trials will FAIL "
            "out of memory; shrink the proxies with proxy.reduction.* to avoid it"
        )


def check_proxy_collisions(cfg: SearchConfig, vocab: int, say: Callable[[str], None]) -> None:
    """Say whether every distinct candidate trains its own proxy; warn, naming examples, when not."""
    from search.proxy import proxy_collisions

    found = proxy_collisions(cfg.space, cfg.deployment, cfg.proxy.reduction, vocab)
    if found is None:
        say(f"proxies: space={cfg.space.name!r} is too large to check that distinct candidates get distinct proxies")
        return
    n, proxies, examples = found
    if proxies == n:
        say(f"proxies: each of the {n} distinct candidates of space={cfg.space.name!r} trains its own proxy")
        return
    say(
        f"warning: proxy.reduction maps the {n} distinct candidates of space={cfg.space.name!r} onto {proxies} proxies "
        f"(e.g. {examples[0]}): candidates sharing a proxy get the same loss, so the performance objectives alone "
        "decide between them; use the proxy its recipes pair with it (dense_1b: proxy=cpu; dense_tiny, moe_tiny: "
        "proxy=tiny; dense, moe: proxy=gpu) or set proxy.reduction (keep_layout=true, a depth whose steps stay apart)"
    )


def check_precision_search(cfg: SearchConfig, say: Callable[[str], None]) -> None:
    """Say plainly that a one-seed proxy does not resolve the quantization penalty between precisions."""
    if len(set(cfg.space.precisions)) > 1:
        say(
            f"warning: space.precisions={list(cfg.space.precisions)} with the loss objective: one proxy run does not "
            "resolve the quantization penalty between precisions above its seed noise (benchmarks/results/"
            "proxy_fidelity.md: NVFP4 minus BF16 was +0.012 nats on average against a seed standard deviation of "
            "0.020, resolved for 5 of 17 candidates), so the loss axis of a precision comparison is mostly noise; "
            "the performance objectives are exact"
        )


def _full_params(cfg: SearchConfig, corner: int) -> int:
    from search.space import space_corners

    return space_corners(cfg.space, cfg.deployment)[corner].arch.param_counts().total


def check_precisions(cfg: SearchConfig, gpu: Any) -> None:
    """Every precision the study may serve in must run natively on the GPU (before any trial runs).

    One check for the whole project: :func:`co_design.hardware.check_precision`, the GPU's precision
    table that ``co-design predict`` and the callback use too. A searched precision serves both
    weights and activations (search/scoring.py), so it is checked as both.
    """
    from co_design.hardware import check_precision

    d = cfg.deployment
    wanted = [(f, f"deployment.{f}", getattr(d, f)) for f in ("weights", "activations", "kv_cache")]
    wanted += [(f, f"space.precisions[{i}]", p) for i, p in enumerate(cfg.space.precisions)
               for f in ("weights", "activations")]
    problems: list[str] = []
    for field_name, key, precision in wanted:
        try:
            check_precision(gpu, field_name, precision, label=key)
        except ValueError as exc:
            if not any(p.startswith(f"{key}=") for p in problems):  # one line per key
                problems.append(str(exc))
    if problems:
        raise ConfigError(problems)


#: a space with at most this many suggestion combinations is checked whole; a larger one by a sample
FEASIBILITY_EXHAUSTIVE = 2048
#: grid points drawn (seeded) from a larger space, besides its two corners
FEASIBILITY_PROBES = 256


def check_feasible_shapes(cfg: SearchConfig, gpu: Any) -> None:
    """Refuse a space of which no shape can be kept (before any trial).

    Scores shapes with the performance model (~1 ms each) and the checks a trial makes
    (:func:`search.objective.evaluate`, the parameter band first) until one is feasible:
    every distinct shape of a space of at most :data:`FEASIBILITY_EXHAUSTIVE` suggestion
    combinations, else its two corners and :data:`FEASIBILITY_PROBES` seeded grid points.
    If none is, every trial would end PRUNED and the front would be empty, so the job
    stops naming the reasons seen most often and the keys that relax them.
    """
    import random

    from search.objective import evaluate, param_budget
    from search.space import candidate_from_params, enumerate_candidates, grid_size, space_corners, space_grid

    names = [n for n in cfg.objectives.names if n != "loss"] or ["tokens_per_s_per_gpu"]
    if grid_size(cfg.space, cfg.deployment) <= FEASIBILITY_EXHAUSTIVE:
        candidates = [cand for _, _, cand in enumerate_candidates(cfg.space, cfg.deployment)]
        scope = f"none of its {len(candidates)} shapes"
    else:
        grid, rng = space_grid(cfg.space, cfg.deployment), random.Random(cfg.seed)
        candidates = list(space_corners(cfg.space, cfg.deployment)) + [
            candidate_from_params(cfg.space, cfg.deployment, {k: rng.choice(v) for k, v in grid.items()})
            for _ in range(FEASIBILITY_PROBES)
        ]
        scope = f"none of {len(candidates)} shapes scored (its corners and a seeded sample)"
    reasons: Counter[str] = Counter()
    for cand in candidates:
        outside = param_budget(cand.arch, cfg.space)[1]
        reason = "; ".join(outside) if outside else evaluate(cand, cfg, gpu, names).reason
        if reason is None:
            return
        reasons[_reason_kind(reason)] += 1
    seen = "; ".join(f"{why} ({n} of {len(candidates)})" for why, n in reasons.most_common(3))
    raise ConfigError(
        [
            f"no shape of space={cfg.space.name!r} can be kept on {gpu.name} with this deployment: {scope} is "
            f"feasible. Seen: {seen}. Relax space.params, deployment.slo.* or deployment.max_gpus, choose a larger "
            "GPU (hardware=...) or another space"
        ]
    )


def _reason_kind(reason: str) -> str:
    """A trial's infeasibility reason without its numbers, so that alike reasons are counted together."""
    import re

    return re.sub(r"\s+", " ", re.sub(r"\d[\d.,]*(?:e[+-]?\d+)?", "N", reason)).strip()[:160]
