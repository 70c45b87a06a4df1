"""The command line explains itself: ``--help``, the key check before Hydra, multirun job dirs."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml

from search.cli_help import HELP_TAG, groups, option_help, scalar_for_list, top_level_keys, unknown_key
from search.paths import CONF_DIR, RECIPES_DIR, REPO_ROOT, group_options


def _search(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    return subprocess.run(
        [sys.executable, "-m", "search", *args], cwd=cwd or REPO_ROOT, env=env, capture_output=True, text=True,
        timeout=180,
    )


@pytest.fixture(scope="module")
def help_text() -> str:
    out = _search("--help")
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_groups_are_the_folders_of_conf_and_the_recipes():
    folders = [p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra"]
    hydra_groups = [f"hydra/{p.name}" for p in (CONF_DIR / "hydra").iterdir() if p.is_dir()]
    assert hydra_groups == ["hydra/launcher"]  # conf/hydra/launcher/: options of Hydra's own group
    assert sorted(groups()) == sorted(folders + hydra_groups + ["experiment"])
    assert groups()[0] == "hardware"  # conf/config.yaml's defaults order


def test_every_option_file_has_one_short_help_line():
    paths = sorted(p for p in CONF_DIR.rglob("*.yaml") if p.parent != CONF_DIR)
    assert any(p.parent.name == "launcher" for p in paths)
    for path in paths:
        lines = [line for line in path.read_text().splitlines() if line.startswith(HELP_TAG)]
        assert len(lines) == 1, path
        assert 0 < len(lines[0]) - len(HELP_TAG) <= 80, path


def test_help_lists_every_group_option_recipe_and_top_level_key(help_text):
    assert "powered by hydra" not in help_text.lower()
    lines = help_text.splitlines()
    for group in groups():
        assert any(line.startswith(f"{group}: ") for line in lines), group
        for option in group_options(group):
            folder = RECIPES_DIR if group == "experiment" else CONF_DIR
            what = option_help(folder / group / f"{option}.yaml")
            # "  * b200    B200 from the catalog ..." (* = the option chosen now)
            row = re.compile(rf"^  [* ] {re.escape(option)} +{re.escape(what.split()[0])}")
            assert any(row.match(line) for line in lines), (group, option)
    assert "  * b200 " in help_text and "  * tpe " in help_text  # the defaults are marked
    for key in ("n_trials=14", "study_name=co-design", "storage=null", "seed=0", "strategy=auto", "quiet=false"):
        assert re.search(rf"^  {re.escape(key)} +\w", help_text, re.M), key
    assert "--hydra-help" in help_text


def test_help_marks_the_recipe_and_shows_its_values():
    out = _search("--help", "experiment=tiny_moe_cpu", "n_trials=3")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "  * tiny_moe_cpu " in out.stdout and "  * moe_tiny " in out.stdout  # the recipe selects space=moe_tiny
    assert re.search(r"^  n_trials=3 ", out.stdout, re.M)
    assert re.search(r"^  recipe=tiny_moe_cpu ", out.stdout, re.M)


def test_hydra_help_still_works():
    out = _search("--hydra-help")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "== Flags ==" in out.stdout and "--multirun" in out.stdout


def test_option_help_falls_back_to_the_first_sentence(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "# @package _global_\n"
        "# A study on one B200, e.g. with fp8: is it worth\n"
        "# it? Second sentence.\n"
        "#   python -m search experiment=r\n"
        "n_trials: 3\n"
    )
    assert option_help(recipe) == "A study on one B200, e.g. with fp8: is it worth it?"
    tagged = tmp_path / "t.yaml"
    tagged.write_text("# help: the short line\n# A longer comment.\nname: x\n")
    assert option_help(tagged) == "the short line"


def test_top_level_keys_have_their_meaning():
    keys = top_level_keys()
    assert {"n_trials", "study_name", "storage", "seed", "quiet", "plots", "strategy"} <= set(keys)
    assert not {"hardware", "space", "proxy"} & set(keys)  # groups are listed with their options
    assert all(keys.values()), keys
    assert keys["n_trials"].startswith("finished trials")  # the comment beside the field in search/config.py
    assert keys["strategy"].startswith("auto: enumerate")  # the comment lines above it
    assert keys["seed"].startswith("seeds the sampler")  # none in search/config.py: conf/config.yaml's


@pytest.mark.parametrize(
    "arg, suggestion",
    [
        ("n_trial=5", "did you mean 'n_trials'?"),
        ("proxy.budget.step=300", "did you mean 'proxy.budget.steps'?"),
        ("hardwre=h100", "did you mean 'hardware'?"),
        ("experimnt=tiny_moe_cpu", "did you mean the config group 'experiment'?"),
    ],
)
def test_unknown_key_names_the_key_and_the_fix(arg, suggestion):
    problem = unknown_key(["-m", arg, "n_trials=3"])
    key = arg.partition("=")[0]
    assert problem is not None and problem.startswith(f"unknown key {key!r} ({arg}); {suggestion}")


@pytest.mark.parametrize(
    "args",
    [
        ["+n_trial=5"], ["++n_trial=5"], ["~storage"], ["hydra.job.chdir=true"], ["hydra.sweep.subdir=x"],
        ["hardware=h100", "experiment=tiny_moe_cpu"], ["hardware.gpu=h100", "n_trials=3", "strategy=sample"],
        ["proxy.mup.base_hidden=64"],  # below an Optional[MuPConfig]
        ["hardware.overrides.hbm_bytes_per_s=7e12"],  # below a mapping: the user's keys
        ["--cfg", "job"], ["--help"], ["-m", "seed=0,1"],
        ["--config-dir", "/my/conf", "n_trial=5"],  # the user's own configs: Hydra judges
    ],
)
def test_unknown_key_lets_through_what_hydra_should_judge(args):
    assert unknown_key(args) is None


def test_misspelt_key_stops_before_hydra_with_exit_status_2():
    out = _search("n_trial=5")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: unknown key 'n_trial' (n_trial=5); did you mean 'n_trials'?")
    assert "+n_trial" not in out.stderr  # not Hydra's hint, which the schema would then refuse


def test_a_bare_value_for_a_list_key_says_how_to_write_it():
    # Hydra's own report: "Invalid value assigned: int is not a ListConfig", no fix
    assert scalar_for_list(["deployment.tp=8"]) == (
        "deployment.tp is a list (search/config.py): write deployment.tp=[8] for that value alone "
        "(deployment.tp=8 gives it bare)")
    sweep = scalar_for_list(["-m", "deployment.tp=1,2"])
    assert "deployment.tp=[1,2] for one study that chooses among them" in sweep
    assert "-m deployment.tp=[1],[2] for one study each" in sweep
    assert scalar_for_list(["space.hidden=2048"]).startswith("space.hidden is a list")
    for fine in (["deployment.tp=[8]"], ["-m", "deployment.tp=[1],[2]"], ["deployment.tp=choice([1],[2])"],
                 ["n_trials=3"], ["-m", "seed=0,1"], ["hardware.overrides.sms=148"], ["+deployment.tp=8"]):
        assert scalar_for_list(fine) is None, fine


def test_a_bare_value_for_a_list_key_stops_before_hydra():
    out = _search("deployment.tp=8")
    assert out.returncode == 2
    assert out.stderr.strip() == ("error: deployment.tp is a list (search/config.py): write deployment.tp=[8] for "
                                  "that value alone (deployment.tp=8 gives it bare)")


@pytest.mark.slow
def test_multirun_in_another_order_finds_each_jobs_study(tmp_path):
    """Job dirs are named by their overrides: the reverse sweep resumes each GPU's own study."""
    common = ["objectives=perf_only", "strategy=sample", "n_trials=1", "study_name=mr", "tracking=off", "plots=false",
              "quiet=true", "deployment.weights=fp8", "deployment.activations=fp8"]  # fp8: the H100 serves it
    first = _search("-m", "hardware.gpu=h100,b200", *common, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.count("new study 'mr'") == 2
    second = _search("-m", "hardware.gpu=b200,h100", *common, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "already exists" not in second.stderr
    assert second.stdout.count("resuming study 'mr': 1 finished trial(s) of n_trials=1; running 0 more") == 2
    jobs = sorted(p.name for p in (tmp_path / "outputs" / "multirun" / "mr").iterdir() if p.is_dir())
    # run-time keys (n_trials, quiet, plots, tracking, study_name) name no job dir
    assert jobs == [
        f"deployment.activations=fp8,deployment.weights=fp8,hardware.gpu={gpu},objectives=perf_only,strategy=sample"
        for gpu in ("b200", "h100")
    ]


def test_the_slurm_launcher_option_is_submitits_with_one_gpu_per_worker(tmp_path):
    out = _search("worker=3", "hydra/launcher=slurm", "--cfg", "hydra")
    assert out.returncode == 0, out.stderr[-3000:]
    launcher = yaml.safe_load(out.stdout)["hydra"]["launcher"]
    assert launcher["_target_"] == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher["gpus_per_node"], launcher["tasks_per_node"], launcher["array_parallelism"]) == (1, 1, 64)



def test_the_list_key_check_stands_aside_for_configs_of_the_users_own():
    # as the unknown-key check does: another primary config may not use the schema's lists
    assert scalar_for_list(["--config-name", "mine", "deployment.tp=8"]) is None
