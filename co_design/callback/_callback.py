"""CoDesignCallback: hardware-aware co-design inside an existing Lightning training.

Hooks (Lightning 2.6 fit order, REFERENCE.md §9):

- ``__init__``: validate every argument at once (GPU name, deployment, SLO,
  quantization, architecture, trial, stopping rule).
- ``setup("fit")`` (before optimizers exist): find or infer the architecture,
  predict its serving performance, swap ``nn.Linear`` layers for fake-quant ones
  (in place, same parameter names, so checkpoints load into the plain model),
  and warn for each dimension that misses tile alignment.
- ``on_fit_start``: log the prediction as ``co_design/...`` metrics, the quantization
  coverage as ``co_design/quant/coverage*`` and the architecture/deployment as
  hyperparameters to every logger (rank zero).
- ``on_train_batch_end``: log ``quantization_stats`` every
  ``log_quant_every_n_steps`` optimizer steps (rank zero).
- ``on_validation_end``: record the monitored value by global step
  (``intermediate_values``; with an Optuna trial also its ``"intermediate_values"``
  user attribute) and apply the stopping rule (decided on rank zero, broadcast to
  every rank). A ``trainer.validate()`` after fit records the final step and never stops.
- ``teardown("fit")``: optionally put the plain ``nn.Linear`` layers back.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.model_helpers import is_overridden
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn
from torch import nn

from co_design import perf
from co_design import quant as quantization
from co_design.arch import Architecture, ArchitectureError
from co_design.precision import PRECISIONS
from co_design.readers.base import ArchitectureInference
from co_design.readers.modules import architecture_mismatches, infer_architecture
from co_design.callback._stopping import (
    INTERMEDIATE_VALUES_ATTR,
    PRUNED_AT_STEP_ATTR,
    MedianStoppingRule,
    StoppingRule,
)
from co_design.quant.fused import is_fused_quantized
from co_design.hardware import GPU, PRECISION_FIELDS, check_precision, get_gpu, load_gpu, supported_precisions

if TYPE_CHECKING:  # pragma: no cover
    import optuna

__all__ = ["CoDesignCallback", "CoDesignWarning"]

#: below this share of the attention+FFN+expert weights quantized, the callback warns (REFERENCE.md section 1:
#: deployments quantize every Linear but lm_head, embeddings, router and norms)
MIN_COVERAGE = 0.9
_BOUNDS = ("compute", "memory", "communication")
DEFAULT_STOPPING = MedianStoppingRule()  # frozen: safe to share as the default argument


class CoDesignWarning(UserWarning):
    """Something the user should look at: misaligned shapes, a contradicting architecture, a skipped step."""


def _resolve_quant(value: Any) -> quantization.QuantConfig | None:
    if value is None or value is False:
        return None
    if value is True:
        return quantization.QuantConfig()
    if isinstance(value, quantization.QuantConfig):
        return value
    if isinstance(value, str):
        fmt = value.strip().lower()
        if fmt in ("none", "off", "false", ""):
            return None
        if fmt not in PRECISIONS:
            raise ValueError(
                f"quant={value!r} is not a known format; use one of {list(PRECISIONS)}, a co_design.quant.QuantConfig, "
                "or None/False to train without fake quantization"
            )
        return quantization.QuantConfig(format=fmt)
    raise TypeError(
        f"quant must be a format name {list(PRECISIONS)}, a co_design.quant.QuantConfig or None/False, "
        f"got {type(value).__name__}"
    )


def _resolve_gpu(value: Any) -> GPU:
    if isinstance(value, GPU):
        return value
    if isinstance(value, Path) or (isinstance(value, str) and value.endswith((".yaml", ".yml"))):
        return load_gpu(value)
    if isinstance(value, str):
        return get_gpu(value)  # unknown -> ValueError listing the known names
    raise TypeError(
        "hardware must be a GPU name (e.g. 'b200'), a co_design.hardware.GPU or a YAML path, "
        f"got {type(value).__name__}"
    )


def _resolve_architecture(value: Any) -> Architecture | None:
    if value is None or isinstance(value, Architecture):
        return value
    if isinstance(value, Mapping):
        if "hidden_size" in value or "model_type" in value or "text_config" in value:
            return Architecture.from_hf_config(value)
        return Architecture.from_dict(value)
    if isinstance(value, (str, os.PathLike)):
        return Architecture.load(value)
    raise TypeError(
        f"architecture must be a co_design.Architecture, a mapping of its fields, an HF config mapping or a "
        f"path to config.json/YAML, or None to infer it from the module; got {type(value).__name__}"
    )


def _default_deployment(gpu: GPU, quant_config: quantization.QuantConfig | None) -> perf.Deployment:
    """Serve in the training format when the GPU runs it natively (else its narrowest native one)."""
    wanted = quant_config.format if quant_config is not None else "bf16"
    native = set(supported_precisions(gpu, "weights")) & set(supported_precisions(gpu, "activations"))
    precision = next((p for p in (wanted, "fp8", "bf16") if p in native), wanted)
    if precision != wanted:
        rank_zero_warn(
            f"CoDesignCallback: {gpu.name} has no {wanted} tensor-core path; predicting {precision} serving "
            f"(pass deployment=Deployment(weights=..., activations=...) to choose)",
            category=CoDesignWarning,
        )
    return perf.Deployment(weights=precision, activations=precision)


def _resolve_deployment(value: Any, gpu: GPU, quant_config: quantization.QuantConfig | None) -> perf.Deployment:
    if value is None:
        deployment = _default_deployment(gpu, quant_config)
    elif isinstance(value, Mapping):
        try:
            deployment = perf.Deployment(**value)
        except TypeError as exc:
            raise ValueError(f"deployment: {exc}; fields are those of co_design.perf.Deployment") from None
    elif isinstance(value, perf.Deployment):
        deployment = value
    else:
        raise TypeError(
            f"deployment must be a co_design.perf.Deployment or a mapping of its fields, got {type(value).__name__}"
        )
    for field_name in PRECISION_FIELDS:  # the table co-design predict and the search use too
        check_precision(gpu, field_name, getattr(deployment, field_name), label=f"deployment.{field_name}")
    return deployment


def _resolve_slo(value: Any) -> perf.SLO | None:
    if value is None or isinstance(value, perf.SLO):
        return value
    if isinstance(value, Mapping):
        try:
            return perf.SLO(**value)
        except TypeError as exc:
            raise ValueError(f"slo: {exc}; fields are those of co_design.perf.SLO") from None
    raise TypeError(f"slo must be a co_design.perf.SLO, a mapping of its fields or None, got {type(value).__name__}")


def _resolve_trial(trial: Any, stopping: Any) -> tuple[Any, StoppingRule | None]:
    if trial is not None and not callable(getattr(trial, "set_user_attr", None)):
        raise TypeError(f"trial must be an optuna.trial.Trial (with set_user_attr), got {type(trial).__name__}")
    if stopping is not None and not isinstance(stopping, StoppingRule):
        raise TypeError(
            "stopping must have a decide(step, value, history, *, validations, minimize) method "
            f"(e.g. MedianStoppingRule()), or be None; got {type(stopping).__name__}"
        )
    if trial is not None and stopping is not None and getattr(trial, "study", None) is None:
        rank_zero_warn(
            f"CoDesignCallback: trial {type(trial).__name__} has no .study to compare with; the stopping rule is "
            "off (values are still recorded). Pass a trial from study.ask()/study.optimize, or stopping=None.",
            category=CoDesignWarning,
        )
        stopping = None
    return trial, stopping


class CoDesignCallback(Callback):
    r"""Tell a Lightning training what its shape costs on a GPU, and train it under fake quantization.

    Args:
        hardware: a GPU name (``"b200"``, ``"gb200"``, ``"h100"``, ... see
            :func:`co_design.hardware.list_gpus`), a :class:`~co_design.hardware.GPU`
            or a path to a GPU YAML file.
        deployment: a :class:`~co_design.perf.Deployment` (or a mapping of its
            fields). Default: one GPU, serving in the training format, at the
            concurrency of maximum throughput.
        quant: ``"nvfp4"`` (default), ``"fp8"``, ``"bf16"``, a
            :class:`~co_design.quant.QuantConfig`, or ``None``/``False`` to train unquantized.
        architecture: the :class:`~co_design.arch.Architecture` to score (or a
            mapping, HF config mapping, or a path). Default: inferred from the
            module at setup (an ``Architecture`` attribute, an HF-style ``config``,
            or the layers' shapes); a rank-zero message says what was inferred.
        trial: an Optuna trial; validation values are recorded in its
            ``"intermediate_values"`` user attribute and ``stopping`` may stop the run.
        stopping: the rule that stops a poor trial's run (default
            :class:`MedianStoppingRule`), or None to only record.
        slo: a :class:`~co_design.perf.SLO` (or mapping); with ``concurrency=None``
            the prediction is the best throughput meeting it; with a fixed
            concurrency, ``co_design/meets_slo`` says whether it is met.
        monitor: the ``trainer.callback_metrics`` key to record (``"val_loss"``).
        mode: ``"min"`` when lower ``monitor`` is better, else ``"max"``.
        log_quant_every_n_steps: optimizer steps between quantization-statistics logs (0: never).
        warn_alignment: warn for dimensions that miss the GPU's tile alignment.
        verify_architecture: check a given ``architecture`` against the module's
            layers and warn on a contradiction. Pass False when the module is
            deliberately a reduced proxy of the full-size ``architecture`` being
            scored (as the search job trains it).
        dequantize_on_fit_end: put the plain ``nn.Linear`` layers back when fit ends
            (default False: the model keeps training behaviour, like ``ModelPruning``).
        export_dir: when fit ends, write what ``co-design export`` writes for the trained
            architecture into this directory (rank zero): a transformers ``config.json``, the
            NVFP4 recipe for ModelOpt and LLM Compressor, and TensorRT-LLM options with the
            predicted serving figures (:func:`co_design.export.export`). A shape no exported
            family holds is refused at setup, before training.

    Attributes after ``setup``: ``architecture``, ``inference`` (how it was found,
    None when given), ``prediction`` (:class:`~co_design.perf.Prediction`),
    ``quantized_modules``, ``quant_coverage`` (:class:`~co_design.quant.CoverageReport`,
    printed at setup and logged at fit start), ``intermediate_values`` (``{global step: value}``),
    ``pruned`` and ``pruned_at_step``.
    """

    def __init__(
        self,
        hardware: str | GPU | os.PathLike[str] = "b200",
        *,
        deployment: perf.Deployment | Mapping[str, Any] | None = None,
        quant: str | quantization.QuantConfig | bool | None = "nvfp4",
        architecture: Architecture | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        trial: optuna.trial.Trial | None = None,
        stopping: StoppingRule | None = DEFAULT_STOPPING,
        slo: perf.SLO | Mapping[str, Any] | None = None,
        monitor: str = "val_loss",
        mode: Literal["min", "max"] = "min",
        log_quant_every_n_steps: int = 50,
        warn_alignment: bool = True,
        verify_architecture: bool = True,
        dequantize_on_fit_end: bool = False,
        export_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__()
        self.gpu = _resolve_gpu(hardware)
        self.quant_config = _resolve_quant(quant)
        self.deployment = _resolve_deployment(deployment, self.gpu, self.quant_config)
        self.slo = _resolve_slo(slo)
        self._given_architecture = _resolve_architecture(architecture)
        self.trial, self.stopping = _resolve_trial(trial, stopping)
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(f"monitor must be a non-empty metric name such as 'val_loss', got {monitor!r}")
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        self.monitor, self.mode = monitor, mode
        n = log_quant_every_n_steps
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"log_quant_every_n_steps must be an integer >= 0 (0: never), got {n!r}")
        self.log_quant_every_n_steps = log_quant_every_n_steps
        self.warn_alignment = bool(warn_alignment)
        self.verify_architecture = bool(verify_architecture)
        self.dequantize_on_fit_end = bool(dequantize_on_fit_end)
        self.export_dir = None if export_dir is None else Path(export_dir)
        self.exported: dict[str, Path] = {}

        # state (state_dict / load_state_dict)
        self.architecture: Architecture | None = self._given_architecture
        self.inference: ArchitectureInference | None = None
        self.prediction: perf.Prediction | None = None
        self.quantized_modules: list[str] = []
        self.quant_coverage: quantization.CoverageReport | None = None
        self.intermediate_values: dict[int, float] = {}
        self.pruned = False
        self.pruned_at_step: int | None = None
        self.stop_reason = ""
        self._validations = 0
        self._last_quant_log_step = -1
        self._warned_missing_monitor = False
        if self.architecture is not None:  # surface deployment/architecture conflicts now, not at fit time
            self.prediction = self._predict(self.architecture)

    # ------------------------------------------------------------------ hooks
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        has_layers = self._check_layers_exist(pl_module)
        self._find_architecture(pl_module, has_layers=has_layers)
        assert self.architecture is not None
        self.prediction = self._predict(self.architecture)
        if self.export_dir is not None:  # an unexportable shape is refused now, not after training
            from co_design.export import hf_config

            try:
                hf_config(self.architecture)
            except ValueError as exc:
                raise ValueError(f"CoDesignCallback(export_dir={str(self.export_dir)!r}): {exc}") from None
        self._quantize(pl_module)
        if self.warn_alignment:
            self._warn_alignment()

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self._log_prediction(trainer)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        n = self.log_quant_every_n_steps
        if n and self.quantized_modules and step % n == 0 and step != self._last_quant_log_step:
            self._last_quant_log_step = step
            if trainer.is_global_zero:
                self._log_quant_stats(trainer, pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if trainer.state.fn == TrainerFn.FITTING:
            self._record_and_decide(trainer)
        elif trainer.state.fn == TrainerFn.VALIDATING and trainer.global_step > 0:
            # trainer.validate() after fit, e.g. for the loss at the final step: record, never stop
            self._record(trainer)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.export_dir is None or not trainer.is_global_zero or self.architecture is None:
            return
        from co_design.export import export

        self.exported = export(self.architecture, self.export_dir, gpu=self.gpu, deployment=self.deployment,
                               slo=self.slo)
        rank_zero_info(f"CoDesignCallback: exported {self.architecture.name!r} to {self.export_dir}: "
                       + ", ".join(str(p.relative_to(self.export_dir)) for p in self.exported.values()))

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and self.dequantize_on_fit_end and self.quantized_modules:
            restored = quantization.dequantize_model(pl_module)
            self.quantized_modules = []
            rank_zero_info(f"CoDesignCallback: restored {len(restored)} plain nn.Linear layer(s) after fit")

    def state_dict(self) -> dict[str, Any]:
        return {
            "intermediate_values": {str(k): v for k, v in sorted(self.intermediate_values.items())},
            "pruned": self.pruned,
            "pruned_at_step": self.pruned_at_step,
            "stop_reason": self.stop_reason,
            "validations": self._validations,
            "last_quant_log_step": self._last_quant_log_step,
            "architecture": self.architecture.to_dict() if self.architecture is not None else None,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.intermediate_values = {int(k): float(v) for k, v in state_dict.get("intermediate_values", {}).items()}
        self.pruned = bool(state_dict.get("pruned", False))
        self.pruned_at_step = state_dict.get("pruned_at_step")
        self.stop_reason = str(state_dict.get("stop_reason", ""))
        self._validations = int(state_dict.get("validations", 0))
        self._last_quant_log_step = int(state_dict.get("last_quant_log_step", -1))
        saved = state_dict.get("architecture")
        if saved is not None and self.architecture is not None and Architecture.from_dict(saved) != self.architecture:
            rank_zero_warn(
                f"CoDesignCallback: the checkpoint was trained with architecture {saved} but this run scores "
                f"{self.architecture.to_dict()}",
                category=CoDesignWarning,
            )

    # ------------------------------------------------------------ public API
    def check_pruned(self) -> None:
        """Raise ``optuna.TrialPruned`` if the stopping rule ended the run (call after ``trainer.fit``)."""
        if self.pruned:
            import optuna

            raise optuna.TrialPruned(f"stopped at step {self.pruned_at_step}: {self.stop_reason}")

    def prediction_metrics(self) -> dict[str, float]:
        """The prediction as the ``co_design/...`` metrics logged at fit start."""
        if self.prediction is None or self.architecture is None:
            return {}
        p = self.prediction
        metrics: dict[str, float] = {
            "co_design/output_tokens_per_s_per_gpu": float(p.output_tokens_per_s_per_gpu),
            "co_design/output_tokens_per_s_per_user": float(p.output_tokens_per_s_per_user),
            "co_design/ttft_ms": float(p.ttft_s) * 1e3,
            "co_design/ttft_p99_ms": float(p.ttft_p99_s) * 1e3,
            "co_design/tpot_ms": float(p.tpot_s) * 1e3,
            "co_design/tpot_p99_ms": float(p.tpot_p99_s) * 1e3,
            "co_design/memory_per_gpu_gb": float(p.memory_per_gpu_bytes) / 1e9,
            "co_design/batch": float(p.batch),
            "co_design/fits": float(bool(p.fits)),
        }
        for bound in _BOUNDS:  # the bound as one 0/1 metric per kind: loggers take numbers only
            metrics[f"co_design/bound_{bound}"] = float(p.bound == bound)
        counts = self.architecture.param_counts()
        metrics["co_design/params_total"] = float(counts.total)
        metrics["co_design/params_active"] = float(counts.active)
        if self.slo is not None:
            metrics["co_design/meets_slo"] = float(self.slo.met(p))
        return metrics

    # ------------------------------------------------------------ internals
    def _check_layers_exist(self, pl_module: nn.Module) -> bool:
        """Whether the module has nn.Linear layers yet; fail clearly when it builds them in
        ``configure_model`` (run after the callback's ``setup``) and the callback needs them."""
        if any(isinstance(m, nn.Linear) for m in pl_module.modules()):
            return True
        if not is_overridden("configure_model", pl_module, pl.LightningModule):
            return False  # no Linear at all: inference / quantization explain that themselves
        if self.quant_config is not None:
            raise ArchitectureError(_configure_model_message(pl_module, "fake-quantize"))
        return False  # an architecture is only scored; there are no layers to verify it with

    def _find_architecture(self, pl_module: nn.Module, *, has_layers: bool) -> None:
        if self._given_architecture is not None:
            self.architecture = self._given_architecture
            if not (self.verify_architecture and has_layers):
                return
            mismatches = architecture_mismatches(self.architecture, pl_module)
            if mismatches:
                rank_zero_warn(
                    "CoDesignCallback: the architecture passed to the callback contradicts the module: "
                    + "; ".join(mismatches)
                    + ". Predictions use the architecture passed; fix it (or pass architecture=None to infer).",
                    category=CoDesignWarning,
                )
            return
        try:
            self.inference = infer_architecture(pl_module)
        except ArchitectureError as exc:
            if is_overridden("configure_model", pl_module, pl.LightningModule):
                raise ArchitectureError(_configure_model_message(pl_module, "infer the architecture from")) from None
            raise ArchitectureError(
                f"CoDesignCallback could not infer the architecture of {type(pl_module).__name__}: {exc}"
            ) from None
        self.architecture = self.inference.architecture
        rank_zero_info(f"CoDesignCallback: {self.inference.describe()}")
        if self.inference.source != "module layers" and has_layers:
            mismatches = architecture_mismatches(self.architecture, pl_module)
            if mismatches:
                rank_zero_warn(
                    f"CoDesignCallback: the architecture from {self.inference.source} contradicts the module's "
                    f"layers: {'; '.join(mismatches)}",
                    category=CoDesignWarning,
                )

    def _predict(self, arch: Architecture) -> perf.Prediction:
        try:
            if self.deployment.concurrency is None:
                pred = perf.max_throughput(arch, self.gpu, self.deployment, slo=self.slo)
            else:
                pred = perf.predict(arch, self.gpu, self.deployment)
        except ValueError as exc:
            d = self.deployment
            layout = ", ".join(f"{f}={getattr(d, f)}" for f in ("tp", "ep", "pp", "helix") if getattr(d, f) != 1)
            raise ValueError(
                f"CoDesignCallback: deployment ({layout or 'one GPU'}) cannot serve {arch.name!r} on "
                f"{self.gpu.name}: {exc}"
            ) from None
        if not pred.fits:
            rank_zero_warn(
                f"CoDesignCallback: {arch.name!r} does not fit on {self.deployment.gpus} x {self.gpu.name} "
                f"({pred.memory_per_gpu_bytes / 1e9:.1f} GB per GPU needed); add GPUs or parallelism to the deployment",
                category=CoDesignWarning,
            )
        return pred

    def _quantize(self, pl_module: nn.Module) -> None:
        if self.quant_config is None:
            self.quantized_modules = []
            return
        if not any(isinstance(m, nn.Linear) for m in pl_module.modules()):
            raise ArchitectureError(
                f"CoDesignCallback: {type(pl_module).__name__} has no nn.Linear layers to fake-quantize at setup; "
                "build the layers in __init__ (not configure_model), or pass quant=None"
            )
        already = _quantized_module_names(pl_module)
        if already:
            self.quantized_modules = already
            formats = sorted(_quantized_formats(pl_module))
            if formats != [self.quant_config.format]:
                rank_zero_warn(
                    f"CoDesignCallback: the module is already fake-quantized to {', '.join(formats)}, so "
                    f"quant={self.quant_config.format!r} is not applied; call co_design.quant.dequantize_model(module) "
                    "before this fit to change the format",
                    category=CoDesignWarning,
                )
            else:
                rank_zero_info(
                    f"CoDesignCallback: {len(already)} layer(s) are already fake-quantized (a second fit, or "
                    "quantized by hand); not quantizing again"
                )
            self._report_coverage(quantization.quantization_coverage(pl_module))
            return
        result = quantization.quantize_model(pl_module, self.quant_config)
        self.quantized_modules = list(result)
        self._report_coverage(result.coverage)

    def _report_coverage(self, report: quantization.CoverageReport) -> None:
        """Print the coverage report and warn when it is far below what the architecture implies."""
        self.quant_coverage = report
        rank_zero_info("CoDesignCallback: " + "\n".join(report.lines()))
        share = report.fraction()
        implied = ""
        if self.architecture is not None and (self.inference is not None or self.verify_architecture):
            c = self.architecture.param_counts()
            expected = c.attention + c.dense_ffn + c.experts + c.shared_experts
            quantized = sum(report.kinds.get(k, (0, 0))[0] for k in quantization.coverage.QUANTIZABLE_KINDS)
            if expected:
                share = min(share, quantized / expected)
                implied = f" ({quantized:,} of the {expected:,} its architecture implies)"
        if share < MIN_COVERAGE:
            rank_zero_warn(
                f"CoDesignCallback: quant={self.quant_config.format!r} covers only {share:.1%} of the attention, "
                f"FFN and expert weights{implied}; skipped: {report.skipped or 'none'}; see the coverage report "
                f"above (QuantConfig.skip={list(self.quant_config.skip)})",
                category=CoDesignWarning,
            )

    def _warn_alignment(self) -> None:
        assert self.architecture is not None
        # every misaligned dimension/shard, whatever its gain: a gain near zero or negative tells the
        # user the misalignment costs nothing here, which is worth knowing too (the message then says to keep the shape)
        for advice in perf.shape_advice(self.architecture, self.gpu, self.deployment, min_gain=-math.inf):
            rank_zero_warn(f"CoDesignCallback ({self.gpu.name}): {advice.message}", category=CoDesignWarning)

    def _hyperparameters(self) -> dict[str, Any]:
        assert self.architecture is not None
        hp: dict[str, Any] = {
            "hardware": self.gpu.name,
            "architecture": self.architecture.to_dict(),
            "deployment": _plain(self.deployment),
            "quant": _plain(self.quant_config) if self.quant_config is not None else "off",
        }
        if self.slo is not None:
            hp["slo"] = _plain(self.slo)
        if self.prediction is not None:
            hp["bound"] = self.prediction.bound
        if self.inference is not None:
            hp["architecture_source"] = self.inference.source
        if self.quant_coverage is not None:
            hp["quant_kept_high_precision"] = {k: n for k, n in self.quant_coverage.kept.items() if n}
            hp["quant_skipped"] = dict(self.quant_coverage.skipped)
        return {"co_design": hp}

    def _log_prediction(self, trainer: pl.Trainer) -> None:
        metrics = self.prediction_metrics()
        if not metrics:
            return
        p = self.prediction
        assert p is not None
        rank_zero_info(
            f"CoDesignCallback: {self.architecture.name if self.architecture else ''} on "
            f"{self.deployment.gpus} x {self.gpu.name}: {p.output_tokens_per_s_per_gpu:.0f} tok/s/GPU, "
            f"{p.output_tokens_per_s_per_user:.1f} tok/s/user, TTFT {p.ttft_s * 1e3:.1f} ms, "
            f"TPOT {p.tpot_s * 1e3:.2f} ms, batch {p.batch}, {p.memory_per_gpu_bytes / 1e9:.1f} GB/GPU, "
            f"{p.bound}-bound{'' if p.fits else ', DOES NOT FIT'}"
        )
        if self.quant_coverage is not None:
            metrics.update(self.quant_coverage.metrics())
        hparams = self._hyperparameters()
        for logger in trainer.loggers:
            logger.log_hyperparams(hparams)
            logger.log_metrics(metrics, step=trainer.global_step)

    def _log_quant_stats(self, trainer: pl.Trainer, pl_module: nn.Module) -> None:
        stats = quantization.quantization_stats(pl_module)
        metrics = {f"co_design/quant/{k}": float(v) for k, v in stats.items()}
        if metrics:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)

    def _completed_history(self) -> list[dict[int, float]]:
        from optuna.trial import TrialState

        assert self.trial is not None
        history = []
        for t in self.trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            raw = t.user_attrs.get(INTERMEDIATE_VALUES_ATTR)
            if t.number == getattr(self.trial, "number", None) or not isinstance(raw, Mapping):
                continue
            values: dict[int, float] = {}
            for k, v in raw.items():
                try:
                    values[int(k)] = float(v)
                except (TypeError, ValueError):
                    continue  # a None (non-finite) or malformed entry
            history.append(values)
        return history

    def _record(self, trainer: pl.Trainer) -> float | None:
        """Store the monitored value at the current global step (and in the trial); None if absent."""
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            if not self._warned_missing_monitor:
                self._warned_missing_monitor = True
                rank_zero_warn(
                    f"CoDesignCallback: no {self.monitor!r} in trainer.callback_metrics (have "
                    f"{sorted(trainer.callback_metrics)}); log it in validation_step (self.log({self.monitor!r}, ...)) "
                    "or set monitor=",
                    category=CoDesignWarning,
                )
            return None
        loss = float(value)
        self.intermediate_values[trainer.global_step] = loss
        if self.trial is not None and trainer.is_global_zero:
            self.trial.set_user_attr(
                INTERMEDIATE_VALUES_ATTR,
                # JSON-serializable for every storage: string keys, None for NaN/inf
                {str(k): (v if math.isfinite(v) else None) for k, v in sorted(self.intermediate_values.items())},
            )
        return loss

    def _record_and_decide(self, trainer: pl.Trainer) -> None:
        loss = self._record(trainer)
        stop, reason = False, ""
        if loss is not None:
            self._validations += 1
            if self.trial is not None and self.stopping is not None and not self.pruned and trainer.is_global_zero:
                decision = self.stopping.decide(
                    trainer.global_step, loss, self._completed_history(),
                    validations=self._validations, minimize=self.mode == "min",
                )
                stop, reason = decision.stop, decision.reason
        # every rank takes rank zero's decision, so DDP processes stop together
        stop, reason = trainer.strategy.broadcast((stop, reason), src=0)
        if stop and not self.pruned:
            self.pruned = True
            self.pruned_at_step = trainer.global_step
            self.stop_reason = f"{self.monitor} {reason}"
            trainer.should_stop = True
            if self.trial is not None and trainer.is_global_zero:
                self.trial.set_user_attr(PRUNED_AT_STEP_ATTR, trainer.global_step)
            rank_zero_info(f"CoDesignCallback: stopping the run at step {trainer.global_step}: {self.stop_reason}")


def _configure_model_message(pl_module: nn.Module, verb: str) -> str:
    return (
        f"CoDesignCallback: {type(pl_module).__name__} builds its layers in configure_model, which Lightning "
        f"runs after the callback's setup, so at setup there are no layers to {verb}; build the layers in "
        "__init__, or pass architecture=... and quant=None (prediction only)"
    )


def _quantized_module_names(model: nn.Module) -> list[str]:
    """Names of modules that quantize_model already changed (FakeQuantLinear, quantized experts)."""
    names = []
    for name, module in model.named_modules():
        if isinstance(module, quantization.FakeQuantLinear) or is_fused_quantized(module) or (
            quantization.is_experts_module(module)
            and any(isinstance(getattr(module, a, None), quantization.FakeQuant)
                    for a in ("weight_quant", "input_quant"))
        ):
            names.append(name)
    return names


def _quantized_formats(model: nn.Module) -> set[str]:
    formats = set()
    for module in model.modules():
        if isinstance(module, quantization.FakeQuantLinear):
            formats.add(module.config.format)
        elif is_fused_quantized(module):
            formats.add(module._co_design_fused_spec.config.format)
        elif quantization.is_experts_module(module):
            formats.update(
                q.format for q in (getattr(module, a, None) for a in ("weight_quant", "input_quant"))
                if isinstance(q, quantization.FakeQuant)
            )
    return formats


def _plain(obj: Any) -> Any:
    """A dataclass as a plain dict (tuples as lists) for loggers' hyperparameters."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (tuple, list)):
        return [_plain(x) for x in obj]
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    return obj
