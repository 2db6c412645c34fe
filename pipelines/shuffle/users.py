"""Contribution bounding in the shuffle: the user privacy unit on a lake (``[privacy] unit = "user"``).

The shuffle (``dpstream.pipelines.shuffle.once``) runs the row shuffle's two passes
(``dpstream.pipelines.shuffle.rows``) with three changes:

1. *Scatter* routes every row by a **keyed hash of its person's id** (a text id normalised first, so
   ``HEAVY`` and `` heavy`` are one person: ``dpstream.person_ids``; the rule is recorded in
   the manifest): SipHash-2-4 (``pandas.util.hash_array``) under a 96-bit key drawn from OS entropy for
   this shuffle and never stored
   (``HashKey``: its repr hides it from task logs). A person's rows all go to output ``hash mod M``,
   and the scratch files carry the hash in place of the id. The key dies with the shuffle, so nothing
   written can be joined back to an id. Two ids whose 64-bit hashes collide (probability about
   U²/2⁶⁵) become one person: training stays within its bounds (a coarser relation), and the
   ``"auto"`` histogram's sensitivity would be √3 instead of √2 for that pair.
2. *Gather* groups each output's rows by hash and keeps **at most k rows per person**, chosen uniformly
   at random, the people in uniformly random order, each person's rows contiguous
   (``dpstream.models.users.bound_contributions``, seeded from OS entropy). It writes each part with a
   column of dense, part-local person codes (``USER_CODE_COLUMN``: 0..U_j−1 in that random order; the
   id is never written) and row groups that end on a person's last row, so a person's rows are one
   block, read in one step: each person participates in exactly one step.
3. ``max_rows_per_user = "auto"`` chooses k with DP before the gather: the people's counts of rows,
   binned by powers of two (bin b holds people with 2^{b−1} < k_u ≤ 2^b, b ≤ 16), are released with Gaussian
   noise of std Δ/μ_k, Δ = √2 under replace-one (a person leaves one bin and joins another) and 1 under
   zero-out; k is the smallest 2^b whose noisy cumulative count reaches ``AUTO_QUANTILE`` of the noisy
   total. That is one μ_k-GDP release per person (``AUTO_MU``), charged to the lake's ledger before it
   is computed (``charge``) and recorded in the manifest; a generation reused by later runs is not
   charged again.

Under the user unit k does not change any sensitivity (a person's rows are combined into one bounded
contribution: ``dpstream.privacy.unit``); it bounds the work and memory one person can cost and how
much a few heavy people weigh in the fit.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dpstream.models.users import bound_contributions
from dpstream.person_ids import id_rule, normalised_uniques
from dpstream.pipeline_constants import AUTO_MU
from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.files import LakeFile
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.shuffle.manifest import USER_CODE_COLUMN, Part, ShuffleUnit
from dpstream.pipelines.shuffle.scatter_gather import (
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
from dpstream.privacy.relation import NeighbouringRelation
from dpstream.storage import open_url

__all__ = [
    "USER_CODE_COLUMN",
    "UserBounding",
    "keyed_hashes",
    "scatter_users",
    "user_histogram",
    "choose_max_rows",
    "gather_users",
    "user_row_groups",
    "shuffle_users",
    "AUTO_QUANTILE",
    "HashKey",
]

_HASH_COLUMN = "__dpstream_user_hash"  # scratch files only
AUTO_QUANTILE = 0.9  # k keeps every row of about 90 % of the people
BINS = 17  # k ≤ 2^16 rows: a person of more keeps 65,536 of them (fewer bins, less noise in the sum)


@dataclass(frozen=True)
class UserBounding:
    """What a user-level shuffle is asked for: the source's id column, k (a whole number, or ``"auto"``),
    and the relation the ``"auto"`` release is calibrated under."""

    user_column: str
    max_rows_per_user: int | str
    relation: NeighbouringRelation = NeighbouringRelation.REPLACE_ONE
    auto_mu: float = AUTO_MU

    def __post_init__(self) -> None:
        k = self.max_rows_per_user
        if k != "auto" and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise LakeError(f"privacy.max_rows_per_user must be a whole number ≥ 1 or 'auto', got {k!r}")
        object.__setattr__(self, "relation", NeighbouringRelation.parse(self.relation))
        if not (math.isfinite(self.auto_mu) and self.auto_mu > 0):
            raise LakeError(f"the auto bound's mu must be finite and > 0, got {self.auto_mu!r}")

    @property
    def is_auto(self) -> bool:
        return self.max_rows_per_user == "auto"

    def noise_std(self) -> float:
        """Std of the "auto" histogram's Gaussian noise: Δ/μ_k (module docstring)."""
        sensitivity = math.sqrt(2.0) if self.relation is NeighbouringRelation.REPLACE_ONE else 1.0
        return sensitivity / self.auto_mu


def keyed_hashes(
    values: pa.Array | pa.ChunkedArray, key: HashKey | str | None, case_fold: bool = True
) -> np.ndarray:
    """SipHash-2-4 of each id's person (``person_ids``: a text id normalised, with ``case_fold``) under
    ``key`` (16 characters; None: pandas' public default key, a fixed partition of people such as
    ``convert --user``'s sample) as uint64; ids of one person hash alike whatever the file or spelling.
    Each distinct stored id is normalised and hashed once (Arrow's ``dictionary_encode`` first)."""
    # Arrow's hash table, not pandas.factorize: it never builds a Python object per row (5 ms against
    # 18 ms for 250,000 string ids, measured).
    _, normalised, indices = normalised_uniques(values, case_fold)
    uniques = normalised.to_numpy(zero_copy_only=False)
    if uniques.dtype.kind in "iu":  # an integer id hashes as its decimal digits: one rule for every width
        uniques = uniques.astype(str)
    secret = key.value if isinstance(key, HashKey) else key
    options = {"hash_key": secret} if secret is not None else {}
    hashed = pd.util.hash_array(np.asarray(uniques, dtype=object), categorize=False, **options)
    return hashed[indices]


def scatter_users(
    source: str,
    file: LakeFile,
    spec: LakeSpec,
    width: int,
    folder_url: str,
    out_options: dict,
    index: int,
    outputs: int,
    key: HashKey,
) -> tuple[np.ndarray, np.ndarray]:
    """Route source file ``index``'s rows to the ``outputs`` by the keyed hash of their ids; the scratch
    file holds the hash, never the id. Returns the rows sent to each output and where each output's
    slice ends (``write_scratch``)."""
    table, _ = read_validated(source, file, spec, width)
    hashes = keyed_hashes(table.column(spec.user_column), key, spec.user_id_case_fold)
    table = table.drop_columns([spec.user_column]).append_column(_HASH_COLUMN, pa.array(hashes))
    targets = (hashes % np.uint64(outputs)).astype(np.int64)
    order = np.argsort(targets, kind="stable")
    counts = np.bincount(targets, minlength=outputs)
    return counts, write_scratch(folder_url, out_options, index, table.take(order), counts)


def user_histogram(folder_url: str, out_options: dict, slices: Slices) -> np.ndarray:
    """The people of one output (its ``slices``) binned by their number of rows (bin b: 2^{b−1} < k_u ≤ 2^b)."""
    fs, root = open_url(folder_url, out_options)
    table = read_slices(fs, root, slices, [_HASH_COLUMN])
    if table is None:
        return np.zeros(BINS, dtype=np.int64)
    _, counts = np.unique(table.column(_HASH_COLUMN).to_numpy(), return_counts=True)
    bins = np.minimum(np.ceil(np.log2(counts)).astype(np.int64), BINS - 1)
    return np.bincount(bins, minlength=BINS)


def choose_max_rows(histogram: np.ndarray, bounding: UserBounding, rng: np.random.Generator) -> int:
    """k from the noisy histogram of rows per person (module docstring, item 3). Post-processing of
    the one Gaussian release: the caller has charged μ_k before calling."""
    # The noisy counts are used as they are: clipping each bin at 0 would bias the total upwards by the
    # empty bins' positive noise and push k up.
    cumulative = np.cumsum(histogram + rng.normal(0.0, bounding.noise_std(), histogram.shape))
    if cumulative[-1] <= 0:  # noise outweighs the people: keep up to the largest bound
        return int(2 ** (histogram.size - 1))
    reached = np.flatnonzero(cumulative >= AUTO_QUANTILE * cumulative[-1])
    return int(2 ** int(reached[0]))


def user_row_groups(rows_per_user: np.ndarray, target_rows: int) -> list[tuple[int, int]]:
    """(rows, people) of each row group: whole people, each group closed at the first person's end at or
    past ``target_rows`` rows (a person of more rows is a group of its own size)."""
    ends = np.cumsum(rows_per_user)
    groups, start, first_user = [], 0, 0
    while first_user < ends.size:
        last = int(np.searchsorted(ends, start + target_rows, side="left"))
        last = min(last, ends.size - 1)
        end = int(ends[last])
        groups.append((end - start, last + 1 - first_user))
        start, first_user = end, last + 1
    return groups


def gather_users(
    folder_url: str,
    out_options: dict,
    target: int,
    seed: int,
    expected_rows: int,
    max_rows_per_user: int,
    row_group_rows: int,
    slices: Slices,
) -> Part | None:
    """Bound, order and write output ``target``'s people (module docstring, item 2) from its ``slices``
    of the scratch files, then free them; returns its part, or None when no person hashed to this
    output."""
    fs, root = open_url(folder_url, out_options)
    path = f"{root}/part-{target:05d}.parquet"
    if fs.exists(path):
        # A retried task (its worker died after writing the part, before or while freeing its slices):
        # the part was written atomically from the same rows and seed, so it is this task's result.
        part = _written_user_part(fs, path)
        release_slices(fs, root, slices)
        return part
    table = read_slices(fs, root, slices)
    rows = 0 if table is None else table.num_rows
    if rows != expected_rows:
        raise LakeError(
            f"output {target} of the shuffle received {rows:,} rows, not the {expected_rows:,} the scatter sent: a "
            "slice is missing or repeated (another process wrote into this shuffle's folder?). Nothing was "
            "committed; shuffle again"
        )
    if table is None:
        return None
    bounded = bound_contributions(
        table.column(_HASH_COLUMN).to_numpy(), max_rows_per_user, np.random.default_rng(seed)
    )
    table = table.take(bounded.rows).drop_columns([_HASH_COLUMN])
    table = table.append_column(USER_CODE_COLUMN, pa.array(bounded.users, pa.int64()))
    groups = user_row_groups(bounded.rows_per_user, row_group_rows)
    try:
        part = write_part(fs, path, table, row_group_rows, groups)
    except FileExistsError:  # a second run of this task (Dask ran it twice) wrote it first
        part = _written_user_part(fs, path)
    release_slices(fs, root, slices)
    return part


def _written_user_part(fs: Any, path: str) -> Part:
    """A user-level part as committed, its people per row group counted from its person codes (each person's
    rows lie in one row group)."""
    with fs.open(path, "rb") as handle:
        reader = pq.ParquetFile(handle)
        people = tuple(
            int(np.unique(reader.read_row_group(group, columns=[USER_CODE_COLUMN]).column(0).to_numpy()).size)
            for group in range(reader.num_row_groups)
        )
    return written_part(fs, path, people)


class HashKey:
    """A shuffle's SipHash key: 16 URL-safe characters (96 bits) from OS entropy, never stored. Its repr
    hides it: Dask logs a failed task's arguments, and this one travels to every scatter task."""

    __slots__ = ("value",)

    def __init__(self, value: str | None = None):
        self.value = value if value is not None else secrets.token_urlsafe(12)

    def __repr__(self) -> str:
        return "HashKey(<secret>)"

    __str__ = __repr__

    def __getstate__(self) -> str:
        return self.value

    def __setstate__(self, value: str) -> None:
        self.value = value


def new_key() -> HashKey:
    return HashKey()


def shuffle_users(
    folder_url: str,
    out_options: dict,
    spec: LakeSpec,
    summary: Any,
    outputs: int,
    bounding: UserBounding,
    charge: Callable[[str, float], None] | None,
    charge_id: str,
    run: Callable[[Callable, list[tuple], Callable[[int, Any], None]], list],
    report: Callable[[str, int], None],
    row_group_rows: int,
) -> tuple[list[Part], ShuffleUnit]:
    """Scatter, (for ``"auto"``: count, charge and choose k,) bound and gather the validated source
    (``summary``, read with ``spec``, whose ``user_column`` is the id column) into ``outputs`` parts
    under ``folder_url``. ``run(function, arguments, done)`` runs the tasks (here or on a cluster);
    ``charge(charge_id, mu)`` charges the ``"auto"`` release to the lake's ledger."""
    if bounding.is_auto and charge is None:
        raise LakeError(
            "privacy.max_rows_per_user = 'auto' chooses k with DP, a release charged to the lake's ledger: run "
            "it through a pipeline config (budget.ledger_url), or give a whole number of rows"
        )
    key = new_key()
    scatter_args = scatter_arguments(
        spec, summary, folder_url, out_options, lambda _, task=(outputs, key): task
    )
    scattered = run(
        scatter_users, scatter_args, lambda index, _: report("scatter", summary.files[index].rows)
    )
    del key, scatter_args  # the scratch files are all written: nothing needs the key again
    received = np.sum([counts for counts, _ in scattered], axis=0).astype(np.int64)
    slices = output_slices([ends for _, ends in scattered])
    noise_seed, *seeds = np.random.SeedSequence(secrets.randbits(128)).spawn(1 + outputs)
    max_rows = bounding.max_rows_per_user
    if bounding.is_auto:
        charge(charge_id, bounding.auto_mu)  # before the release is computed: refused here if over budget
        histograms = run(
            user_histogram, [(folder_url, out_options, slices[j]) for j in range(outputs)], lambda *_: None
        )
        max_rows = choose_max_rows(np.sum(histograms, axis=0), bounding, np.random.default_rng(noise_seed))
    gather_args = [
        (
            folder_url,
            out_options,
            j,
            int(seeds[j].generate_state(1)[0]),
            int(received[j]),
            max_rows,
            row_group_rows,
            slices[j],
        )
        for j in range(outputs)
    ]
    parts = run(gather_users, gather_args, lambda index, _: report("gather", int(received[index])))
    unit = ShuffleUnit(
        user_column=bounding.user_column,
        max_rows_per_user=int(max_rows),
        requested=bounding.max_rows_per_user,
        relation=bounding.relation.value,
        outputs=outputs,
        auto_mu=bounding.auto_mu if bounding.is_auto else None,
        charge_id=charge_id if bounding.is_auto else None,
        user_id_rule=id_rule(spec.user_id_case_fold, summary.schema.field(spec.user_column).type),
    )
    return [part for part in parts if part is not None], unit
