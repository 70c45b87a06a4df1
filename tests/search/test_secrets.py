"""No secret in any file, log or console line of the search job (search/redact.py).

The real ``python -m search`` runs with a PostgreSQL storage URL holding a password and
offline W&B; every file under the test's directory (Hydra's ``.hydra/``, ``wandb/``
with its binary run files, the results) and both console streams are searched for the
password, for a finished job and for failing ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from search.paths import REPO_ROOT
from search.redact import redact

PASSWORD = "S3CRETPASS"
# the local server trusts user postgres with any password; the URL still carries one
URL = f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:5432/test"
SHOWN = "postgresql+psycopg://postgres:***@127.0.0.1:5432/test"
FAST = ["objectives=perf_only", "strategy=sample", "n_trials=1", "plots=false", "quiet=true"]


# --------------------------------------------------------------------------- the redaction
@pytest.mark.parametrize(
    "text, shown",
    [
        (URL, SHOWN),
        (f"storage={URL}", f"storage={SHOWN}"),
        (f"storage: {URL}\n", f"storage: {SHOWN}\n"),
        (f"['storage={URL}', 'n_trials=2']", f"['storage={SHOWN}', 'n_trials=2']"),
        ("storage=postgresql+psycopg\\://u\\:pw@h\\:5432/db", "storage=postgresql+psycopg\\://u\\:***@h\\:5432/db"),  # a Hydra sweep
        ("mysql+pymysql://u:p:w@h/db?password=x&ssl=1", "mysql+pymysql://u:***@h/db?password=***&ssl=1"),
        ("+tracking.api_key=abc n_trials=3", "+tracking.api_key=*** n_trials=3"),
        ("  db_password: 'a b c'\n  token: xyz\n", "  db_password: ***\n  token: ***\n"),
        ("WANDB_API_KEY=0123abc", "WANDB_API_KEY=***"),
    ],
)
def test_redact_hides_passwords_and_secret_keys(text, shown):
    assert redact(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "postgresql+psycopg://user@host/db",
        "sqlite:///study.db",
        "journal:///tmp/study.journal",
        "objectives=[tokens_per_s_per_gpu,tokens_per_s_per_user] deployment.max_num_tokens=8192",
        "http://host:8080/path",
        "space.experts_per_token=[2,4] space.params.min_tokens_per_s_per_user=20",
    ],
)
def test_redact_leaves_text_without_a_secret_alone(text):
    assert redact(text) == text


def test_redact_walks_configs():
    cfg = {"storage": URL, "tracking": {"api_key": "abc", "tags": [f"db={URL}"]}, "max_num_tokens": 8192,
           "objectives": ("tokens_per_s_per_gpu",), "password": None, "experts_per_token": 2}
    assert redact(cfg) == {"storage": SHOWN, "tracking": {"api_key": "***", "tags": [f"db={SHOWN}"]},
                           "max_num_tokens": 8192, "objectives": ("tokens_per_s_per_gpu",), "password": None,
                           "experts_per_token": 2}


# --------------------------------------------------------------------------- the job
def _job(tmp_path, *args: str, code: str | None = None) -> subprocess.CompletedProcess:
    """``python -m search <args>`` in ``tmp_path`` (or ``python -c code`` with ``args`` as its argv)."""
    env = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    env.update(PYTHONPATH=str(REPO_ROOT), WANDB_MODE="offline", WANDB_SILENT="true", NETRC=str(tmp_path / "no-netrc"),
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "search", *args] if code is None else [sys.executable, "-c", code, *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def _assert_no_password(tmp_path, proc: subprocess.CompletedProcess) -> list:
    """The password is in neither console stream nor any file under ``tmp_path``; returns the files searched."""
    assert PASSWORD not in proc.stdout and PASSWORD not in proc.stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()]
    leaked = [str(p.relative_to(tmp_path)) for p in files if PASSWORD.encode() in p.read_bytes()]
    assert not leaked, f"the password is written in {leaked}"
    return files


@pytest.mark.slow
@pytest.mark.usefixtures("postgres_url")  # skipped without a database, a failure under CI=true
def test_a_job_with_a_database_password_writes_and_prints_it_nowhere(tmp_path):
    name = f"co-design-secrets-{uuid.uuid4().hex[:12]}"
    try:
        proc = _job(tmp_path, f"storage={URL}", f"study_name={name}", "tracking.mode=offline", *FAST,
                    f"hydra.run.dir={tmp_path / 'run'}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        files = _assert_no_password(tmp_path, proc)
    finally:
        import optuna

        try:
            optuna.delete_study(study_name=name, storage=URL)
        except KeyError:
            pass
    run = tmp_path / "run"
    # the places the password used to be, still there with the URL hidden
    for f in ("overrides.yaml", "hydra.yaml", "config.yaml"):
        assert SHOWN in (run / ".hydra" / f).read_text()
    runs = [p for p in files if p.suffix == ".wandb"]
    assert len(runs) == 2  # one trial run, one summary run: W&B did record the command line
    assert all(f"storage={SHOWN}".encode() in p.read_bytes() for p in runs)
    assert f"storage {SHOWN}" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, says",
    [
        # the database refuses the connection: a configuration error naming the storage, password hidden
        ([URL.replace("postgres:", "no_such_role:")], "storage='postgresql+psycopg://no_such_role:***@"),
        ([URL, "n_trials=abc"], "Error merging override n_trials=abc"),  # Hydra's own error
    ],
    ids=["refused", "bad_override"],
)
def test_a_failing_job_does_not_print_the_password(tmp_path, args, says):
    storage, *more = args
    proc = _job(tmp_path, f"storage={storage}", *more, "tracking=off", "objectives=perf_only",
                f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode != 0
    assert says in proc.stderr
    _assert_no_password(tmp_path, proc)


@pytest.mark.parametrize("what, shows", [("job", f"storage: {SHOWN}"), ("hydra", f"- storage={SHOWN}")])
def test_printing_the_config_hides_the_password(tmp_path, what, shows):
    # Hydra prints --cfg itself, without running the job: the console streams are redacted for it
    proc = _job(tmp_path, f"storage={URL}", "--cfg", what)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shows in proc.stdout.splitlines() or shows in proc.stdout
    _assert_no_password(tmp_path, proc)


def test_the_console_streams_redact_what_is_written(capsys):
    import io

    from search.redact import _RedactingStream

    buf = io.StringIO()
    stream = _RedactingStream(buf)
    print(f"storage={URL}", file=stream)
    stream.writelines([f"url {URL}\n", "plain\n"])
    stream.flush()  # delegated to the wrapped stream
    assert buf.getvalue() == f"storage={SHOWN}\nurl {SHOWN}\nplain\n"


# A job whose run fails unexpectedly (a lost database, a bug), with the storage URL in its message
_CRASH = """
import runpy, sys
import search.app

def run(cfg, **kw):
    raise RuntimeError(f"lost the database at {cfg.storage}")

search.app.run = run
sys.argv[0] = "search"
runpy.run_module("search", run_name="__main__")
"""


def test_an_unexpected_error_is_one_redacted_line_not_hydras_report(tmp_path):
    proc = _job(tmp_path, f"storage={URL}", "tracking=off", f"hydra.run.dir={tmp_path / 'run'}", code=_CRASH)
    assert proc.returncode == 1
    assert "Error executing job with overrides" not in proc.stderr  # Hydra's report, every override in it
    errors = tmp_path / "run" / "errors.log"
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: RuntimeError: lost the database at {SHOWN} (traceback in {errors})"
    )
    assert "Traceback" in errors.read_text() and SHOWN in errors.read_text()
    _assert_no_password(tmp_path, proc)


@pytest.mark.slow
def test_a_multirun_logs_and_writes_no_password(tmp_path):
    """Hydra's launcher logs each job's overrides (colons escaped) and writes multirun.yaml."""
    noop = _CRASH.replace('raise RuntimeError(f"lost the database at {cfg.storage}")', "return None")
    proc = _job(tmp_path, "--multirun", f"storage={URL}", "tracking=off", "quiet=true,false",
                f"hydra.sweep.dir={tmp_path / 'sweep'}", code=noop)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "#1 : storage=postgresql+psycopg\\://postgres\\:***@" in proc.stdout + proc.stderr
    assert SHOWN in (tmp_path / "sweep" / "multirun.yaml").read_text()
    _assert_no_password(tmp_path, proc)
