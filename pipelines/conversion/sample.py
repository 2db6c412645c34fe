"""The rows of a CSV that ``dpstream convert`` spends on private bounds and leaves out of the lake: a fixed,
public sample of rows or of people (``dpstream.pipelines.preprocessing.private_bounds``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from dpstream.pipelines.shuffle.users import keyed_hashes

__all__ = ["sample_mask", "person_sample_mask"]


def person_sample_mask(ids: pa.Array | pa.ChunkedArray, every: int) -> np.ndarray:
    """True for the rows whose person is in the sample: a fixed, public partition of the id space (the
    SipHash of the id's text under pandas' public default key, modulo ``every``), so a person is wholly
    in the sample or wholly in the lake, whatever file or batch holds their rows. The id is normalised
    first, case folded (``person_ids``): every spelling of a person falls on one side, under either
    setting of ``privacy.user_id_case_fold`` the lake is later trained with (case folding only merges)."""
    return keyed_hashes(ids, None) % np.uint64(every) == 0


def sample_mask(offset: int, num_rows: int, every: int) -> np.ndarray:
    """True for the rows of a batch starting at data row ``offset`` whose position is a multiple of ``every``."""
    return (np.arange(offset, offset + num_rows) % every) == 0
