"""Every CUDA path of the project, checked on one CUDA machine in one run (issue #10, item 7).

Usage (from the repository root, on the GPU machine)::

    python benchmarks/gpu_checks.py OUT [--wheels DIR] [--full-calibration] [--budget-s 540]

Steps, each in its own process with its own time limit, each run even when an earlier one failed:

1. ``env``: ``nvidia-smi``, Python, torch and its CUDA build, the device. With ``--wheels DIR`` the search's
   dependencies (:data:`SEARCH_REQUIREMENTS`) are first installed from that folder of wheels without an
   index (``pip install --no-index --find-links DIR``), for a GPU machine that cannot reach one.
2. ``cuda_tests``: the tests marked ``gpu`` (:data:`GPU_TESTS`): NVFP4 fake-quant on CUDA, compiled and
   eager, equal to the CPU result; the grouped-GEMM MoE dispatch in bf16 against the padded path; a
   two-trial search whose proxy trains on the GPU in bf16-mixed.
3. ``calibration``: ``benchmarks/calibrate_gpu.py --quick`` (``--full-calibration``: the whole sweep) into
   ``OUT/calibration``: the hardware override file and the per-shape predicted-vs-measured report.
4. ``proxy``: ``python -m search proxy=gpu space=dense`` for :data:`PROXY_TRIALS` trials of
   :data:`PROXY_TOKENS` tokens each, tracking off; its ``trials.csv`` and ``pareto.csv`` are copied into
   the step's log.

What each step prints goes to ``OUT/<step>.log``; ``OUT/gpu_checks.md`` sums them up (status, seconds,
the log's last lines). At most 8 files land in ``OUT``: the 4 logs, the summary and calibration's 3.
The steps share ``--budget-s`` seconds (default 540): each gets its own limit or what is left, whichever
is smaller. Without a CUDA device the script exits 2 before any step; otherwise its exit status is the
number of steps that failed or ran out of time.

On a machine with a package index, for a GPU machine without one (its Python version, e.g. 3.12)::

    python benchmarks/gpu_checks.py --download-wheels DIR --python-version 3.12
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
# what `python -m search` needs beyond torch and lightning, as pyproject.toml pins it
SEARCH_REQUIREMENTS = ("optuna>=5.0,<6", "hydra-core>=1.3.8,<1.4", "omegaconf>=2.3", "filelock>=3.12", "rich>=13")
GPU_TESTS = ("tests/quant/test_formats.py", "tests/model/test_moe.py", "tests/search/test_e2e.py")
# hydra-core 1.3 pins antlr4-python3-runtime 4.9.*, published as a source archive only: built here into a
# pure-Python wheel, which serves any Python 3
SOURCE_ONLY = ("antlr4-python3-runtime==4.9.3",)
PROXY_TRIALS = 2
PROXY_TOKENS = 3_000_000
TAIL_LINES = 6


@dataclass(frozen=True)
class Step:
    """One check: ``name`` (its log is ``OUT/<name>.log``), the command, its own time limit in seconds."""

    name: str
    command: tuple[str, ...]
    limit_s: float


@dataclass(frozen=True)
class Outcome:
    """How a :class:`Step` ended: ``status`` "ok", "failed (exit N)" or "timed out after N s"; seconds taken."""

    step: Step
    status: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def steps(out: Path, *, wheels: Path | None = None, full_calibration: bool = False,
          proxy_dir: Path | None = None, python: str = sys.executable) -> list[Step]:
    """The checks in the order they run (module docstring), writing under ``out``; ``proxy_dir`` is the
    search's run directory (default ``out/proxy-run``, which the script removes after copying its results)."""
    env = [
        "command -v nvidia-smi >/dev/null && nvidia-smi || echo 'nvidia-smi: not found'",
        f"{python} -c \"import sys, torch; print('python', sys.version.split()[0]); print('torch', torch.__version__, "
        "'cuda', torch.version.cuda); print('device', torch.cuda.get_device_name() if torch.cuda.is_available() "
        "else None)\"",
    ]
    if wheels is not None:
        env.append(" ".join([python, "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
                             *(f"'{r}'" for r in SEARCH_REQUIREMENTS)]))
    run_dir = proxy_dir or out / "proxy-run"
    return [
        Step("env", ("bash", "-c", " && ".join(env)), 300.0),
        Step("cuda_tests", (python, "-m", "pytest", "-p", "no:cacheprovider", "-m", "gpu", "-rs", *GPU_TESTS), 300.0),
        Step("calibration", (python, "benchmarks/calibrate_gpu.py", "--out", str(out / "calibration"),
                             *(() if full_calibration else ("--quick",))), 1200.0 if full_calibration else 300.0),
        Step("proxy", (python, "-m", "search", "proxy=gpu", "space=dense", f"n_trials={PROXY_TRIALS}",
                       f"proxy.budget.tokens={PROXY_TOKENS}", "tracking=off", "plots=false", "quiet=true",
                       "study_name=gpu-check", f"output_dir={run_dir}"), 300.0),
    ]


def run_step(step: Step, out: Path, limit_s: float) -> Outcome:
    """Run ``step`` from the repository root (the project importable, output unbuffered), its output into
    ``out/<name>.log``, for at most ``limit_s`` seconds."""
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    start = time.monotonic()
    with open(out / f"{step.name}.log", "w") as log:
        log.write(f"$ {' '.join(step.command)}\n")
        log.flush()
        proc = subprocess.Popen(step.command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=max(1.0, limit_s))
            status = "ok" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # the step and whatever it started (dataloader workers, spawned ranks)
            proc.wait()
            status = f"timed out after {limit_s:.0f} s"
    return Outcome(step, status, time.monotonic() - start)


def _tail(path: Path, n: int = TAIL_LINES) -> list[str]:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return [ln for ln in lines if ln.strip()][-n:]


def _append_proxy_results(log: Path, run_dir: Path) -> None:
    """The proxy run's ``trials.csv`` and ``pareto.csv`` appended to its log; the run directory removed."""
    with open(log, "a") as f:
        for name in ("trials.csv", "pareto.csv"):
            p = run_dir / name
            f.write(f"\n== {name}\n" + (p.read_text() if p.exists() else "(not written)\n"))
    shutil.rmtree(run_dir, ignore_errors=True)


def summary(outcomes: Sequence[Outcome], out: Path) -> str:
    """``gpu_checks.md``: one line per step, then each step's last log lines."""
    L = ["# GPU checks", "", f"Command: `python benchmarks/gpu_checks.py {out}`", "",
         "| step | status | seconds |", "|---|---|---:|"]
    L += [f"| {o.step.name} | {o.status} | {o.seconds:.0f} |" for o in outcomes]
    for o in outcomes:
        L += ["", f"## {o.step.name}", "", "```", *_tail(out / f"{o.step.name}.log"), "```"]
    return "\n".join(L) + "\n"


def download_wheels(dest: Path, python_version: str, python: str = sys.executable) -> int:
    """Fetch :data:`SEARCH_REQUIREMENTS` and their dependencies as binary wheels for CPython
    ``python_version`` on x86-64 Linux into ``dest``, after building :data:`SOURCE_ONLY` into wheels there
    (the first failing pip's exit status, else 0)."""
    build = [python, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dest), *SOURCE_ONLY]
    fetch = [python, "-m", "pip", "download", "--dest", str(dest), "--find-links", str(dest), "--only-binary=:all:",
             "--python-version", python_version, "--implementation", "cp",
             "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64", *SEARCH_REQUIREMENTS]
    for cmd in (build, fetch):
        print("$", " ".join(cmd), flush=True)
        if code := subprocess.call(cmd):
            return code
    return 0


def cuda_device() -> str | None:
    """The CUDA device's name, or None when torch sees none."""
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path, help="directory for the logs and results")
    ap.add_argument("--wheels", type=Path, default=None,
                    help="folder of wheels to install the search's dependencies from, without an index")
    ap.add_argument("--full-calibration", action="store_true", help="the whole calibration sweep, not --quick")
    ap.add_argument("--budget-s", type=float, default=540.0, help="seconds all steps share (default 540)")
    ap.add_argument("--download-wheels", type=Path, metavar="DIR", default=None,
                    help="only fetch the wheels --wheels needs into DIR (on a machine with an index)")
    ap.add_argument("--python-version", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                    help="with --download-wheels: the GPU machine's Python (default this one's)")
    args = ap.parse_args(argv)
    if args.download_wheels is not None:
        return download_wheels(args.download_wheels, args.python_version)
    if args.out is None:
        ap.error("OUT is required: the directory for the logs and results")
    if args.wheels is not None and not args.wheels.is_dir():
        ap.error(f"--wheels {args.wheels}: not a directory (make one with --download-wheels DIR)")
    device = cuda_device()
    if device is None:
        print("gpu_checks: no CUDA device (torch.cuda.is_available() is False): nothing to check here; run it on "
              "a machine with an NVIDIA GPU", file=sys.stderr)
        return 2
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"gpu_checks on {device}: logs in {out}", flush=True)
    deadline = time.monotonic() + args.budget_s
    outcomes = []
    for step in steps(out, wheels=args.wheels, full_calibration=args.full_calibration):
        left = deadline - time.monotonic()
        if left < 5:
            outcomes.append(Outcome(step, "not run: --budget-s spent", 0.0))
            continue
        o = run_step(step, out, min(step.limit_s, left))
        if step.name == "proxy":
            _append_proxy_results(out / "proxy.log", out / "proxy-run")
        print(f"{step.name}: {o.status} in {o.seconds:.0f} s", flush=True)
        outcomes.append(o)
    text = summary(outcomes, out)
    (out / "gpu_checks.md").write_text(text)
    print(text)
    return sum(not o.ok for o in outcomes)


if __name__ == "__main__":
    sys.exit(main())
