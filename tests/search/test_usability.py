"""What a user trips over: command-line mistakes, impossible deployments, Ctrl-C inside a proxy run,
failed-trial tracebacks, log-file output, seed reproducibility."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import lightning as L
import pytest
import torch
from optuna.trial import TrialState
from torch.utils.data import DataLoader, IterableDataset

from search.app import run
from search.compose import compose_config
from search.config import ConfigError, show_progress_bars, to_search_config, validate
from search.paths import REPO_ROOT, unknown_group_option
from search.results import print_pareto_table

TINY = [
    "space=dense_tiny",
    "proxy=tiny",
    "proxy.budget.steps=4",
    "proxy.budget.val_every_steps=2",
    "proxy.data.seq_len=32",
    "proxy.data.batch_size=2",
    "proxy.data.val_batches=1",
    "proxy.warmup_steps=1",
    "space.hidden=[128,256]",
    "space.layers=[2,3]",
    "quiet=true",
    "plots=false",
    "tracking=off",
]


# --------------------------------------------------------------------------- command line
@pytest.mark.parametrize(
    "arg, group",
    [("sampler=nsga4", "sampler"), ("hardware=b2OO", "hardware"), ("space=foo", "space"),
     ("experiment=nope", "experiment"), ("+experiment=nope", "experiment")],
)
def test_unknown_group_option_names_the_group_and_the_known_options(arg, group):
    msg = unknown_group_option([arg, "tracking=off"])
    assert msg is not None and msg.startswith(f"unknown {group} ")
    known = {"sampler": "gp, nsga2, nsga3, random, tpe", "space": "dense, dense_1b, dense_tiny, moe, moe_tiny"}.get(group)
    if known:
        assert f"known: {known}" in msg
    if group == "experiment":
        assert "tiny_moe_cpu" in msg and "recipes/experiment/" in msg


@pytest.mark.parametrize(
    "args",
    [["sampler=nsga2", "experiment=tiny_moe_cpu", "space.alignment=256"], ["sampler=tpe,nsga2"],
     ["hydra.searchpath=[file:///elsewhere]", "sampler=mine"], ["experiment=null"]],
)
def test_known_options_sweeps_and_user_search_paths_pass(args):
    assert unknown_group_option(args) is None


def test_cli_reports_an_unknown_option_in_one_line_with_status_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    res = subprocess.run([sys.executable, "-m", "search", "sampler=nsga4"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip() == (
        "error: unknown sampler 'nsga4' (sampler=nsga4); known: gp, nsga2, nsga3, random, tpe (the files in conf/sampler/)"
    )
    assert not (tmp_path / "outputs").exists()


def test_each_progress_line_is_flushed_for_a_log_file(monkeypatch):
    # stdout into a file or pipe is block-buffered: an enumeration of a large space ran 13 minutes
    # with nothing in its log, not even the line saying it had started
    import io

    from search.console import say

    class Log(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.flushed: list[str] = []

        def flush(self) -> None:
            self.flushed.append(self.getvalue())

    log = Log()
    monkeypatch.setattr(sys, "stdout", log)
    say("enumerating 1,234 suggestion combinations")
    assert log.flushed and log.flushed[-1] == "enumerating 1,234 suggestion combinations\n"


# --------------------------------------------------------------------------- validation
def _problems(*overrides: str) -> str:
    with pytest.raises(ConfigError) as e:
        validate(to_search_config(compose_config(*overrides)))
    return str(e.value)


def test_a_tp_that_divides_no_candidates_heads_is_refused_before_any_trial():
    msg = _problems("space=dense_tiny", "deployment.tp=[16]", "deployment.gpus=16")  # dense_tiny: 2-8 heads
    assert "no parallelism choice of deployment (tp=[16]" in msg and "tp=16 does not divide heads=" in msg
    assert "space.heads_multiple" in msg
    assert "helix=4 must divide tp=2" in _problems("space=dense_tiny", "deployment.tp=[2]", "deployment.helix=[4]")
    # a choice that serves part of the space is allowed (the rest is pruned before training)
    validate(to_search_config(compose_config("space=dense_tiny", "deployment.tp=[3]")))


def test_an_alignment_the_head_dim_does_not_divide_gets_one_message():
    msg = _problems("space=dense_tiny", "space.alignment=96")
    assert "(1 problem(s))" in msg and "space.alignment=96 is not a multiple of the space.head_dim choice 64" in msg


def test_a_storage_url_that_cannot_be_opened_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"storage='garbage://' cannot be opened \(NoSuchModuleError"):
        run(compose_config("objectives=perf_only", "strategy=sample", "n_trials=1", "storage=garbage://", *TINY), run_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"storage='postgresql\+psycopg://u:\*\*\*@127.0.0.1:1/x' cannot be opened"):
        run(compose_config("objectives=perf_only", "strategy=sample", "n_trials=1", "storage=postgresql+psycopg://u:secret@127.0.0.1:1/x",
                           *TINY), run_dir=tmp_path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_wandb_online_without_an_api_key_is_refused_before_any_trial(tmp_path, monkeypatch):
    # it used to run the whole study, each trial's W&B run failing at its start, then the summary run
    from search.checks import check_tracking

    for var in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    args = [a for a in TINY if a != "tracking=off"]
    with pytest.raises(ConfigError, match=r"tracking.mode=online logs to W&B online, but no W&B API key is set "
                       r"\(WANDB_API_KEY, WANDB_IDENTITY_TOKEN_FILE or an entry for api.wandb.ai in ~/.netrc\): run "
                       r"`wandb login`, or use tracking.mode=offline"):
        run(compose_config("tracking.mode=online", "objectives=perf_only", "study_name=online", *args),
            run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    check_tracking(to_search_config(compose_config("tracking.mode=offline", *args)))  # offline needs no key
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    check_tracking(to_search_config(compose_config("tracking.mode=online", *args)))


def test_a_gpu_sized_proxy_on_a_cpu_machine_is_refused_before_any_trial(tmp_path):
    cfg = compose_config("experiment=dense_1b_b200_fp8_vs_nvfp4", "tracking=off", "n_trials=1")
    with pytest.raises(ConfigError, match="proxy.accelerator=gpu but this machine has no CUDA device.*objectives=perf_only"):
        run(cfg, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    # the same recipe without training runs on CPU
    res = run(compose_config("experiment=dense_1b_b200_fp8_vs_nvfp4", "objectives=perf_only", "strategy=sample", "n_trials=2",
                             "tracking=off", "quiet=true", "plots=false"), run_dir=tmp_path / "perf")
    assert res.ran == 2


# --------------------------------------------------------------------------- output
def test_no_progress_bars_in_a_log_file_and_the_table_title_is_a_plain_line(capsys):
    cfg = to_search_config(compose_config("quiet=false"))
    assert not show_progress_bars(cfg)  # pytest captures stdout: not a terminal
    from search.train import _StepProgressBar

    assert _StepProgressBar("trial 3 proxy")._get_train_description(0) == "trial 3 proxy"  # not "Epoch 0/-2"
    print_pareto_table({"pareto": []}, title="Pareto front of 'x': 0 of 1 trials")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Pareto front of 'x': 0 of 1 trials" and "no feasible COMPLETE trial" in out[1]


# --------------------------------------------------------------------------- Ctrl-C inside Lightning
class _InterruptedStream(IterableDataset):
    """Byte windows (B, T+1) until the third batch, then what Ctrl-C raises."""

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for i in range(10**6):
            if i == 2 * 2:  # third batch of 2
                raise KeyboardInterrupt
            yield torch.randint(0, 256, (33,), generator=g)


class _InterruptedData(L.LightningDataModule):
    vocab_size = 256

    def train_dataloader(self):
        return DataLoader(_InterruptedStream(), batch_size=2)

    def val_dataloader(self):
        return DataLoader([torch.zeros(33, dtype=torch.long)] * 2, batch_size=2)


@pytest.mark.slow
def test_ctrl_c_inside_a_proxy_run_ends_the_study_like_ctrl_c_between_trials(tmp_path):
    """Lightning answers Ctrl-C with SIGINT ignored and sys.exit(1): the job must still record the
    trial as interrupted, write its results, restore Ctrl-C and raise KeyboardInterrupt (status 130)."""
    before = signal.getsignal(signal.SIGINT)
    cfg = ("n_trials=2", "study_name=ctrlc-inside", "proxy.early_stopping=false", *TINY)
    with pytest.raises(KeyboardInterrupt):
        run(compose_config(*cfg), run_dir=tmp_path / "run", datamodule_factory=_InterruptedData)
    assert signal.getsignal(signal.SIGINT) is before  # Ctrl-C works again
    assert (tmp_path / "run" / "summary.json").exists()
    res = run(compose_config(*cfg), run_dir=tmp_path / "run")
    first = res.study.trials[0]
    assert first.state == TrialState.FAIL and first.user_attrs["fail_reason"].startswith("interrupted")
    assert res.finished == 2 and res.ran == 2


class _TerminatedStream(IterableDataset):
    """Byte windows (B, T+1); at the third batch the process gets SIGTERM, as from a batch system."""

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for i in range(10**6):
            if i == 2 * 2:
                os.kill(os.getpid(), signal.SIGTERM)
            yield torch.randint(0, 256, (33,), generator=g)


class _TerminatedData(_InterruptedData):
    def train_dataloader(self):
        return DataLoader(_TerminatedStream(), batch_size=2)


@pytest.mark.slow
def test_sigterm_inside_a_proxy_run_ends_the_study_like_ctrl_c(tmp_path):
    """A batch system's time limit: Lightning turned SIGTERM into a SystemExit of status 0, so the job
    ended silently, reported success, wrote no results and left its trial RUNNING."""
    from search.signals import Terminated

    before = signal.getsignal(signal.SIGTERM)
    cfg = ("n_trials=2", "study_name=term-inside", "proxy.early_stopping=false", *TINY)
    with pytest.raises(Terminated):
        run(compose_config(*cfg), run_dir=tmp_path / "run", datamodule_factory=_TerminatedData)
    assert signal.getsignal(signal.SIGTERM) is before
    assert (tmp_path / "run" / "summary.json").exists()
    res = run(compose_config(*cfg), run_dir=tmp_path / "run")
    first = res.study.trials[0]
    assert first.state == TrialState.FAIL and first.user_attrs["fail_reason"] == "interrupted (SIGTERM)"
    assert res.finished == 2 and res.ran == 2


@pytest.mark.slow
def test_a_terminated_job_says_so_writes_its_results_and_exits_143(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-m", "search", "n_trials=3", "study_name=term", *TINY, "proxy.budget.steps=100000"]
    with subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:
        out = ""
        while not out.endswith("trains its own proxy\n"):  # the last line before the first trial (flushed)
            line = proc.stdout.readline()
            assert line, out
            out += line
        time.sleep(1.0)  # inside the first proxy run (100,000 steps)
        proc.send_signal(signal.SIGTERM)
        out += proc.stdout.read()
    assert proc.returncode == 143, out
    assert "terminated (SIGTERM): finished trials are saved; run the same command to resume" in out
    assert "Received SIGTERM" not in out  # Lightning's own notice, twice, said nothing the job's line does not
    assert (tmp_path / "outputs" / "term" / "summary.json").exists()


# --------------------------------------------------------------------------- failures, seeds
def test_a_failed_trials_traceback_goes_to_errors_log_not_the_console(tmp_path, capfd):
    def boom(**kw):
        raise RuntimeError("injected failure")

    res = run(compose_config("n_trials=1", "study_name=tb", *TINY), run_dir=tmp_path / "run", train_fn=boom)
    assert res.study.trials[0].state == TrialState.FAIL
    out = capfd.readouterr()
    assert "Traceback" not in out.out + out.err
    assert "trial   0 FAIL" in out.out and "RuntimeError: injected failure" in out.out
    log = (tmp_path / "run" / "errors.log").read_text()
    assert "Traceback" in log and "RuntimeError: injected failure" in log


@pytest.mark.parametrize("sampler", ["tpe", "nsga2"])
def test_the_same_seed_proposes_the_same_shapes(tmp_path, sampler):
    def params(run_dir):
        cfg = compose_config(f"sampler={sampler}", "sampler.n_startup_trials=2", "sampler.population_size=2",
                             "objectives=perf_only", "strategy=sample", "n_trials=5", f"study_name=seed-{sampler}", *TINY)
        return [t.params for t in run(cfg, run_dir=run_dir).study.trials]

    assert params(tmp_path / "a") == params(tmp_path / "b")


def test_the_same_seed_trains_the_same_losses_on_an_idle_or_a_busy_machine(tmp_path, monkeypatch):
    # the proxy's thread count sets its loss's float rounding; when it followed the load average,
    # the same command gave another front whenever the machine was busy at start
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    values = []
    for load in (0.0, 64.0):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        cfg = compose_config("strategy=sample", "n_trials=2", "study_name=load", "proxy.early_stopping=false", *TINY)
        trials = run(cfg, run_dir=tmp_path / f"load-{load}").study.trials
        assert torch.get_num_threads() == 1  # proxy.threads' default
        values.append([t.values for t in trials])
    assert values[0] == values[1] and all(v is not None for v in values[0])


def test_proxy_threads_null_takes_every_core_the_process_may_use(monkeypatch):
    from search.train import cpu_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    assert cpu_threads(None) == 3 and cpu_threads(2) == 2


# --------------------------------------------------------------------------- resume
def test_resuming_a_study_with_other_settings_is_refused_naming_what_changed(tmp_path):
    base = ("objectives=perf_only", "strategy=sample", "study_name=same", *TINY)
    run(compose_config("n_trials=1", *base), run_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"other settings: hardware.gpu: 'b200' -> 'gb200'.*study_name=same-2"):
        run(compose_config("n_trials=2", "hardware=gb200", *base), run_dir=tmp_path)
    # run-time knobs may change: more trials with another sampler resume the study
    res = run(compose_config("n_trials=2", "sampler=random", *base), run_dir=tmp_path)
    assert res.ran == 1 and len(res.study.trials) == 2


def test_a_study_from_before_a_setting_existed_resumes_at_its_default_only(tmp_path):
    from search.study import SETTINGS_ATTR

    base = ("objectives=perf_only", "strategy=sample", "study_name=older", *TINY)
    study = run(compose_config("n_trials=1", *base), run_dir=tmp_path).study
    older = {k: v for k, v in study.user_attrs[SETTINGS_ATTR].items() if k != "deployment.arrivals"}
    study.set_user_attr(SETTINGS_ATTR, older)  # as a study created before deployment.arrivals was a setting
    with pytest.raises(ConfigError, match=r"other settings: deployment.arrivals: 'steady' -> 'burst'"):
        run(compose_config("n_trials=2", "deployment.arrivals=burst", *base), run_dir=tmp_path)
    res = run(compose_config("n_trials=2", *base), run_dir=tmp_path)  # the default: what the study ran with
    assert res.ran == 1 and res.study.user_attrs[SETTINGS_ATTR]["deployment.arrivals"] == "steady"
def test_the_perf_only_recipe_on_other_hardware_is_its_own_study():
    h100 = to_search_config(compose_config("experiment=perf_only_dense_h100_vs_b200"))
    b200 = to_search_config(compose_config("experiment=perf_only_dense_h100_vs_b200", "hardware=b200"))
    assert (h100.study_name, b200.study_name) == ("perf-only-dense-h100", "perf-only-dense-b200")


def test_proxy_sizes_are_announced_and_a_space_whose_smallest_proxy_cannot_train_is_refused(tmp_path, monkeypatch, capsys):
    import search.checks

    def never(**kw):  # pragma: no cover - must not be called
        raise AssertionError("a proxy ran")

    cfg = ("n_trials=1", "study_name=mem", *TINY)
    monkeypatch.setattr(search.checks, "TRAIN_STATE_BYTES_PER_PARAM", 10**12)  # no machine holds one parameter
    with pytest.raises(ConfigError, match=r"the smallest proxy of space='dense_tiny' has .* parameters: training it needs"):
        run(compose_config(*cfg), run_dir=tmp_path, train_fn=never)
    assert "proxies: " in capsys.readouterr().out


def test_space_corners_are_the_smallest_and_largest_candidates():
    from search.space import space_corners

    cfg = to_search_config(compose_config("space=moe_tiny"))
    small, large = space_corners(cfg.space, cfg.deployment)
    assert (small.arch.hidden, small.arch.layers, small.arch.experts) == (128, 2, 4)
    assert (large.arch.hidden, large.arch.layers, large.arch.experts) == (384, 6, 8)
    assert small.arch.param_counts().total < large.arch.param_counts().total


def test_a_precision_search_with_the_loss_objective_says_the_penalty_is_within_noise():
    from search.checks import check_precision_search as _check_precision_search

    said: list[str] = []
    _check_precision_search(to_search_config(compose_config("experiment=dense_1b_b200_fp8_vs_nvfp4", "tracking=off")),
                            said.append)
    assert len(said) == 1 and "does not resolve the quantization penalty" in said[0] and "['fp8', 'nvfp4']" in said[0]
    said.clear()
    _check_precision_search(to_search_config(compose_config("tracking=off")), said.append)
    assert not said
