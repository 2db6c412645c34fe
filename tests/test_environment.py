"""The shell environment (.ci/env.sh) and the CLI's quiet default leave nothing behind and print little."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def clean_env(tmp_path, **extra):
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PREFECT_HOME", "DASK_TEMPORARY_DIRECTORY")
    }
    env.update(TMPDIR=str(tmp_path), **extra)
    return env


def test_env_sh_removes_the_temporary_homes_it_created(tmp_path):
    script = (
        '. ./.ci/env.sh && test -d "$PREFECT_HOME" && test -d "$DASK_TEMPORARY_DIRECTORY" '
        '&& echo "$PREFECT_HOME $DASK_TEMPORARY_DIRECTORY"'
    )
    done = subprocess.run(
        ["sh", "-c", script], cwd=ROOT, env=clean_env(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    homes = done.stdout.split()
    assert len(homes) == 2 and all(home.startswith(str(tmp_path)) for home in homes)
    assert list(tmp_path.iterdir()) == []  # both removed when the shell exited


def test_env_sh_keeps_homes_the_caller_set(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    done = subprocess.run(
        ["sh", "-c", ". ./.ci/env.sh && echo $PREFECT_HOME"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=clean_env(tmp_path, PREFECT_HOME=str(mine)),
        timeout=60,
    )
    assert done.stdout.strip() == str(mine) and mine.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "mine"
    ]  # the scratch it made is gone, the caller's stays


def run_python(code: str, **env):
    full = {key: value for key, value in os.environ.items() if key != "DASK_LOGGING__DISTRIBUTED"}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=full, capture_output=True, text=True, timeout=120
    )


def test_quiet_dask_by_default_verbose_and_user_settings_win():
    check = (
        "import logging, os; from dpstream.flows.logs import quiet_dask; quiet_dask(verbose={verbose}); "
        "print(os.environ.get('DASK_LOGGING__DISTRIBUTED'), logging.getLevelName(logging.getLogger('distributed').level))"
    )
    assert run_python(check.format(verbose=False)).stdout.split() == ["warning", "WARNING"]
    assert run_python(check.format(verbose=True)).stdout.split() == ["None", "NOTSET"]
    assert run_python(check.format(verbose=False), DASK_LOGGING__DISTRIBUTED="info").stdout.split() == [
        "info",
        "INFO",
    ]


def test_logs_go_to_the_named_file_and_verbose_keeps_them_on_the_terminal(tmp_path):
    check = (
        "import logging; from pathlib import Path; from dpstream.flows.cli.log_file import capture_logs; "
        "capture_logs(Path({path!r}), verbose={verbose}); "
        "logging.getLogger('prefect').info('prefect server line'); "
        "logging.getLogger('distributed.scheduler').info('scheduler line'); "
        "logging.getLogger('some.library').warning('library warning')"
    )
    for verbose in (False, True):
        path = tmp_path / f"verbose-{verbose}.log"
        done = run_python(check.format(path=str(path), verbose=verbose), PREFECT_LOGGING_LEVEL="WARNING")
        assert done.returncode == 0, done.stderr
        written = path.read_text()
        # The file has the whole story, once per record, whatever PREFECT_LOGGING_LEVEL says for the console.
        for line in ("prefect server line", "scheduler line", "library warning"):
            assert written.count(line) == 1, written
            assert (line in done.stderr) == verbose, done.stderr


def test_log_folder_is_bounded(tmp_path, monkeypatch):
    from dpstream.flows.logs import KEEP_LOGS, new_log_file

    monkeypatch.setenv("DPSTREAM_LOG_DIR", str(tmp_path))
    (tmp_path / "notes.txt").write_text("mine")
    paths = []
    for _ in range(KEEP_LOGS + 5):
        paths.append(new_log_file("train", "run-x"))
        paths[-1].write_text("log")
    new_log_file("demo", "run").write_text("log")
    kept = sorted(p.name for p in tmp_path.glob("*-train-*.log"))
    assert len(kept) == KEEP_LOGS
    assert kept == sorted(p.name for p in paths[-KEEP_LOGS:]) and (tmp_path / "notes.txt").exists()
    assert len(list(tmp_path.glob("*-demo-*.log"))) == 1  # each command has its own bound


def test_the_environment_carries_bytecode_for_what_every_process_imports():
    """`make install` writes the libraries' bytecode and `make test` ours (Makefile, BYTECODE): where
    PYTHONDONTWRITEBYTECODE is set, a missing .pyc is compiled again in every CLI command and Dask worker
    (2.5 of the 3.8 s of a small `dpstream validate`)."""
    import importlib.util

    import distributed
    import pyarrow.parquet

    import dpstream.pipelines.lake.files

    for module in (distributed, pyarrow.parquet, dpstream.pipelines.lake.files):
        cached = Path(importlib.util.cache_from_source(module.__file__))
        assert cached.exists(), (
            f"{module.__name__}: no bytecode at {cached}; run `make install` / `make test`"
        )
