"""Smoke test: benchmarks/quant_speed.py runs end to end on tiny sizes and writes its report."""

from __future__ import annotations

from pathlib import Path

import quant_speed  # benchmarks/ is on pytest's pythonpath (pyproject.toml)


def test_quant_speed_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "quant_speed.md"
    tiny = ["--tokens", "64", "--features", "32", "--rounds", "1", "--calls", "1", "--threads", "1"]
    figures = quant_speed.main([*tiny, "--out", str(out)])
    assert figures["linear_plain"] > 0 and figures["linear product / plain"] > 0
    assert "linear product / plain" in out.read_text()
