"""GPU catalog as data: H100, H200, B200, GB200, B300, GB300 (+ the user's YAML files).

>>> from co_design.hardware import get_gpu
>>> get_gpu("B200").peak_flops_per_s["nvfp4"]
9000000000000.0
>>> get_gpu("H100").precisions["weights"]  # formats with real kernels: no FP4 tensor cores on Hopper
('bf16', 'fp8')

:func:`check_precision` is the one test of a deployment's formats against that
table; ``co-design predict``, the performance model, the callback and the search use it.

No torch, no numpy: the performance model and the CLI import this fast.
"""

from co_design.hardware._catalog import GPU, HARDWARE_PATH_ENV, get_gpu, list_gpus, load_gpu
from co_design.hardware._support import PRECISION_FIELDS, check_precision, supported_precisions

__all__ = ["GPU", "HARDWARE_PATH_ENV", "PRECISION_FIELDS", "check_precision", "get_gpu", "list_gpus", "load_gpu",
           "supported_precisions"]
