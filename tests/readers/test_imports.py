"""The config readers stay torch-free (co-design predict reads config.json files through them)."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["co_design.readers", "co_design.readers.hf", "co_design.readers.litgpt",
                                    "co_design.readers.torchtitan"])
def test_config_readers_import_without_torch(module):
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split())
    assert not {"torch", "numpy", "transformers", "litgpt"} & loaded


def test_module_inspection_is_reached_through_the_package():
    import co_design.readers as r
    from co_design.readers import modules

    assert r.infer_architecture is modules.infer_architecture and r.inspect_layers is modules.inspect_layers
