"""The demo is a real pipeline: privacy statements, ledger charges and the refusal are computed."""

import io
import json

from rich.console import Console

from dpstream.demo import DemoConfig, main, run


def test_demo_runs_and_charges_the_ledger(tmp_path):
    buffer = io.StringIO()
    config = DemoConfig(rows=20_000, dim=4, steps=64)
    run(config, str(tmp_path), Console(file=buffer, width=200))
    output = buffer.getvalue()
    for name in ("independent", "lambda", "nu", "tree"):
        assert name in output
    assert "A fifth run is refused" in output
    runs = sorted((tmp_path).glob("*/runs/*.json"))
    assert [p.stem for p in runs] == ["demo-independent", "demo-lambda", "demo-nu", "demo-tree"]
    assert {json.loads(p.read_text())["status"] for p in runs} == {"committed"}
    secrets_seen = [p.read_text() for p in runs]
    assert not any("secret" in text for text in secrets_seen)


def test_demo_bad_arguments_exit_2(capsys):
    assert main(["--rows", "10", "--steps", "100"]) == 2
    assert "rows (10) must be at least steps (100)" in capsys.readouterr().out


def test_demo_training_section(tmp_path):
    from dpstream.demo import train_models

    buffer = io.StringIO()
    train_models(DemoConfig(), str(tmp_path), Console(file=buffer, width=200), rows=120_000)
    output = buffer.getvalue()
    for label in ("AdaSSP", "DP-AMBSSGD", "ν-DP-FTRL", "Accelerated-DP-SRGD", "non-private least squares"):
        assert label in output
    assert "guarantee" in output  # the privacy report
    runs = sorted(p.stem for p in tmp_path.glob("synthetic-regression/runs/*.json"))
    assert runs == ["demo-ambssgd", "demo-dpsgd", "demo-srgd", "demo-ssp"]
