"""The performance model is pure Python: importing it loads neither torch nor numpy."""

import subprocess
import sys


def test_perf_and_cli_import_without_torch_or_numpy():
    code = ("import sys, co_design.perf, co_design.hardware, co_design.cli; "
            "print(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split())
    assert not {"torch", "numpy"} & loaded


def test_public_api():
    import co_design.hardware as hw
    import co_design.perf as perf

    for name in ("Deployment", "SLO", "Prediction", "OpCost", "MemoryBreakdown", "Advice", "predict",
                 "max_throughput", "pareto", "shape_advice", "Precision", "anchor_runtime", "TPOTMeasurement"):
        assert name in perf.__all__ and hasattr(perf, name)
    for name in ("GPU", "get_gpu", "list_gpus", "load_gpu"):
        assert name in hw.__all__ and hasattr(hw, name)
