"""`dpstream validate` states how many people were stored under several spellings of their id, under the
config's `privacy.user_id_case_fold`."""

from __future__ import annotations

from pathlib import Path

from tests.flows.test_cli import dpstream
from tests.pipelines.conftest import DIM
from tests.pipelines.test_person_ids import _write_spelled_lake

CONFIG = """
[lake]
url = "raw"
features = [{features}]
label = "y"
shuffled_url = "shuffled"
rows_per_file = 200

[privacy]
unit = "user"
user_column = "customer"
max_rows_per_user = 8
{fold}

[budget]
epsilon = 1.0
delta = 1e-6
lifetime_epsilon = 4.0
ledger_url = "ledger"
"""


def _config(folder: Path, fold: str = "") -> Path:
    path = folder / "pipeline.toml"
    path.write_text(CONFIG.format(features=", ".join(f'"x{j}"' for j in range(DIM)), fold=fold))
    return path


def test_validate_prints_the_merged_people(tmp_path):
    _write_spelled_lake(str(tmp_path / "raw"))
    folded = dpstream("validate", _config(tmp_path))
    assert folded.returncode == 0, folded.stderr
    assert "1 person id(s) of 'customer' are stored in more than one spelling (3 spelling(s)" in folded.stderr
    assert "nfkc+strip+drop-format+casefold" in folded.stderr
    kept = dpstream("validate", _config(tmp_path, "user_id_case_fold = false"))
    assert kept.returncode == 0, kept.stderr
    assert "(2 spelling(s) merged into them by the rule nfkc+strip+drop-format:" in kept.stderr, kept.stderr
