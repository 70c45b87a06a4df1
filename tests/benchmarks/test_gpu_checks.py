"""benchmarks/gpu_checks.py on CPU: the refusal without a CUDA device, the steps' commands (the search's
overrides compose and validate), a step's ok / failed / timed-out outcomes and its log, the summary, and the
proxy's results folded into its log."""

from __future__ import annotations

import sys

import pytest
import torch

import gpu_checks as gc  # benchmarks/ is on pytest's pythonpath (pyproject.toml)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_without_a_cuda_device_it_exits_2_before_any_step(tmp_path, capsys):
    assert gc.main([str(tmp_path / "out")]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_bad_arguments_name_the_fix(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        gc.main([])
    assert exc.value.code == 2 and "OUT is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gc.main([str(tmp_path), "--wheels", str(tmp_path / "missing")])
    assert "make one with --download-wheels DIR" in capsys.readouterr().err


def test_steps_run_the_gpu_tests_calibration_and_a_search_that_composes(tmp_path):
    from search.compose import compose_config
    from search.config import to_search_config, validate

    steps = {s.name: s for s in gc.steps(tmp_path, wheels=tmp_path / "wh")}
    assert list(steps) == ["env", "cuda_tests", "calibration", "proxy"]
    assert "--no-index --find-links" in steps["env"].command[-1]
    assert all(f"'{r}'" in steps["env"].command[-1] for r in gc.SEARCH_REQUIREMENTS)
    assert "--find-links" not in gc.steps(tmp_path)[0].command[-1]
    tests = steps["cuda_tests"].command
    assert tests[tests.index("-m", 2) + 1] == "gpu" and all((gc.ROOT / t).is_file() for t in gc.GPU_TESTS)
    assert steps["calibration"].command[-1] == "--quick"
    assert "--quick" not in gc.steps(tmp_path, full_calibration=True)[2].command
    # the search's overrides, as `python -m search` would take them: composed and validated
    overrides = steps["proxy"].command[steps["proxy"].command.index("search") + 1:]
    cfg = validate(to_search_config(compose_config(*overrides)))
    assert cfg.proxy.accelerator == "gpu" and cfg.n_trials == gc.PROXY_TRIALS
    assert cfg.proxy.budget.tokens == gc.PROXY_TOKENS and cfg.output_dir == str(tmp_path / "proxy-run")


def test_a_step_ends_ok_failed_or_timed_out_with_its_output_logged(tmp_path):
    py = sys.executable
    ok = gc.run_step(gc.Step("ok", (py, "-c", "print('hello')"), 60), tmp_path, 60)
    assert ok.ok and ok.status == "ok"
    assert (tmp_path / "ok.log").read_text().splitlines()[-1] == "hello"
    bad = gc.run_step(gc.Step("bad", (py, "-c", "import sys; sys.exit(3)"), 60), tmp_path, 60)
    assert bad.status == "failed (exit 3)" and not bad.ok
    slow = gc.run_step(gc.Step("slow", (py, "-c", "import time; time.sleep(60)"), 60), tmp_path, 1)
    assert slow.status == "timed out after 1 s" and slow.seconds < 30
    text = gc.summary([ok, bad, slow], tmp_path)
    assert "| ok | ok |" in text and "| bad | failed (exit 3) |" in text and "| slow | timed out after 1 s |" in text
    assert "## ok\n\n```\n$ " in text and "hello\n```" in text


def test_proxy_results_go_into_its_log_and_the_run_dir_is_removed(tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "proxy.log"
    run_dir.mkdir()
    (run_dir / "trials.csv").write_text("number,loss\n0,3.1\n")
    log.write_text("search output\n")
    gc._append_proxy_results(log, run_dir)
    text = log.read_text()
    assert text.startswith("search output\n") and "== trials.csv\nnumber,loss\n0,3.1\n" in text
    assert "== pareto.csv\n(not written)" in text and not run_dir.exists()


def test_the_search_requirements_are_pyprojects_own():
    # SEARCH_REQUIREMENTS copies pyproject.toml's specifiers (the script runs on a GPU machine's own Python,
    # possibly without tomllib): a change to one without the other fails here
    import tomllib

    deps = tomllib.loads((gc.ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert set(gc.SEARCH_REQUIREMENTS) <= set(deps)
