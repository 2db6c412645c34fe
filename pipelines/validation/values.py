"""The checks of the values a batch of a lake's rows holds: no null, NaN or inf in a used column, every
feature vector of one length, and a classifier's label contract.

Each refusal is a ``LakeError`` naming the file, the column and the row (``dpstream.pipelines.validation.validate``
runs them over every file; a shuffle runs them again where the filesystem does not pin the bytes read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.memory import sum_is_finite

if TYPE_CHECKING:
    from dpstream.models.kinds.base import LabelContract

__all__ = ["SHOWN_VALUES", "file_name", "check_class_labels", "check_values"]

# A classifier's label contract (dpstream.models.kinds.base.LabelContract: two classes coded {0, 1} or
# {−1, +1}, or the positions 0..K−1 of a public class list) is fixed in advance, so checking a lake
# against it releases nothing beyond the refusal to the operator.
SHOWN_VALUES = 8


def file_name(path: str) -> str:
    """The name of the file at ``path``: what a message names."""
    return path.rsplit("/", 1)[-1]


def check_class_labels(
    values: np.ndarray, seen: set[float], path: str, spec: LakeSpec, labels: LabelContract
) -> None:
    """Add the label values of a batch to ``seen``; refuse as soon as they fit none of the contract's
    public label sets."""
    seen.update(float(v) for v in np.unique(values)[: SHOWN_VALUES + 1])
    if not any(seen <= allowed for allowed in labels.allowed()):
        shown = sorted(seen)[:SHOWN_VALUES]
        more = ", ..." if len(seen) > SHOWN_VALUES else ""
        raise LakeError(
            f"{file_name(path)}: label column {spec.label!r} holds the values {{{', '.join(f'{v:g}' for v in shown)}{more}}}, "
            f"but this classifier needs {labels.describe()}; list the classes in model.classes (in the order of "
            "their codes), recode the label column (`dpstream convert --label-classes A,B,C`), or use "
            "model.kind = 'linear' for a continuous target"
        )


def check_values(
    batch: pa.RecordBatch | pa.Table,
    spec: LakeSpec,
    path: str,
    offset: int = 0,
    width: int = -1,
    labels_seen: set[float] | None = None,
    labels: LabelContract | None = None,
) -> int:
    """Check the used columns of one batch of rows that start at row ``offset`` of ``path``: no null, NaN or
    inf, every vector of the same length, and (``labels_seen`` given) the classifier's label contract ``labels``.
    Returns the vector width (``width`` when known, else the first row's)."""
    for column in spec.columns:
        values = batch.column(column)
        if pa.types.is_list(values.type) or pa.types.is_fixed_size_list(values.type):
            lengths = pc.list_value_length(values).to_numpy(zero_copy_only=False)
            expected = width if width > 0 else int(lengths[0])
            wrong = np.flatnonzero(lengths != expected)
            if wrong.size:
                row = offset + int(wrong[0])
                raise LakeError(
                    f"{file_name(path)}: row {row} of column {column!r} has a vector of length "
                    f"{int(lengths[wrong[0]])}, expected {expected}; every feature vector must have the same length"
                )
            width = expected
            values = pc.list_flatten(values)
            stride = expected
        else:
            stride = 1
        if values.null_count:
            row = offset + int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0]) // stride
            raise LakeError(
                f"{file_name(path)}: row {row} of column {column!r} is missing (null); drop or impute it"
            )
        numbers = values.to_numpy(zero_copy_only=False)
        if numbers.dtype.kind == "f" and not sum_is_finite(numbers):
            bad = np.flatnonzero(~np.isfinite(numbers))
            if bad.size:
                row = offset + int(bad[0]) // stride
                raise LakeError(
                    f"{file_name(path)}: row {row} of column {column!r} is {numbers[bad[0]]}; remove or impute "
                    "non-finite values before training"
                )
        if labels_seen is not None and labels is not None and column == spec.label:
            check_class_labels(numbers, labels_seen, path, spec, labels)
    return width
