"""Ctrl-C during `dpstream predict`: one line and exit 130, the unfinished parts removed, never a
KeyboardInterrupt traceback (one was 39 lines)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.pipelines.conftest import local_put, write_lake
from tests.pipelines.test_predict import document

ROOT = Path(__file__).resolve().parents[2]

# The scoring runs in this process (no cluster: the test is about the command's unwinding) and the
# interrupt arrives while the second file is scored, after the first part was written.
INTERRUPTING = """
import sys
from dpstream.pipelines.execution import predict
import dpstream.pipelines as pipelines

class NoCluster:
    def close(self):
        pass

pipelines.connect = lambda *args, **kwargs: NoCluster()
scored = []
score_file = predict.score_file

def score_then_interrupt(*args):
    if scored:
        raise KeyboardInterrupt
    scored.append(score_file(*args))
    return scored[-1]

predict.score_file = score_then_interrupt
predict_lake = predict.predict_lake
predict.predict_lake = lambda *args, client, **kwargs: predict_lake(*args, client=None, **kwargs)
from dpstream.flows.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_during_predict_prints_one_line_and_leaves_nothing(tmp_path):
    lake, run, out = tmp_path / "lake", tmp_path / "run", tmp_path / "scored"
    write_lake(local_put, str(lake), files=2, rows=500)
    run.mkdir()
    (run / "model.json").write_text(json.dumps(document()))
    env = {**os.environ, "DPSTREAM_LOG_DIR": str(tmp_path / "logs")}
    result = subprocess.run(
        [sys.executable, "-c", INTERRUPTING, "predict", str(run), str(lake), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 130, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"dpstream: interrupted; scoring stopped and nothing was written to {out}"), last
    assert not out.exists()  # its unfinished parts and the folder it made are gone
