"""Shuffle once: a uniform random permutation of the whole lake into M balanced Parquet files.

Two bounded-memory passes, each task holding one file: a *scatter* that permutes each source file and
cuts it into a slice per output, and a *gather* that concatenates and permutes each output's slices
(``dpstream.pipelines.shuffle.rows``). Under the user privacy unit (``users=``) the two passes route
and bound people instead (``dpstream.pipelines.shuffle.users``): at most k rows per person, a person's
rows in one row group, person codes in place of ids. The randomness comes from OS entropy and is not stored: the
shuffle serves utility (i.i.d. batches), and privacy holds for any order.

**Each shuffle is a new, immutable generation** (``dpstream.pipelines.shuffle.generations``): its parts are written into a
folder of its own and committed by exclusively creating the next numbered manifest; a run reads only the
generation it pinned, so a reshuffle never changes what a running or resumed run reads. The source is
never modified. A source file is read only if it is still the file validation saw (``open_unchanged``)
and its values are checked again as it is scattered; every part's row count is checked as it is
gathered, and a generation whose rows differ from the validated source's is never committed. Parts are
written with page checksums and recorded with their content identities (``dpstream.pipelines.shuffle.manifest``).

Running again reuses the current generation when it holds this source's rows with the columns asked
for (in any order) and the layout asked for (``dpstream.pipelines.shuffle.reuse``: a manifest whose
recorded source files are not the validated source's is refused, as is one whose people were formed by
another id rule); anything else is refused with the fix (``reshuffle=True`` shuffles a new generation).
The output location must be new, empty, or hold dpstream shuffles; an output that equals, contains or
lies inside the source lake (or another protected location, such as the folder of the pipeline config)
is refused before anything is written (``dpstream.pipelines.shuffle.location``).
"""

from __future__ import annotations

import base64
import datetime as _dt
import math
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pyarrow as pa

from dpstream.pipeline_constants import DEFAULT_WORKER_TIMEOUT
from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.preprocessing.spec import RAW_LABEL_COLUMN
from dpstream.pipelines.shuffle.generations import SCRATCH, GenerationStore
from dpstream.pipelines.shuffle.location import check_output_location
from dpstream.pipelines.shuffle.manifest import USER_CODE_COLUMN, Manifest, verify_parts
from dpstream.pipelines.shuffle.reuse import layout
from dpstream.pipelines.shuffle.reuse import reading as _reading
from dpstream.pipelines.shuffle.reuse import refusal as _refusal
from dpstream.pipelines.shuffle.rows import shuffle_rows
from dpstream.pipelines.shuffle.scatter_gather import ROW_GROUP_ROWS, carries_raw_labels, run_tasks
from dpstream.pipelines.shuffle.users import UserBounding, shuffle_users
from dpstream.pipelines.validation.validate import LakeSummary, validate_lake
from dpstream.storage import url_of

__all__ = [
    "Manifest",
    "shuffle_once",
    "read_manifest",
    "prune_shuffles",
    "layout",
    "automatic_rows_per_file",
]

DEFAULT_ROWS_PER_FILE = 250_000
HELD_OUT_FILES = 5  # automatic layout: at least this many files, so the held-out last file is ≤ 20 %


def automatic_rows_per_file(num_rows: int) -> int:
    """DEFAULT_ROWS_PER_FILE, but small enough for HELD_OUT_FILES files: every lake of ≥ 2 rows can train."""
    return max(1, min(DEFAULT_ROWS_PER_FILE, math.ceil(num_rows / HELD_OUT_FILES)))


def read_manifest(
    url: str, storage_options: dict[str, Any] | None = None, generation: str | None = None
) -> Manifest | None:
    """The current shuffle generation at ``url`` (None before the first shuffle), or the committed
    generation ``generation`` (a run's pinned data version; ``LakeError`` when it is gone)."""
    store = GenerationStore(url, storage_options)
    return store.current() if generation is None else store.find(generation)


def pinned_generation(row_order: str) -> str | None:
    """The generation a run's data version (``Manifest.row_order``) names, or None for another format."""
    generation = row_order.rsplit("/", 1)[-1] if row_order else ""
    return generation if generation.startswith("_g-") else None


def prune_shuffles(
    url: str,
    storage_options: dict[str, Any] | None = None,
    keep: frozenset[str] = frozenset(),
    now: float | None = None,
) -> list[str]:
    """Delete the superseded generations at ``url``, except those in ``keep`` (the data versions, as
    ``Manifest.row_order``, of runs that may still resume: ``Ledger.unfinished_data_versions``), and
    interrupted shuffles' folders (``GenerationStore.prune``)."""
    store = GenerationStore(url, storage_options)
    store.check_usable()
    pinned = frozenset(g for g in (pinned_generation(version) for version in keep) if g is not None)
    return store.prune(pinned, now)


def shuffle_once(
    spec: LakeSpec,
    out_url: str,
    *,
    rows_per_file: int | None = None,
    out_storage_options: dict[str, Any] | None = None,
    client: Any = None,
    summary: LakeSummary | None = None,
    on_progress: Callable[[str, int], None] | None = None,
    protected: tuple[str, ...] = (),
    reshuffle: bool = False,
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT,
    generation: str | None = None,
    users: UserBounding | None = None,
    charge: Callable[[str, float], None] | None = None,
) -> Manifest:
    """Validate ``spec``'s lake and return a committed shuffle generation of it under ``out_url``: the
    current one when it serves (idempotent), else a new one.

    ``users`` makes it a user-level shuffle (``dpstream.pipelines.shuffle.users``): ``spec.user_column``
    names the id column, each person keeps at most k rows, and the parts hold person codes in place of
    ids. With ``max_rows_per_user = "auto"``, ``charge(charge_id, mu)`` charges the choice of k to the
    lake's ledger under ``charge_id`` (once per generation: ``max-rows`` and the generation's name).

    ``out_url`` must not overlap the source lake, nor equal or contain any ``protected`` location
    (``location.check_output_location``); a non-empty ``out_url`` must hold dpstream shuffles only.

    ``on_progress(phase, rows)`` is called as each input file is scattered (``"scatter"``) and each
    output file gathered (``"gather"``), with that file's rows; each phase moves ``num_rows`` rows.

    ``rows_per_file=None`` uses ``automatic_rows_per_file`` for a new generation and reuses the current
    one whatever its layout; an explicit value that would give another number of files is refused (never
    silently reused), as is a current generation of another source version or without the columns asked
    for. ``reshuffle=True`` commits a new generation (the earlier ones stay, for the runs that pinned
    them, until ``prune_shuffles``). ``generation`` (a resumed run's pinned generation) returns that
    committed generation and never shuffles: ``LakeError`` when it is gone or holds another version of
    the source.
    """
    _check_request(spec, rows_per_file, users)
    out_options = out_storage_options if out_storage_options is not None else spec.storage_options
    check_output_location(out_url, spec.url, protected)
    store = GenerationStore(out_url, out_options)
    store.check_usable(clear_legacy=reshuffle)
    summary = summary or validate_lake(spec, client=client, worker_timeout=worker_timeout)
    if generation is not None:
        return _resumed(store, generation, spec, summary, users)
    current = store.current()
    if current is not None and not reshuffle:
        reason = _refusal(current, spec, summary, rows_per_file, users)
        if reason is None:
            return _reading(current, spec)
        raise LakeError(
            f"{out_url} {reason}. Shuffle it again as a new generation with `dpstream shuffle CONFIG --reshuffle` "
            "(reshuffle=True), or point lake.shuffled_url at a new folder"
        )
    generation = store.new_generation(spec.url)
    try:
        manifest = _shuffle_into(
            store,
            generation,
            spec,
            summary,
            rows_per_file,
            client,
            on_progress,
            worker_timeout,
            users,
            charge,
        )
        manifest = replace(manifest, number=(current.number if current else 0) + 1)
        return _reading(_commit(store, manifest, spec, summary, rows_per_file, users), spec)
    except BaseException:
        try:
            store.discard(generation)
        except Exception:  # noqa: BLE001 - the shuffle's own error is the one to report
            pass
        raise


def _check_request(spec: LakeSpec, rows_per_file: int | None, users: UserBounding | None) -> None:
    """Refuse a layout of fewer than one row per file, and a user bounding whose id column is not the one
    the lake is read with."""
    if rows_per_file is not None and rows_per_file < 1:
        raise LakeError(f"rows_per_file must be a positive integer, got {rows_per_file!r}")
    if (users.user_column if users is not None else None) != spec.user_column:
        raise LakeError(
            f"the lake is read with user_column={spec.user_column!r} but bounded by "
            f"{users.user_column if users is not None else None!r}: give both the same id column (or neither)"
        )


def _resumed(
    store: GenerationStore, generation: str, spec: LakeSpec, summary: LakeSummary, users: UserBounding | None
) -> Manifest:
    """The committed generation a resumed run pinned, read with ``spec``'s columns; ``LakeError`` when it is
    gone or does not hold the validated source's rows as this run reads them."""
    pinned = store.find(generation)
    reason = _refusal(pinned, spec, summary, None, users, resuming=True)
    if reason is not None:
        raise LakeError(
            f"the run resumes on shuffle generation {generation} of {store.url}, which {reason}: it cannot "
            "resume (its remaining steps must read that shuffle of the same rows). Start a new run id"
        )
    return _reading(pinned, spec)


def _shuffle_into(
    store: GenerationStore,
    generation: str,
    spec: LakeSpec,
    summary: LakeSummary,
    rows_per_file: int | None,
    client: Any,
    on_progress: Callable[[str, int], None] | None,
    worker_timeout: float,
    users: UserBounding | None = None,
    charge: Callable[[str, float], None] | None = None,
) -> Manifest:
    """Scatter and gather the validated source into the (uncommitted) folder ``generation``: its rows, or
    with ``users`` its people, each bounded to k rows (``dpstream.pipelines.shuffle.users``)."""
    num_rows = summary.num_rows
    outputs = layout(
        num_rows, rows_per_file if rows_per_file is not None else automatic_rows_per_file(num_rows)
    )[0]
    folder_url = url_of(store.fs, store.folder(generation))
    report = on_progress or (lambda phase, rows: None)

    def run(function: Callable, arguments: list[tuple], done: Callable[[int, Any], None]) -> list:
        return run_tasks(client, function, arguments, done, worker_timeout)

    if users is None:
        parts, unit = (
            shuffle_rows(folder_url, store.storage_options, spec, summary, outputs, run, report),
            None,
        )
    else:
        parts, unit = shuffle_users(
            folder_url,
            store.storage_options,
            spec,
            summary,
            outputs,
            users,
            charge,
            f"max-rows{generation}",
            run,
            report,
            ROW_GROUP_ROWS,
        )
    scratch = f"{store.folder(generation)}/{SCRATCH}"
    if store.fs.exists(scratch):
        store.fs.rm(scratch, recursive=True)
    kept = sum(part.rows for part in parts)
    # Each part was checked; the total is the commit's rule (a user-level shuffle keeps at most every row).
    if (kept > num_rows or not parts) if users is not None else kept != num_rows:
        raise LakeError(f"the shuffle's parts hold {kept:,} rows, not the source's {num_rows:,}")
    schema = pa.schema(
        [summary.schema.field(name) for name in spec.columns]
        + ([pa.field(USER_CODE_COLUMN, pa.int64(), nullable=False)] if users is not None else [])
        + ([pa.field(RAW_LABEL_COLUMN, pa.float64())] if carries_raw_labels(spec, summary.schema) else [])
    )
    return Manifest(
        url=store.url,
        number=0,
        generation=generation,
        parts=tuple(parts),
        schema_ipc=base64.b64encode(schema.serialize().to_pybytes()).decode(),
        features=spec.features,
        label=spec.label,
        num_features=summary.num_features,
        source_url=spec.url,
        source_fingerprint=summary.fingerprint,
        source_rows=num_rows,
        created_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        source_files=summary.file_identities,
        shuffle_id=secrets.token_hex(8),
        unit=unit,
        source_version=summary.version,
        preprocessing=None if spec.preprocess is None else spec.preprocess.record(),
    )


def _commit(
    store: GenerationStore,
    manifest: Manifest,
    spec: LakeSpec,
    summary: LakeSummary,
    rows_per_file: int | None,
    users: UserBounding | None = None,
) -> Manifest:
    """Commit ``manifest`` at its number, or, when another shuffle committed that number first, reuse the
    winner if it serves this request (discarding this generation), else fail cleanly. The parts are
    verified first: a generation whose folder was pruned or damaged while it was written is never
    committed."""
    verify_parts(manifest, store.storage_options)
    if store.try_commit(manifest):
        return manifest
    winner = store.read(manifest.number)
    if winner.generation == manifest.generation:  # our own conditional PUT, retried after a lost answer
        return winner
    reason = _refusal(winner, spec, summary, rows_per_file, users)
    if reason is None:
        store.discard(manifest.generation)
        return winner
    raise LakeError(
        f"another shuffle committed generation {manifest.number} of {store.url} while this one ran, and it "
        f"{reason}: nothing of this shuffle was committed. Give each pipeline a lake.shuffled_url of its own"
    )
