"""The churn path of docs/lakes.md, run exactly as written (section "String and multi-class labels"): the
R table written as a CSV, `convert` with a public class list and an id column, the generated pipeline.toml,
validate, train, report and predict, with no feature list typed by hand."""

import re
import shlex
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from tests.flows.conftest import cli_prefect_api  # noqa: F401  (the module's one Prefect API)
from tests.test_newcomer import DPSTREAM, ROOT

pytestmark = pytest.mark.usefixtures("cli_prefect_api")


def churn_commands() -> list[list[str]]:
    page = ROOT / "docs" / "lakes.md"
    section = page.read_text().split("## String and multi-class labels", 1)[1].split("\n## ", 1)[0]
    bash = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [shlex.split(line, comments=True) for line in bash.replace("\\\n", " ").splitlines()]
    return [command for command in commands if command]


@pytest.mark.slow
def test_the_documented_churn_path_from_convert_to_predict(tmp_path):
    commands = churn_commands()
    assert [command[0] for command in commands] == ["python", "mkdir", *["dpstream"] * 5]
    outputs = {}
    for command in commands:
        program = {"python": sys.executable, "dpstream": str(DPSTREAM)}.get(command[0], command[0])
        result = subprocess.run(
            [program, *command[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, (command, result.stderr[-3000:])
        outputs[command[1] if command[0] == "dpstream" else command[0]] = result.stdout
    config = (tmp_path / "churn" / "pipeline.toml").read_text()
    assert 'classes = ["No", "Yes"]' in config and '"contract=Two year"' in config and '"intercept"' in config
    line = next(line for line in outputs["train"].splitlines() if line.startswith("held-out accuracy"))
    accuracy, majority = (float(value) for value in line.split()[2:5:2])
    assert accuracy > majority + 0.03, line  # measured 0.795 against 0.734 (docs/lakes.md)
    assert "for the majority class" in outputs["report"]
    scored = pq.read_table(tmp_path / "churn" / "scored").to_pandas()
    assert scored.columns.tolist() == [
        "customer_id",
        "tenure",
        "prediction",
        "probability_No",
        "probability_Yes",
    ]
    assert set(scored["prediction"]) <= {"No", "Yes"} and scored["customer_id"].str.match(r"C\d{5}$").all()
    assert scored["tenure"].max() > 12  # months, not the lake's [-1, 1]
