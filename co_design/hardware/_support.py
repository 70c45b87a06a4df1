"""Which precisions a GPU runs natively: the one check ``predict``, the callback and the search call.

The table itself is data: the ``precisions:`` entry of each GPU file in
``co_design/hardware/data/`` (weights, activations, KV cache; each with its
public source), read into :attr:`co_design.hardware.GPU.precisions`.

>>> from co_design.hardware import check_precision, get_gpu
>>> check_precision(get_gpu("b200"), "weights", "nvfp4")  # Blackwell has FP4 tensor cores: fine
>>> check_precision(get_gpu("h100"), "weights", "nvfp4", label="--weights")
Traceback (most recent call last):
...
ValueError: --weights='nvfp4' is not supported by h100 (native weights formats: bf16, fp8); use one of those, or a GPU with nvfp4 weights: b200, gb200, b300, gb300

No torch, no numpy.
"""

from __future__ import annotations

from co_design.hardware._catalog import GPU, PRECISION_FIELDS, PRECISIONS, get_gpu, list_gpus

__all__ = ["PRECISION_FIELDS", "supported_precisions", "check_precision"]

_NOUN = {"weights": "weights", "activations": "activations", "kv_cache": "KV-cache"}


def supported_precisions(gpu: "GPU | str", field: str) -> tuple[str, ...]:
    """Formats ``gpu`` runs ``field`` (``"weights"``, ``"activations"`` or ``"kv_cache"``) in natively."""
    if field not in PRECISION_FIELDS:
        raise ValueError(f"unknown precision field {field!r}; use one of {list(PRECISION_FIELDS)}")
    return get_gpu(gpu).precisions[field]


def check_precision(gpu: "GPU | str", field: str, precision: str, *, label: str | None = None) -> None:
    """Raise ValueError (one line) unless ``gpu`` runs ``field`` natively in ``precision``.

    ``label`` names the setting in the caller's terms (``"--weights"``,
    ``"deployment.kv_cache"``); default ``"Deployment.<field>"``. The message
    names the GPU, the setting, the formats it supports and the catalog GPUs
    that would run the requested one.
    """
    gpu = get_gpu(gpu)
    label = label or f"Deployment.{field}"
    if precision not in PRECISIONS:
        raise ValueError(f"{label}={precision!r} is not a known format; use one of {', '.join(PRECISIONS)}")
    supported = supported_precisions(gpu, field)
    if precision in supported:
        return
    noun = _NOUN[field]
    try:  # catalog GPUs that do run it, as the "did you mean"
        others = [n for n in list_gpus() if precision in get_gpu(n).precisions[field]]
    except ValueError:  # a broken user catalog directory: say the rest without the list
        others = []
    alt = f", or a GPU with {precision} {noun}: {', '.join(others)}" if others else ""
    raise ValueError(f"{label}={precision!r} is not supported by {gpu.name} "
                     f"(native {noun} formats: {', '.join(supported)}); use one of those{alt}")
