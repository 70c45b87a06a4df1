"""Typed configuration of the search job: Hydra structured-config schemas and validation.

The dataclasses below are the schema (registered in Hydra's ConfigStore as
``search_schema``); the YAML files in ``conf/`` only select and fill them, so a
misspelled key or a wrong type fails at compose time. :func:`validate` then checks
what types cannot (known names, ranges, alignment, consistency between groups)
*before any trial runs*, and raises one :class:`ConfigError` that lists every
problem with the key to change and how.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional

from co_design.perf.types import ARRIVALS
from co_design.precision import FP8_SCALINGS
from co_design.precision import PRECISIONS as _PRECISIONS

__all__ = [
    "BudgetConfig",
    "ConfigError",
    "DataConfig",
    "DeploymentConfig",
    "HalvingConfig",
    "MuPConfig",
    "HardwareConfig",
    "ObjectivesConfig",
    "ParamBudgetConfig",
    "ProxyConfig",
    "ReductionConfig",
    "SLOConfig",
    "SamplerConfig",
    "SearchConfig",
    "SpaceConfig",
    "TrackingConfig",
    "OBJECTIVES",
    "SAMPLERS",
    "STRATEGIES",
    "PRECISIONS",
    "register_configs",
    "to_search_config",
    "validate",
    "show_progress_bars",
    "steps_of",
    "enumerates",
    "study_settings",
]

class ObjectiveSpec(NamedTuple):
    """One objective: its direction, its label (with unit) and where its value comes from.

    ``point`` is the operating point of :mod:`search.scoring` that gives the value
    (``"throughput"`` or ``"interactive"``; None for the proxy's loss), ``field`` the
    :class:`co_design.perf.Prediction` attribute read there and ``scale`` the factor to
    the label's unit (seconds to milliseconds: 1000).
    """

    direction: str  # "minimize" | "maximize"
    label: str
    point: Optional[str]
    field: Optional[str]
    scale: float = 1.0


#: Every objective, defined once. The loss is the proxy's validation cross-entropy
#: (nats/token); the others come from the performance model at the candidate's
#: operating points (search/scoring.py reads them through ``point`` and ``field``).
OBJECTIVES: dict[str, ObjectiveSpec] = {
    "loss": ObjectiveSpec("minimize", "proxy val loss (nats/token)", None, None),
    "tokens_per_s_per_gpu": ObjectiveSpec("maximize", "output tok/s/GPU", "throughput", "output_tokens_per_s_per_gpu"),
    "tokens_per_s_per_user": ObjectiveSpec(
        "maximize", "output tok/s/user", "interactive", "output_tokens_per_s_per_user"
    ),
    "ttft_ms": ObjectiveSpec("minimize", "TTFT (ms)", "interactive", "ttft_s", 1e3),
    "tpot_ms": ObjectiveSpec("minimize", "TPOT (ms)", "interactive", "tpot_s", 1e3),
}


class SamplerSpec(NamedTuple):
    """An Optuna sampler the job offers: its class in ``optuna.samplers`` and the
    :class:`SamplerConfig` fields it takes (None values keep Optuna's defaults; the others
    are ignored, so one sweep may cover several samplers)."""

    optuna_class: str
    options: tuple[str, ...]


#: Every sampler, defined once (:func:`search.study.make_sampler` builds them from this).
SAMPLERS: dict[str, SamplerSpec] = {
    "tpe": SamplerSpec("TPESampler", ("n_startup_trials",)),
    "nsga2": SamplerSpec("NSGAIISampler", ("population_size",)),
    "nsga3": SamplerSpec("NSGAIIISampler", ("population_size",)),
    "gp": SamplerSpec("GPSampler", ("n_startup_trials",)),
    "random": SamplerSpec("RandomSampler", ()),
}
STRATEGIES = ("auto", "sample", "enumerate")
#: serving/QAT precisions (co_design.precision), narrowest first
PRECISIONS = _PRECISIONS
DATA_SOURCES = ("stdlib", "tokens", "datamodule")
TRACKING_BACKENDS = ("wandb", "off")
WANDB_MODES = ("auto", "offline", "online", "disabled")


class ConfigError(ValueError):
    """The search configuration is invalid; the message lists each key and its fix."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid search configuration ({len(self.problems)} problem(s)):\n{lines}")


# ----------------------------------------------------------------------------- schemas
@dataclass
class HardwareConfig:
    """The GPU, by catalog name, optionally with catalog numbers overridden.

    ``overrides`` replaces fields of :class:`co_design.hardware.GPU` (SI units, e.g.
    ``hbm_bytes_per_s: 7.7e12``); ``file`` loads a user's GPU YAML instead of the catalog.
    """

    gpu: str = "b200"
    file: Optional[str] = None
    overrides: Dict[str, Any] = field(default_factory=dict)


@dataclass
class SLOConfig:
    """Service-level objective; unset fields are unconstrained."""

    min_tokens_per_s_per_user: Optional[float] = None
    max_ttft_s: Optional[float] = None  # mean
    max_tpot_s: Optional[float] = None
    max_ttft_p99_s: Optional[float] = None  # 99th percentile (deployment.arrivals=poisson: the prompt queue's tail)
    max_tpot_p99_s: Optional[float] = None  # 99th percentile over requests (poisson: each beside different prompts)

    @property
    def is_set(self) -> bool:
        return any(getattr(self, f.name) is not None for f in dataclasses.fields(self))


@dataclass
class DeploymentConfig:
    """How a candidate is served. Parallelism fields are lists of *choices*.

    Every combination of the choices that is valid for a candidate is scored and the
    best one (highest output tok/s/GPU, meeting the SLO) is that candidate's operating
    point: the deployment is tuned per shape, the proxy run is not repeated per choice.
    ``concurrency`` fixes the requests in flight of the throughput point; None means the
    highest-throughput concurrency that fits and meets ``slo`` (with a fixed concurrency
    the SLO is checked there). ``interactive_concurrency`` is the load of the interactivity
    point (tok/s/user, TTFT, TPOT; see search/scoring.py).
    """

    gpus: Optional[int] = None  # None: tp * pp (one replica); more: gpus / (tp * pp) replicas
    tp: List[int] = field(default_factory=lambda: [1])
    ep: List[int] = field(default_factory=lambda: [1])
    pp: List[int] = field(default_factory=lambda: [1])
    attention_dp: List[bool] = field(default_factory=lambda: [False])
    helix: List[int] = field(default_factory=lambda: [1])
    weights: str = "nvfp4"
    activations: Optional[str] = None  # null: the weights' format (W8A8, W4A4), as co_design.perf.Deployment
    kv_cache: str = "fp8"
    fp8_scaling: str = "tensor"  # FP8 activation scales: tensor (Model Optimizer) or block (co_design.perf.Deployment)
    isl: int = 1024  # input tokens per request
    osl: int = 1024  # output tokens per request
    concurrency: Optional[int] = None  # throughput point; None: the best that fits and meets the SLO
    arrivals: str = "steady"  # TTFT under load: steady (spread in time), burst (all at once) or poisson (at random,
    # queueing behind earlier prompts; co_design.perf.Deployment)
    slo: SLOConfig = field(default_factory=SLOConfig)
    interactive_concurrency: int = 1  # requests in flight at the interactivity point (search/scoring.py)
    # The serving runtime's limits (TensorRT-LLM max_batch_size / max_num_tokens; vLLM max_num_seqs /
    # max_num_batched_tokens): deployment settings, shown with each result and flagged when they cap it.
    max_batch: int = 2048  # requests scheduled per iteration per replica (per attention-DP rank)
    max_num_tokens: int = 8192  # tokens per iteration (decode + prompt chunk); larger steps run as chunks
    # The performance model's runtime overheads and rates: null = the fitted defaults; a JSON file of
    # co_design.perf.Runtime fields (e.g. from `co-design anchor --out`, anchored on a TPOT measured on your
    # runtime) replaces them. max_batch and max_num_tokens above still apply.
    runtime_file: Optional[str] = None


@dataclass
class ParamBudgetConfig:
    """Parameter-count budgets, enforced with ``trial.set_constraint`` (numbers of parameters)."""

    max_total: Optional[float] = None
    min_total: Optional[float] = None
    max_active: Optional[float] = None
    min_active: Optional[float] = None


@dataclass
class SpaceConfig:
    """The shapes to search. Sizes are elements; ranges are inclusive ``[low, high]``.

    ``hidden`` steps in multiples of ``alignment``; FFN widths are ``multiplier *
    hidden`` rounded to a multiple of ``alignment`` times the largest TP (so every
    per-GPU shard is aligned); heads = hidden / head_dim. ``kv_heads`` lists the
    KV-head counts to try; a count that does not divide the heads is lowered to the
    largest divisor below it. MoE fields apply when ``experts`` is non-empty.
    ``precisions`` non-empty searches the serving/QAT precision (weights and
    activations) over those values; empty keeps the deployment's.
    """

    name: str = "dense_tiny"
    alignment: int = 128
    vocab: int = 32000  # the full model's vocabulary (scored by the performance model)
    hidden: List[int] = field(default_factory=lambda: [128, 512])
    layers: List[int] = field(default_factory=lambda: [2, 8])
    layers_step: int = 1  # layer counts low, low + step, ... (e.g. 4: 12, 16, ..., 32)
    head_dim: List[int] = field(default_factory=lambda: [64])
    heads_multiple: int = 1  # heads a multiple of this (e.g. 8: whole heads per rank up to TP8)
    kv_heads: List[int] = field(default_factory=lambda: [1, 2, 4, 8])
    ffn_multiplier: List[float] = field(default_factory=lambda: [2.0, 4.0])
    ffn_multiplier_step: float = 0.5
    gated_ffn: bool = True
    tied_embeddings: bool = False
    # Mixture of experts (empty `experts`: dense)
    experts: List[int] = field(default_factory=list)
    experts_per_token: List[int] = field(default_factory=lambda: [1, 2])
    shared_experts: List[int] = field(default_factory=lambda: [0])
    expert_ffn_multiplier: List[float] = field(default_factory=lambda: [0.5, 2.0])
    expert_ffn_multiplier_step: float = 0.25
    dense_layers: List[int] = field(default_factory=lambda: [0, 0])
    precisions: List[str] = field(default_factory=list)
    params: ParamBudgetConfig = field(default_factory=ParamBudgetConfig)


@dataclass
class ReductionConfig:
    """How the proxy shrinks a candidate before training it (factors in (0, 1]).

    ``width`` scales hidden and FFN widths: through the number of heads at a fixed
    head_dim, or, with ``keep_layout``, through head_dim at the candidate's own heads,
    KV heads and dense-first layers (so distinct layouts stay distinct proxies);
    ``depth`` scales layers; ``experts`` scales the expert count (top-k kept). Each
    space's recipes pair it with a proxy whose reduction keeps its distinct candidates
    apart (checked before training: search/proxy.py ``proxy_collisions``).
    ``vocab`` null trains on the data's own vocabulary; an integer folds token ids
    modulo it (the hashing trick) to shrink embedding and output head.
    """

    width: float = 1.0
    depth: float = 1.0
    experts: float = 1.0
    vocab: Optional[int] = None
    min_hidden: int = 32
    keep_layout: bool = False


@dataclass
class MuPConfig:
    """The maximal update parametrization (co_design/model/parametrization.py): ``lr`` and the
    initialisation hold at ``base_hidden`` (the model width, elements) and transfer to every
    other width; attention keeps ``1/sqrt(d)`` at ``base_head_dim`` and scales as ``1/d``."""

    base_hidden: int = 128
    base_head_dim: int = 16


@dataclass
class HalvingConfig:
    """Successive halving over Pareto rank (search/halving.py): ``rungs`` proxy budgets ending at
    the proxy's budget, each ``eta`` times the one before; the best ``1/eta`` of the candidates at a
    rung (non-dominated sorting on loss and performance) train at the next. ``rungs: 1``: one
    budget for every candidate."""

    rungs: int = 1
    eta: int = 3


@dataclass
class DataConfig:
    """The proxy's data.

    ``source``: ``stdlib`` (bytes of the Python standard library's sources, vocab 256,
    built once and cached in ``cache_dir``), ``tokens`` (a pre-tokenized file read as
    ``np.memmap`` of ``dtype``; ``val_path`` or the last ``val_fraction`` for
    validation) or ``datamodule`` (any ``LightningDataModule`` built from the
    ``datamodule`` mapping with ``_target_``; it must expose ``vocab_size`` or set
    ``vocab_size`` here, and yield batches of a form :func:`search.proxy.split_batch`
    reads: a tensor (B, T+1), a ``TensorDataset``'s ``[x]``, ``(inputs, targets)`` or a
    dict with ``input_ids`` (and Hugging Face style ``labels``, -100 not scored); its first
    batch is checked before the first trial).
    """

    source: str = "stdlib"
    path: Optional[str] = None
    val_path: Optional[str] = None
    dtype: str = "uint16"
    vocab_size: Optional[int] = None
    val_fraction: float = 0.05
    datamodule: Optional[Any] = None
    cache_dir: Optional[str] = None  # default: <shared cache>/corpus (search.cache.cache_dir())
    seq_len: int = 128  # tokens per sequence
    batch_size: int = 8  # sequences per step
    val_batches: int = 8  # fixed validation batches, identical for every trial
    num_workers: int = 0


@dataclass
class BudgetConfig:
    """Training budget of one proxy run: exactly one of ``tokens`` or ``steps``."""

    tokens: Optional[int] = None
    steps: Optional[int] = None
    val_every_steps: Optional[int] = None  # default: 4 validations per run


@dataclass
class ProxyConfig:
    """One proxy training run (Lightning ``Trainer`` + ``CoDesignCallback``)."""

    reduction: ReductionConfig = field(default_factory=ReductionConfig)
    data: DataConfig = field(default_factory=DataConfig)
    budget: BudgetConfig = field(default_factory=lambda: BudgetConfig(steps=200))
    lr: float = 3e-3
    # μP: lr and init tuned at mup.base_hidden hold for every proxy and full-size width; null: the
    # standard parametrization (one lr for every width, GPT-2 init)
    mup: Optional[MuPConfig] = field(default_factory=MuPConfig)
    halving: HalvingConfig = field(default_factory=HalvingConfig)
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    aux_loss_coef: float = 0.01  # MoE load-balancing loss weight
    # QAT format of the proxy: nvfp4 | fp8 | bf16; null: the serving precision (the searched
    # precision, else deployment.weights; NVFP4 by default), so the loss includes its penalty
    quant: Optional[str] = None
    early_stopping: bool = True  # the callback's median stopping rule across trials
    accelerator: str = "auto"  # auto | cpu | gpu
    precision: str = "auto"  # auto: bf16-mixed where the GPU supports it, else 32-true
    # torch threads of a CPU proxy; null: every core this process may use. The count sets the float
    # rounding of a proxy's loss (1 vs 2 threads: up to 0.04 nats, about a seed's noise), so it is
    # never taken from the machine's load; keep one value within a study. 2 threads ran the default
    # study's proxies 1.4x faster on 2 idle cores, and oversubscribed cores run ~10x slower.
    threads: Optional[int] = 1
    max_seq_len: Optional[int] = None  # model's RoPE table; default data.seq_len
    reuse_losses: bool = True  # identical proxy (shape, precision, data, budget): reuse the earlier loss


@dataclass
class ObjectivesConfig:
    """2 or 3 objectives, names from :data:`OBJECTIVES`."""

    names: List[str] = field(
        default_factory=lambda: ["loss", "tokens_per_s_per_gpu", "tokens_per_s_per_user"]
    )


@dataclass
class SamplerConfig:
    """The Optuna sampler. ``n_startup_trials``/``population_size`` None keep Optuna's defaults."""

    name: str = "tpe"
    seed: Optional[int] = None  # default: the top-level seed
    n_startup_trials: Optional[int] = None  # tpe, gp
    population_size: Optional[int] = None  # nsga2, nsga3


@dataclass
class TrackingConfig:
    """Experiment tracking. ``mode: auto`` is online with an API key, offline without."""

    backend: str = "wandb"
    project: str = "co-design"
    entity: Optional[str] = None
    mode: str = "auto"
    tags: List[str] = field(default_factory=list)


@dataclass
class SearchConfig:
    """The whole search job (``python -m search``)."""

    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    deployment: DeploymentConfig = field(default_factory=DeploymentConfig)
    space: SpaceConfig = field(default_factory=SpaceConfig)
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    objectives: ObjectivesConfig = field(default_factory=ObjectivesConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    n_trials: int = 14  # finished trials the study should hold in total (resume runs the rest)
    study_name: str = "co-design"
    storage: Optional[str] = None  # Optuna storage URL; None: journal file in the run dir
    seed: int = 0
    quiet: bool = False  # no progress bars (they are shown only when stdout is a terminal anyway)
    output_dir: Optional[str] = None  # the run dir (study journal, results); default: Hydra's run dir, outputs/<study_name>
    plots: bool = True
    recipe: Optional[str] = None  # name of the selected recipe (set by recipes/experiment/*.yaml), informative
    # auto: enumerate the whole space (the exact front) when no objective needs training, else sample;
    # sample: always ask the sampler (n_trials of them); enumerate: refused when loss is an objective
    strategy: str = "auto"
    # which of several workers launched as one sweep this is (python -m search -m worker=0,1,2
    # hydra/launcher=joblib); it names nothing else: every worker joins the same study in one run dir
    worker: int = 0


def register_configs() -> None:
    """Register the schema in Hydra's ConfigStore (``defaults: [search_schema, ...]``)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="search_schema", node=SearchConfig)


def to_search_config(cfg: Any) -> SearchConfig:
    """A composed DictConfig (or plain mapping) -> :class:`SearchConfig` instance."""
    from omegaconf import OmegaConf

    if isinstance(cfg, SearchConfig):
        return _resolved(cfg)
    if not OmegaConf.is_config(cfg):
        cfg = OmegaConf.create(cfg)
    unknown = _unknown_keys(OmegaConf.to_container(cfg, resolve=False), SearchConfig, "")
    if unknown:
        raise ConfigError([f"unknown key {k!r}; {_did_you_mean(k)}(the schema is search/config.py)" for k in unknown])
    merged = OmegaConf.merge(OmegaConf.structured(SearchConfig), cfg)
    missing = sorted(k for k in OmegaConf.missing_keys(merged) if not k.startswith("hydra"))
    if missing:
        raise ConfigError([f"{k} is required (???) for this choice; set it on the command line, e.g. {k}=..." for k in missing])
    # `datamodule` is an arbitrary mapping: keep it as a plain container for hydra.utils.instantiate.
    obj = OmegaConf.to_object(merged)
    assert isinstance(obj, SearchConfig)
    return _resolved(obj)


def _resolved(cfg: SearchConfig) -> SearchConfig:
    """``deployment.activations: null`` -> the weights' format, here, so the checks, the scoring and the study's
    recorded settings all see the format (a study from before the default was null recorded it the same way)."""
    if cfg.deployment.activations is None:
        cfg.deployment.activations = cfg.deployment.weights
    return cfg


def _did_you_mean(key: str) -> str:
    """``did you mean 'proxy.budget.steps'? `` for a misspelt dotted key (its closest sibling), else ``check the spelling ``."""
    import difflib
    import typing

    *parents, leaf = key.split(".")
    schema: Any = SearchConfig
    for part in parents:
        schema = typing.get_type_hints(schema).get(part)
        if not dataclasses.is_dataclass(schema):
            return "check the spelling "
    close = difflib.get_close_matches(leaf, list(typing.get_type_hints(schema)), n=1)
    return f"did you mean {'.'.join([*parents, close[0]])!r}? " if close else "check the spelling "


def _unknown_keys(data: Any, schema: type, prefix: str) -> list[str]:
    """Keys of ``data`` that the dataclass ``schema`` (recursively) does not have."""
    if not isinstance(data, dict):
        return []
    import typing

    hints = typing.get_type_hints(schema)
    out = []
    for key, value in data.items():
        if key == "hydra" and not prefix:
            continue
        if key not in hints:
            out.append(prefix + str(key))
            continue
        sub = hints[key]
        if dataclasses.is_dataclass(sub):
            out.extend(_unknown_keys(value, sub, f"{prefix}{key}."))
    return out


# ----------------------------------------------------------------------------- validation
def _range(problems: list[str], key: str, value: list, *, positive: bool = True, integer: bool = True) -> None:
    if len(value) not in (1, 2):
        problems.append(f"{key}={list(value)}: give an inclusive range [low, high], or one value [v] to fix it")
        return
    lo, hi = value[0], value[-1]
    if lo > hi:
        problems.append(f"{key}={list(value)}: low > high; swap them")
    if positive and lo <= 0:
        problems.append(f"{key}={list(value)}: values must be > 0")
    if not positive and lo < 0:
        problems.append(f"{key}={list(value)}: values must be >= 0")
    if integer and any(isinstance(v, float) and not float(v).is_integer() for v in value):
        problems.append(f"{key}={list(value)}: values must be integers")


def _known(problems: list[str], key: str, value: str, known: tuple[str, ...] | list[str]) -> None:
    if value not in known:
        problems.append(f"unknown {key} {value!r}; known: {', '.join(known)}")


def _validate_hardware(cfg: SearchConfig, problems: list[str]) -> None:
    hw = cfg.hardware
    if hw.gpu == "custom" and hw.file is None:
        problems.append("hardware.file is required for hardware=custom: give the path of your GPU YAML file")
        return
    if hw.file is not None:
        if not os.path.isfile(hw.file):
            problems.append(f"hardware.file={hw.file!r} does not exist; give a GPU YAML path or null")
        return
    try:
        from co_design.hardware import get_gpu, list_gpus
    except ImportError:  # the catalog is not installed: nothing more to check here
        return
    try:
        gpu = get_gpu(hw.gpu)
    except ValueError:
        problems.append(f"unknown hardware.gpu {hw.gpu!r}; known: {', '.join(list_gpus())} (or set hardware.file)")
        return
    if dataclasses.is_dataclass(gpu):
        fields = {f.name for f in dataclasses.fields(gpu)}
        bad = sorted(set(hw.overrides) - fields)
        if bad:
            problems.append(
                f"hardware.overrides has unknown GPU field(s) {bad}; known: {', '.join(sorted(fields))}"
            )


def _validate_deployment(cfg: SearchConfig, problems: list[str]) -> None:
    d = cfg.deployment
    if d.gpus is not None and d.gpus < 1:
        problems.append(f"deployment.gpus={d.gpus}: must be >= 1 or null (tp * pp)")
    for key in ("tp", "ep", "pp", "helix"):
        choices = getattr(d, key)
        if not choices:
            problems.append(f"deployment.{key} is empty; give at least one choice, e.g. [1]")
        elif any(v < 1 for v in choices):
            problems.append(f"deployment.{key}={list(choices)}: every choice must be >= 1")
        elif d.gpus is not None and any(v > d.gpus for v in choices):
            problems.append(
                f"deployment.{key}={list(choices)}: choices above deployment.gpus={d.gpus}; raise gpus or drop them"
            )
    if not d.attention_dp:
        problems.append("deployment.attention_dp is empty; give [false], [true] or [false, true]")
    for key in ("weights", "activations", "kv_cache"):
        if key == "activations" and d.activations == d.weights:
            continue  # unset, activations take the weights' format: one problem, reported for the weights
        _known(problems, f"deployment.{key}", getattr(d, key), PRECISIONS)
    _known(problems, "deployment.fp8_scaling", d.fp8_scaling, FP8_SCALINGS)
    _known(problems, "deployment.arrivals", d.arrivals, ARRIVALS)
    for key in ("isl", "osl"):
        if getattr(d, key) < 1:
            problems.append(f"deployment.{key}={getattr(d, key)}: must be >= 1 token")
    if d.concurrency is not None and d.concurrency < 1:
        problems.append(f"deployment.concurrency={d.concurrency}: must be >= 1 or null (max throughput)")
    for key in ("interactive_concurrency", "max_batch", "max_num_tokens"):
        if getattr(d, key) < 1:
            problems.append(f"deployment.{key}={getattr(d, key)}: must be >= 1")
    if d.runtime_file is not None:
        from co_design.perf import Runtime

        try:
            Runtime.load(d.runtime_file)
        except ValueError as exc:
            problems.append(f"deployment.runtime_file: {exc}; give a runtime JSON (co-design anchor --out FILE) or null")
    for f in dataclasses.fields(d.slo):
        v = getattr(d.slo, f.name)
        if v is not None and v <= 0:
            problems.append(f"deployment.slo.{f.name}={v}: must be > 0 or null")


def _validate_space(cfg: SearchConfig, problems: list[str]) -> None:
    s = cfg.space
    if s.alignment < 1:
        problems.append(f"space.alignment={s.alignment}: must be >= 1 (typically 128, 256 or 512)")
        return
    if s.vocab < 1:
        problems.append(f"space.vocab={s.vocab}: must be >= 1")
    _range(problems, "space.hidden", s.hidden)
    if s.heads_multiple < 1:
        problems.append(f"space.heads_multiple={s.heads_multiple}: must be >= 1")
    elif len(s.hidden) in (1, 2) and s.head_dim and all(h >= 8 and s.alignment % h == 0 for h in s.head_dim):
        from search.space import hidden_step

        step = hidden_step(s)
        for v in s.hidden:
            if v % step:
                why = f"space.alignment={s.alignment}" if step == s.alignment else (
                    f"the hidden step {step} (lcm of space.alignment={s.alignment} and "
                    f"max(head_dim) x heads_multiple={max(s.head_dim)} x {s.heads_multiple})"
                )
                problems.append(
                    f"space.hidden={list(s.hidden)}: {v} is not a multiple of {why}; "
                    f"use multiples such as {max(1, v // step) * step}"
                )
    _range(problems, "space.layers", s.layers)
    if s.layers_step < 1:
        problems.append(f"space.layers_step={s.layers_step}: must be >= 1")
    if not s.head_dim or any(h < 8 for h in s.head_dim):
        problems.append(f"space.head_dim={list(s.head_dim)}: give choices >= 8, e.g. [64, 128]")
    elif len(s.hidden) in (1, 2):
        for h in s.head_dim:
            if s.alignment % h:
                problems.append(
                    f"space.alignment={s.alignment} is not a multiple of the space.head_dim choice {h}, so "
                    "hidden / head_dim would not be a whole number of heads; use an alignment such as 128, 256 or 512 "
                    "(or head_dims dividing it)"
                )
    if not s.kv_heads or any(k < 1 for k in s.kv_heads):
        problems.append(f"space.kv_heads={list(s.kv_heads)}: give choices >= 1, e.g. [1, 2, 4, 8]")
    _range(problems, "space.ffn_multiplier", s.ffn_multiplier, integer=False)
    if s.ffn_multiplier_step <= 0:
        problems.append(f"space.ffn_multiplier_step={s.ffn_multiplier_step}: must be > 0")
    if s.experts:
        if any(e < 2 for e in s.experts):
            problems.append(f"space.experts={list(s.experts)}: MoE choices must be >= 2 (empty list: dense)")
        _range(problems, "space.experts_per_token", s.experts_per_token)
        if len(s.experts_per_token) in (1, 2) and s.experts and s.experts_per_token[0] > min(s.experts):
            problems.append(
                f"space.experts_per_token={list(s.experts_per_token)}: low exceeds the fewest experts "
                f"{min(s.experts)}; lower it"
            )
        _range(problems, "space.shared_experts", s.shared_experts, positive=False)
        _range(problems, "space.expert_ffn_multiplier", s.expert_ffn_multiplier, integer=False)
        _range(problems, "space.dense_layers", s.dense_layers, positive=False)
        if len(s.dense_layers) in (1, 2) and len(s.layers) in (1, 2):
            if s.dense_layers[-1] >= s.layers[0]:
                problems.append(
                    f"space.dense_layers={list(s.dense_layers)} can leave no MoE layer with "
                    f"space.layers low={s.layers[0]}; keep dense_layers high < layers low"
                )
        for ep in cfg.deployment.ep:
            bad = [e for e in s.experts if e % ep]
            if bad:
                problems.append(
                    f"space.experts {bad} not divisible by deployment.ep choice {ep}; "
                    "use expert counts that are multiples of every EP choice"
                )
    elif any(ep > 1 for ep in cfg.deployment.ep):
        problems.append(
            f"deployment.ep={list(cfg.deployment.ep)} needs an MoE space; set space=moe (or ep=[1])"
        )
    for p in s.precisions:
        _known(problems, "space.precisions entry", p, PRECISIONS)
    b = s.params
    for lo, hi in (("min_total", "max_total"), ("min_active", "max_active")):
        vlo, vhi = getattr(b, lo), getattr(b, hi)
        for k, v in ((lo, vlo), (hi, vhi)):
            if v is not None and v <= 0:
                problems.append(f"space.params.{k}={v}: must be > 0 parameters or null")
        if vlo is not None and vhi is not None and vlo > vhi:
            problems.append(f"space.params.{lo}={vlo} > space.params.{hi}={vhi}; swap them")


def _budget_ok(b: BudgetConfig) -> bool:
    value = b.tokens if b.steps is None else b.steps
    return (b.tokens is None) != (b.steps is None) and value is not None and value >= 1


def _validate_proxy(cfg: SearchConfig, problems: list[str]) -> None:
    p = cfg.proxy
    r = p.reduction
    for k in ("width", "depth", "experts"):
        v = getattr(r, k)
        if not 0 < v <= 1:
            problems.append(f"proxy.reduction.{k}={v}: must be in (0, 1] (1 = no reduction)")
    if r.vocab is not None and r.vocab < 2:
        problems.append(f"proxy.reduction.vocab={r.vocab}: must be >= 2 or null (the data's vocabulary)")
    d = p.data
    _known(problems, "proxy.data.source", d.source, DATA_SOURCES)
    if d.source == "tokens":
        if not d.path:
            problems.append("proxy.data.path is required for source=tokens (a .bin/.npy file of token ids)")
        elif not os.path.isfile(d.path):
            problems.append(f"proxy.data.path={d.path!r} does not exist")
        if d.val_path and not os.path.isfile(d.val_path):
            problems.append(f"proxy.data.val_path={d.val_path!r} does not exist")
        _known(problems, "proxy.data.dtype", d.dtype, ("uint8", "uint16", "uint32", "int32", "int64"))
    if d.source == "datamodule":
        dm = d.datamodule
        if not isinstance(dm, dict) or "_target_" not in dm:
            problems.append(
                "proxy.data.datamodule must be a mapping with _target_ (the LightningDataModule class path) "
                "for source=datamodule"
            )
    if not 0 < d.val_fraction < 1:
        problems.append(f"proxy.data.val_fraction={d.val_fraction}: must be in (0, 1)")
    for k in ("seq_len", "batch_size", "val_batches"):
        if getattr(d, k) < 1:
            problems.append(f"proxy.data.{k}={getattr(d, k)}: must be >= 1")
    b = p.budget
    if (b.tokens is None) == (b.steps is None):
        problems.append(
            "proxy.budget: set exactly one of tokens or steps "
            f"(got tokens={b.tokens}, steps={b.steps}); e.g. proxy.budget.steps=200 proxy.budget.tokens=null"
        )
    for k in ("tokens", "steps", "val_every_steps"):
        v = getattr(b, k)
        if v is not None and v < 1:
            problems.append(f"proxy.budget.{k}={v}: must be >= 1")
    if p.lr <= 0:
        problems.append(f"proxy.lr={p.lr}: must be > 0")
    h = p.halving
    if h.rungs < 1:
        problems.append(f"proxy.halving.rungs={h.rungs}: must be >= 1 (1 = one budget for every candidate)")
    if h.eta < 2:
        problems.append(f"proxy.halving.eta={h.eta}: must be >= 2 (the budget ratio between rungs)")
    elif h.rungs > 1 and _budget_ok(p.budget) and steps_of(p) < h.eta ** (h.rungs - 1):
        problems.append(
            f"proxy.halving: the first of {h.rungs} rungs would train {steps_of(p) / h.eta ** (h.rungs - 1):.2g} steps "
            f"({steps_of(p)} steps / eta={h.eta}^{h.rungs - 1}); raise proxy.budget or lower proxy.halving.rungs")
    if p.mup is not None:
        for k in ("base_hidden", "base_head_dim"):
            v = getattr(p.mup, k)
            if v < 1:
                problems.append(f"proxy.mup.{k}={v}: must be >= 1 (a width in elements), or proxy.mup=null")
    if not 0 <= p.min_lr_ratio <= 1:
        problems.append(f"proxy.min_lr_ratio={p.min_lr_ratio}: must be in [0, 1]")
    if p.quant is not None:
        _known(problems, "proxy.quant", p.quant, PRECISIONS)
    _known(problems, "proxy.accelerator", p.accelerator, ("auto", "cpu", "gpu", "cuda"))
    _known(
        problems, "proxy.precision", p.precision, ("auto", "32-true", "bf16-mixed", "16-mixed", "bf16-true")
    )
    if p.threads is not None and p.threads < 1:
        problems.append(f"proxy.threads={p.threads}: must be >= 1 or null")


def _validate_objectives(cfg: SearchConfig, problems: list[str]) -> None:
    names = list(cfg.objectives.names)
    for n in names:
        _known(problems, "objective", n, tuple(OBJECTIVES))
    if len(set(names)) != len(names):
        problems.append(f"objectives.names={names} repeats a name; list each objective once")
    if not 2 <= len(names) <= 3:
        problems.append(
            f"objectives.names={names}: choose 2 or 3 objectives (a multi-objective study), "
            f"e.g. [loss, tokens_per_s_per_gpu, tokens_per_s_per_user]"
        )


def _validate_sampler(cfg: SearchConfig, problems: list[str]) -> None:
    s = cfg.sampler
    _known(problems, "sampler", s.name, tuple(SAMPLERS))
    if s.n_startup_trials is not None and s.n_startup_trials < 0:
        problems.append(f"sampler.n_startup_trials={s.n_startup_trials}: must be >= 0 or null")
    if s.population_size is not None and s.population_size < 2:
        problems.append(f"sampler.population_size={s.population_size}: must be >= 2 or null")


def _validate_tracking(cfg: SearchConfig, problems: list[str]) -> None:
    t = cfg.tracking
    _known(problems, "tracking.backend", t.backend, TRACKING_BACKENDS)
    _known(problems, "tracking.mode", t.mode, WANDB_MODES)


def _validate_top(cfg: SearchConfig, problems: list[str]) -> None:
    _known(problems, "strategy", cfg.strategy, STRATEGIES)
    if cfg.strategy == "enumerate" and "loss" in cfg.objectives.names:
        problems.append(
            "strategy=enumerate scores every shape of the space, but loss is an objective and would train a proxy "
            "for each; use strategy=auto (samples n_trials shapes) or objectives=perf_only"
        )
    if cfg.n_trials < 1:
        problems.append(f"n_trials={cfg.n_trials}: must be >= 1 (the total number of trials the study should hold)")
    if cfg.worker < 0:
        problems.append(f"worker={cfg.worker}: must be >= 0 (the index of a worker in a sweep: -m worker=0,1,2)")
    if not cfg.study_name or any(c in cfg.study_name for c in "/\\"):
        problems.append(f"study_name={cfg.study_name!r}: give a non-empty name without slashes")
    if cfg.storage is not None:
        url = cfg.storage
        ok = "://" in url or url.endswith(".journal") or url.endswith(".log")
        if not ok:
            problems.append(
                f"storage={url!r} is not an Optuna storage URL; use e.g. sqlite:///study.db, "
                "postgresql+psycopg://user@host/db, journal:///path/study.journal, or null (journal in the run dir)"
            )


def _validate_parallelism(cfg: SearchConfig, problems: list[str]) -> None:
    """Some parallelism choice must serve some shape of the space, else every trial would be infeasible."""
    from search.space import parallelism_coverage

    d = cfg.deployment
    ok, total, reasons = parallelism_coverage(cfg.space, d)
    if ok == 0:
        choices = f"tp={list(d.tp)} ep={list(d.ep)} pp={list(d.pp)} helix={list(d.helix)} attention_dp={list(d.attention_dp)}"
        problems.append(
            f"no parallelism choice of deployment ({choices}, gpus={d.gpus}) can serve any of the {total} head "
            f"layouts of space={cfg.space.name!r}, so every trial would be infeasible (e.g. {'; '.join(reasons)}); "
            "choose deployment.tp/helix that divide the heads (heads = hidden / head_dim), or set "
            "space.heads_multiple to a multiple of the TP degree"
        )


def validate(cfg: SearchConfig) -> SearchConfig:
    """Check the whole configuration; raise :class:`ConfigError` listing every problem.

    The cross-group check that the deployment can serve the space runs only when
    everything else is valid (its inputs must be sound first).
    """
    problems: list[str] = []
    for check in (
        _validate_top,
        _validate_hardware,
        _validate_deployment,
        _validate_space,
        _validate_proxy,
        _validate_objectives,
        _validate_sampler,
        _validate_tracking,
    ):
        check(cfg, problems)
    if not problems:
        _validate_parallelism(cfg, problems)
    if problems:
        raise ConfigError(problems)
    return cfg


def study_settings(cfg: SearchConfig) -> dict[str, Any]:
    """The settings that give a study's objective values their meaning, flattened to dotted keys.

    Stored with a new study and compared on resume: trials scored on another GPU,
    deployment or space, or proxies trained differently, are not comparable, and a
    front mixing them would be wrong. Run-time knobs (``n_trials``, sampler, tracking,
    plots, the proxy's device, threads and early stopping) may change between runs.
    """
    import json

    from co_design.perf import Runtime

    cfg = _resolved(cfg)
    data: dict[str, Any] = {
        "objectives": {"names": list(cfg.objectives.names)},
        "hardware": dataclasses.asdict(cfg.hardware),
        # the runtime file's path is not a setting (a copy elsewhere serves as well): its contents are, below
        "deployment": {k: v for k, v in dataclasses.asdict(cfg.deployment).items() if k != "runtime_file"},
        "space": dataclasses.asdict(cfg.space),
        # the performance model's runtime constants (fitted, or from deployment.runtime_file): a study scored
        # with other constants would mix predictions that are not comparable
        "perf_runtime": dataclasses.asdict(Runtime.load(cfg.deployment.runtime_file) if cfg.deployment.runtime_file
                                           else Runtime()),
    }
    if "loss" in cfg.objectives.names:
        proxy = dataclasses.asdict(cfg.proxy)
        for key in ("accelerator", "precision", "threads", "early_stopping", "reuse_losses"):
            proxy.pop(key)
        for key in ("num_workers", "cache_dir"):
            proxy["data"].pop(key)
        data["proxy"] = proxy
        data["seed"] = cfg.seed  # the proxy's initialisation and data order

    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            flat[prefix] = value

    walk("", json.loads(json.dumps(data, default=str)))
    return flat


def show_progress_bars(cfg: SearchConfig) -> bool:
    """Progress bars (Optuna's across trials, Lightning's within one) only on a terminal and not ``quiet``.

    In a log file (``> log``, a batch system) their carriage-return redraws pile up into
    long padded lines; the job's one line per trial is the progress there.
    """
    import sys

    return not cfg.quiet and sys.stdout.isatty()


def steps_of(cfg: ProxyConfig) -> int:
    """Training steps of one proxy run from its budget (tokens rounded up to whole steps)."""
    b = cfg.budget
    if b.steps is not None:
        return int(b.steps)
    assert b.tokens is not None
    per_step = cfg.data.batch_size * cfg.data.seq_len
    return max(1, math.ceil(b.tokens / per_step))


def enumerates(cfg: SearchConfig) -> bool:
    """Whether the job enumerates the whole space (the exact front) instead of sampling it.

    ``strategy=auto`` enumerates when no objective needs training: the performance model
    scores a candidate in milliseconds, so every aligned shape can be scored and the exact
    Pareto front returned; with a trained loss objective it samples ``n_trials`` shapes.
    """
    return cfg.strategy == "enumerate" or (cfg.strategy == "auto" and "loss" not in cfg.objectives.names)
