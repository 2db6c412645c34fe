"""docs/scikit-learn.md runs as written: its Python blocks, in order, as one script, and what they print
is what the page says they print."""

import contextlib
import io
import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "scikit-learn.md"


def test_the_scikit_learn_page_runs_and_says_what_it_prints():
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) >= 5
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile("\n".join(blocks), str(PAGE), "exec"), {"__name__": "docs"})
    lines = printed.getvalue().splitlines()
    assert lines[0].startswith("7 ")  # 6 candidate fits and the refit charged
    assert any("has epsilon=" in line and "left after" in line for line in lines)  # cross_val_score refused
    assert any("'standardscaler' (StandardScaler)" in line for line in lines)
    assert any("pipeline releases" in line for line in lines)
    assert any("does not take sample_weight" in line for line in lines)
