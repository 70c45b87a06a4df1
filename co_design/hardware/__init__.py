"""GPU catalog as data: H100, H200, B200, GB200, B300, GB300 (+ the user's YAML files).

>>> from co_design.hardware import get_gpu
>>> get_gpu("B200").peak_flops_per_s["nvfp4"]
9000000000000.0

No torch, no numpy: the performance model and the CLI import this fast.
"""

from co_design.hardware._catalog import GPU, HARDWARE_PATH_ENV, get_gpu, list_gpus, load_gpu

__all__ = ["GPU", "HARDWARE_PATH_ENV", "get_gpu", "list_gpus", "load_gpu"]
