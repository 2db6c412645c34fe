"""The ready ``pipeline.toml`` that ``dpstream convert`` writes beside the lake it made, and the column
selection it starts from when ``--columns`` is left out.

The config names the lake's features in order, the label, the model kind the label implies (``linear``
for a numeric label, ``logistic`` with the public class list for ``--label-classes``), and locations
beside the lake for the shuffled lake and the ledger, with the budget defaults of the California
example (ε = 1, δ below 1/N, a lifetime ε of 4). Every value is public: names, the class list and the
row count of the written lake (the count the ledger and ``dpstream validate`` state anyway). The file is
written atomically and never over an existing one.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv

from dpstream.pipelines.errors import LakeError
from dpstream.storage import open_url, write_bytes_atomic

__all__ = ["default_columns", "pipeline_toml", "write_pipeline_toml"]


def default_columns(
    source_url: str, used: set[str], storage_options: dict[str, Any] | None = None
) -> list[str]:
    """The CSV's numeric columns, in header order, that are not in ``used`` (the label, categorical, id and
    dropped columns). A text column left over is refused by name with the fixes, since it would otherwise
    vanish from the model without a word. Column types come from the first block, as pyarrow infers them."""
    fs, path = open_url(source_url, storage_options)
    if not fs.exists(path):
        raise LakeError(f"{source_url} does not exist; check the path")
    with fs.open(path, "rb") as handle:
        schema = pcsv.open_csv(handle).schema
    numeric, text = [], []
    for field in schema:
        if field.name in used:
            continue
        kind = field.type
        is_number = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_null(kind)
        (numeric if is_number else text).append(field.name)
    if text:
        shown = ", ".join(map(repr, text[:8])) + (" and more" if len(text) > 8 else "")
        raise LakeError(
            f"{path.rsplit('/', 1)[-1]}: column(s) {shown} hold text: give each its public categories "
            "(--categorical COLUMN=A,B,C), carry it through untouched (--id COLUMN), or leave it out (--drop COLUMN)"
        )
    if not numeric:
        raise LakeError(f"{path.rsplit('/', 1)[-1]}: no numeric column is left to use as a feature")
    return numeric


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string is a JSON string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return repr(value)


def pipeline_toml(lake_url: str, record: dict[str, Any], rows: int) -> str:
    """The config text for the lake at ``lake_url`` that ``dpstream convert`` wrote with ``record``."""
    root = lake_url.rstrip("/")
    classes = record.get("label_classes") or []
    delta = 10.0 ** math.floor(math.log10(1.0 / max(rows, 10))) / 10  # below 1/N: δ ≥ 1/N warns
    kind = "logistic" if classes else "linear"
    person = record.get("user_column")
    privacy = (
        f"""
[privacy]
unit = "user"  # the guarantee protects every row of one {person} together
user_column = {_toml_value(person)}
max_rows_per_user = "auto"  # chosen with DP when the lake is shuffled (charged to the ledger)
"""
        if person
        else ""
    )
    model = f"kind = {_toml_value(kind)}"
    if classes:
        model += (
            f"\nclasses = {_toml_value(classes)}  # the label's codes 0..{len(classes) - 1}, in this order"
        )
    return f"""# Written by `dpstream convert` for the lake at {root} ({rows:,} rows). Edit freely: every key is
# checked when a command loads the file (`dpstream validate pipeline.toml`).

[lake]
url = {_toml_value(root)}
features = {_toml_value(record["features"])}
label = {_toml_value(record["label"])}
shuffled_url = {_toml_value(root + "-shuffled")}

[model]
{model}

[algorithm]
name = "auto"  # AdaSSP for up to 256 inputs, DP-SGD above
{privacy}
[budget]
epsilon = 1.0
delta = {delta:g}  # below 1/N
relation = "replace-one"
lifetime_epsilon = 4.0
ledger_url = {_toml_value(root + "-ledger")}
"""


def write_pipeline_toml(
    config_url: str,
    lake_url: str,
    record: dict[str, Any],
    rows: int,
    storage_options: dict[str, Any] | None = None,
) -> None:
    fs, path = open_url(config_url, storage_options)
    if fs.exists(path):
        raise LakeError(
            f"{config_url} exists; pass --config to write the pipeline config elsewhere, or --no-config"
        )
    write_bytes_atomic(fs, path, pipeline_toml(lake_url, record, rows).encode())


def check_config_location(config_url: str, storage_options: dict[str, Any] | None = None) -> None:
    """Refuse before converting anything when the config would overwrite a file."""
    fs, path = open_url(config_url, storage_options)
    if fs.exists(path):
        raise LakeError(
            f"{config_url} already exists and is never overwritten; pass --config PATH for another file, or --no-config"
        )
