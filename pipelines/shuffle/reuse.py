"""Whether a committed shuffle generation may serve a run: the rules ``shuffle_once`` reuses one by.

A generation is reused (a run trains on it, and charges the lake's ledger for the source files its
manifest records) only when it holds this source's rows, as validated now, with the columns, the
preprocessing, the privacy unit and the layout asked for. Anything else is refused with the fix, never
silently reused. Two of these checks guard against a manifest that does not describe its own shuffle:

* the **source identities**: a generation whose manifest records this lake's fingerprint must also
  record its source files' content identities and row count as validation finds them now. A manifest
  copied from another lake's shuffle and edited to carry this lake's fingerprint would otherwise train
  on the other lake's rows and charge this lake's ledger for them (and not the other's);
* the **person rule** of a user-level shuffle (``dpstream.person_ids``): people formed from
  the ids by another rule (case folded or not, or not normalised at all, as before the rule existed)
  are other people, so their bounds are not this config's.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from dpstream.person_ids import AS_STORED, id_rule
from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.shuffle.generations import COMMITS
from dpstream.pipelines.shuffle.manifest import Manifest

if TYPE_CHECKING:
    from dpstream.pipelines.shuffle.users import UserBounding
    from dpstream.pipelines.validation.validate import LakeSummary

__all__ = ["layout", "reading", "refusal", "check_recorded_source"]


def layout(num_rows: int, rows_per_file: int) -> tuple[int, int, int]:
    """(files, training rows, held-out rows) of a shuffle of ``num_rows`` with ``rows_per_file``: the
    rows are spread evenly, the larger files first, and training holds out the last file."""
    files = max(1, math.ceil(num_rows / rows_per_file))
    held_out = num_rows // files
    return files, num_rows - held_out, held_out


def reading(manifest: Manifest, spec: LakeSpec) -> Manifest:
    """``manifest`` read with ``spec``'s columns (in ``spec``'s order)."""
    if (manifest.features, manifest.label) == (spec.features, spec.label):
        return manifest
    num_features = manifest.num_features if isinstance(spec.features, str) else len(spec.features)
    return replace(manifest, features=spec.features, label=spec.label, num_features=num_features)


def check_recorded_source(manifest: Manifest, summary: LakeSummary) -> None:
    """Refuse (``LakeError`` naming the manifest's commit record) a generation that records this lake's
    fingerprint but not its source files' identities or row count: its manifest was edited or copied
    from another lake's shuffle, and training on it would charge this lake's ledger for another lake's
    rows (module docstring)."""
    recorded, validated = tuple(sorted(manifest.source_files)), summary.file_identities
    if recorded == validated and manifest.source_rows == summary.num_rows:
        return
    # One edited identity is one recorded that validation did not find (and one found, not recorded).
    changed = max(len(set(recorded) - set(validated)), len(set(validated) - set(recorded)))
    differs = (
        f"{changed} source file identit{'y differs' if changed == 1 else 'ies differ'}"
        if recorded != validated
        else f"it records {manifest.source_rows:,} source rows, validation found {summary.num_rows:,}"
    )
    raise LakeError(
        f"{manifest.url.rstrip('/')}/{COMMITS}/{manifest.number:06d}.json records the fingerprint of the lake "
        f"{summary.spec.url} ({summary.fingerprint}) but not the source it was shuffled from ({differs}): the "
        "manifest was edited or copied from another lake's shuffle. Nothing was trained or charged; shuffle the "
        "lake again with `dpstream shuffle CONFIG --reshuffle` (or point lake.shuffled_url at a new folder)"
    )


def refusal(
    existing: Manifest,
    spec: LakeSpec,
    summary: LakeSummary,
    rows_per_file: int | None,
    users: UserBounding | None = None,
    resuming: bool = False,
) -> str | None:
    """Why the committed generation ``existing`` cannot serve ``spec``'s lake as asked (its rows, or with
    ``users`` its people bounded as asked), or None. A manifest that does not describe this source
    although it carries its fingerprint is refused outright (``check_recorded_source``). ``resuming``:
    the generation a run started on, which it reads again as it was made."""
    if existing.source_fingerprint != summary.fingerprint:
        return f"holds a shuffle of another lake ({existing.source_url}), or of this lake before its files changed"
    check_recorded_source(existing, summary)
    missing = [column for column in spec.columns if column not in existing.schema.names]
    if missing:
        return f"holds a shuffle of this lake without the column(s) {', '.join(missing)}"
    wanted = None if spec.preprocess is None else spec.preprocess.record()
    if existing.preprocessing != wanted:
        return (
            "holds a shuffle of this lake preprocessed otherwise ([preprocess] changed: bounds, categories, "
            "imputation or intercept)"
            if wanted is not None and existing.preprocessing is not None
            else f"holds a shuffle of this lake {'with' if wanted is None else 'without'} [preprocess]"
        )
    reason = _unit_refusal(existing, spec, summary, users, resuming)
    if reason is not None:
        return reason
    unit = existing.unit
    files = len(existing.parts) if unit is None else unit.outputs
    wanted = files if rows_per_file is None else layout(summary.num_rows, rows_per_file)[0]
    if files != wanted:
        return (
            f"holds a shuffle of this lake in {files} files, but rows_per_file={rows_per_file} asks for "
            f"{wanted} (a shuffle made with other settings is never reused silently; or set lake.rows_per_file back "
            f"to a value giving {files} files, e.g. {math.ceil(summary.num_rows / files)})"
        )
    return None


def _unit_refusal(
    existing: Manifest, spec: LakeSpec, summary: LakeSummary, users: UserBounding | None, resuming: bool
) -> str | None:
    """Why ``existing``'s privacy unit (rows, or people bounded to k by a rule) is not the one asked for."""
    unit = existing.unit
    if users is None and unit is not None:
        return (
            f"holds a user-level shuffle of this lake (at most {unit.max_rows_per_user} rows per value of "
            f"{unit.user_column!r}), but this run trains on rows"
        )
    if users is None:
        return None
    # The relation matters only to the "auto" release's calibration: a fixed k serves either relation.
    if unit is None or (
        unit.user_column,
        unit.requested,
        unit.relation if unit.requested == "auto" else None,
    ) != (users.user_column, users.max_rows_per_user, users.relation.value if users.is_auto else None):
        held = (
            "a row-level shuffle"
            if unit is None
            else f"a shuffle bounded with max_rows_per_user = {unit.requested!r} per value of {unit.user_column!r}"
            + (f" ({unit.relation})" if unit.requested == "auto" else "")
        )
        return (
            f"holds {held} of this lake, but this run asks for max_rows_per_user = {users.max_rows_per_user!r} "
            f"per value of {users.user_column!r}" + (f" ({users.relation.value})" if users.is_auto else "")
        )
    rule = id_rule(spec.user_id_case_fold, summary.schema.field(spec.user_column).type)
    # A run resuming a generation shuffled before ids were normalised reads it as it started: its
    # remaining steps must read the same people, and the rule cannot change them mid-run.
    if unit.user_id_rule != rule and not (resuming and unit.user_id_rule == AS_STORED):
        return (
            f"holds a shuffle whose people were formed from the values of {unit.user_column!r} by the rule "
            f"{unit.user_id_rule!r}, but this config forms them by {rule!r} (privacy.user_id_case_fold; "
            "dpstream.person_ids): other people, bounded otherwise"
        )
    return None
