"""The held-out evaluation of a run's released parameters (non-private, operator only), in the label's units.

The held-out file is the shuffle's last part (``Manifest.split_last_file``); training never reads it. A
regression on a lake prepared by public preprocessing (``dpstream convert``, or ``[preprocess]`` as the
shuffle reads the rows) trains on labels clipped to the label's public bounds [lo, hi] and mapped onto
``scale_range``. Scoring against those clipped labels flatters the model (a delay of 300 minutes counts as
the bound's 60, which a model fitted to clipped labels predicts well), so the shuffle keeps each row's label
as it was before clipping (``RAW_LABEL_COLUMN``, never read by training) and the model's outputs, mapped back
into the label's units (``ConvertSpec.original_units``, as ``dpstream predict`` writes them), are scored
against these raw labels:

    RMSE = sqrt(mean((ŷ_i − y_i)²)) over the held-out rows, y_i the raw label,

beside the constant predictor's: the RMSE of the held-out raw labels' own mean, the best constant on these
rows (no constant does better, so the comparison never favours the model). The share of held-out labels
the preprocessing clipped is the share of raw labels strictly outside [lo, hi]: a label equal to a bound (a
count of 0 with bounds [0, 9]) is a value the range holds, not a clipped one.

A shuffle without raw labels (made before they were kept, or of a lake converted before) is scored
against the labels as the lake holds them, mapped back, with the share of labels that sit at a bound
(clipped there or equal to it: it cannot tell) under its own key (``AT_BOUNDS_LABELS``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpstream.export import label_range
from dpstream.models import Model
from dpstream.models.kinds.base import AT_BOUNDS_LABELS, CLIPPED_LABELS, ModelKind
from dpstream.pipelines import Manifest
from dpstream.pipelines.lake.blocks import read_block, read_verified_footer
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.preprocessing.spec import RAW_LABEL_COLUMN, ConvertSpec

__all__ = ["score_holdout", "held_out_rows"]


def score_holdout(
    kind: ModelKind,
    label: str,
    holdout: Manifest,
    model: Model,
    preprocessing: dict[str, Any] | None,
    params: np.ndarray,
) -> dict[str, float]:
    """The kind's held-out metric beside its baseline (``ModelKind.evaluate``) for ``params`` on the
    ``holdout`` part(s); a regression on a preprocessed lake in the label's units, against the raw labels
    where the shuffle kept them (module docstring), with the share of them clipped."""
    X, y, raw = held_out_rows(holdout)
    outputs = model.predict_margin(X.astype(np.float64), params)
    if kind.classifies or not preprocessing:
        return kind.evaluate(outputs, y)
    spec = ConvertSpec.from_record(preprocessing)
    outputs = kind.clip_outputs(outputs, label_range(preprocessing, label))  # as predict writes them
    outputs, y = (np.asarray(spec.original_units(label, v), dtype=np.float64) for v in (outputs, y))
    if label not in spec.bounds:  # a label kept as stored: never clipped
        return kind.evaluate(outputs, y)
    low, high = spec.bounds[label]
    # A raw label that is missing (a part's rows from a file without them) or infinite cannot be scored
    # against: then the whole file is scored as the lake holds it, never a mix of the two.
    if label == spec.label and raw is not None and np.isfinite(raw).all():
        metrics = kind.evaluate(outputs, raw)
        metrics[CLIPPED_LABELS] = float(np.mean((raw < low) | (raw > high)))
        return metrics
    metrics = kind.evaluate(outputs, y)
    at_bound = np.isclose(y[:, None], np.array([low, high])[None, :], rtol=1e-9).any(axis=1)
    metrics[AT_BOUNDS_LABELS] = float(np.mean(at_bound))
    return metrics


def held_out_rows(holdout: Manifest) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(X, y, the raw labels or None) of the ``holdout`` part(s), each part checked against its manifest
    entry as it is opened (``read_block``). A user-level block's people are left out: the score weighs every
    held-out row alike. The raw labels (``RAW_LABEL_COLUMN``, NaN where a row has none) come with every
    part that holds them, else None."""
    spec = holdout.spec()
    fs, _ = spec.filesystem()
    checks = holdout.part_checks()
    # The raw labels read as the "features" of a spec of their own: the same verified read, two columns.
    raw_spec = LakeSpec(holdout.url, (RAW_LABEL_COLUMN,), holdout.label)
    carried = {
        path: RAW_LABEL_COLUMN in read_verified_footer(fs, path, check).schema.to_arrow_schema().names
        for path, check in checks.items()
    }
    Xs, ys, raws = [], [], []
    for _, path, group, _ in holdout.blocks():
        X, y = read_block(fs, path, spec, group, holdout.row_order, checks[path])[:2]
        Xs.append(X)
        ys.append(y)
        if carried[path]:
            raws.append(read_block(fs, path, raw_spec, group, holdout.row_order, checks[path])[0][:, 0])
    raw = np.concatenate(raws).astype(np.float64) if raws and all(carried.values()) else None
    return np.concatenate(Xs), np.concatenate(ys).astype(np.float64), raw
