"""Smoke test: benchmarks/quant_speed.py runs end to end on tiny sizes and writes its report."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_quant_speed_benchmark_runs(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("quant_speed", REPO_ROOT / "benchmarks" / "quant_speed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "quant_speed.md"
    tiny = ["--tokens", "64", "--features", "32", "--rounds", "1", "--calls", "1", "--threads", "1"]
    figures = module.main([*tiny, "--out", str(out)])
    assert figures["linear_plain"] > 0 and figures["linear product / plain"] > 0
    assert "linear product / plain" in out.read_text()
