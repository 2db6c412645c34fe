"""The docs' numbers come from the code, and the README's quick start is two commands."""

import re
from pathlib import Path

from benchmarks.noise_costs import table

ROOT = Path(__file__).resolve().parents[1]


def test_privacy_page_noise_cost_table_is_current():
    text = (ROOT / "docs" / "privacy.md").read_text()
    match = re.search(r"<!-- noise-cost-table:start -->\n(.*?)\n<!-- noise-cost-table:end -->", text, re.S)
    assert match, "docs/privacy.md lost its noise-cost table markers"
    assert match.group(1).strip() == table().strip(), (
        "run: python -m benchmarks.noise_costs and update docs/privacy.md"
    )


def test_readme_quick_start_is_two_commands():
    text = (ROOT / "README.md").read_text()
    quick_start = text.split("## Quick start", 1)[1].split("##", 1)[0]
    commands = re.findall(r"^make \w+", quick_start, re.M)
    assert commands == ["make demo", "make test"]
