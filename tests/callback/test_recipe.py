"""recipes/callback_example.py runs end to end (a few steps)."""

import importlib.util
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "callback_example.py"


def test_callback_example_runs(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("callback_example", RECIPE)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    result = recipe.main(["--max-steps", "3", "--log-dir", str(tmp_path)])
    assert result["steps"] == 3 and result["output_tokens_per_s_per_gpu"] > 0
    out = capsys.readouterr().out
    assert "architecture inferred from module layers" in out and "vocab: tok_emb.num_embeddings" in out
    assert "co_design/output_tokens_per_s_per_gpu" in out and "co_design/quant/weight_relative_error_mean" in out
