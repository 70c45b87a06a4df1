"""Dependencies flow one way: each package imported alone in a fresh interpreter.

precision -> hardware -> perf -> search; readers need no torch; quant and model stand alone
on torch; the callback uses perf, quant and readers; nothing in co_design imports the search job.
"""

import subprocess
import sys

import pytest

FORBIDDEN = {
    "co_design": {"torch", "lightning", "optuna", "hydra", "wandb", "search"},
    "co_design.arch": {"torch", "lightning", "optuna", "hydra", "wandb", "search"},
    "co_design.hardware": {"torch", "numpy", "lightning", "optuna", "hydra", "wandb", "search"},
    "co_design.perf": {"torch", "numpy", "lightning", "optuna", "hydra", "wandb", "search"},
    "co_design.precision": {"torch", "numpy", "lightning", "optuna", "hydra", "wandb", "search", "co_design.perf"},
    "co_design.readers": {"torch", "numpy", "lightning", "optuna", "hydra", "wandb", "search", "transformers", "litgpt"},
    "co_design.quant": {"lightning", "optuna", "hydra", "wandb", "search", "co_design.perf", "co_design.model"},
    "co_design.model": {"lightning", "optuna", "hydra", "wandb", "search", "co_design.perf"},
    "co_design.callback": {"hydra", "wandb", "search"},
}


# importing Lightning takes ~5 s on 2 cores: that case is slow
@pytest.mark.parametrize("module", [pytest.param(m, marks=pytest.mark.slow) if m == "co_design.callback" else m
                                    for m in sorted(FORBIDDEN)])
def test_module_imports_only_what_it_may(module):
    code = (
        "import sys, importlib; importlib.import_module(%r); "
        "print(' '.join(sorted(m for m in sys.modules)))" % module
    )
    loaded = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split())
    bad = sorted(m for m in FORBIDDEN[module] if m in loaded)
    assert not bad, f"importing {module} loads {bad}"


def test_public_api_resolves():
    import co_design

    for name in co_design.__all__:
        assert getattr(co_design, name) is not None, name
