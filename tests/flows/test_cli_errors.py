"""The CLI's error line names the file and the fix for failures another try cannot cure: a full disk, a
location that cannot be written, an object store out of reach (``dpstream.flows.cli.support.refuse``).
Other errors keep their type in the line."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from dpstream.flows.cli.support import EXIT_BAD_INPUT, EXIT_OTHER, Place, run_places
from dpstream.flows.cli.support import refuse as _refuse
from tests.flows.test_release_safety import write_config
from tests.pipelines.conftest import local_put, write_lake

ROOT = Path(__file__).resolve().parents[2]
LEDGER = Place("/data/ledger", "the privacy ledger (budget.ledger_url)")


def refused(capsys, error: Exception, **args) -> tuple[int, str]:
    """(exit code, the stderr lines) of ``_refuse`` for ``error``."""
    code = _refuse(error, SimpleNamespace(log_file=None, **args))
    return code, capsys.readouterr().err.strip().splitlines()


def test_a_full_disk_names_the_file_and_the_setting_that_chose_it(capsys):
    error = OSError(errno.ENOSPC, "No space left on device", "/data/ledger/lake-1/runs/nightly.json")
    code, lines = refused(capsys, error, places=[LEDGER])
    assert code == EXIT_OTHER and len(lines) == 1, lines
    assert lines[0] == (
        "dpstream: no space left on device writing /data/ledger/lake-1/runs/nightly.json: free space there "
        "(or point budget.ledger_url elsewhere) and run the command again"
    )


def test_the_innermost_location_names_the_setting_and_a_run_says_how_to_resume(capsys):
    places = [
        Place("/project", "the pipeline config's folder"),
        *run_places("/project/runs/a", "/project/operator/a"),
    ]
    error = OSError(errno.ENOSPC, "No space left on device", "/project/runs/a/model.json")
    again = "`dpstream train p.toml --run-id a` resumes the run, charged once"
    _, (line,) = refused(capsys, error, places=places, again=again)
    assert "point --output elsewhere" in line and line.endswith(f"run the command again ({again})"), line


def test_a_full_disk_under_no_known_location_still_names_the_file(capsys):
    error = OSError(errno.EDQUOT, "Disk quota exceeded", "/elsewhere/part-0.parquet")
    _, (line,) = refused(capsys, error)
    assert line.startswith("dpstream: disk quota exceeded writing /elsewhere/part-0.parquet: free space"), (
        line
    )
    assert "point the setting that names it elsewhere" in line


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.EROFS, "is on a read-only file system (Read-only file system)"),
        (errno.EACCES, "is read-only (or not writable) for this user (Permission denied)"),
        (errno.EPERM, "is read-only (or not writable) for this user (Operation not permitted)"),
    ],
)
def test_a_location_that_cannot_be_written_is_named_with_the_fix(capsys, code, words):
    error = OSError(code, os.strerror(code), "/data/ledger/lake-1/budget.json")  # PermissionError for two
    exit_code, lines = refused(capsys, error, places=[LEDGER])
    assert exit_code == EXIT_OTHER and len(lines) == 1, lines
    assert lines[0] == (
        f"dpstream: /data/ledger/lake-1/budget.json {words}: make it writable (or point budget.ledger_url "
        "elsewhere) and run the command again"
    )
    assert "PermissionError" not in lines[0] and "Errno" not in lines[0]


def test_the_cause_of_a_wrapping_error_is_found(capsys):
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/data/ledger/x.json")
        except OSError as full:
            raise RuntimeError("the publish task failed") from full
    except RuntimeError as error:
        _, (line,) = refused(capsys, error, places=[LEDGER])
    assert line.startswith("dpstream: no space left on device writing /data/ledger/x.json:"), line


def test_other_os_errors_keep_their_type_and_a_missing_file_stays_bad_input(capsys):
    code, (line,) = refused(capsys, OSError(errno.EIO, "Input/output error", "/data/x"))
    assert code == EXIT_OTHER and line == "dpstream: OSError: [Errno 5] Input/output error: '/data/x'"
    code, (line,) = refused(capsys, FileNotFoundError(errno.ENOENT, "No such file or directory", "/data/y"))
    assert code == EXIT_BAD_INPUT and line == "dpstream: [Errno 2] No such file or directory: '/data/y'"


def test_a_raw_endpoint_connection_error_names_the_endpoint_and_the_fix(capsys):
    from botocore.exceptions import EndpointConnectionError

    raw = EndpointConnectionError(endpoint_url="http://127.0.0.1:9/bucket/lake/part-0.parquet")
    for error in (raw, OSError(f"reading s3://bucket/lake/part-0.parquet failed: {raw}")):
        code, lines = refused(capsys, error)
        assert code == EXIT_OTHER and len(lines) == 1, lines
        assert lines[0].startswith(
            "dpstream: could not reach the object store at http://127.0.0.1:9/bucket/lake/part-0.parquet: "
            "check that it is running"
        ), lines[0]
        assert "AWS_ENDPOINT_URL" in lines[0] and "EndpointConnectionError" not in lines[0]


def test_an_error_that_already_names_its_fix_keeps_its_words(capsys):
    from dpstream.outages import StoreUnavailableError

    words = 'the ledger was unreachable for 600 s (EndpointConnectionError: Could not connect to the endpoint URL: "x")'
    _, (line,) = refused(capsys, StoreUnavailableError(words))
    assert line == f"dpstream: StoreUnavailableError: {words}"


def test_the_log_note_follows_the_named_fix(capsys):
    error = OSError(errno.ENOSPC, "No space left on device", "/data/ledger/x.json")
    code = _refuse(error, SimpleNamespace(log_file="/logs/train.log", places=[LEDGER]))
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_OTHER and line.endswith("run the command again (full log: /logs/train.log)"), line


@pytest.mark.skipif(not os.path.ismount("/sys"), reason="needs sysfs, where even root cannot create a folder")
def test_a_shuffled_lake_where_nothing_can_be_written_is_refused_in_one_line(tmp_path):
    """End to end: root may write anywhere a mode allows, so the unwritable place is sysfs, where creating
    a folder fails (EPERM) for root too."""
    write_lake(local_put, str(tmp_path / "raw"), files=2, rows=500)
    config = write_config(tmp_path / "project", tmp_path / "raw", extra='prepare_on = "flow"\n')
    text = config.read_text().replace("rows_per_file = 4000", "rows_per_file = 200")
    config.write_text(
        text.replace(
            f'shuffled_url = "{tmp_path / "project" / "shuffled"}"', 'shuffled_url = "/sys/dpstream-shuffled"'
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "dpstream.flows.cli.main", "shuffle", str(config), "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == EXIT_OTHER, result.stderr[-2000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("dpstream: /sys/dpstream-shuffled"), line  # the folder, or the file in it
    assert "is read-only (or not writable) for this user (Operation not permitted)" in line, line
    assert "point lake.shuffled_url elsewhere" in line and "PermissionError" not in line, line
    assert not Path("/sys/dpstream-shuffled").exists()


def test_an_interrupt_a_library_wrapped_in_its_own_error_still_exits_as_interrupted(tmp_path):
    """After Ctrl-C, pydantic's serializer reported our ``Interrupted`` as its own error ("Error calling
    function `_ser_model`: Interrupted: SIGINT", exit 2); an error reaching the top after a signal arrived
    is the interrupt: one line, 130."""
    script = (
        "import sys\n"
        "from dpstream.flows.cli import interrupt, main\n"
        "import dpstream.flows.cli.validate as command\n"
        "interrupt._unwinding['signal'] = 2\n"
        "def wrapped(args):\n"
        "    raise RuntimeError('Error calling function `_ser_model`: Interrupted: SIGINT')\n"
        "command.run = wrapped\n"
        "sys.exit(main.main(['validate', 'pipeline.toml']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 130 and len(lines) == 1, result.stderr
    assert lines[0].startswith("dpstream: interrupted; ") and "_ser_model" not in result.stderr
