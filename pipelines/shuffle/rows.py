"""The row shuffle's two passes: a uniform random permutation of the validated rows into exactly balanced
parts (``dpstream.pipelines.shuffle.once`` runs them into a generation's folder).

1. *Scatter*: output file j gets exactly c_j = ⌊N/M⌋ or ⌈N/M⌉ rows. Input file i sends n_ij rows to
   output j, with (n_i1..n_iM) drawn from the multivariate hypergeometric distribution over the
   capacities left after files 1..i−1; the rows of file i are permuted and cut into those slices,
   written as one scratch file (``dpstream.pipelines.shuffle.scatter_gather``).
2. *Gather*: output j concatenates its slice of every scratch file and permutes them.

Assigning rows to output slots this way and permuting within files yields a uniformly random
permutation with exactly balanced files. The randomness comes from OS entropy and is not stored.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import numpy as np

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.files import LakeFile
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.shuffle.manifest import Part
from dpstream.pipelines.shuffle.scatter_gather import (
    ROW_GROUP_ROWS,
    Slices,
    output_slices,
    read_slices,
    read_validated,
    release_slices,
    scatter_arguments,
    write_part,
    write_scratch,
    written_part,
)
from dpstream.pipelines.validation.validate import LakeSummary
from dpstream.storage import open_url

__all__ = ["scatter_rows", "gather_rows", "shuffle_rows"]


def scatter_rows(
    source: str,
    file: LakeFile,
    spec: LakeSpec,
    width: int,
    folder_url: str,
    out_options: dict,
    index: int,
    counts: np.ndarray,
    seed: int,
) -> np.ndarray:
    """Permute source file ``index`` and write its scratch file, a slice per output, under the generation
    folder; returns where each slice ends (``write_scratch``).
    The file is read only if it is still the one validated (``file.stamp``: a file swapped after
    validation is refused, never shuffled into a generation). On a local disk or S3 the stamp pins the
    bytes read, so its values are not scanned again (16-30 ms a 200,000-row file, measured); on other
    filesystems they are."""
    table, _ = read_validated(source, file, spec, width)
    table = table.take(np.random.default_rng(seed).permutation(table.num_rows))
    return write_scratch(folder_url, out_options, index, table, counts)


def gather_rows(
    folder_url: str, out_options: dict, target: int, seed: int, expected_rows: int, slices: Slices
) -> Part:
    """Concatenate and permute output ``target``'s slices of the scratch files into its part, then free
    them; refuses a part that would not hold exactly ``expected_rows`` rows."""
    fs, root = open_url(folder_url, out_options)
    path = f"{root}/part-{target:05d}.parquet"
    if fs.exists(path):
        # A retried task (its worker died after writing the part, before or while freeing its slices):
        # the part was written atomically, so it is whole; its row count is checked like a new one's.
        part = written_part(fs, path)
        if part.rows == expected_rows:
            release_slices(fs, root, slices)
            return part
    table = read_slices(fs, root, slices)
    if table is None or table.num_rows != expected_rows:
        raise LakeError(
            f"part-{target:05d}.parquet would hold {0 if table is None else table.num_rows:,} rows, not the "
            f"{expected_rows:,} its layout "
            "assigned: a scatter slice is missing or repeated (another process wrote into this shuffle's folder?). "
            "Nothing was committed; shuffle again"
        )
    table = table.take(np.random.default_rng(seed).permutation(table.num_rows))
    try:
        part = write_part(fs, path, table, ROW_GROUP_ROWS)
    except FileExistsError:  # a second run of this task (Dask ran it twice) wrote it first: the same rows
        part = written_part(fs, path)
        if part.rows != expected_rows:
            raise
    release_slices(fs, root, slices)
    return part


def shuffle_rows(
    folder_url: str,
    out_options: dict,
    spec: LakeSpec,
    summary: LakeSummary,
    outputs: int,
    run: Callable[[Callable, list[tuple], Callable[[int, Any], None]], list],
    report: Callable[[str, int], None],
) -> list[Part]:
    """The row shuffle's two passes (module docstring) into ``outputs`` exactly balanced parts."""
    num_rows = summary.num_rows
    capacity = np.full(outputs, num_rows // outputs, dtype=np.int64)
    capacity[: num_rows % outputs] += 1
    entropy = np.random.SeedSequence(secrets.randbits(128))
    allocation_rng, *seeds = entropy.spawn(1 + len(summary.files) + outputs)
    allocator = np.random.default_rng(allocation_rng)
    remaining, counts = capacity.copy(), []
    for file in summary.files:
        drawn = allocator.multivariate_hypergeometric(remaining, file.rows)
        remaining -= drawn
        counts.append(drawn)
    scatter_args = scatter_arguments(
        spec, summary, folder_url, out_options, lambda i: (counts[i], int(seeds[i].generate_state(1)[0]))
    )
    ends = run(scatter_rows, scatter_args, lambda index, _: report("scatter", summary.files[index].rows))
    slices = output_slices(ends)
    gather_args = [
        (
            folder_url,
            out_options,
            j,
            int(seeds[len(summary.files) + j].generate_state(1)[0]),
            int(capacity[j]),
            slices[j],
        )
        for j in range(outputs)
    ]
    return run(gather_rows, gather_args, lambda _, part: report("gather", part.rows))
