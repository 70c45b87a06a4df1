"""Read an :class:`~co_design.arch.Architecture` from what a model already carries.

One reader per library, each duck-typed (the library need not be installed):

- :mod:`co_design.readers.hf` -- Hugging Face ``config.json`` / ``PretrainedConfig``
  (transformers 4 and 5 spellings: ``attribute_map`` aliases, ``rope_parameters``,
  ``layer_types``, ``text_config``);
- :mod:`co_design.readers.litgpt` -- LitGPT ``Config`` or its ``model_config.yaml``;
- :mod:`co_design.readers.torchtitan` -- torchtitan model args;
- :mod:`co_design.readers.modules` -- a ``torch.nn.Module``: an ``Architecture`` attribute, then
  the model's own config (the readers above), then layer inspection (torch; imported on first use).

:func:`architecture_from_config` picks the reader for a config object or mapping. This package
imports no torch until a module-inspection name is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from co_design.arch import Architecture, ArchitectureError
from co_design.readers.base import ArchitectureInference
from co_design.readers.hf import architecture_from_hf, architecture_kwargs_from_hf, hf_config_mapping
from co_design.readers.litgpt import architecture_from_litgpt, is_litgpt_config
from co_design.readers.torchtitan import architecture_from_torchtitan, is_torchtitan_args

__all__ = [
    "ArchitectureInference",
    "architecture_from_config",
    "architecture_from_hf",
    "architecture_from_litgpt",
    "architecture_from_torchtitan",
    "architecture_kwargs_from_hf",
    "architecture_mismatches",
    "find_model_config",
    "hf_config_mapping",
    "infer_architecture",
    "inspect_layers",
    "is_litgpt_config",
    "is_torchtitan_args",
]

_TORCH_NAMES = ("architecture_mismatches", "find_model_config", "infer_architecture", "inspect_layers")


def architecture_from_config(config: Any, *, name: str | None = None) -> Architecture:
    """The Architecture of a model config: an ``Architecture`` as is, a LitGPT ``Config``, torchtitan
    model args, or an HF config (``PretrainedConfig`` or ``config.json`` mapping)."""
    if isinstance(config, Architecture):
        return config
    if is_litgpt_config(config):
        return architecture_from_litgpt(config, name=name)
    if is_torchtitan_args(config):
        return architecture_from_torchtitan(config, name=name)
    if isinstance(config, Mapping) or callable(getattr(config, "to_dict", None)):
        return architecture_from_hf(config, name=name)
    raise ArchitectureError(
        f"cannot read a model config of type {type(config).__name__}: give a transformers PretrainedConfig or "
        "config.json mapping, a LitGPT Config, torchtitan model args, or a co_design.Architecture"
    )


def __getattr__(name: str) -> Any:
    if name in _TORCH_NAMES:
        value = getattr(importlib.import_module("co_design.readers.modules"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'co_design.readers' has no attribute {name!r}")
