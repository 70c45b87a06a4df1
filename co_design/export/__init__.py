"""``co-design export``: one shape -> the files to train, quantize and serve it.

:func:`export` writes into a directory:

- ``config.json``: a Hugging Face config ``transformers`` builds the model from
  (:mod:`co_design.export.hf_config`: Llama for dense, Qwen3-MoE or DeepSeek-V3 for MoE);
- ``arch.yaml``: the shape in the project's own format (``Architecture.load`` reads it);
- ``quantization/modelopt_quant_cfg.yaml`` and ``quantization/llmcompressor_recipe.yaml``: which
  modules go to NVFP4/FP8 and which stay 16-bit (:mod:`co_design.export.quant_recipes`; skipped for
  16-bit weights);
- ``serving/extra_llm_api_options.yaml``: the predicted best TensorRT-LLM configuration, and
  ``serving/predicted.json``: what the performance model expects of it
  (:mod:`co_design.export.serving`).

:func:`trial_architecture` reads one trial's shape from a search run directory. No torch.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from co_design.export.hf_config import hf_config, hf_extra_params, hf_family
from co_design.export.quant_recipes import (llmcompressor_recipe, llmcompressor_yaml, modelopt_config, modelopt_yaml,
                                            quantization_plan)
from co_design.export.serving import predicted_figures, serving_options, serving_yaml

if TYPE_CHECKING:
    from co_design.arch import Architecture
    from co_design.hardware import GPU
    from co_design.perf import SLO, Deployment

__all__ = [
    "export",
    "trial_architecture",
    "trial_serving",
    "trial_standing",
    "hf_config",
    "hf_family",
    "hf_extra_params",
    "modelopt_config",
    "llmcompressor_recipe",
    "quantization_plan",
    "serving_options",
    "predicted_figures",
]


def export(arch: "Architecture", out_dir: str | Path, *, gpu: "GPU | str", deployment: "Deployment",
           slo: "SLO | None" = None) -> dict[str, Path]:
    """Write the files of the module docstring into ``out_dir``; return {what: path}.

    The operating point is ``deployment.concurrency`` if given, else :func:`co_design.perf.max_throughput`'s
    (under ``slo``). ValueError (naming the field) for a shape no exported family holds.
    """
    from co_design.hardware import get_gpu
    from co_design.perf import max_throughput, predict

    gpu = get_gpu(gpu)
    config = hf_config(arch)  # refuses an unexportable shape before anything is written
    pred = predict(arch, gpu, deployment) if deployment.concurrency is not None else \
        max_throughput(arch, gpu, deployment, slo=slo)
    out = Path(out_dir)
    (out / "quantization").mkdir(parents=True, exist_ok=True)
    (out / "serving").mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}

    def write(key: str, rel: str, text: str) -> None:
        path = out / rel
        path.write_text(text)
        files[key] = path

    write("config", "config.json", json.dumps(config, indent=2) + "\n")
    a = arch.to_dict()
    write("arch", "arch.yaml", "# co-design Architecture (co_design.Architecture.load reads it)\n"
          + yaml.safe_dump(a, sort_keys=False))
    if deployment.weights in ("nvfp4", "fp8"):
        write("modelopt", "quantization/modelopt_quant_cfg.yaml", modelopt_yaml(arch, deployment))
        write("llmcompressor", "quantization/llmcompressor_recipe.yaml", llmcompressor_yaml(arch, deployment))
        write("plan", "quantization/plan.json", json.dumps(quantization_plan(arch, deployment), indent=2) + "\n")
    write("serving", "serving/extra_llm_api_options.yaml", serving_yaml(arch, pred))
    write("predicted", "serving/predicted.json", json.dumps(predicted_figures(arch, pred), indent=2) + "\n")
    return files


def trial_serving(study_dir: str | Path, trial: int) -> tuple["Deployment | None", str | None]:
    """How the search served trial ``trial`` at its throughput point: (Deployment with the point's
    concurrency, GPU name or file), from its row's ``deployment_config`` and ``batch`` and
    ``summary.json``'s ``hardware``; None for what a run directory of an older version lacks."""
    from co_design.perf import Deployment, Runtime

    d = Path(study_dir)
    summary = json.loads((d / "summary.json").read_text()) if (d / "summary.json").is_file() else {}
    for row in _rows(d):
        if str(row.get("trial")) != str(trial) or not row.get("deployment_config") or not row.get("batch"):
            continue
        cfg = row["deployment_config"]
        cfg = dict(json.loads(cfg) if isinstance(cfg, str) else cfg)
        runtime = cfg.pop("runtime", None) or {}
        known = Runtime.__dataclass_fields__
        cfg["runtime"] = Runtime(**{k: v for k, v in runtime.items() if k in known})
        cfg["concurrency"] = int(float(row["batch"]))
        return Deployment(**cfg), summary.get("hardware")
    return None, summary.get("hardware")


def trial_standing(study_dir: str | Path, trial: int) -> str | None:
    """Why trial ``trial`` of a search run directory is not a front candidate, in one sentence, or None when it is
    one (or when the directory's rows do not say: a run directory of an older version).

    From its row in ``trials.csv`` (``state``, ``pareto``, ``reason``): a trial that did not finish (PRUNED,
    infeasible shapes included, FAIL, RUNNING) or a finished one off the Pareto front. Exporting either is
    allowed (a shape picked on purpose); the sentence says what the export does not carry."""
    d = Path(study_dir)
    if not (d / "trials.csv").is_file():
        return None
    with open(d / "trials.csv", newline="") as f:
        row = next((r for r in csv.DictReader(f) if str(r.get("trial")) == str(trial)), None)
    if row is None or not row.get("state"):
        return None
    if row["state"] != "COMPLETE":
        reason = " ".join((row.get("reason") or "").split())
        return (f"trial {trial} ended {row['state']}{': ' + reason if reason else ''}; the search did not finish "
                "scoring it, so it has no trained loss (pareto.csv lists the front)")
    if row.get("pareto") == "False":
        return (f"trial {trial} is not on the Pareto front: another trial is at least as good on every objective "
                "and better on one (pareto.csv lists the front)")
    return None


def _rows(d: Path) -> list[dict[str, Any]]:
    """The result rows of a run directory: pareto.json, then trials.csv."""
    rows: list[dict[str, Any]] = []
    if (d / "pareto.json").is_file():
        rows += json.loads((d / "pareto.json").read_text())
    if (d / "trials.csv").is_file():
        with open(d / "trials.csv", newline="") as f:
            rows += list(csv.DictReader(f))
    return rows


def trial_architecture(study_dir: str | Path, trial: int) -> "Architecture":
    """The full-size shape of trial ``trial`` of a search run directory (``outputs/<name>``).

    Read from the ``arch`` of its row in ``pareto.json`` or ``trials.csv`` when the rows carry one,
    else from the trial's ``arch`` user attribute in the Optuna storage ``summary.json`` names.
    ValueError naming what is missing.
    """
    from co_design.arch import Architecture

    d = Path(study_dir)
    if not d.is_dir():
        raise ValueError(f"--study-dir {str(d)!r} is not a directory (a search run directory, e.g. outputs/co-design)")
    rows = _rows(d)
    for row in rows:
        if str(row.get("trial")) == str(trial) and row.get("arch"):
            a = row["arch"]
            data = json.loads(a) if isinstance(a, str) else a
            return Architecture.from_dict({**data, "name": data.get("name") or f"trial{trial}"})
    summary = d / "summary.json"
    if not summary.is_file():
        known = sorted({str(r.get("trial")) for r in rows}, key=lambda s: (len(s), s))
        raise ValueError(f"trial {trial} has no arch in {d}/pareto.json or trials.csv and there is no summary.json "
                         f"naming the study's storage (trials listed: {', '.join(known) or 'none'})")
    s = json.loads(summary.read_text())
    study = _load_study(s["study_name"], str(s["storage"]))
    for t in study.get_trials(deepcopy=False):
        if t.number == trial:
            if "arch" not in t.user_attrs:
                raise ValueError(f"trial {trial} of study {s['study_name']!r} has no arch (it ended "
                                 f"{t.state.name} before its shape was recorded)")
            data = dict(t.user_attrs["arch"])
            return Architecture.from_dict({**data, "name": data.get("name") or f"trial{trial}"})
    raise ValueError(f"study {s['study_name']!r} has no trial {trial} (it has {len(study.trials)} trials, 0-based)")


def _load_study(name: str, url: str) -> Any:
    """The Optuna study ``summary.json`` names: its journal file, or a database URL (ValueError when it cannot be
    opened, e.g. a URL whose password summary.json hides)."""
    import optuna

    try:
        if url.startswith("journal://"):
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            storage: Any = JournalStorage(JournalFileBackend(url[len("journal://"):]))
        else:
            storage = url
        return optuna.load_study(study_name=name, storage=storage)
    except Exception as exc:
        hint = " (summary.json hides the password: run export on a study dir whose rows carry arch)" if "***" in url \
            else ""
        raise ValueError(f"cannot open study {name!r} at {url}{hint}: {type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]}") from None

